"""Weights named by where they lie instead of carried: a grading job that needs a layer of Qwen3.5's size names
its tensors in the safetensors files of the course's cache, and the sandbox, which may read that folder (see
``autograder/engine/sandbox/walls.py``), reads them itself, instead of the grader pickling 40 MB into every job."""
import functools
from dataclasses import dataclass

import torch
from safetensors import safe_open


@dataclass(frozen=True)
class StoredTensors:
    """``{name: tensor}`` as ``(name, file, key)``: the tensor stored under ``key`` in the safetensors ``file``."""

    entries: tuple[tuple[str, str, str], ...]

    def load(self) -> dict[str, torch.Tensor]:
        """The tensors, in their stored dtypes. Shared between calls (the grader builds many modules from one
        layer): copy before changing one. ``OSError`` when a file cannot be read."""
        return _read(self.entries)


@functools.lru_cache(maxsize=1)
def _read(entries: tuple[tuple[str, str, str], ...]) -> dict[str, torch.Tensor]:
    found = {}
    for file in dict.fromkeys(file for _, file, _ in entries):
        with safe_open(file, framework="pt") as handle:
            found.update({name: handle.get_tensor(key) for name, where, key in entries if where == file})
    return {name: found[name] for name, _, _ in entries}
