"""Independent oracle: the reference ``LlamaAttention`` (07) against Hugging Face transformers' own
``LlamaAttention`` with the same weights, eager attention in float32 — whole sequences and decoding through each
side's own cache, without padding, with right and with left padding. (The whole model is compared with
transformers in ``test_smollm2_weights.py``; this covers padding and the cache layer by layer.)"""
from types import SimpleNamespace

import pytest
import torch
from transformers.cache_utils import DynamicCache
from transformers.models.llama.configuration_llama import LlamaConfig
from transformers.models.llama.modeling_llama import LlamaAttention as TheirAttention
from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding

from solutions.gqa_kv_cache import KVCache
from solutions.real_model import LlamaAttention

HIDDEN, HEADS, KV_HEADS, HEAD_DIM, THETA, SEQ = 48, 6, 2, 8, 1_000.0, 7


def their_config() -> LlamaConfig:
    config = LlamaConfig(hidden_size=HIDDEN, num_attention_heads=HEADS, num_key_value_heads=KV_HEADS,
                         head_dim=HEAD_DIM, attention_bias=False, attention_dropout=0.0,
                         rope_parameters={"rope_type": "default", "rope_theta": THETA})
    config._attn_implementation = "eager"
    return config


def modules():
    """Ours and theirs with the same seeded weights (each linear ~ N(0, 1/fan_in))."""
    gen = torch.Generator().manual_seed(11)
    theirs = TheirAttention(their_config(), layer_idx=0).eval()
    weights = {name: torch.randn(p.shape, generator=gen) / p.shape[1] ** 0.5 for name, p in theirs.state_dict().items()}
    ours = LlamaAttention(SimpleNamespace(hidden_size=HIDDEN, num_attention_heads=HEADS, num_key_value_heads=KV_HEADS,
                                          head_dim=HEAD_DIM, rope_theta=THETA))
    for module in (ours, theirs):
        module.load_state_dict(weights)  # strict: the same keys and shapes
    return ours, theirs


def additive(attention_mask: torch.Tensor, q_len: int) -> torch.Tensor:
    """transformers' eager mask [B, 1, q_len, k_len]: 0 where the query may look (causal, with the queries at the
    last positions, and a real key), the lowest float32 elsewhere."""
    k_len = attention_mask.shape[1]
    allowed = (torch.arange(k_len)[None, :] <= torch.arange(k_len - q_len, k_len)[:, None]) \
        & attention_mask.bool()[:, None, None, :]
    return torch.zeros(allowed.shape).masked_fill(~allowed, torch.finfo(torch.float32).min)


def run_theirs(theirs, x, attention_mask, chunks):
    rope, cache, outs, start = LlamaRotaryEmbedding(their_config()), DynamicCache(), [], 0
    for n in chunks:
        cos, sin = rope(x, torch.arange(start, start + n)[None])
        out, _ = theirs(x[:, start:start + n], (cos, sin), additive(attention_mask[:, :start + n], n), cache=cache)
        outs.append(out)
        start += n
    return torch.cat(outs, dim=1)


def run_ours(ours, x, attention_mask, chunks, give_mask):
    cache, outs, start = KVCache(), [], 0
    for n in chunks:
        out, returned = ours(x[:, start:start + n], attention_mask=attention_mask[:, :start + n] if give_mask else None,
                             cache=cache)
        assert returned is cache
        outs.append(out)
        start += n
    assert len(cache) == SEQ
    return torch.cat(outs, dim=1)


PADDING = {"no padding": None,
           "right padding": torch.tensor([[1, 1, 1, 1, 1, 1, 1], [1, 1, 1, 1, 1, 0, 0]]),
           "left padding": torch.tensor([[1, 1, 1, 1, 1, 1, 1], [0, 0, 0, 1, 1, 1, 1]])}
CHUNKS = {"whole sequence": [SEQ], "prefill then one by one": [4, 1, 1, 1], "one by one": [1] * SEQ}


@pytest.mark.parametrize("chunks", CHUNKS.values(), ids=CHUNKS)
@pytest.mark.parametrize("padding", PADDING.values(), ids=PADDING)
def test_llama_attention_matches_transformers(padding, chunks):
    ours, theirs = modules()
    x = torch.randn(2, SEQ, HIDDEN, generator=torch.Generator().manual_seed(5))
    attention_mask = torch.ones(2, SEQ, dtype=torch.long) if padding is None else padding
    with torch.no_grad():
        want = run_theirs(theirs, x, attention_mask, chunks)
        got = run_ours(ours, x, attention_mask, chunks, give_mask=padding is not None)
    real = attention_mask.bool()  # padding queries' rows are defined differently by each implementation
    assert torch.isfinite(got).all()
    torch.testing.assert_close(got[real], want[real], atol=1e-5, rtol=1e-5)
