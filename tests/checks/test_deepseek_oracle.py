"""Independent oracle: the reference multi-head latent attention (04) against Hugging Face transformers' own
``DeepseekV3Attention`` with the same weights, in float32 with the eager attention — whole sequences, padding,
decoding through each side's own cache, the absorbed path, and the interleaved rope layout."""
from types import SimpleNamespace

import pytest
import torch
from transformers.cache_utils import DynamicCache
from transformers.models.deepseek_v3.configuration_deepseek_v3 import DeepseekV3Config
from transformers.models.deepseek_v3.modeling_deepseek_v3 import (
    DeepseekV3Attention,
    DeepseekV3RotaryEmbedding,
    apply_rotary_pos_emb,
    apply_rotary_pos_emb_interleave,
)

from solutions.rope_mla import LatentKVCache, MultiHeadLatentAttention, rope_cos_sin

HIDDEN, HEADS, KV_LORA, NOPE, ROPE, V_DIM, THETA = 64, 4, 16, 8, 4, 6, 10_000.0
SEQ, PREFILL = 7, 3
TOL = dict(atol=1e-5, rtol=1e-5)


def hf_config(q_lora_rank: int | None, interleave: bool = False) -> DeepseekV3Config:
    # rms_norm_eps 1e-6: transformers builds q_a_layernorm / kv_a_layernorm with their default eps (1e-6),
    # not with config.rms_norm_eps, so only this value makes both sides normalise alike.
    cfg = DeepseekV3Config(hidden_size=HIDDEN, num_attention_heads=HEADS, num_key_value_heads=HEADS,
                           q_lora_rank=q_lora_rank, kv_lora_rank=KV_LORA, qk_nope_head_dim=NOPE,
                           qk_rope_head_dim=ROPE, v_head_dim=V_DIM, rms_norm_eps=1e-6, attention_bias=False,
                           attention_dropout=0.0, rope_interleave=interleave,
                           rope_parameters={"rope_type": "default", "rope_theta": THETA})
    cfg._attn_implementation = "eager"
    return cfg


def our_config(q_lora_rank: int | None) -> SimpleNamespace:
    # transformers 5 keeps rope_theta inside rope_parameters only, so the contract's flat names are spelled out.
    return SimpleNamespace(hidden_size=HIDDEN, num_attention_heads=HEADS, q_lora_rank=q_lora_rank,
                           kv_lora_rank=KV_LORA, qk_nope_head_dim=NOPE, qk_rope_head_dim=ROPE, v_head_dim=V_DIM,
                           rope_theta=THETA, rms_norm_eps=1e-6)


def random_weights(q_lora_rank: int | None, seed: int = 0) -> dict[str, torch.Tensor]:
    """Seeded weights for every key of transformers' module: linears ~ N(0, 1/fan_in), norms 1 + N(0, 0.1²)
    (so a norm whose weight is ignored would show)."""
    gen = torch.Generator().manual_seed(seed + (q_lora_rank or 0))
    weights = {}
    for name, param in DeepseekV3Attention(hf_config(q_lora_rank), layer_idx=0).state_dict().items():
        if "layernorm" in name:
            weights[name] = 1.0 + 0.1 * torch.randn(param.shape, generator=gen)
        else:
            weights[name] = torch.randn(param.shape, generator=gen) / param.shape[1] ** 0.5
    return weights


def layers(q_lora_rank, weights, interleave=False):
    ours = MultiHeadLatentAttention(our_config(q_lora_rank))
    theirs = DeepseekV3Attention(hf_config(q_lora_rank, interleave), layer_idx=0)
    for layer in (ours, theirs):
        layer.load_state_dict(weights)  # strict: the key sets and shapes are the same
        layer.eval()
    return ours, theirs


def additive_mask(attention_mask: torch.Tensor, q_len: int) -> torch.Tensor:
    """``[B, k_len]`` of 0/1 -> the ``[B, 1, q_len, k_len]`` float mask transformers' eager attention adds:
    0 where a query may attend (causal, offset by the cached positions, and a real key), finfo.min elsewhere."""
    k_len = attention_mask.shape[-1]
    query_pos = torch.arange(k_len - q_len, k_len)[:, None]
    allowed = (torch.arange(k_len)[None, :] <= query_pos) & attention_mask.bool()[:, None, None, :]
    return torch.zeros(allowed.shape).masked_fill(~allowed, torch.finfo(torch.float32).min)


def hf_rope(cfg, positions):
    cos, sin = DeepseekV3RotaryEmbedding(cfg)(torch.zeros(1), positions[None])
    return cos, sin


