"""The synthetic stand-in for Qwen3.5-0.8B's first three layers (Gated DeltaNet) and for the MLPs of layers 0-3,
made from a seed.

Layer 3's attention ships in ``data/qwen35_layer3/`` (15 MB). Layers 0-2 are linear-attention layers of about
21 MB each, and each layer's MLP is 22 MB, too much to keep in git, so the course ships the recipe instead:
``linear_layer_bytes`` and ``mlp_bytes`` draw the values from numpy's frozen ``RandomState`` stream and serialise
them with a fixed header, which gives the same bytes on every machine. ``course.qwen35_weights`` makes a file the
first time it is read, keeps it in the course's cache, and checks it against ``SHA256`` (``MLP_SHA256``) whenever
it reads it; ``data/make_qwen35_fixture.py`` writes the same files, and ``data/qwen35_layer3/README.md`` describes
them.

The values are random but shaped like a trained layer's, with the real keys, shapes and dtypes (bfloat16, and
float32 for ``A_log`` and the output norm, as the published checkpoint stores them):

- ``in_proj_qkv``: query, key and value rows of standard deviation 0.02-0.04; each head's query rows lean on its
  key head's rows by its own amount (``QUERY_KEY_ALIGNMENT``), so some heads match a token with itself more;
- ``in_proj_b`` and ``in_proj_z``: rows that lean along the direction every embedding row of the stand-in shares
  (``shared_direction``), by a different amount in each head, so the heads' β = sigmoid(b) and output gates
  SiLU(z) sit at different levels, plus a direction of the head's own, so they also change from token to token;
- ``A_log`` and ``dt_bias``: A = exp(A_log) spread evenly in log over 0.01-16, the range Hugging Face draws it
  from at initialisation, and ``dt_bias`` near 1, its initial value; ``in_proj_a`` moves each head's decay from
  token to token. So the decay per token exp(g) = exp(-A·softplus(a + dt_bias)) goes from about 0.99 (a head
  that remembers long) to about 0 (one that keeps only the current token);
- ``conv1d``: a depthwise kernel of 4 taps, about 0.5 on the current token and small (std 0.1) on the three
  before it;
- ``norm.weight`` near 1 (the gated output norm scales by its weight), ``input_layernorm.weight`` near 0 (the
  decoder's norms are zero-centred and scale by 1 + weight), ``out_proj`` columns of std 0.0002-0.0004, so
  that each layer adds about a third of the embeddings' size to the residual stream and the stream that reaches
  layer 3 is still mostly the embeddings, as layer 3's stand-in is drawn for.

Each layer's MLP (``mlp.{gate,up,down}_proj``, the SwiGLU ``down(SiLU(gate(x)) · up(x))``) and the norm before it
(``post_attention_layernorm``, zero-centred like the input norm: it scales by 1 + weight) are plain random: gate and
up rows of std 0.02 (the config's ``initializer_range``), ``post_attention_layernorm.weight`` near 0, and
``down_proj`` small enough (``DOWN_PROJ_STD``) that in layers 0-2 each MLP adds about a sixth of the residual
stream's size to it (the Gated DeltaNet half a little under half), so the stream stays led by the embeddings.
Layer 3's shipped attention, drawn for assignment 06 where only its pattern counts, adds about 17 times the
stream it gets; its MLP is drawn like the others all the same.
"""
import hashlib
import json
import math

import numpy as np
import torch
from safetensors.torch import save

SEED = 20260303  # the stand-in's seed, layer 3's (data/make_qwen35_fixture.py) and layers 0-2's
EMBED_SHARED = 0.8  # weight of the direction every stand-in embedding row shares, relative to its own noise
LINEAR_LAYERS = (0, 1, 2)  # the Gated DeltaNet layers the stand-in has
MLP_LAYERS = (0, 1, 2, 3)  # the layers whose MLP (and post-attention norm) the stand-in has
REPO_ID = "Qwen/Qwen3.5-0.8B"
LANGUAGE_MODEL = "model.language_model."

