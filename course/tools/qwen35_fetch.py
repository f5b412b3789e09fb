"""``course-weights qwen35 --layers 3``: fetch from the real Qwen3.5-0.8B on the Hugging Face Hub only what the
course reads, and keep it as a small checkpoint that ``course.qwen35_weights`` prefers over the synthetic stand-in.

The whole model is 1.7 GB; assignment 06 needs about 14 MB of it: layer 3's attention weights and input norm
(bfloat16), and the embedding rows of the few tokens it feeds in. A safetensors file says in its first bytes
where every tensor lies (an 8-byte header length, then a JSON header of names, dtypes, shapes and byte
offsets), so HTTP range requests can fetch exactly those bytes:

1. ``config.json`` and ``model.safetensors.index.json`` (which shard holds which tensor);
2. for each shard that holds something needed: its 8-byte length and its header;
3. each needed tensor's bytes, and each needed embedding row (``hidden × 2`` bytes).

URLs come from ``huggingface_hub.hf_hub_url``, so ``HF_ENDPOINT`` (a mirror) and ``--revision`` apply, and the
requests go through ``huggingface_hub``'s HTTP client (its headers and token, redirects to the CDN followed).
A server that ignores range requests answers with the whole file: that is an error, unless the caller allows
a full download, which then streams each needed shard once and keeps only the needed bytes.

The result, ``<cache>/qwen35/Qwen3.5-0.8B-partial/`` (``course.cache``), holds the real ``config.json`` and a
``model.safetensors`` with the real keys of the fetched layers and the fetched rows under the same keys as
the stand-in's (``course.qwen35_weights.FIXTURE_ROWS_KEY`` / ``FIXTURE_IDS_KEY``). Fetching more layers or tokens
later adds them to it.
"""
import json
import os
import struct
import tempfile
from pathlib import Path

import torch
from safetensors import safe_open
from safetensors.torch import save_file

from course.qwen35 import FULL_ATTENTION, PROMPT_IDS, read_config, text_config_from_dict
from course.qwen35_weights import (
    EMBEDDING_KEY,
    FIXTURE_IDS_KEY,
    FIXTURE_ROWS_KEY,
    INDEX_FILE,
    LANGUAGE_MODEL,
    PARTIAL_NOTE,
    REPO_ID,
    SINGLE_FILE,
    attention_shapes,
    partial_folder,
)


class FetchError(RuntimeError):
    """What was needed could not be fetched; the message says why and what to do."""


class RangeUnsupported(FetchError):
    """The server answered a range request with the whole file."""


class Traffic:
    """Bytes received (response bodies) and bytes the course needed of them, over one fetch."""

    def __init__(self):
        self.received = 0
        self.needed = 0

    def got(self, received: int, needed: int) -> None:
        self.received += received
        self.needed += needed


def _hub():
    """The ``huggingface_hub`` package, or an error saying how to install it."""
    try:
        import huggingface_hub
    except ImportError:
        raise FetchError("fetching from the Hugging Face Hub needs the huggingface_hub package: "
                         "pip install 'attention-by-hand[qwen35]'") from None
    return huggingface_hub


def _http():
    """``huggingface_hub``'s HTTP client and request headers (user agent, token when one is configured)."""
    hub = _hub()
    from huggingface_hub.utils import build_hf_headers

    return hub.get_session(), build_hf_headers()


def _url(filename: str, revision: str, endpoint: str | None) -> str:
    return _hub().hf_hub_url(REPO_ID, filename, revision=revision, endpoint=endpoint)


def _unreachable(url: str, error: Exception) -> FetchError:
    return FetchError(f"cannot reach {url} ({type(error).__name__}: {error}). Is this machine offline? The Hugging "
                      "Face Hub must be reachable, directly or through a mirror named in HF_ENDPOINT. Without it, "
                      "the course uses its synthetic stand-in.")


def _get_whole(url: str, traffic: Traffic, missing_ok: bool = False) -> bytes | None:
    """The whole (small) file at ``url``; None for a 404 when ``missing_ok``."""
    session, headers = _http()
    try:
        response = session.get(url, headers=headers)
    except Exception as error:  # noqa: BLE001 - any transport failure is "unreachable"
        raise _unreachable(url, error) from None
    if response.status_code == 404 and missing_ok:
        return None
    if response.status_code != 200:
        raise FetchError(f"{url} answered HTTP {response.status_code}; is {REPO_ID} available at this endpoint "
                         "and revision?")
    traffic.got(len(response.content), len(response.content))
    return response.content


class _RangedFile:
    """A remote file read by HTTP range requests, in any order."""

    def __init__(self, url: str, traffic: Traffic):
        self.url, self.traffic = url, traffic

    def read(self, start: int, stop: int) -> bytes:
        """Bytes ``[start, stop)``."""
        session, headers = _http()
        try:
            with session.stream("GET", self.url, headers={**headers, "Range": f"bytes={start}-{stop - 1}"}) as response:
                if response.status_code == 200:
                    raise RangeUnsupported(f"{self.url} ignores HTTP range requests: asked for {stop - start} "
                                           "bytes, it started sending the whole file")
                if response.status_code != 206:
                    raise FetchError(f"{self.url} answered HTTP {response.status_code} to a range request")
                data = response.read()
        except FetchError:
            raise
        except Exception as error:  # noqa: BLE001 - any transport failure is "unreachable"
            raise _unreachable(self.url, error) from None
        self.traffic.got(len(data), stop - start)
        if len(data) != stop - start:
            raise FetchError(f"{self.url} sent {len(data)} bytes for a range of {stop - start}")
        return data


