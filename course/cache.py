"""The folder where the course keeps what it builds or downloads once: the Qwen3.5 tokenizer it builds,
the SmolLM2 weights of assignment 07, a partial download of Qwen3.5-0.8B.

It is ``$ATTENTION_COURSE_CACHE`` when set, else ``$XDG_CACHE_HOME/attention-course``, else
``~/.cache/attention-course``: outside the course's folder, so a fresh checkout or a new release of the
notebooks keeps it.
"""
import os
from pathlib import Path

CACHE_ENV = "ATTENTION_COURSE_CACHE"


def cache_dir() -> Path:
    """The course's cache folder (it may not exist yet)."""
    if os.environ.get(CACHE_ENV):
        return Path(os.environ[CACHE_ENV]).expanduser()
    base = Path(os.environ["XDG_CACHE_HOME"]) if os.environ.get("XDG_CACHE_HOME") else Path.home() / ".cache"
    return base / "attention-course"
