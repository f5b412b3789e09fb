"""``course-weights qwen35`` against a local stand-in for the Hugging Face Hub: a full-size checkpoint with the
published key layout (about 1.7 GB, two shards and an index), served over HTTP with range requests and a
redirect to a "CDN" path, as the Hub serves files; and the same files from a server that ignores ranges.

What is checked: the bytes sent are at most 1.05 × the bytes the course needs (headers, layer 3 or layers 0-3 with
their MLPs, six embedding rows); the tensors fetched are byte-identical to the full file's, dtypes included (the
Gated DeltaNet layers' float32 ``A_log`` and ``norm.weight``); ``course.qwen35_weights`` then uses them; a second
fetch sends nothing; a copy fetched before the MLPs were read gets only them added; HF_ENDPOINT reaches the CLI, whose ``--layers`` takes numbers and ranges; a server without ranges gives a
clear error, or a streamed full download when allowed; an unreachable endpoint says so.
"""
import http.server
import json
import os
import re
import struct
import subprocess
import sys
import threading

import pytest
import torch
from safetensors import safe_open

from course import qwen35_weights
from course.qwen35 import PROMPT_IDS
from course.tools import qwen35_fetch, weights_cli
from tests.checkpoints import (
    checkpoint_layout,
    published_shard_name,
    real_like_tensors,
    write_checkpoint,
    write_full_size,
)
from tests.course.test_weights import linear_like_tensors, mlp_like_tensors

REPO = "Qwen/Qwen3.5-0.8B"
LAYER_PREFIX = "model.language_model.layers.3."
LINEAR_PREFIXES = tuple(f"model.language_model.layers.{layer}." for layer in (0, 1, 2))
EMBEDDINGS = qwen35_weights.EMBEDDING_KEY
FLOAT32 = ("linear_attn.A_log", "linear_attn.norm.weight")  # float32 in the published checkpoint


def _embedding_pattern(shape) -> torch.Tensor:
    """A table whose every row differs from its neighbours, made in blocks (its int16 bits are a cheap formula)."""
    rows, width = shape
    table = torch.empty(rows, width, dtype=torch.int16)
    columns = torch.arange(width, dtype=torch.int32)
    for start in range(0, rows, 16384):
        index = torch.arange(start, min(start + 16384, rows), dtype=torch.int32)[:, None]
        table[start:start + len(index)] = ((index * 131 + columns * 7) % 32749).to(torch.int16)
    return table.view(torch.bfloat16)


FULL_SIZE = pytest.mark.slow  # the hub serves a checkpoint of the published size: 1.7 GB written per run


@pytest.fixture(scope="module")
def hub_files(tmp_path_factory):
    """The full-size checkpoint: layers 0-3 random (the Gated DeltaNet layers' A_log and norm.weight in float32, as
    published), the embedding table patterned, everything else zeros."""
    folder = tmp_path_factory.mktemp("hub") / "main"
    layout = checkpoint_layout(qwen35_weights.FIXTURE_DIR / "config.json")
    gen = torch.Generator().manual_seed(3)
    values = {key: torch.randn(shape, generator=gen).to(torch.float32 if key.endswith(FLOAT32) else torch.bfloat16)
              for key, shape in layout.items() if key.startswith((LAYER_PREFIX, *LINEAR_PREFIXES))}
    values[EMBEDDINGS] = _embedding_pattern(layout[EMBEDDINGS])
    shards = write_full_size(folder, shards=2, values=values)
    assert sum(f.stat().st_size for f in shards) > 1.7e9
    return folder


class _Hub(http.server.ThreadingHTTPServer):
    """Serves ``folder`` as ``/<repo>/resolve/main/<file>``, redirected to ``/cdn/main/<file>``, with or without
    HTTP ranges; counts the body bytes it sends."""

    daemon_threads = True

    def __init__(self, folder, ranges: bool):
        super().__init__(("127.0.0.1", 0), _Handler)
        self.folder, self.ranges, self.sent, self.lock = folder, ranges, 0, threading.Lock()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