# What linear_layer_bytes makes, checked whenever a stand-in file is read (tests/course/test_weights.py checks that the
# recipe still makes these, and that data/qwen35_layer3/README.md quotes them).
SHA256 = {
    0: "b911433b7c6e5c2a5cc59ad176e131f8a7b418e48df5d0d4e1c67458be5f510b",
    1: "7028a05e8c224ee40bca84547e185701ac0b966767da0d78992c54bb09196709",
    2: "f6b121a8d6496141e51cca8afc245215006ba4c7e051e4057032be77bed9be38",
}
# What mlp_bytes makes, checked the same way.
MLP_SHA256 = {
    0: "278d5c42fcfa1139d21892c8875dff76db68d6328897e79c2ae6d73e095b2d52",
    1: "2e039699dab5f499aded140ea84bc03294974ea9f76c7863c8ad7b3411fd40f1",
    2: "bb68ebbf65352426ea03ef5f9f939ff6434dc60e43344f7b5d1a10f260fc0127",
    3: "686908796a94519149aadf1498c8c49cd10b8f351dde796dadb6322eb11fa8cf",
}

# The settings: a pair is a range spread evenly over the heads, which each layer takes in an order of its own.
QUERY_KEY_ALIGNMENT = (0.0, 0.6)  # per key head: from unrelated to strongly aligned
QUERY_STD, KEY_STD = 0.03, 0.03
VALUE_STD = (0.02, 0.04)  # per value head
BETA_MEAN_LOGIT = (-2.0, 2.0)  # per value head: β from about 0.12 to 0.88
BETA_TOKEN_SPREAD = (0.5, 1.5)  # how much a head's logit moves from token to token
GATE_MEAN_LOGIT = (-1.0, 1.5)  # per value head: the output gate SiLU(z)'s mean input
GATE_TOKEN_SPREAD = 0.7
GATE_LOGIT_STD = 1.0  # spread of z over a head's dims
A_RANGE = (0.01, 16.0)  # Hugging Face's initial A is uniform on this range; here spread evenly in log
DECAY_TOKEN_SPREAD = (0.3, 1.0)  # per value head: how much in_proj_a moves softplus's input from token to token
DT_BIAS_STD = 0.1
CONV_CURRENT_TAP, CONV_STD = 0.5, 0.1
NORM_STD = 0.05  # the gated output norm's weight: 1 + this · noise
INPUT_NORM_STD = 0.05  # the zero-centred input norm's weight: this · noise
# Per value head's out_proj columns. Small: the gated norm hands out_proj values of RMS about 1, and each layer's
# output should stay a fraction (about a third) of the stand-in embeddings' RMS (0.026), so that what reaches layer 3
# is still led by the embeddings' shared direction, as layer 3's stand-in is drawn for.
OUT_PROJ_STD = (0.0002, 0.0004)
# The MLP: gate and up rows of the config's initializer_range, so that on a normed input (RMS 1) gate(x) and up(x)
# have std 0.02·√hidden = 0.64 and SiLU(gate)·up an RMS of about 0.23; down_proj then gives an output of RMS about
# DOWN_PROJ_STD · √intermediate · 0.23 = 0.0055, a fifth of the stand-in embeddings' RMS (0.026).
GATE_UP_STD = 0.02
DOWN_PROJ_STD = 0.0004
POST_NORM_STD = 0.05  # the zero-centred post-attention norm's weight: this · noise


def normal(seed: int, *shape: int) -> np.ndarray:
    """Standard normal float64 draws. numpy's legacy RandomState is used because its stream is frozen
    across numpy versions and platforms (NEP 19), which keeps the written files byte-identical."""
    return np.random.RandomState(seed).standard_normal(shape)


