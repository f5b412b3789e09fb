"""Small checkpoints on disk for the loader and tokenizer tests, and an environment with no model in it."""
import json

import torch
from safetensors.torch import load_file, save_file

from course.weights import EMBEDDING_KEY, FIXTURE_DIR

HUB_FOLDER = "models--Qwen--Qwen3.5-0.8B"
VOCAB = 256  # the test checkpoints' embedding table is [VOCAB, 1024] (ids up to 255 are exact in bf16)
PREFIX = "model.language_model.layers.3."


def isolate(monkeypatch, tmp_path):
    """No $QWEN35_PATH and an empty Hugging Face cache, so only what a test sets up is found."""
    monkeypatch.delenv("QWEN35_PATH", raising=False)
    monkeypatch.delenv("HF_HOME", raising=False)
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "empty-hub"))


def shipped_config() -> dict:
    return json.loads((FIXTURE_DIR / "config.json").read_text(encoding="utf-8"))


def real_like_tensors() -> dict[str, torch.Tensor]:
    """Layer 3 as the fixture has it but with other values (so a test can tell the two apart), plus an
    embedding table under the real key whose row i is filled with i / 1024."""
    layer = {key: -value for key, value in load_file(FIXTURE_DIR / "model.safetensors").items()
             if key.startswith(PREFIX)}
    rows = (torch.arange(VOCAB, dtype=torch.float32) / 1024)[:, None].expand(VOCAB, 1024)
    return {**layer, EMBEDDING_KEY: rows.to(torch.bfloat16).contiguous()}


def published_shard_name(i: int, n: int) -> str:
    """How Qwen3.5-0.8B names its single shard: model.safetensors-00001-of-00001.safetensors."""
    return f"model.safetensors-{i + 1:05d}-of-{n:05d}.safetensors"


def write_checkpoint(folder, tensors=None, *, shards: int = 0, shard_name=None, config=None, metadata=None):
    """A checkpoint folder: config.json (the shipped one, vocab cut to VOCAB) and the tensors, in one
    ``model.safetensors`` (``shards=0``) or in ``shards`` files listed in ``model.safetensors.index.json``.
    ``shard_name(i, n)`` names shard ``i`` of ``n`` (default like Hugging Face: model-00001-of-00002...)."""
    tensors = real_like_tensors() if tensors is None else tensors
    if config is None:
        config = shipped_config()
        config["text_config"]["vocab_size"] = VOCAB
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(config), encoding="utf-8")
    if not shards:
        save_file(tensors, folder / "model.safetensors", metadata=metadata)
        return folder
    shard_name = shard_name or (lambda i, n: f"model-{i + 1:05d}-of-{n:05d}.safetensors")
    weight_map = {}
    for i in range(shards):
        part = {key: value for j, (key, value) in enumerate(sorted(tensors.items())) if j % shards == i}
        save_file(part, folder / shard_name(i, shards), metadata=metadata)
        weight_map.update(dict.fromkeys(part, shard_name(i, shards)))
    total = sum(t.numel() * t.element_size() for t in tensors.values())
    index = {"metadata": {"total_size": total}, "weight_map": weight_map}
    (folder / "model.safetensors.index.json").write_text(json.dumps(index), encoding="utf-8")
    return folder


def hub_snapshot(hub, revision="0123abcd", *, main=True, **kwargs):
    """A checkpoint laid out as huggingface_hub caches it: models--Qwen--Qwen3.5-0.8B/snapshots/<rev>/."""
    folder = write_checkpoint(hub / HUB_FOLDER / "snapshots" / revision, **kwargs)
    if main:
        (hub / HUB_FOLDER / "refs").mkdir(parents=True, exist_ok=True)
        (hub / HUB_FOLDER / "refs" / "main").write_text(revision, encoding="utf-8")
    return folder
