"""``course-weights qwen35 --layers 0-3``: fetch from the real Qwen3.5-0.8B on the Hugging Face Hub only what the
course reads, and keep it as a small checkpoint that ``course.qwen35_weights`` prefers over the synthetic stand-in.

The whole model is 1.7 GB. A layer brings what ``course.qwen35_weights.load_layer`` reads of it
(``layer_shapes``): its attention (layer 3: 14 MB) or Gated DeltaNet linear attention (layers 0-2: 21 MB each;
bfloat16, with ``A_log`` and ``norm.weight`` float32 in the published file, either dtype accepted for them and
``dt_bias``), its MLP (22 MB) and both its norms; with the embedding rows of the few tokens fed in, ``--layers 3``
is about 37 MB and ``--layers 0-3`` (assignment 08) about 166 MB. Assignment 06 reads only layer 3's attention
and input norm, which ``--layers 3`` includes. A safetensors file says in its
first bytes where every tensor lies (an 8-byte header length, then a JSON header of names, dtypes, shapes and byte
offsets), so HTTP range requests can fetch exactly those bytes:

1. ``config.json`` and ``model.safetensors.index.json`` (which shard holds which tensor);
2. for each shard that holds something needed: its 8-byte length and its header;
3. each needed tensor's bytes, and each needed embedding row (``hidden × 2`` bytes).

URLs come from ``huggingface_hub.hf_hub_url``, so ``HF_ENDPOINT`` (a mirror) and ``--revision`` apply, and the
requests go through ``huggingface_hub``'s HTTP client (its headers and token, redirects to the CDN followed).
A server that ignores range requests answers with the whole file: that is an error, unless the caller allows
a full download, which then streams each needed shard once and keeps only the needed bytes.

What a server sends is not trusted, so that a broken or hostile mirror ends the fetch with a message instead of
a hang, a full memory or a traceback: every request has the timeouts of ``course.tools.net_limits``; every
answer is read in pieces up to a cap known before reading (``JSON_CAP``, ``HEADER_CAP``, the range asked for);
the JSON files must parse into what the course reads of them; and a shard's header is checked (its length,
and each tensor's offsets: within the file, not overlapping, dtype size × shape bytes apart) before any
tensor byte is asked for.

The result, ``<cache>/qwen35/Qwen3.5-0.8B-partial/`` (``course.cache``), holds the real ``config.json`` and a
``model.safetensors`` with the real keys of the fetched layers and the fetched rows under the same keys as
the stand-in's (``course.qwen35_weights.FIXTURE_ROWS_KEY`` / ``FIXTURE_IDS_KEY``). Fetching more layers or tokens
later adds them to it.
"""
import contextlib
import importlib
import json
import math
import os
import struct
import tempfile
import time
from pathlib import Path

import torch
from safetensors import safe_open
from safetensors.torch import save_file

from course.qwen35 import PROMPT_IDS, read_config, text_config_from_dict
from course.qwen35_weights import (
    EMBEDDING_KEY,
    FIXTURE_IDS_KEY,
    FIXTURE_ROWS_KEY,
    FLOAT32_ALLOWED,
    INDEX_FILE,
    LANGUAGE_MODEL,
    PARTIAL_NOTE,
    REPO_ID,
    SINGLE_FILE,
    CheckpointError,
    layer_shapes,
    partial_folder,
)
from course.tools import net_limits


class FetchError(RuntimeError):
    """What was needed could not be fetched; the message says why and what to do."""


class RangeUnsupported(FetchError):
    """The server answered a range request with the whole file."""


# The most the course reads of each kind of answer, known before reading it: a server that declares or sends
# more is broken or hostile, and is stopped there instead of filling the memory.
JSON_CAP = 4 << 20  # config.json (3 kB on the Hub) or the index (50 kB)
HEADER_CAP = 8 << 20  # a shard's safetensors header (65 kB for the 488 tensors of Qwen3.5-0.8B)
SHARD_CAP = 4 * 10**9  # a shard's size: the whole published model is 1.7 GB
NEEDED_CAP = 1 << 30  # the tensors fetched at once: all 24 layers (attention and MLP) are 996 MB, an embedding row 2 kB