def run_hf(theirs, x, attention_mask, steps):
    """transformers' layer over ``x`` in the chunks ``steps`` (lengths), through a DynamicCache when there is
    more than one chunk. Returns ``[B, T, hidden]``."""
    cache = DynamicCache() if len(steps) > 1 else None
    outs, start = [], 0
    for n in steps:
        positions = torch.arange(start, start + n)
        cos, sin = hf_rope(theirs.config, positions)
        out, _ = theirs(x[:, start:start + n], (cos, sin), additive_mask(attention_mask[:, :start + n], n),
                        cache=cache)
        outs.append(out)
        start += n
    if cache is not None:
        assert cache.get_seq_length() == x.shape[1]
    return torch.cat(outs, dim=1)


def run_ours(ours, x, attention_mask, steps, absorbed, mask_given):
    """The reference over ``x`` in the chunks ``steps``, through its own LatentKVCache when there is more
    than one chunk."""
    forward = ours.forward_absorbed if absorbed else ours.forward
    cache = LatentKVCache() if len(steps) > 1 else None
    outs, start = [], 0
    for n in steps:
        mask = attention_mask[:, :start + n] if mask_given else None
        out, returned = forward(x[:, start:start + n], attention_mask=mask, cache=cache)
        assert returned is cache
        outs.append(out)
        start += n
    if cache is not None:
        assert len(cache) == x.shape[1]
        assert cache.latent.shape == (x.shape[0], x.shape[1], KV_LORA)
        assert cache.k_rope.shape == (x.shape[0], x.shape[1], ROPE)
    return torch.cat(outs, dim=1)


PADDINGS = {
    "no padding": None,
    "right padding": torch.tensor([[1, 1, 1, 1, 1, 1, 1], [1, 1, 1, 1, 1, 0, 0]]),
    "left padding": torch.tensor([[1, 1, 1, 1, 1, 1, 1], [0, 0, 1, 1, 1, 1, 1]]),
}
STEPS = {"whole sequence": [SEQ], "prefill then decode": [PREFILL] + [1] * (SEQ - PREFILL)}


def test_rope_tables_match_transformers():
    positions = torch.arange(11)
    cos, sin = rope_cos_sin(positions, ROPE, THETA)
    hf_cos, hf_sin = hf_rope(hf_config(None), positions)
    torch.testing.assert_close(cos, hf_cos[0], atol=1e-6, rtol=0)
    torch.testing.assert_close(sin, hf_sin[0], atol=1e-6, rtol=0)


def test_state_dict_keys_are_transformers_keys():
    for q_lora_rank in (None, 12):
        ours, theirs = layers(q_lora_rank, random_weights(q_lora_rank))
        assert {k: v.shape for k, v in ours.state_dict().items()} == \
               {k: v.shape for k, v in theirs.state_dict().items()}


@pytest.mark.parametrize("absorbed", [False, True], ids=["forward", "forward_absorbed"])
@pytest.mark.parametrize("steps", STEPS.values(), ids=STEPS)
@pytest.mark.parametrize("padding", PADDINGS.values(), ids=PADDINGS)
@pytest.mark.parametrize("q_lora_rank", [None, 12], ids=["q_proj", "q_lora_rank 12"])
def test_mla_matches_transformers(q_lora_rank, padding, steps, absorbed):
    weights = random_weights(q_lora_rank)
    ours, theirs = layers(q_lora_rank, weights)
    x = torch.randn(2, SEQ, HIDDEN, generator=torch.Generator().manual_seed(7))
    attention_mask = torch.ones(2, SEQ, dtype=torch.long) if padding is None else padding
    with torch.no_grad():
        want = run_hf(theirs, x, attention_mask, steps)
        got = run_ours(ours, x, attention_mask, steps, absorbed, mask_given=padding is not None)
    assert got.shape == want.shape == x.shape
    assert torch.isfinite(got).all()
    # Rows of padding queries are defined differently by each implementation (a left-padded query sees no
    # key at all); only real tokens' rows are compared.
    real = attention_mask.bool()
    torch.testing.assert_close(got[real], want[real], **TOL)


def test_decoding_equals_whole_sequence_on_both_sides():
    """The decode loop above is a real one: each side's cached decoding reproduces its own full forward."""
    weights = random_weights(12)
    ours, theirs = layers(12, weights)
    x = torch.randn(2, SEQ, HIDDEN, generator=torch.Generator().manual_seed(8))
    ones = torch.ones(2, SEQ, dtype=torch.long)
    with torch.no_grad():
        torch.testing.assert_close(run_hf(theirs, x, ones, STEPS["prefill then decode"]),
                                   run_hf(theirs, x, ones, [SEQ]), **TOL)
        torch.testing.assert_close(run_ours(ours, x, ones, STEPS["prefill then decode"], False, True),
                                   run_ours(ours, x, ones, [SEQ], False, True), **TOL)