class _Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):  # noqa: N802 - the name http.server calls
        path = self.path.split("?")[0]
        resolve = f"/{REPO}/resolve/"
        if path.startswith(resolve):
            self.send_response(302)
            self.send_header("Location", "/cdn/" + path[len(resolve):])
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        revision, _, name = path.removeprefix("/cdn/").partition("/")
        file = self.server.folder / name
        if revision != "main" or "/" in name or not file.is_file():
            self.send_error(404)
            return
        size = file.stat().st_size
        start, stop, status = 0, size, 200
        asked = self.headers.get("Range")
        if asked and self.server.ranges:
            first, _, last = asked.removeprefix("bytes=").partition("-")
            start, stop, status = int(first), min(int(last) + 1, size), 206
        self.send_response(status)
        if status == 206:
            self.send_header("Content-Range", f"bytes {start}-{stop - 1}/{size}")
        self.send_header("Content-Length", str(stop - start))
        self.end_headers()
        with open(file, "rb") as handle:
            handle.seek(start)
            left = stop - start
            try:
                while left:
                    block = handle.read(min(left, 1 << 20))
                    self.wfile.write(block)
                    with self.server.lock:
                        self.server.sent += len(block)
                    left -= len(block)
            except (BrokenPipeError, ConnectionResetError):
                pass  # the client stopped reading (a full answer to a range request)

    def log_message(self, *args):
        pass


def _serve(folder, ranges: bool):
    server = _Hub(folder, ranges)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


@pytest.fixture(scope="module")
def hub(hub_files):
    server = _serve(hub_files, ranges=True)
    yield server
    server.shutdown()


@pytest.fixture
def cache(tmp_path, monkeypatch):
    """An empty course cache, and no other Qwen3.5 checkpoint to be found."""
    monkeypatch.setenv("ATTENTION_COURSE_CACHE", str(tmp_path / "course-cache"))
    monkeypatch.delenv("QWEN35_PATH", raising=False)
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "empty-hub"))
    return tmp_path / "course-cache"


def _bytes_needed(folder, keys, rows: int) -> int:
    """What the course has to read, computed from the files: config.json and the index, the 8 bytes and
    header of each shard holding something needed, the needed tensors' bytes as the headers place them,
    ``rows`` embedding rows."""
    index = json.loads((folder / qwen35_weights.INDEX_FILE).read_text())["weight_map"]
    total = (folder / "config.json").stat().st_size + (folder / qwen35_weights.INDEX_FILE).stat().st_size
    for shard in {index[key] for key in [*keys, EMBEDDINGS]}:
        with open(folder / shard, "rb") as handle:
            (length,) = struct.unpack("<Q", handle.read(8))
            header = json.loads(handle.read(length))
        total += 8 + length
        total += sum(header[key]["data_offsets"][1] - header[key]["data_offsets"][0] for key in keys if key in header)
    return total + rows * 1024 * 2


def _full(folder, key, rows=None) -> torch.Tensor:
    shard = json.loads((folder / qwen35_weights.INDEX_FILE).read_text())["weight_map"][key]
    with safe_open(folder / shard, framework="pt") as handle:
        if rows is None:
            return handle.get_tensor(key)
        view = handle.get_slice(key)
        return torch.cat([view[row:row + 1] for row in rows])


def _same_bytes(a: torch.Tensor, b: torch.Tensor) -> bool:
    bits = torch.int32 if a.dtype == torch.float32 else torch.int16
    return a.shape == b.shape and a.dtype == b.dtype and torch.equal(a.view(bits), b.view(bits))


def _layer3_keys():
    """What the course reads of layer 3: every tensor the published checkpoint has of it (attention, MLP, norms)."""
    return [key for key in checkpoint_layout(qwen35_weights.FIXTURE_DIR / "config.json") if key.startswith(LAYER_PREFIX)]


def _linear_keys():
    """What the course reads of layers 0-2: every tensor of theirs (linear attention, MLP, norms)."""
    return [key for key in checkpoint_layout(qwen35_weights.FIXTURE_DIR / "config.json")
            if key.startswith(LINEAR_PREFIXES)]


def _mlp_keys(layers):
    return [f"model.language_model.layers.{layer}.{name}" for layer in layers
            for name in qwen35_weights.mlp_shapes(qwen35_weights.load_config())]


