"""Write the synthetic stand-in for layer 3 of Qwen3.5-0.8B into ``data/qwen35_layer3/``, and layers 0-2's and the
MLPs of layers 0-3.

The real checkpoint cannot be downloaded where this course is built, so the course ships random
weights in the real format: the model's ``config.json`` (layout and values as published) and a
``model.safetensors`` whose tensors have exactly the real keys, shapes and dtype (bfloat16) for layer
3's attention and input norm. The embedding rows of the six tokens of the course's prompt are stored
under keys that do not exist in the real file (``fixture.embed_tokens.*``), because the whole
embedding table would be about 500 MB.

The values are random but shaped like a trained layer's, so the plots in the notebook have something
to show: the embeddings share a common direction (as trained embeddings do), each query head's gate
rows lean along it by a different amount (so heads open their gates differently) and along a
direction of its own (so a head's gate also changes from token to token), and each query head is
aligned with its key head by a different amount (so some heads look mostly at the token itself and
others spread out).

Layers 0-2 (Gated DeltaNet, about 21 MB each) and the MLPs and post-attention norms of layers 0-3 (22 MB each)
are not kept in git: ``course.qwen35_stand_in`` makes them from the same seed when they are first read, into the
course's cache. This script writes them too, into the cache or into a folder given, and prints their SHA-256
(``course.qwen35_stand_in.SHA256`` and ``MLP_SHA256`` record them).

Deterministic: running it again writes byte-identical files.
Run: python data/make_qwen35_fixture.py [FOLDER]  (FOLDER: write everything there instead, to compare)
"""
import json
import math
import sys
from pathlib import Path

import numpy as np
import torch
from safetensors.torch import save

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from course import qwen35_stand_in  # noqa: E402
from course.qwen35 import PROMPT, PROMPT_IDS, read_config  # noqa: E402
from course.qwen35_stand_in import EMBED_SHARED, SEED, bf16, normal, shared_direction, with_ordered_metadata  # noqa: E402
from course.qwen35_weights import stand_in_file, stand_in_folder, stand_in_mlp_file  # noqa: E402

OUT = REPO / "data" / "qwen35_layer3"
LAYER = 3
PREFIX = f"model.language_model.layers.{LAYER}."
NOTE = ("synthetic stand-in for Qwen/Qwen3.5-0.8B layer 3: random bfloat16 weights with the real keys, shapes "
        "and config; made by data/make_qwen35_fixture.py; not the trained model")

# Per query head (8 of them): how far the query rows align with the head's key rows (0: unrelated,
# larger: the head mostly attends to the token itself); the gate's mean logit; how much the gate's
# logit moves from token to token (all of a head's gate dims together); and the spread of the logits
# over the head's dims. Per KV head (2): key and value row std. Per query head: o_proj column std.
QUERY_KEY_ALIGNMENT = (0.0, 0.1, 0.2, 0.35, 0.05, 0.15, 0.25, 0.45)
GATE_MEAN_LOGIT = (-2.5, -1.5, -0.5, 0.5, -3.0, -1.0, 0.0, 1.5)
GATE_TOKEN_SPREAD = (0.5, 1.5, 2.0, 1.0, 0.3, 2.5, 1.2, 1.0)
GATE_LOGIT_STD = (0.4, 0.8, 0.6, 1.2, 0.3, 1.0, 0.7, 0.9)
KEY_STD = (0.03, 0.045)
VALUE_STD = (0.03, 0.05)
QUERY_STD = (0.02, 0.03, 0.025, 0.04, 0.02, 0.035, 0.03, 0.045)
O_PROJ_STD = (0.015, 0.02, 0.025, 0.018, 0.03, 0.022, 0.016, 0.028)
NORM_WEIGHT_STD = 0.05  # zero-centred norms scale by (1 + weight): small weights keep the scale near 1
QK_NORM_WEIGHT_STD = 0.1
EMBED_STD = 0.02

