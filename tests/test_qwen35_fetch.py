"""``course-weights qwen35`` against a local stand-in for the Hugging Face Hub: a full-size checkpoint with the
published key layout (about 1.7 GB, two shards and an index), served over HTTP with range requests and a
redirect to a "CDN" path, as the Hub serves files; and the same files from a server that ignores ranges.

What is checked: the bytes sent are at most 1.05 × the bytes the course needs (headers, layer 3, six embedding
rows); the tensors fetched are byte-identical to the full file's; ``course.qwen35_weights`` then uses them; a second
fetch sends nothing; HF_ENDPOINT reaches the CLI; a server without ranges gives a clear error, or a streamed
full download when allowed; an unreachable endpoint says so.
"""
import http.server
import json
import os
import struct
import subprocess
import sys
import threading

import pytest
import torch
from safetensors import safe_open

from course import qwen35_weights
from course.qwen35 import PROMPT_IDS
from course.tools import qwen35_fetch
from tests.checkpoints import checkpoint_layout, published_shard_name, write_checkpoint, write_full_size

REPO = "Qwen/Qwen3.5-0.8B"
LAYER_PREFIX = "model.language_model.layers.3."
EMBEDDINGS = qwen35_weights.EMBEDDING_KEY


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
    """The full-size checkpoint: layer 3 random, the embedding table patterned, everything else zeros."""
    folder = tmp_path_factory.mktemp("hub") / "main"
    layout = checkpoint_layout(qwen35_weights.FIXTURE_DIR / "config.json")
    gen = torch.Generator().manual_seed(3)
    values = {key: torch.randn(shape, generator=gen).to(torch.bfloat16)
              for key, shape in layout.items() if key.startswith(LAYER_PREFIX)}
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
    header of each shard holding something needed, the needed tensors, ``rows`` embedding rows."""
    index = json.loads((folder / qwen35_weights.INDEX_FILE).read_text())["weight_map"]
    total = (folder / "config.json").stat().st_size + (folder / qwen35_weights.INDEX_FILE).stat().st_size
    for shard in {index[key] for key in [*keys, EMBEDDINGS]}:
        with open(folder / shard, "rb") as handle:
            total += 8 + struct.unpack("<Q", handle.read(8))[0]
    with_shapes = checkpoint_layout(folder / "config.json")
    return total + sum(torch.Size(with_shapes[key]).numel() * 2 for key in keys) + rows * 1024 * 2


def _full(folder, key, rows=None) -> torch.Tensor:
    shard = json.loads((folder / qwen35_weights.INDEX_FILE).read_text())["weight_map"][key]
    with safe_open(folder / shard, framework="pt") as handle:
        if rows is None:
            return handle.get_tensor(key)
        view = handle.get_slice(key)
        return torch.cat([view[row:row + 1] for row in rows])


def _same_bytes(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.shape == b.shape and a.dtype == b.dtype and torch.equal(a.view(torch.int16), b.view(torch.int16))


def _layer3_keys():
    """What the course reads of layer 3: its attention's tensors and its input norm (not its MLP)."""
    return [key for key in checkpoint_layout(qwen35_weights.FIXTURE_DIR / "config.json")
            if key.startswith(LAYER_PREFIX + "self_attn.") or key == LAYER_PREFIX + "input_layernorm.weight"]


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
    layer = qwen35_weights.load_attention_layer(3, verbose=False)
    assert len(layer) == 7
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
def test_only_softmax_attention_layers_can_be_fetched(hub, cache):
    with pytest.raises(qwen35_fetch.FetchError, match=r"layer 2 is not a softmax-attention layer.*\[3, 7, 11"):
        qwen35_fetch.fetch([2], PROMPT_IDS, endpoint=hub.url, progress=False)


def _cli(*args, env: dict) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "course.tools.weights_cli", *args], capture_output=True, text=True,
                          env={**os.environ, **env}, stdin=subprocess.DEVNULL, timeout=300)


@FULL_SIZE
def test_the_command_follows_hf_endpoint(hub, tmp_path):
    done = _cli("qwen35", "--layers", "3", "--quiet",
                env={"HF_ENDPOINT": hub.url, "ATTENTION_COURSE_CACHE": str(tmp_path / "cache")})
    assert done.returncode == 0, done.stderr
    with safe_open(tmp_path / "cache" / "qwen35" / "Qwen3.5-0.8B-partial" / "model.safetensors", "pt") as handle:
        assert LAYER_PREFIX + "self_attn.k_norm.weight" in handle.keys()
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
    files = write_checkpoint(tmp_path / "small", shards=2, shard_name=published_shard_name)
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
    for name, tensor in qwen35_weights.load_attention_layer(3, folder, verbose=False).items():
        assert _same_bytes(tensor, _full(files, LAYER_PREFIX + name)), name
    assert _same_bytes(qwen35_weights.load_embedding_rows(tokens, folder, verbose=False), _full(files, EMBEDDINGS, tokens))


def test_an_unreachable_endpoint_says_so(cache):
    with pytest.raises(qwen35_fetch.FetchError, match="cannot reach .*offline"):
        qwen35_fetch.fetch([3], PROMPT_IDS, endpoint="http://127.0.0.1:9", progress=False)