def _assert_fetched(folder, files, layers) -> None:
    """The loaders read each of ``layers`` (the whole decoder layer) from the partial copy byte for byte as ``files``
    hold it."""
    for layer in layers:
        got = qwen35_weights.load_layer(layer, folder, verbose=False)
        assert len(got) == (11 if layer == 3 else 14)
        for name, tensor in got.items():
            assert _same_bytes(tensor, _full(files, f"model.language_model.layers.{layer}.{name}")), (layer, name)


@FULL_SIZE
def test_fetches_only_the_needed_bytes_and_they_are_the_real_ones(hub, hub_files, cache):
    before = hub.sent
    folder, traffic = qwen35_fetch.fetch([3], PROMPT_IDS, endpoint=hub.url, progress=False)
    sent = hub.sent - before
    needed = _bytes_needed(hub_files, _layer3_keys(), len(PROMPT_IDS))
    assert sent == traffic.received
    assert sent <= 1.05 * needed, f"sent {sent} bytes for {needed} needed"
    assert folder == qwen35_weights.partial_folder() and folder.is_relative_to(cache)

    found = qwen35_weights.find_checkpoint()
    assert found.partial and not found.synthetic and found.folder == folder
    assert "course-weights qwen35" in found.describe()
    layer = qwen35_weights.load_layer(3, verbose=False)
    assert len(layer) == 11
    for name, tensor in layer.items():
        assert _same_bytes(tensor, _full(hub_files, LAYER_PREFIX + name)), name
    rows = qwen35_weights.load_embedding_rows(list(PROMPT_IDS), verbose=False)
    assert _same_bytes(rows, _full(hub_files, EMBEDDINGS, PROMPT_IDS))
    assert (folder / "config.json").read_bytes() == (hub_files / "config.json").read_bytes()

    again_before = hub.sent
    _, again = qwen35_fetch.fetch([3], PROMPT_IDS, endpoint=hub.url, progress=False)
    assert again.received == 0 and hub.sent == again_before  # nothing is asked of the server

    with pytest.raises(qwen35_weights.CheckpointError, match="course-weights qwen35 --text"):
        qwen35_weights.load_embedding_rows([5], verbose=False)
    _, more = qwen35_fetch.fetch([3], [5, 6, *PROMPT_IDS], endpoint=hub.url, progress=False)
    assert more.received <= 1.05 * _bytes_needed(hub_files, [], 2)
    assert _same_bytes(qwen35_weights.load_embedding_rows([6, 5, PROMPT_IDS[0]], verbose=False),
                       _full(hub_files, EMBEDDINGS, [6, 5, PROMPT_IDS[0]]))
    assert _same_bytes(qwen35_weights.load_attention_layer(3, verbose=False)["self_attn.q_proj.weight"],
                       _full(hub_files, LAYER_PREFIX + "self_attn.q_proj.weight"))


@FULL_SIZE
def test_layers_0_to_3_fetch_only_the_needed_bytes_and_they_are_the_real_ones(hub, hub_files, cache):
    before = hub.sent
    folder, traffic = qwen35_fetch.fetch([0, 1, 2, 3], PROMPT_IDS, endpoint=hub.url, progress=False)
    needed = _bytes_needed(hub_files, [*_linear_keys(), *_layer3_keys()], len(PROMPT_IDS))
    assert hub.sent - before == traffic.received <= 1.05 * needed
    assert qwen35_weights.find_checkpoint().folder == folder
    _assert_fetched(folder, hub_files, [0, 1, 2, 3])
    assert qwen35_weights.load_linear_attention_layer(0, verbose=False)["linear_attn.A_log"].dtype == torch.float32
    with safe_open(folder / "model.safetensors", "pt") as handle:
        assert handle.metadata()["note"].startswith("partial copy of Qwen/Qwen3.5-0.8B: layers [0, 1, 2, 3]")
    again_before = hub.sent
    assert qwen35_fetch.fetch([0, 1, 2, 3], PROMPT_IDS, endpoint=hub.url, progress=False)[1].received == 0
    assert hub.sent == again_before


@pytest.fixture
def small_hub(tmp_path):
    """A small checkpoint (the embedding table cut to 256 rows) with layers 0-3's real keys, shapes and dtypes, one
    shard and an index as published, served with ranges; ``(server, files)``."""
    files = write_checkpoint(tmp_path / "small-hub", {**real_like_tensors(), **linear_like_tensors(), **mlp_like_tensors()},
                             shards=1, shard_name=published_shard_name)
    server = _serve(files, ranges=True)
    yield server, files
    server.shutdown()