# The published config.json of Qwen/Qwen3.5-0.8B (vision-language model; text model under text_config).
CONFIG = {
    "architectures": ["Qwen3_5ForConditionalGeneration"],
    "image_token_id": 248056,
    "model_type": "qwen3_5",
    "text_config": {
        "attention_bias": False,
        "attention_dropout": 0.0,
        "attn_output_gate": True,
        "dtype": "bfloat16",
        "eos_token_id": 248044,
        "full_attention_interval": 4,
        "head_dim": 256,
        "hidden_act": "silu",
        "hidden_size": 1024,
        "initializer_range": 0.02,
        "intermediate_size": 3584,
        "layer_types": ["linear_attention", "linear_attention", "linear_attention", "full_attention"] * 6,
        "linear_conv_kernel_dim": 4,
        "linear_key_head_dim": 128,
        "linear_num_key_heads": 16,
        "linear_num_value_heads": 16,
        "linear_value_head_dim": 128,
        "max_position_embeddings": 262144,
        "mlp_only_layers": [],
        "model_type": "qwen3_5_text",
        "mtp_num_hidden_layers": 1,
        "mtp_use_dedicated_embeddings": False,
        "num_attention_heads": 8,
        "num_hidden_layers": 24,
        "num_key_value_heads": 2,
        "rms_norm_eps": 1e-06,
        "tie_word_embeddings": True,
        "use_cache": True,
        "vocab_size": 248320,
        "mamba_ssm_dtype": "float32",
        "rope_parameters": {
            "mrope_interleaved": True,
            "mrope_section": [11, 11, 10],
            "rope_type": "default",
            "rope_theta": 10000000,
            "partial_rotary_factor": 0.25,
        },
    },
    "tie_word_embeddings": True,
    "transformers_version": "4.57.0.dev0",
    "video_token_id": 248057,
    "vision_config": {
        "deepstack_visual_indexes": [],
        "depth": 12,
        "hidden_act": "gelu_pytorch_tanh",
        "hidden_size": 768,
        "in_channels": 3,
        "initializer_range": 0.02,
        "intermediate_size": 3072,
        "model_type": "qwen3_5",
        "num_heads": 12,
        "num_position_embeddings": 2304,
        "out_hidden_size": 1024,
        "patch_size": 16,
        "spatial_merge_size": 2,
        "temporal_patch_size": 2,
    },
    "vision_end_token_id": 248054,
    "vision_start_token_id": 248053,
}