# Element sizes of the safetensors dtypes, to check that each tensor's bytes are its shape's; a tensor of
# another dtype (none in Qwen3.5-0.8B) keeps only its bounds checked.
_DTYPE_BYTES = {"BOOL": 1, "U8": 1, "I8": 1, "F8_E4M3": 1, "F8_E5M2": 1, "U16": 2, "I16": 2, "F16": 2, "BF16": 2,
                "U32": 4, "I32": 4, "F32": 4, "U64": 8, "I64": 8, "F64": 8}

_ANOTHER_SERVER = ("Point HF_ENDPOINT (or --endpoint) at the Hub or at another mirror; without the real weights "
                   "the course uses its synthetic stand-in.")


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


def _timeout() -> tuple[float, float, float, float]:
    """The client's (connect, read, write, pool) timeouts, from ``net_limits`` when each request starts."""
    return (net_limits.CONNECT_TIMEOUT_S, net_limits.READ_TIMEOUT_S, net_limits.READ_TIMEOUT_S,
            net_limits.CONNECT_TIMEOUT_S)


def _unreachable(url: str, error: Exception) -> FetchError:
    return FetchError(f"cannot reach {url} ({type(error).__name__}: {error}). Is this machine offline? The Hugging "
                      "Face Hub must be reachable, directly or through a mirror named in HF_ENDPOINT. Without it, "
                      "the course uses its synthetic stand-in.")


@contextlib.contextmanager
def _failures_explained(url: str):
    """Transport failures while talking to ``url``, as FetchErrors that say which: no connection (the only one
    that asks whether the machine is offline), a stall (nothing for a read timeout), or a broken exchange."""
    # huggingface_hub's client is httpx (huggingface_hub 1.x) or its fork httpx2 (2.x): the same exceptions.
    errors = importlib.import_module(type(_hub().get_session()).__module__.partition(".")[0])
    try:
        yield
    except (errors.ConnectError, errors.ConnectTimeout, ConnectionError) as error:  # ConnectionError: HF_HUB_OFFLINE
        raise _unreachable(url, error) from None
    except errors.TimeoutException:
        raise FetchError(f"{url} sent nothing for {net_limits.READ_TIMEOUT_S:g} s (the read timeout): the server "
                         f"stalls. Run again later. {_ANOTHER_SERVER}") from None
    except (errors.HTTPError, errors.InvalidURL) as error:
        raise FetchError(f"the exchange with {url} failed ({type(error).__name__}: {error}): the server or the "
                         f"network broke it. Run again; if it fails again, check the address. {_ANOTHER_SERVER}") from None


@contextlib.contextmanager
def _get(url: str, headers: dict | None = None):
    """The streamed answer to a GET of ``url``, under the timeouts of ``net_limits``; failures explained."""
    session, hub_headers = _http()
    with _failures_explained(url), \
            session.stream("GET", url, headers={**hub_headers, **(headers or {})}, timeout=_timeout()) as response:
        yield response


def _too_big(url: str, what: str, cap: int, expected: str) -> FetchError:
    return FetchError(f"{url} {what}, more than the {cap:,} bytes the course reads there ({expected}): the server "
                      f"is broken or does not serve {REPO_ID}. {_ANOTHER_SERVER}")


def _declared_length(response) -> int | None:
    """The body's length as the Content-Length header declares it; None when absent, or when the body is
    compressed (the header then counts the compressed bytes)."""
    if response.headers.get("content-encoding", "identity") != "identity":
        return None
    length = response.headers.get("content-length")
    return int(length) if length is not None and length.isdigit() else None


def _read_body(response, url: str, cap: int, expected: str) -> bytes:
    """``response``'s body, at most ``cap`` bytes: refused unread when its Content-Length is larger, stopped as
    soon as more arrives, and given up when it trickles in slower than ``net_limits`` allows for its
    Content-Length (for ``cap`` when it declares none)."""
    declared = _declared_length(response)
    if declared is not None and declared > cap:
        raise _too_big(url, f"declares a body of {declared:,} bytes", cap, expected)
    size = cap if declared is None else declared
    body, deadline = bytearray(), net_limits.deadline(size)
    for chunk in response.iter_bytes():  # each piece as it arrives, so that the size and time checks keep up
        body += chunk
        if len(body) > cap:
            raise _too_big(url, "sends a body that does not end", cap, expected)
        if time.monotonic() > deadline:
            raise FetchError(net_limits.too_slow(url, len(body), size))
    return bytes(body)