def test_linear_layers_are_fetched_with_layer_3(small_hub, cache):
    server, files = small_hub
    tokens = [7, 200, 3]
    folder, traffic = qwen35_fetch.fetch([0, 1, 2, 3], tokens, endpoint=server.url, progress=False)
    keys = [key for key in json.loads((files / qwen35_weights.INDEX_FILE).read_text())["weight_map"]
            if key.startswith((LAYER_PREFIX, *LINEAR_PREFIXES))]
    assert server.sent == traffic.received <= 1.05 * _bytes_needed(files, keys, len(tokens))
    _assert_fetched(folder, files, [0, 1, 2, 3])
    assert _same_bytes(qwen35_weights.load_embedding_rows(tokens, folder, verbose=False), _full(files, EMBEDDINGS, tokens))
    sent = server.sent
    _, again = qwen35_fetch.fetch([0, 3], tokens, endpoint=server.url, progress=False)
    assert again.received == 0 and server.sent == sent


def test_a_linear_layer_is_added_to_an_earlier_fetch(small_hub, cache):
    server, files = small_hub
    qwen35_fetch.fetch([3], [7], endpoint=server.url, progress=False)
    with pytest.raises(qwen35_weights.CheckpointError, match=r"this partial copy holds only the layers it was fetched"):
        qwen35_weights.load_linear_attention_layer(1, verbose=False)
    _, more = qwen35_fetch.fetch([1, 3], [7], endpoint=server.url, progress=False)
    assert more.received <= 1.05 * _bytes_needed(files, [key for key in _linear_keys() if key.startswith(LINEAR_PREFIXES[1])], 0)
    _assert_fetched(qwen35_weights.partial_folder(), files, [1, 3])


def test_a_copy_fetched_without_the_mlps_gets_only_them_added(small_hub, cache, monkeypatch):
    server, files = small_hub
    with monkeypatch.context() as before:  # what a fetch of the course brought before it read the MLPs
        before.setattr(qwen35_weights, "mlp_shapes", lambda config: {})
        qwen35_fetch.fetch([0, 1, 2, 3], [7], endpoint=server.url, progress=False)
    assert qwen35_weights.load_linear_attention_layer(0, verbose=False)
    with pytest.raises(qwen35_weights.CheckpointError, match=r"no tensor 'model.language_model.layers.0.mlp.\S+'; this "
                                                             r"partial copy holds only the layers it was fetched with"):
        qwen35_weights.load_layer(0, verbose=False)
    _, more = qwen35_fetch.fetch([0, 1, 2, 3], [7], endpoint=server.url, progress=False)
    mlp_bytes = _bytes_needed(files, _mlp_keys([0, 1, 2, 3]), 0)
    assert 0.95 * mlp_bytes <= more.needed and more.received <= 1.05 * mlp_bytes
    _assert_fetched(qwen35_weights.partial_folder(), files, [0, 1, 2, 3])


@pytest.mark.parametrize("layer, match", [
    (24, r"cannot fetch layer 24 of Qwen/Qwen3.5-0.8B: layer 24 does not exist: config.json has 24 layers"),
    (-1, r"cannot fetch layer -1 .*does not exist"),
])
def test_layers_the_model_does_not_have_are_refused(small_hub, cache, layer, match):
    with pytest.raises(qwen35_fetch.FetchError, match=match):
        qwen35_fetch.fetch([layer], PROMPT_IDS, endpoint=small_hub[0].url, progress=False)


@pytest.mark.parametrize("words, layers", [
    ([], [3]),
    (["--layers", "0-3"], [0, 1, 2, 3]),
    (["--layers", "0", "1", "2", "3"], [0, 1, 2, 3]),
    (["--layers", "3", "0-2", "1"], [0, 1, 2, 3]),
    (["--layers", "7"], [7]),
])
def test_the_command_takes_layer_numbers_and_ranges(monkeypatch, words, layers):
    asked = []
    monkeypatch.setattr(qwen35_fetch, "fetch", lambda layers, ids, **options: asked.append(layers))
    assert weights_cli.main(["qwen35", "--quiet", *words]) == 0
    assert asked == [layers]