def make_tensors(config) -> dict[str, torch.Tensor]:
    """All fixture tensors, real keys for layer 3 plus ``fixture.embed_tokens.{rows,ids}``."""
    hidden, heads, kv_heads, dim = (config.hidden_size, config.num_attention_heads,
                                    config.num_key_value_heads, config.head_dim)
    group = heads // kv_heads
    shared = shared_direction(hidden)  # the direction every embedding row leans along
    shared_unit = shared / np.linalg.norm(shared)
    # Each row has its own seed (clear of the weights' seeds), so adding a token later leaves the
    # other rows unchanged.
    rows = np.stack([EMBED_STD * (EMBED_SHARED * shared + normal(SEED + 1_000_000 + token, hidden))
                     for token in PROMPT_IDS])
    along_shared = qwen35_stand_in.along_shared(hidden)  # an embedding row's reach along shared_unit, after the norm

    keys = [KEY_STD[g] * normal(SEED + 100 + g, dim, hidden) for g in range(kv_heads)]
    values = [VALUE_STD[g] * normal(SEED + 200 + g, dim, hidden) for g in range(kv_heads)]
    q_proj = []
    for h in range(heads):
        alignment = QUERY_KEY_ALIGNMENT[h]
        own = normal(SEED + 300 + h, dim, hidden)
        query = QUERY_STD[h] * (alignment * keys[h // group] / KEY_STD[h // group] + math.sqrt(1 - alignment**2) * own)
        gate_std = GATE_LOGIT_STD[h] / math.sqrt(hidden)  # input of RMS 1: logit std = row std · √hidden
        token_direction = normal(SEED + 600 + h, hidden) / math.sqrt(hidden)  # an input of RMS 1 projects to ~N(0, 1)
        gate = (gate_std * normal(SEED + 400 + h, dim, hidden) + GATE_MEAN_LOGIT[h] / along_shared * shared_unit
                + GATE_TOKEN_SPREAD[h] * token_direction)
        q_proj += [query, gate]  # Qwen3.5 layout: each head's rows are [query_h | gate_h]
    o_proj = np.concatenate([O_PROJ_STD[h] * normal(SEED + 500 + h, hidden, dim) for h in range(heads)], axis=1)

    return {
        PREFIX + "input_layernorm.weight": bf16(NORM_WEIGHT_STD * normal(SEED + 1, hidden)),
        PREFIX + "self_attn.q_proj.weight": bf16(np.concatenate(q_proj)),
        PREFIX + "self_attn.k_proj.weight": bf16(np.concatenate(keys)),
        PREFIX + "self_attn.v_proj.weight": bf16(np.concatenate(values)),
        PREFIX + "self_attn.o_proj.weight": bf16(o_proj),
        PREFIX + "self_attn.q_norm.weight": bf16(QK_NORM_WEIGHT_STD * normal(SEED + 2, dim)),
        PREFIX + "self_attn.k_norm.weight": bf16(QK_NORM_WEIGHT_STD * normal(SEED + 3, dim)),
        "fixture.embed_tokens.rows": bf16(rows),
        "fixture.embed_tokens.ids": torch.tensor(PROMPT_IDS, dtype=torch.int64),
    }


def write(out: Path = OUT) -> None:
    """Write ``config.json`` and ``model.safetensors`` into ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    (out / "config.json").write_text(json.dumps(CONFIG, indent=4, ensure_ascii=False) + "\n", encoding="utf-8")
    # The shapes come from the config.json just written, the one place the model's sizes live.
    tensors = make_tensors(read_config(out / "config.json"))
    metadata = {"format": "pt", "note": NOTE, "prompt": PROMPT}
    (out / "model.safetensors").write_bytes(with_ordered_metadata(save(tensors, metadata=metadata)))


def write_linear_layers(out: Path, config_json: Path = OUT / "config.json") -> dict[int, Path]:
    """Write the stand-in's Gated DeltaNet layers into ``out`` as ``stand_in_file`` names them; their paths."""
    config = read_config(config_json)
    out.mkdir(parents=True, exist_ok=True)
    written = {}
    for layer in qwen35_stand_in.LINEAR_LAYERS:
        written[layer] = out / stand_in_file(layer).name
        written[layer].write_bytes(qwen35_stand_in.linear_layer_bytes(config, layer))
    return written


def write_mlps(out: Path, config_json: Path = OUT / "config.json") -> dict[int, Path]:
    """Write the stand-in's MLPs (with their post-attention norms) into ``out`` as ``stand_in_mlp_file`` names
    them; their paths."""
    config = read_config(config_json)
    out.mkdir(parents=True, exist_ok=True)
    written = {}
    for layer in qwen35_stand_in.MLP_LAYERS:
        written[layer] = out / stand_in_mlp_file(layer).name
        written[layer].write_bytes(qwen35_stand_in.mlp_bytes(config, layer))
    return written


if __name__ == "__main__":
    target = Path(sys.argv[1]) if len(sys.argv) > 1 else None  # another folder: to compare with the shipped one
    write(target or OUT)
    print(f"wrote {(target or OUT) / 'config.json'} and {(target or OUT) / 'model.safetensors'}")
    for layer, file in write_linear_layers(target or stand_in_folder(), (target or OUT) / "config.json").items():
        print(f"wrote {file} (layer {layer}), SHA-256 {qwen35_stand_in.sha256(file.read_bytes())}")
    for layer, file in write_mlps(target or stand_in_folder(), (target or OUT) / "config.json").items():
        print(f"wrote {file} (layer {layer}'s MLP), SHA-256 {qwen35_stand_in.sha256(file.read_bytes())}")
