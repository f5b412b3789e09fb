"""Independent oracle: the reference ``GroupedQueryAttention`` against torch's own
``scaled_dot_product_attention(..., enable_gqa=True)`` on the same projections, as MHA, GQA and MQA, with
and without padding, on whole sequences and decoding through the KV cache."""
import pytest
import torch
import torch.nn.functional as F

from autograder.engine.inputs.modules import linear_weights
from solutions.gqa_kv_cache import GroupedQueryAttention, KVCache

CONFIGS = {"MHA": (32, 4, 4, None), "GQA": (32, 4, 2, None), "MQA": (32, 4, 1, None),
           "GQA, H·D ≠ hidden": (24, 4, 2, 8)}
PADDING = {
    "no padding": None,
    "right padding": torch.tensor([[1, 1, 1, 1, 1, 1, 1], [1, 1, 1, 1, 1, 0, 0]]),
    "left padding": torch.tensor([[1, 1, 1, 1, 1, 1, 1], [0, 0, 0, 1, 1, 1, 1]]),
}


def layer(hidden, heads, kv_heads, head_dim, seed=0) -> GroupedQueryAttention:
    module = GroupedQueryAttention(hidden, heads, kv_heads, head_dim).double()
    dim = module.head_dim
    shapes = {"q_proj": (heads * dim, hidden), "k_proj": (kv_heads * dim, hidden), "v_proj": (kv_heads * dim, hidden),
              "o_proj": (hidden, heads * dim)}
    module.load_state_dict(linear_weights(torch.Generator().manual_seed(seed), shapes, torch.float64))
    return module


def torch_attention(module: GroupedQueryAttention, x, attention_mask):
    """The layer's projections around torch's attention: no split/merge, mask or repeat_kv of the course."""
    batch, seq, _ = x.shape
    heads, kv_heads, dim = module.num_heads, module.num_kv_heads, module.head_dim
    q = module.q_proj(x).unflatten(-1, (heads, dim)).transpose(1, 2)
    k = module.k_proj(x).unflatten(-1, (kv_heads, dim)).transpose(1, 2)
    v = module.v_proj(x).unflatten(-1, (kv_heads, dim)).transpose(1, 2)
    allowed = torch.ones(seq, seq, dtype=torch.bool).tril()
    if attention_mask is not None:
        allowed = allowed & attention_mask.bool()[:, None, None, :]
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=allowed, enable_gqa=True)
    return module.o_proj(out.transpose(1, 2).reshape(batch, seq, heads * dim))


def decoded(module, x, attention_mask, prefill):
    """The reference run through a KV cache: ``prefill`` positions at once, then one at a time."""
    cache, outputs = KVCache(), []
    for start, end in [(0, prefill)] + [(t, t + 1) for t in range(prefill, x.shape[1])]:
        mask = None if attention_mask is None else attention_mask[:, :end]
        outputs.append(module(x[:, start:end], attention_mask=mask, cache=cache)[0])
    assert len(cache) == x.shape[1]
    return torch.cat(outputs, dim=1)


@pytest.mark.parametrize("padding", PADDING)
@pytest.mark.parametrize("config", CONFIGS)
@pytest.mark.parametrize("mode", ["whole sequence", "cached decoding"])
def test_reference_matches_torch_sdpa(config, padding, mode):
    module = layer(*CONFIGS[config])
    x = torch.randn(2, 7, module.q_proj.in_features, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    attention_mask = PADDING[padding]
    with torch.no_grad():
        want = torch_attention(module, x, attention_mask)
        if mode == "whole sequence":
            got = module(x, attention_mask=attention_mask)[0]
        else:
            got = decoded(module, x, attention_mask, prefill=3)
    # A padding query that sees nothing is the course's zeros; torch's convention for it may differ between
    # versions, so compare the real tokens.
    real = torch.ones(x.shape[:2], dtype=torch.bool) if attention_mask is None else attention_mask.bool()
    torch.testing.assert_close(got[real], want[real], atol=1e-10, rtol=1e-10)