def _get_whole(url: str, traffic: Traffic, missing_ok: bool = False) -> bytes | None:
    """The whole JSON file at ``url`` (at most ``JSON_CAP`` bytes); None for a 404 when ``missing_ok``."""
    with _get(url) as response:
        if response.status_code == 404 and missing_ok:
            return None
        if response.status_code != 200:
            raise FetchError(f"{url} answered HTTP {response.status_code}; is {REPO_ID} available at this endpoint "
                             "and revision?")
        data = _read_body(response, url, JSON_CAP, "a JSON file of a few kB")
    traffic.got(len(data), len(data))
    return data


def _json_object(data: bytes, name: str, url: str) -> dict:
    """``data`` parsed as a JSON object, or an error naming the file and where it came from."""
    try:
        value = json.loads(data)
    except (ValueError, RecursionError) as error:  # ValueError: not UTF-8, or not JSON; RecursionError: nested deep
        raise FetchError(f"{name} from {url} is not valid JSON ({type(error).__name__}: {str(error)[:200]}): the "
                         f"server sent something other than {REPO_ID}'s file. {_ANOTHER_SERVER}") from None
    if not isinstance(value, dict):
        raise FetchError(f"{name} from {url} is a JSON {type(value).__name__}, not an object: the server sent "
                         f"something other than {REPO_ID}'s file. {_ANOTHER_SERVER}")
    return value


# The sizes of config.json's text model that the fetch computes with: each a positive integer, at most 2^20
# (Qwen3.5-0.8B's largest is its vocabulary, 248,320), so that no product or list built from them explodes.
MAX_SIZE = 1 << 20
_SIZES = ("hidden_size", "num_attention_heads", "num_key_value_heads", "head_dim", "vocab_size", "num_hidden_layers",
          "full_attention_interval", "linear_num_key_heads", "linear_num_value_heads", "linear_key_head_dim",
          "linear_value_head_dim", "linear_conv_kernel_dim")


def _config(data: bytes, url: str):
    """``config.json``'s text model, checked: a JSON object that ``text_config_from_dict`` reads, whose sizes
    (``_SIZES``, where present) are integers from 1 to 2^20."""
    raw = _json_object(data, "config.json", url)
    text = raw.get("text_config", raw)
    if not isinstance(text, dict):
        raise FetchError(f"config.json from {url} has a text_config that is not an object. {_ANOTHER_SERVER}")
    bad = [name for name in _SIZES if name in text and not (type(text[name]) is int and 0 < text[name] <= MAX_SIZE)]
    if bad:
        raise FetchError(f"config.json from {url} has {', '.join(f'{name}={text[name]!r:.40}' for name in bad)}: not "
                         f"the sizes of {REPO_ID}. {_ANOTHER_SERVER}")
    try:
        return text_config_from_dict(raw, source=f"config.json from {url}")
    except (ValueError, TypeError) as error:  # ConfigError is a ValueError; TypeError: a value of another JSON type
        raise FetchError(f"config.json from {url} is not a Qwen3.5 configuration ({error}). {_ANOTHER_SERVER}") from None


def _weight_map(data: bytes, url: str) -> dict[str, str]:
    """The index's ``weight_map``, checked: an object that maps tensor names to plain ``.safetensors`` file names
    (no folders, so that every shard URL stays in the repository)."""
    weight_map = _json_object(data, INDEX_FILE, url).get("weight_map")
    if not isinstance(weight_map, dict) or not all(
            isinstance(shard, str) and shard.endswith(".safetensors") and "/" not in shard and "\\" not in shard
            for shard in weight_map.values()):
        raise FetchError(f"{INDEX_FILE} from {url} has no weight_map of tensor names to .safetensors files: the "
                         f"server sent something other than {REPO_ID}'s index. {_ANOTHER_SERVER}")
    return weight_map