def bf16(array: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(np.ascontiguousarray(array, dtype=np.float32)).to(torch.bfloat16)


def f32(array: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(np.ascontiguousarray(array, dtype=np.float32))


def shared_direction(hidden: int) -> np.ndarray:
    """The direction ``[hidden]`` (not unit) every stand-in embedding row leans along, ``EMBED_SHARED`` times it."""
    return normal(SEED, hidden)


def along_shared(hidden: int) -> float:
    """About how far an embedding row of the stand-in reaches along the unit shared direction after the input
    RMSNorm (which gives it RMS 1, so a norm of √hidden)."""
    return EMBED_SHARED * float(np.linalg.norm(shared_direction(hidden))) / math.sqrt(1 + EMBED_SHARED**2)


def linear_layer_tensors(config, layer: int) -> dict[str, torch.Tensor]:
    """Linear-attention layer ``layer``'s stand-in tensors under the real checkpoint keys
    (``model.language_model.layers.N.linear_attn.*`` and ``.input_layernorm.weight``); ``config`` gives the
    sizes (``course.qwen35.TextConfig`` or a transformers config)."""
    if layer not in LINEAR_LAYERS:
        raise ValueError(f"the stand-in has Gated DeltaNet layers {list(LINEAR_LAYERS)}, not {layer}")
    hidden, kernel = config.hidden_size, config.linear_conv_kernel_dim
    k_heads, v_heads = config.linear_num_key_heads, config.linear_num_value_heads
    k_dim, v_dim = config.linear_key_head_dim, config.linear_value_head_dim
    base = SEED + 10_000_000 * (layer + 1)  # clear of layer 3's seeds (SEED + up to 1,250,000) and of each other
    unit = shared_direction(hidden) / np.linalg.norm(shared_direction(hidden))
    reach = along_shared(hidden)

    def spread(limits, count: int, salt: int) -> np.ndarray:
        """``count`` values evenly from ``limits[0]`` to ``limits[1]``, in this layer's own order."""
        return np.random.RandomState(base + salt).permutation(np.linspace(*limits, count))

    def leaning(mean_logit: float, token_spread: float, seed: int) -> np.ndarray:
        """A row whose product with a normed stand-in input is about ``mean_logit`` plus ``token_spread`` · N(0, 1)
        from token to token (an input of RMS 1 projects on a random unit direction as about N(0, 1))."""
        own = normal(seed, hidden)
        return mean_logit / reach * unit + token_spread * own / np.linalg.norm(own)

    alignment = spread(QUERY_KEY_ALIGNMENT, k_heads, 1)
    keys = [KEY_STD * normal(base + 100 + h, k_dim, hidden) for h in range(k_heads)]
    queries = [QUERY_STD * (alignment[h] * keys[h] / KEY_STD + math.sqrt(1 - alignment[h]**2)
                            * normal(base + 200 + h, k_dim, hidden)) for h in range(k_heads)]
    value_std = spread(VALUE_STD, v_heads, 2)
    values = [value_std[h] * normal(base + 300 + h, v_dim, hidden) for h in range(v_heads)]

    gate_mean = spread(GATE_MEAN_LOGIT, v_heads, 3)
    z = [GATE_LOGIT_STD / math.sqrt(hidden) * normal(base + 400 + h, v_dim, hidden)
         + leaning(gate_mean[h], GATE_TOKEN_SPREAD, base + 450 + h) for h in range(v_heads)]
    beta_mean, beta_spread = spread(BETA_MEAN_LOGIT, v_heads, 4), spread(BETA_TOKEN_SPREAD, v_heads, 5)
    b = [leaning(beta_mean[h], beta_spread[h], base + 500 + h) for h in range(v_heads)]
    decay_spread = spread(DECAY_TOKEN_SPREAD, v_heads, 6)
    a = [leaning(0.0, decay_spread[h], base + 600 + h) for h in range(v_heads)]
    a_log = spread(tuple(math.log(x) for x in A_RANGE), v_heads, 7)

    conv = CONV_STD * normal(base + 700, 2 * k_heads * k_dim + v_heads * v_dim, 1, kernel)
    conv[..., -1] += CONV_CURRENT_TAP  # the last tap multiplies the current token (the conv is causal)
    out_std = spread(OUT_PROJ_STD, v_heads, 8)
    out_proj = np.concatenate([out_std[h] * normal(base + 800 + h, hidden, v_dim) for h in range(v_heads)], axis=1)

    prefix = f"{LANGUAGE_MODEL}layers.{layer}."
    return {
        prefix + "input_layernorm.weight": bf16(INPUT_NORM_STD * normal(base + 10, hidden)),
        prefix + "linear_attn.in_proj_qkv.weight": bf16(np.concatenate([*queries, *keys, *values])),
        prefix + "linear_attn.in_proj_z.weight": bf16(np.concatenate(z)),
        prefix + "linear_attn.in_proj_b.weight": bf16(np.stack(b)),
        prefix + "linear_attn.in_proj_a.weight": bf16(np.stack(a)),
        prefix + "linear_attn.conv1d.weight": bf16(conv),
        prefix + "linear_attn.dt_bias": bf16(1 + DT_BIAS_STD * normal(base + 11, v_heads)),
        prefix + "linear_attn.A_log": f32(a_log),
        prefix + "linear_attn.norm.weight": f32(1 + NORM_STD * normal(base + 12, v_dim)),
        prefix + "linear_attn.out_proj.weight": bf16(out_proj),
    }


def mlp_tensors(config, layer: int) -> dict[str, torch.Tensor]:
    """Layer ``layer``'s stand-in MLP and post-attention norm under the real checkpoint keys
    (``model.language_model.layers.N.mlp.{gate_proj,up_proj,down_proj}.weight`` and
    ``.post_attention_layernorm.weight``); ``config`` gives the sizes."""
    if layer not in MLP_LAYERS:
        raise ValueError(f"the stand-in has the MLPs of layers {list(MLP_LAYERS)}, not {layer}")
    hidden, intermediate = config.hidden_size, config.intermediate_size
    base = SEED + 100_000_000 + 10_000_000 * layer  # clear of the attention layers' seeds (up to SEED + 30,001,000)
    prefix = f"{LANGUAGE_MODEL}layers.{layer}."
    return {
        prefix + "post_attention_layernorm.weight": bf16(POST_NORM_STD * normal(base, hidden)),
        prefix + "mlp.gate_proj.weight": bf16(GATE_UP_STD * normal(base + 1, intermediate, hidden)),
        prefix + "mlp.up_proj.weight": bf16(GATE_UP_STD * normal(base + 2, intermediate, hidden)),
        prefix + "mlp.down_proj.weight": bf16(DOWN_PROJ_STD * normal(base + 3, hidden, intermediate)),
    }


def note(layer: int) -> str:
    """The safetensors metadata note of layer ``layer``'s file; it starts as every stand-in's does."""
    return (f"synthetic stand-in for {REPO_ID} layer {layer} (Gated DeltaNet): random weights with the real keys, "
            "shapes and dtypes; made by course/qwen35_stand_in.py; not the trained model")


def linear_layer_bytes(config, layer: int) -> bytes:
    """Layer ``layer``'s stand-in as a safetensors file, the same bytes on every machine (``SHA256``)."""
    metadata = {"format": "pt", "note": note(layer)}
    return with_ordered_metadata(save(linear_layer_tensors(config, layer), metadata=metadata))


def mlp_note(layer: int) -> str:
    """The safetensors metadata note of layer ``layer``'s MLP file; it starts as every stand-in's does."""
    return (f"synthetic stand-in for {REPO_ID} layer {layer}'s MLP and post-attention norm: random weights with the "
            "real keys, shapes and dtypes; made by course/qwen35_stand_in.py; not the trained model")


def mlp_bytes(config, layer: int) -> bytes:
    """Layer ``layer``'s stand-in MLP as a safetensors file, the same bytes on every machine (``MLP_SHA256``)."""
    metadata = {"format": "pt", "note": mlp_note(layer)}
    return with_ordered_metadata(save(mlp_tensors(config, layer), metadata=metadata))


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def with_ordered_metadata(data: bytes) -> bytes:
    """``data`` (a safetensors file) with its ``__metadata__`` entries in sorted order.

    safetensors writes the metadata from a hash map whose order changes from one process to the next,
    which would make every run's file differ. Reordering keeps the header's length, so the tensor
    data and its offsets stay as they are.
    """
    length = int.from_bytes(data[:8], "little")
    header = json.loads(data[8:8 + length])
    ordered = {"__metadata__": dict(sorted(header.pop("__metadata__").items())), **header}
    # Compact JSON as safetensors writes it; the header is padded with spaces to keep the data aligned.
    text = json.dumps(ordered, separators=(",", ":"), ensure_ascii=False).encode("utf-8").ljust(length)
    if len(text) != length:
        raise RuntimeError(f"re-serialised safetensors header is {len(text)} bytes, expected {length}; "
                           "safetensors changed its header format: adapt with_ordered_metadata")
    return data[:8] + text + data[8 + length:]