class _StreamedFile:
    """A remote file downloaded once from start to end, keeping only the ranges asked for, in increasing order."""

    def __init__(self, url: str, traffic: Traffic):
        session, headers = _http()
        self.url, self.traffic, self.position = url, traffic, 0
        try:
            self._context = session.stream("GET", url, headers=headers)
            self._response = self._context.__enter__()
        except Exception as error:  # noqa: BLE001
            raise _unreachable(url, error) from None
        if self._response.status_code != 200:
            self.close()
            raise FetchError(f"{url} answered HTTP {self._response.status_code}")
        self._chunks = self._response.iter_bytes(1 << 20)
        self._buffer = b""

    def read(self, start: int, stop: int) -> bytes:
        if start < self.position:
            raise ValueError("a streamed file is read front to back")
        while self.position + len(self._buffer) < stop:
            chunk = next(self._chunks, None)
            if chunk is None:
                raise FetchError(f"{self.url} ended before byte {stop}")
            self.traffic.got(len(chunk), 0)
            self._buffer += chunk
            if self.position + len(self._buffer) < start:  # nothing wanted in there: drop it
                self.position += len(self._buffer)
                self._buffer = b""
        data = self._buffer[start - self.position:stop - self.position]
        self._buffer = self._buffer[stop - self.position:]
        self.position = stop
        self.traffic.got(0, len(data))
        return data

    def close(self) -> None:
        self._context.__exit__(None, None, None)


def _header(remote) -> tuple[int, dict]:
    """A safetensors file's header: where its data starts, and its entries ``{name: {dtype, shape, data_offsets}}``."""
    (length,) = struct.unpack("<Q", remote.read(0, 8))
    if length > 100_000_000:
        raise FetchError(f"{remote.url} does not start like a safetensors file")
    header = json.loads(remote.read(8, 8 + length))
    header.pop("__metadata__", None)
    return 8 + length, header


def _tensor(data: bytes, shape) -> torch.Tensor:
    """bfloat16 bytes (checked by ``_check_entry``) as a tensor of ``shape``."""
    return torch.frombuffer(bytearray(data), dtype=torch.bfloat16).reshape(shape)


def _needed_keys(config, layers) -> dict[str, tuple[int, ...]]:
    """Checkpoint key -> expected shape, for the attention layers asked for."""
    for layer in layers:
        if not 0 <= layer < config.num_hidden_layers or config.layer_types[layer] != FULL_ATTENTION:
            raise FetchError(f"layer {layer} is not a softmax-attention layer of {REPO_ID}; those are "
                             f"{list(config.full_attention_layers)}")
    return {f"{LANGUAGE_MODEL}layers.{layer}.{name}": shape
            for layer in layers for name, shape in attention_shapes(config).items()}


def _missing(config, layers, token_ids, held: dict) -> tuple[dict[str, tuple[int, ...]], list[int]]:
    """What ``held`` lacks: the keys (with shapes) of ``layers`` and the sorted ids among ``token_ids``."""
    wanted = {key: shape for key, shape in _needed_keys(config, layers).items() if key not in held}
    stored = set(held[FIXTURE_IDS_KEY].tolist()) if FIXTURE_IDS_KEY in held else set()
    new_ids = sorted(set(int(i) for i in token_ids) - stored)
    for token in new_ids:
        if not 0 <= token < config.vocab_size:
            raise FetchError(f"token id {token} is out of range: {REPO_ID} has {config.vocab_size} tokens")
    return wanted, new_ids


def _held(folder: Path) -> tuple[dict[str, torch.Tensor], dict]:
    """What an earlier fetch left in ``folder``: its tensors and metadata (empty when there is none)."""
    file = folder / SINGLE_FILE
    if not file.is_file():
        return {}, {}
    with safe_open(file, framework="pt") as handle:
        # Copies: the file is replaced when the fetch ends.
        return {key: handle.get_tensor(key).clone() for key in handle.keys()}, handle.metadata() or {}