def _file_size(response, url: str, start: int, stop: int) -> int | None:
    """The file's size as a 206 answer's Content-Range declares it (None when it does not say), after checking
    that the range sent is the one asked for."""
    sent = response.headers.get("content-range")
    if sent is None:
        return None
    unit, _, rest = sent.partition(" ")
    span, _, size = rest.partition("/")
    if unit != "bytes" or span != f"{start}-{stop - 1}" or not (size.isdigit() or size == "*"):
        raise FetchError(f"{url} answered a request for bytes {start}-{stop - 1} with Content-Range {sent!r:.80}: "
                         f"the server is broken. {_ANOTHER_SERVER}")
    return int(size) if size.isdigit() else None


class _RangedFile:
    """A remote file read by HTTP range requests, in any order; ``size`` is its size as the last answer declared
    it (None when it did not)."""

    def __init__(self, url: str, traffic: Traffic):
        self.url, self.traffic, self.size = url, traffic, None

    def read(self, start: int, stop: int) -> bytes:
        """Bytes ``[start, stop)``, exactly: an answer of any other range or length is refused."""
        with _get(self.url, {"Range": f"bytes={start}-{stop - 1}"}) as response:
            if response.status_code == 200:
                raise RangeUnsupported(f"{self.url} ignores HTTP range requests: asked for {stop - start} "
                                       "bytes, it started sending the whole file")
            if response.status_code != 206:
                raise FetchError(f"{self.url} answered HTTP {response.status_code} to a range request")
            self.size = _file_size(response, self.url, start, stop)
            data = _read_body(response, self.url, stop - start, "the range asked for")
        self.traffic.got(len(data), stop - start)
        if len(data) != stop - start:
            raise FetchError(f"{self.url} sent {len(data)} bytes for a range of {stop - start}")
        return data


class _StreamedFile:
    """A remote file downloaded once from start to end, keeping only the ranges asked for, in increasing order;
    ``size`` is its size as its Content-Length declares it (None when it does not)."""

    def __init__(self, url: str, traffic: Traffic):
        self.url, self.traffic, self.position = url, traffic, 0
        self._context = _get(url)
        self._response = self._context.__enter__()
        if self._response.status_code != 200:
            self.close()
            raise FetchError(f"{url} answered HTTP {self._response.status_code}")
        self.size = _declared_length(self._response)
        self._chunks = self._response.iter_bytes()
        self._buffer = bytearray()

    def read(self, start: int, stop: int) -> bytes:
        """Bytes ``[start, stop)``: the stream read on up to ``stop``, never further, dropping what lies before
        ``start``, and given up when it trickles in slower than ``net_limits`` allows."""
        if start < self.position:
            raise ValueError("a streamed file is read front to back")
        begun = self.position
        deadline = net_limits.deadline(stop - begun)
        with _failures_explained(self.url):
            while self.position + len(self._buffer) < stop:
                chunk = next(self._chunks, None)
                if chunk is None:
                    raise FetchError(f"{self.url} ended before byte {stop}")
                self.traffic.got(len(chunk), 0)
                self._buffer += chunk
                if self.position + len(self._buffer) < start:  # nothing wanted in there: drop it
                    self.position += len(self._buffer)
                    self._buffer.clear()
                if time.monotonic() > deadline:
                    raise FetchError(net_limits.too_slow(self.url, self.position + len(self._buffer) - begun,
                                                         stop - begun))
        data = bytes(self._buffer[start - self.position:stop - self.position])
        del self._buffer[:stop - self.position]
        self.position = stop
        self.traffic.got(0, len(data))
        return data

    def close(self) -> None:
        self._context.__exit__(None, None, None)