@pytest.mark.parametrize("word, match", [
    ("3-1", r"'3-1' ends before it starts; a range is written low-high, as 0-3"),
    ("x", r"'x' is neither a layer number \(3\) nor a range of them \(0-3\)"),
    ("0-", r"'0-' is neither"),
    ("-1", r"'-1' is neither"),
    ("0-99999999999", r"names layer 99999999999; no model the course reads has that many"),
])
def test_the_command_refuses_other_layer_words(monkeypatch, capsys, word, match):
    monkeypatch.setattr(qwen35_fetch, "fetch", lambda *args, **kwargs: pytest.fail("fetched"))
    with pytest.raises(SystemExit) as done:
        weights_cli.main(["qwen35", "--layers", word])
    assert done.value.code == 2
    assert re.search(match, capsys.readouterr().err)


def _cli(*args, env: dict) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "course.tools.weights_cli", *args], capture_output=True, text=True,
                          env={**os.environ, **env}, stdin=subprocess.DEVNULL, timeout=300)


@FULL_SIZE
def test_the_command_follows_hf_endpoint(hub, tmp_path):
    done = _cli("qwen35", "--layers", "0-3", "--quiet",
                env={"HF_ENDPOINT": hub.url, "ATTENTION_COURSE_CACHE": str(tmp_path / "cache")})
    assert done.returncode == 0, done.stderr
    with safe_open(tmp_path / "cache" / "qwen35" / "Qwen3.5-0.8B-partial" / "model.safetensors", "pt") as handle:
        assert LAYER_PREFIX + "self_attn.k_norm.weight" in handle.keys()
        assert {prefix + "linear_attn.A_log" for prefix in LINEAR_PREFIXES} <= set(handle.keys())
        assert set(_mlp_keys([0, 1, 2, 3])) <= set(handle.keys())
        assert handle.metadata()["endpoint"] == hub.url


@FULL_SIZE
def test_a_server_without_ranges_is_refused_clearly(hub_files, cache, tmp_path):
    server = _serve(hub_files, ranges=False)
    try:
        with pytest.raises(qwen35_fetch.RangeUnsupported, match="ignores HTTP range requests"):
            qwen35_fetch.fetch([3], PROMPT_IDS, endpoint=server.url, progress=False)
        assert not (qwen35_weights.partial_folder() / "model.safetensors").exists()
        done = _cli("qwen35", "--quiet", env={"HF_ENDPOINT": server.url, "ATTENTION_COURSE_CACHE": str(tmp_path / "c")})
        assert done.returncode == 1 and "ignores HTTP range requests" in done.stderr, done.stderr
        assert "--full-download" in done.stderr
    finally:
        server.shutdown()


def test_a_server_without_ranges_is_streamed_when_allowed(cache, tmp_path):
    # A small checkpoint with the real keys is enough here: what matters is what is kept, not how much is sent.
    files = write_checkpoint(tmp_path / "small", {**real_like_tensors(), **mlp_like_tensors([3])}, shards=2,
                             shard_name=published_shard_name)
    tokens = [7, 200, 3]
    server = _serve(files, ranges=False)
    try:
        folder, traffic = qwen35_fetch.fetch([3], tokens, endpoint=server.url, full_download=True, progress=False)
    finally:
        server.shutdown()
    # Each shard streamed at most once, up to the last byte needed of it; only the needed bytes are kept.
    shards = sum(f.stat().st_size for f in files.glob("*-of-*.safetensors"))
    small_files = (files / "config.json").stat().st_size + (files / qwen35_weights.INDEX_FILE).stat().st_size
    assert traffic.needed < traffic.received <= shards + small_files
    for name, tensor in qwen35_weights.load_layer(3, folder, verbose=False).items():
        assert _same_bytes(tensor, _full(files, LAYER_PREFIX + name)), name
    assert _same_bytes(qwen35_weights.load_embedding_rows(tokens, folder, verbose=False), _full(files, EMBEDDINGS, tokens))


def test_an_unreachable_endpoint_says_so(cache):
    with pytest.raises(qwen35_fetch.FetchError, match="cannot reach .*offline"):
        qwen35_fetch.fetch([3], PROMPT_IDS, endpoint="http://127.0.0.1:9", progress=False)
