"""A small Llama with random weights, for the generation case that only decoding through the caches gets through in
its CPU budget (07's ``greedy_generate``): one layer, 8 query heads and 2 KV heads of 8 dims, a vocabulary of 256.
Its weights come from a fixed seed and are written once into the course cache (``home()``), where the grading
sandbox reads them as it reads SmolLM2's (weights, not answers)."""
import hashlib
import json
import os
import shutil
import tempfile
from pathlib import Path

import torch

from course.cache import cache_dir
from course.llama import CONFIG_FILE, WEIGHTS_FILE

CONFIG = {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 1, "num_attention_heads": 8,
          "num_key_value_heads": 2, "head_dim": 8, "rope_theta": 10_000.0, "rms_norm_eps": 1e-6, "vocab_size": 256,
          "bos_token_id": 0, "eos_token_id": 1}
SEED = 7


def home() -> Path:
    """``<cache>/toy-llama``: the folder the sandbox may read, which holds the model's own folder."""
    return cache_dir() / "toy-llama"


def folder() -> Path:
    """The model's folder (``config.json``, ``model.safetensors``), written on first use."""
    target = home() / _version()
    if not (target / WEIGHTS_FILE).is_file():
        _write(target)
    return target


# Gains over matrices of variance 1/fan-in. Sharp attention (q and k) makes the next token depend on which earlier
# tokens a query finds; attention and MLP outputs (o, down) that outweigh the token's own embedding keep the model
# from repeating its last token (with all gains 1 it does, from any prompt).
GAINS = {"q_proj": 4.0, "k_proj": 4.0, "o_proj": 16.0, "down_proj": 4.0}


def _version() -> str:
    """The folder's name: a digest of what decides the weights, so that changing them starts a new folder."""
    return "v-" + hashlib.sha256(json.dumps([CONFIG, GAINS, SEED], sort_keys=True).encode()).hexdigest()[:12]


def weights() -> dict[str, torch.Tensor]:
    """The model's tensors under Hugging Face's Llama keys: random matrices with ``GAINS``, norms of ones, an
    embedding (the head too: it is tied) of variance 1."""
    gen = torch.Generator().manual_seed(SEED)
    hidden, inner = CONFIG["hidden_size"], CONFIG["intermediate_size"]
    width = CONFIG["num_attention_heads"] * CONFIG["head_dim"]
    kv_width = CONFIG["num_key_value_heads"] * CONFIG["head_dim"]

    def matrix(rows: int, columns: int, name: str = "") -> torch.Tensor:
        return torch.randn(rows, columns, generator=gen) * GAINS.get(name, 1.0) / columns ** 0.5

    found = {"model.embed_tokens.weight": torch.randn(CONFIG["vocab_size"], hidden, generator=gen),
             "model.norm.weight": torch.ones(hidden)}
    for layer in range(CONFIG["num_hidden_layers"]):
        prefix = f"model.layers.{layer}."
        found.update({
            prefix + "input_layernorm.weight": torch.ones(hidden),
            prefix + "post_attention_layernorm.weight": torch.ones(hidden),
            prefix + "self_attn.q_proj.weight": matrix(width, hidden, "q_proj"),
            prefix + "self_attn.k_proj.weight": matrix(kv_width, hidden, "k_proj"),
            prefix + "self_attn.v_proj.weight": matrix(kv_width, hidden),
            prefix + "self_attn.o_proj.weight": matrix(hidden, width, "o_proj"),
            prefix + "mlp.gate_proj.weight": matrix(inner, hidden),
            prefix + "mlp.up_proj.weight": matrix(inner, hidden),
            prefix + "mlp.down_proj.weight": matrix(hidden, inner, "down_proj"),
        })
    return found


def _write(target: Path) -> None:
    """Write the folder whole under another name, then rename it into place: a reader never sees half of it, and
    two graders writing at once both end with the same folder. Readable by all: the sandbox's user reads it."""
    from safetensors.torch import save_file

    home().mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(dir=home(), prefix=".writing-"))
    try:
        (staging / CONFIG_FILE).write_text(json.dumps(CONFIG, indent=1), encoding="utf-8")
        save_file(weights(), str(staging / WEIGHTS_FILE))
        for path in (staging / CONFIG_FILE, staging / WEIGHTS_FILE):
            path.chmod(0o644)
        staging.chmod(0o755)
        try:
            os.rename(staging, target)
        except OSError:  # another grader put it there first
            if not (target / WEIGHTS_FILE).is_file():
                raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
