"""Independent oracle: the reference Qwen3.5 attention layer against Hugging Face transformers' own
``Qwen3_5Attention`` and rotary embedding, with the same weights, in float32."""
import pytest
import torch
from transformers.models.qwen3_5.configuration_qwen3_5 import Qwen3_5TextConfig
from transformers.models.qwen3_5.modeling_qwen3_5 import Qwen3_5Attention, Qwen3_5TextRotaryEmbedding

from autograder.engine.checks.qwen35_attention import layer3_input, random_weights
from solutions.qwen35_attention import Qwen35Attention, rope_cos_sin

HIDDEN, HEADS, KV_HEADS, HEAD_DIM, ROTARY_FACTOR, THETA = 1024, 8, 2, 256, 0.25, 10_000_000.0


def hf_config() -> Qwen3_5TextConfig:
    cfg = Qwen3_5TextConfig(hidden_size=HIDDEN, num_attention_heads=HEADS, num_key_value_heads=KV_HEADS,
                            head_dim=HEAD_DIM, rms_norm_eps=1e-6, attention_bias=False, attention_dropout=0.0,
                            rope_parameters={"rope_type": "default", "rope_theta": THETA,
                                             "partial_rotary_factor": ROTARY_FACTOR})
    cfg._attn_implementation = "eager"
    return cfg


def layers(weights):
    ours, theirs = Qwen35Attention(hf_config()), Qwen3_5Attention(hf_config(), layer_idx=3)
    for layer in (ours, theirs):
        layer.load_state_dict(weights)
        layer.eval()
    return ours, theirs


def additive_mask(attention_mask: torch.Tensor) -> torch.Tensor:
    """``[B, T]`` of 0/1 -> the ``[B, 1, T, T]`` float mask that transformers' eager attention adds."""
    seq = attention_mask.shape[-1]
    allowed = torch.ones(seq, seq, dtype=torch.bool).tril() & attention_mask.bool()[:, None, None, :]
    return torch.zeros(allowed.shape).masked_fill(~allowed, torch.finfo(torch.float32).min)


def test_rope_tables_match_transformers():
    positions = torch.arange(7)
    cos, sin = rope_cos_sin(positions, int(HEAD_DIM * ROTARY_FACTOR), THETA)
    hf_cos, hf_sin = Qwen3_5TextRotaryEmbedding(hf_config())(torch.zeros(1, dtype=torch.float32), positions[None])
    torch.testing.assert_close(cos, hf_cos[0], atol=1e-6, rtol=0)
    torch.testing.assert_close(sin, hf_sin[0], atol=1e-6, rtol=0)


def check_agreement(weights, x, attention_mask, compare_rows):
    ours, theirs = layers(weights)
    cos, sin = rope_cos_sin(torch.arange(x.shape[1]), int(HEAD_DIM * ROTARY_FACTOR), THETA)
    mask = torch.ones(x.shape[:2], dtype=torch.long) if attention_mask is None else attention_mask
    with torch.no_grad():
        got = ours(x, cos, sin, attention_mask=attention_mask)
        want, _ = theirs(x, (cos[None], sin[None]), additive_mask(mask))
    torch.testing.assert_close(got[compare_rows], want[compare_rows], atol=1e-5, rtol=1e-5)


def layer3():
    """The layer-3 weights and the prompt's layer-3 input, twice: ``[2, 6, hidden]`` in float32."""
    cfg, weights, x = layer3_input(torch.float32)
    assert (cfg.hidden_size, cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim, cfg.rotary_dim,
            cfg.rope_theta) == (HIDDEN, HEADS, KV_HEADS, HEAD_DIM, int(HEAD_DIM * ROTARY_FACTOR), THETA)
    return weights, x.expand(2, -1, -1)


def random_layer():
    gen = torch.Generator().manual_seed(3)
    return random_weights(hf_config(), gen, torch.float32), torch.randn(2, 6, HIDDEN, generator=gen)


@pytest.mark.parametrize("make", [layer3, random_layer], ids=["layer 3", "random weights"])
def test_layer_matches_transformers_without_padding(make):
    weights, x = make()
    check_agreement(weights, x, None, (slice(None),))


@pytest.mark.parametrize("make", [layer3, random_layer], ids=["layer 3", "random weights"])
def test_layer_matches_transformers_with_padding(make):
    weights, x = make()
    right = torch.tensor([[1, 1, 1, 1, 1, 1], [1, 1, 1, 1, 0, 0]])
    check_agreement(weights, x, right, (slice(None),))
    # With left padding a pad query sees nothing; transformers then averages, the course outputs 0.
    # Real tokens must agree.
    left = torch.tensor([[1, 1, 1, 1, 1, 1], [0, 0, 1, 1, 1, 1]])
    check_agreement(weights, x, left, left.bool())