def _header(remote) -> tuple[int, dict]:
    """A safetensors file's header: where its data starts, and its entries ``{name: {dtype, shape, data_offsets}}``.
    Its declared length is checked against ``HEADER_CAP`` before it is read, its entries (``_check_layout``)
    before any tensor byte is."""
    (length,) = struct.unpack("<Q", remote.read(0, 8))
    if length > HEADER_CAP:
        raise FetchError(f"{remote.url} declares a safetensors header of {length:,} bytes, more than the "
                         f"{HEADER_CAP:,} the course reads (those of {REPO_ID} are 65 kB): it is not a safetensors "
                         f"file of {REPO_ID}. {_ANOTHER_SERVER}")
    header = _json_object(remote.read(8, 8 + length), "the safetensors header", remote.url)
    header.pop("__metadata__", None)
    _check_layout(remote.url, header, 8 + length, remote.size)
    return 8 + length, header


def _span(url: str, name: str, entry) -> tuple[int, int]:
    """Where tensor ``name``'s bytes lie after the header, checked: ``entry`` is ``{dtype, shape, data_offsets}``
    with integer offsets in order and, for a known dtype, exactly dtype size × elements between them."""
    fields = entry if isinstance(entry, dict) else {}
    dtype, shape, offsets = fields.get("dtype"), fields.get("shape"), fields.get("data_offsets")
    well_formed = (isinstance(dtype, str) and isinstance(shape, list) and isinstance(offsets, list)
                   and len(offsets) == 2 and all(type(n) is int and n >= 0 for n in [*offsets, *shape])
                   and offsets[0] <= offsets[1])
    if not well_formed or (dtype in _DTYPE_BYTES and offsets[1] - offsets[0] != _DTYPE_BYTES[dtype] * math.prod(shape)):
        raise FetchError(f"{url}'s safetensors header describes {name!r} as {entry!r:.200}: not a dtype, a shape and "
                         f"offsets that span its bytes. The file is damaged or not {REPO_ID}'s. {_ANOTHER_SERVER}")
    return offsets[0], offsets[1]


def _check_layout(url: str, entries: dict, data_start: int, file_size: int | None) -> None:
    """The header's tensors (``_span``) do not overlap and end within the file's declared size (when known) and
    within ``SHARD_CAP``: no byte is asked for that the file cannot hold."""
    end, last = 0, None
    for (begin, stop), name in sorted((_span(url, name, entry), name) for name, entry in entries.items()):
        if begin < end:
            raise FetchError(f"{url}'s safetensors header places {name!r} over {last!r}: the file is damaged. "
                             f"{_ANOTHER_SERVER}")
        end, last = stop, name
    limit, of = (SHARD_CAP, f"the {SHARD_CAP:,} bytes a shard of {REPO_ID} can hold (the whole model is 1.7 GB)")
    if file_size is not None and file_size < limit:
        limit, of = file_size, f"the file's {file_size:,} bytes"
    if data_start + end > limit:
        raise FetchError(f"{url}'s safetensors header declares tensor data up to byte {data_start + end:,}, beyond "
                         f"{of}: the file is damaged or not {REPO_ID}'s. {_ANOTHER_SERVER}")


# The dtypes a needed tensor may have, by the safetensors names: bfloat16, or float32 too for FLOAT32_ALLOWED.
_TORCH_DTYPES = {"BF16": torch.bfloat16, "F32": torch.float32}


def _dtypes(key: str) -> tuple[str, ...]:
    return ("BF16", "F32") if key.endswith(tuple("." + name for name in FLOAT32_ALLOWED)) else ("BF16",)


def _tensor(data: bytes, shape, dtype: str) -> torch.Tensor:
    """Bytes of a needed tensor (``_check_entry`` checked its safetensors ``dtype``) as a tensor of ``shape``."""
    return torch.frombuffer(bytearray(data), dtype=_TORCH_DTYPES[dtype]).reshape(shape)


