"""Checkpoints on disk for the loader, tokenizer and fetch tests — small ones, and one with the published
model's full layout and size — and an environment with no model in it."""
import json
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

from course import qwen35_weights
from course.qwen35 import FULL_ATTENTION, read_config
from course.qwen35_weights import EMBEDDING_KEY, FIXTURE_DIR, attention_shapes

HUB_FOLDER = "models--Qwen--Qwen3.5-0.8B"
VOCAB = 256  # the test checkpoints' embedding table is [VOCAB, 1024] (ids up to 255 are exact in bf16)
PREFIX = "model.language_model.layers.3."


def isolate(monkeypatch, tmp_path):
    """No $QWEN35_PATH, an empty Hugging Face cache and no partial copy in the course's cache, so only what a
    test sets up is found."""
    monkeypatch.delenv("QWEN35_PATH", raising=False)
    monkeypatch.delenv("HF_HOME", raising=False)
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "empty-hub"))
    monkeypatch.setattr(qwen35_weights, "partial_folder", lambda: tmp_path / "no-partial-copy")


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


def checkpoint_layout(config_json: Path) -> dict[str, tuple[int, ...]]:
    """Key → shape of every tensor in the published Qwen3.5-0.8B checkpoint, from its config.json.

    Names and shapes follow transformers' ``models/qwen3_5/modeling_qwen3_5.py`` (language model,
    vision tower) and the published weight index (the ``mtp.*`` head, which transformers skips).
    """
    text = read_config(config_json)
    vision = json.loads(config_json.read_text(encoding="utf-8"))["vision_config"]
    hidden, inter = text.hidden_size, text.intermediate_size
    key_dim = text.linear_num_key_heads * text.linear_key_head_dim
    value_dim = text.linear_num_value_heads * text.linear_value_head_dim
    conv_dim = 2 * key_dim + value_dim

    def decoder_layer(prefix: str, kind: str) -> dict[str, tuple[int, ...]]:
        shapes = {
            "input_layernorm.weight": (hidden,),
            "post_attention_layernorm.weight": (hidden,),
            "mlp.gate_proj.weight": (inter, hidden),
            "mlp.up_proj.weight": (inter, hidden),
            "mlp.down_proj.weight": (hidden, inter),
        }
        if kind == FULL_ATTENTION:
            shapes |= {name: shape for name, shape in attention_shapes(text).items() if name.startswith("self_attn.")}
        else:
            heads = text.linear_num_value_heads
            shapes |= {
                "linear_attn.in_proj_qkv.weight": (conv_dim, hidden),
                "linear_attn.in_proj_z.weight": (value_dim, hidden),
                "linear_attn.in_proj_b.weight": (heads, hidden),
                "linear_attn.in_proj_a.weight": (heads, hidden),
                "linear_attn.conv1d.weight": (conv_dim, 1, text.linear_conv_kernel_dim),
                "linear_attn.dt_bias": (heads,),
                "linear_attn.A_log": (heads,),
                "linear_attn.norm.weight": (text.linear_value_head_dim,),
                "linear_attn.out_proj.weight": (hidden, value_dim),
            }
        return {prefix + name: shape for name, shape in shapes.items()}

    layout = {"model.language_model.embed_tokens.weight": (text.vocab_size, hidden),
              "model.language_model.norm.weight": (hidden,)}
    for i, kind in enumerate(text.layer_types):
        layout |= decoder_layer(f"model.language_model.layers.{i}.", kind)

    width, v_inter = vision["hidden_size"], vision["intermediate_size"]
    merged = width * vision["spatial_merge_size"] ** 2
    patch = (width, vision["in_channels"], vision["temporal_patch_size"], vision["patch_size"], vision["patch_size"])
    layout |= {"model.visual.patch_embed.proj.weight": patch, "model.visual.patch_embed.proj.bias": (width,),
               "model.visual.pos_embed.weight": (vision["num_position_embeddings"], width)}
    for i in range(vision["depth"]):
        block = f"model.visual.blocks.{i}."
        layout |= {block + name: shape for name, shape in {
            "norm1.weight": (width,), "norm1.bias": (width,), "norm2.weight": (width,), "norm2.bias": (width,),
            "attn.qkv.weight": (3 * width, width), "attn.qkv.bias": (3 * width,),
            "attn.proj.weight": (width, width), "attn.proj.bias": (width,),
            "mlp.linear_fc1.weight": (v_inter, width), "mlp.linear_fc1.bias": (v_inter,),
            "mlp.linear_fc2.weight": (width, v_inter), "mlp.linear_fc2.bias": (width,),
        }.items()}
    layout |= {"model.visual.merger.norm.weight": (width,), "model.visual.merger.norm.bias": (width,),
               "model.visual.merger.linear_fc1.weight": (merged, merged),
               "model.visual.merger.linear_fc1.bias": (merged,),
               "model.visual.merger.linear_fc2.weight": (vision["out_hidden_size"], merged),
               "model.visual.merger.linear_fc2.bias": (vision["out_hidden_size"],)}

    layout |= {"mtp.fc.weight": (hidden, 2 * hidden), "mtp.pre_fc_norm_embedding.weight": (hidden,),
               "mtp.pre_fc_norm_hidden.weight": (hidden,), "mtp.norm.weight": (hidden,)}
    layout |= decoder_layer("mtp.layers.0.", FULL_ATTENTION)
    return layout


def write_full_size(folder: Path, shards: int, values: dict[str, torch.Tensor] | None = None) -> list[Path]:
    """Qwen3.5-0.8B's published checkpoint at full size (about 1.7 GB of bfloat16) in ``folder``: its config.json,
    every tensor of ``checkpoint_layout`` spread over ``shards`` files named as published, and the index. A
    tensor in ``values`` has those values; every other one is zeros. Returns the shard files.

    Shards are written one at a time, so no more than one shard's tensors are in memory at once.
    """
    layout = checkpoint_layout(FIXTURE_DIR / "config.json")
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_bytes((FIXTURE_DIR / "config.json").read_bytes())
    names = [published_shard_name(i, shards) for i in range(shards)]
    keys = list(layout)
    weight_map = {key: names[i % shards] for i, key in enumerate(keys)}  # a layer's tensors end up in every shard
    for name in names:
        part = {key: (values or {}).get(key, None) for key in keys if weight_map[key] == name}
        save_file({key: torch.zeros(layout[key], dtype=torch.bfloat16) if value is None else value
                   for key, value in part.items()}, str(folder / name), metadata={"format": "pt"})
    total = sum(torch.Size(shape).numel() * 2 for shape in layout.values())
    index = {"metadata": {"total_size": total}, "weight_map": weight_map}
    (folder / qwen35_weights.INDEX_FILE).write_text(json.dumps(index, indent=2), encoding="utf-8")
    return [folder / name for name in names]