def interleave_permutation(d: int) -> torch.Tensor:
    """The order in which rotate-half rows must be laid out for transformers' interleaved RoPE.

    Rotate-half pairs dim i with dim i + d/2 (d = qk_rope_head_dim), both turned at frequency i:
        (x_i, x_{i+d/2}) -> (x_i cos - x_{i+d/2} sin, x_{i+d/2} cos + x_i sin).
    transformers' ``apply_rotary_pos_emb_interleave`` pairs adjacent dims (2i, 2i+1) at frequency i and
    writes its result de-interleaved: ``cat([z_{2i} cos - z_{2i+1} sin], [z_{2i+1} cos + z_{2i} sin])``.
    So if a projection's output z has z_{2i} = x_i and z_{2i+1} = x_{i+d/2}, the interleaved rotation of z is
    exactly the rotate-half rotation of x, already back in rotate-half order — for queries and keys alike,
    hence also for what the cache holds. New row 2i is old row i, new row 2i+1 is old row i + d/2:
    ``perm = [0, d/2, 1, d/2 + 1, ..., d/2 - 1, d - 1]`` (``arange(d).view(2, d/2).t().flatten()``), used
    as ``W_new = W_old[perm]``.
    """
    return torch.arange(d).view(2, d // 2).t().flatten()


def rotate_half_to_interleaved(weights: dict[str, torch.Tensor], q_lora_rank: int | None) -> dict:
    """Apply ``interleave_permutation`` to the rows that produce q_rope and k_rope: each head's rope rows of
    q_proj / q_b_proj, and the rope rows of kv_a_proj_with_mqa. Nope, latent and value rows stay put."""
    perm = interleave_permutation(ROPE)
    permuted = dict(weights)
    q_name = "q_proj.weight" if q_lora_rank is None else "q_b_proj.weight"
    q = weights[q_name].view(HEADS, NOPE + ROPE, -1)
    permuted[q_name] = torch.cat([q[:, :NOPE], q[:, NOPE:][:, perm]], dim=1).flatten(0, 1)
    kv = weights["kv_a_proj_with_mqa.weight"]
    permuted["kv_a_proj_with_mqa.weight"] = torch.cat([kv[:KV_LORA], kv[KV_LORA:][perm]])
    return permuted


@pytest.mark.parametrize("d", [4, 8, 16])
def test_interleave_permutation_turns_interleaved_rope_into_rotate_half(d):
    assert interleave_permutation(4).tolist() == [0, 2, 1, 3]
    assert interleave_permutation(8).tolist() == [0, 4, 1, 5, 2, 6, 3, 7]
    gen = torch.Generator().manual_seed(d)
    q, k = torch.randn(2, 3, 5, d, generator=gen), torch.randn(2, 1, 5, d, generator=gen)
    cos, sin = rope_cos_sin(torch.arange(5), d, THETA)
    perm = interleave_permutation(d)
    want = apply_rotary_pos_emb(q, k, cos[None], sin[None])
    got = apply_rotary_pos_emb_interleave(q[..., perm], k[..., perm], cos[None], sin[None])
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w, atol=1e-6, rtol=1e-6)
    # ...while without the permutation the two layouts disagree.
    assert (apply_rotary_pos_emb_interleave(q, k, cos[None], sin[None])[0] - want[0]).abs().max() > 1e-3


@pytest.mark.parametrize("steps", STEPS.values(), ids=STEPS)
@pytest.mark.parametrize("q_lora_rank", [None, 12], ids=["q_proj", "q_lora_rank 12"])
def test_interleaved_layout_is_rotate_half_with_permuted_rows(q_lora_rank, steps):
    weights = random_weights(q_lora_rank, seed=1)
    ours, _ = layers(q_lora_rank, weights)
    _, interleaved = layers(q_lora_rank, rotate_half_to_interleaved(weights, q_lora_rank), interleave=True)
    _, unpermuted = layers(q_lora_rank, weights, interleave=True)
    x = torch.randn(2, SEQ, HIDDEN, generator=torch.Generator().manual_seed(9))
    attention_mask = PADDINGS["left padding"]
    real = attention_mask.bool()
    with torch.no_grad():
        want = run_ours(ours, x, attention_mask, steps, False, True)
        got = run_hf(interleaved, x, attention_mask, steps)
        wrong = run_hf(unpermuted, x, attention_mask, steps)
    torch.testing.assert_close(got[real], want[real], **TOL)
    # Without the permutation the layouts really differ, so the check above can fail.
    assert (wrong[real] - want[real]).abs().max() > 1e-3