def _needed_keys(config, layers) -> dict[str, tuple[int, ...]]:
    """Checkpoint key -> expected shape, for the layers asked for: a softmax-attention layer's ``self_attn`` or a
    Gated DeltaNet layer's ``linear_attn`` tensors, each with its ``input_layernorm``, ``mlp`` and
    ``post_attention_layernorm``."""
    needed = {}
    for layer in layers:
        try:
            shapes = layer_shapes(config, layer)
        except CheckpointError as error:
            raise FetchError(f"cannot fetch layer {layer} of {REPO_ID}: {error}") from None
        needed |= {f"{LANGUAGE_MODEL}layers.{layer}.{name}": shape for name, shape in shapes.items()}
    return needed


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
    config_url = _url("config.json", revision, endpoint)
    config_bytes = _get_whole(config_url, traffic)
    config = _config(config_bytes, config_url)
    wanted, new_ids = _missing(config, layers, token_ids, held)
    row_bytes = config.hidden_size * 2
    # At the widest dtype each may have (a few float32 tensors), in Python ints: no overflow.
    total = (sum(math.prod(shape) * (4 if "F32" in _dtypes(key) else 2) for key, shape in wanted.items())
             + len(new_ids) * row_bytes)
    if total > NEEDED_CAP:
        raise FetchError(f"config.json from {config_url} makes those layers and rows {total:,} bytes, more than the "
                         f"{NEEDED_CAP:,} the course fetches at once: it is not {REPO_ID}'s. {_ANOTHER_SERVER}")
    index_url = _url(INDEX_FILE, revision, endpoint)
    index = _get_whole(index_url, traffic, missing_ok=True)
    weight_map = _weight_map(index, index_url) if index is not None else None
    shard_of = (lambda key: weight_map.get(key)) if weight_map is not None else (lambda key: SINGLE_FILE)
    jobs: dict[str, list] = {}
    for key in [*wanted, *([EMBEDDING_KEY] if new_ids else [])]:
        if shard_of(key) is None:
            raise FetchError(f"{INDEX_FILE} of {REPO_ID} lists no {key!r}; is this the right model?")
        jobs.setdefault(shard_of(key), []).append(key)
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
                    embeddings = (config.vocab_size, config.hidden_size)
                    _check_entry(url, key, entry, embeddings if key == EMBEDDING_KEY else wanted[key], _dtypes(key))
                    begin = start + entry["data_offsets"][0]
                    if key == EMBEDDING_KEY:
                        reads += [(begin + token * row_bytes, begin + (token + 1) * row_bytes, key, token)
                                  for token in new_ids]
                    else:
                        reads.append((begin, start + entry["data_offsets"][1], key, None))
                for begin, end, key, token in sorted(reads):  # in file order, as a streamed file needs
                    if token is None:
                        fetched[key] = _tensor(remote.read(begin, end), wanted[key], entries[key]["dtype"])
                    else:
                        rows[token] = _tensor(remote.read(begin, end), (config.hidden_size,), "BF16")
                    bar.update(end - begin)
            finally:
                if isinstance(remote, _StreamedFile):
                    remote.close()
    _write(folder, held, fetched, rows, config_bytes, revision, endpoint)
    if progress:
        print(f"fetched {traffic.received / 1e6:.1f} MB for {traffic.needed / 1e6:.1f} MB needed; "
              f"{REPO_ID} layers {list(layers)} and {len(new_ids)} embedding rows are in {folder}")
    return folder, traffic


def _check_entry(url: str, key: str, entry: dict, shape, dtypes: tuple[str, ...]) -> None:
    """Needed tensor ``key`` has one of ``dtypes`` and the shape the course expects (``_span`` checked its bytes
    fit)."""
    if entry.get("dtype") not in dtypes or tuple(entry.get("shape", ())) != tuple(shape):
        raise FetchError(f"{key} in {url} is {entry.get('dtype')} {entry.get('shape')}, expected "
                         f"{' or '.join(dtypes)} {list(shape)}: is this {REPO_ID}?")


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
    note = (f"{PARTIAL_NOTE} of {REPO_ID}: layers {layers} (each layer's attention or Gated DeltaNet linear "
            f"attention, its MLP and its two norms) and the embedding rows of {len(ids)} tokens")
    metadata = {"note": note,
                "revision": revision, "endpoint": endpoint or os.environ.get("HF_ENDPOINT", "https://huggingface.co")}
    folder.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=folder, prefix=".writing-") as tmp:
        save_file(tensors, Path(tmp) / SINGLE_FILE, metadata=metadata)
        (Path(tmp) / "config.json").write_bytes(config_bytes)
        for name in ("config.json", SINGLE_FILE):
            os.replace(Path(tmp) / name, folder / name)