def fetch(layers=(3,), token_ids=PROMPT_IDS, *, revision: str = "main", endpoint: str | None = None,
          full_download: bool = False, progress: bool = True) -> tuple[Path, Traffic]:
    """Fetch layers ``layers`` and the embedding rows of ``token_ids`` (added to what is already there);
    return the partial checkpoint's folder and the traffic of this fetch.

    ``endpoint`` overrides ``HF_ENDPOINT``. ``full_download`` allows streaming whole shards from a server
    without range support. Raises ``RangeUnsupported`` (without it) and ``FetchError``.
    """
    from tqdm.auto import tqdm

    folder = partial_folder()
    held, metadata = _held(folder)
    if metadata.get("revision", revision) != revision:
        held = {}  # another revision: start again
    traffic = Traffic()
    if held and not any(_missing(read_config(folder / "config.json"), layers, token_ids, held)):
        if progress:
            print(f"{folder} already holds layers {list(layers)} and those tokens' embeddings")
        return folder, traffic
    config_bytes = _get_whole(_url("config.json", revision, endpoint), traffic)
    config = text_config_from_dict(json.loads(config_bytes), source=f"{REPO_ID} config.json")
    wanted, new_ids = _missing(config, layers, token_ids, held)
    index = _get_whole(_url(INDEX_FILE, revision, endpoint), traffic, missing_ok=True)
    weight_map = json.loads(index)["weight_map"] if index is not None else None
    shard_of = (lambda key: weight_map.get(key)) if weight_map is not None else (lambda key: SINGLE_FILE)
    jobs: dict[str, list] = {}
    for key in [*wanted, *([EMBEDDING_KEY] if new_ids else [])]:
        if shard_of(key) is None:
            raise FetchError(f"{INDEX_FILE} of {REPO_ID} lists no {key!r}; is this the right model?")
        jobs.setdefault(shard_of(key), []).append(key)
    row_bytes = config.hidden_size * 2
    total = sum(int(torch.Size(shape).numel()) * 2 for shape in wanted.values()) + len(new_ids) * row_bytes
    fetched, rows = {}, {}
    with tqdm(total=total, unit="B", unit_scale=True, desc="fetching", disable=not progress) as bar:
        for shard, keys in jobs.items():
            url = _url(shard, revision, endpoint)
            remote = _StreamedFile(url, traffic) if full_download else _RangedFile(url, traffic)
            try:
                start, entries = _header(remote)
                reads = []
                for key in keys:
                    entry = entries.get(key)
                    if entry is None:
                        raise FetchError(f"{url} has no tensor {key!r}")
                    begin = start + entry["data_offsets"][0]
                    if key == EMBEDDING_KEY:
                        reads += [(begin + token * row_bytes, begin + (token + 1) * row_bytes, key, token)
                                  for token in new_ids]
                    else:
                        reads.append((begin, start + entry["data_offsets"][1], key, None))
                for begin, end, key, token in sorted(reads):  # in file order, as a streamed file needs
                    if token is None:
                        _check_entry(url, key, entries[key], wanted[key])
                        fetched[key] = _tensor(remote.read(begin, end), wanted[key])
                    else:
                        _check_entry(url, key, entries[key], (config.vocab_size, config.hidden_size))
                        rows[token] = _tensor(remote.read(begin, end), (config.hidden_size,))
                    bar.update(end - begin)
            finally:
                if isinstance(remote, _StreamedFile):
                    remote.close()
    _write(folder, held, fetched, rows, config_bytes, revision, endpoint)
    if progress:
        print(f"fetched {traffic.received / 1e6:.1f} MB for {traffic.needed / 1e6:.1f} MB needed; "
              f"{REPO_ID} layers {list(layers)} and {len(new_ids)} embedding rows are in {folder}")
    return folder, traffic


def _check_entry(url: str, key: str, entry: dict, shape) -> None:
    if entry.get("dtype") != "BF16" or tuple(entry.get("shape", ())) != tuple(shape):
        raise FetchError(f"{key} in {url} is {entry.get('dtype')} {entry.get('shape')}, expected BF16 {list(shape)}: "
                         f"is this {REPO_ID}?")


def _write(folder: Path, held: dict, fetched: dict, rows: dict, config_bytes: bytes, revision: str,
           endpoint: str | None) -> None:
    """The partial checkpoint: what was held plus what was fetched, written next to the old one and moved in."""
    tensors = {key: value for key, value in held.items() if key not in (FIXTURE_IDS_KEY, FIXTURE_ROWS_KEY)}
    tensors.update(fetched)
    ids = held[FIXTURE_IDS_KEY].tolist() if FIXTURE_IDS_KEY in held else []
    table = list(held[FIXTURE_ROWS_KEY]) if FIXTURE_ROWS_KEY in held else []
    for token, row in sorted(rows.items()):
        ids.append(token)
        table.append(row)
    if ids:
        tensors[FIXTURE_IDS_KEY] = torch.tensor(ids, dtype=torch.int64)
        tensors[FIXTURE_ROWS_KEY] = torch.stack(table).contiguous()
    layers = sorted({int(key.split(".")[3]) for key in tensors if key.startswith(f"{LANGUAGE_MODEL}layers.")})
    metadata = {"note": f"{PARTIAL_NOTE} of {REPO_ID}: layers {layers} and the embedding rows of {len(ids)} tokens",
                "revision": revision, "endpoint": endpoint or os.environ.get("HF_ENDPOINT", "https://huggingface.co")}
    folder.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=folder, prefix=".writing-") as tmp:
        save_file(tensors, Path(tmp) / SINGLE_FILE, metadata=metadata)
        (Path(tmp) / "config.json").write_bytes(config_bytes)
        for name in ("config.json", SINGLE_FILE):
            os.replace(Path(tmp) / name, folder / name)
