"""The references of 08 against Hugging Face's own code as the oracle: ``torch_recurrent_gated_delta_rule``,
``torch_chunk_gated_delta_rule``, ``causal_conv1d_fn`` and ``Qwen3_5GatedDeltaNet`` from transformers (their
PyTorch fallbacks, on the CPU), on the same inputs and the same weights (one's state dict loaded into the other,
keys unchanged), with padding and through the cache. Hugging Face scales q by Dk^-1/2 inside its kernels; the
course's rules take q already scaled."""
import pytest
import torch

from autograder.engine.checks import chunked_gated_delta_rule as chunked_gated_delta_rule_check
from autograder.engine.checks.qwen35_gated_deltanet import config, random_weights
from autograder.engine.inputs import linear_attention as inputs
from autograder.engine.inputs.seeded import generator
from course import qwen35_weights
from course.protocols import PerPosition, call_chunkwise
from solutions.gated_deltanet import (
    GatedDeltaNetCache,
    Qwen35GatedDeltaNet,
    causal_conv1d,
    chunked_gated_delta_rule,
    gated_delta_rule,
    l2_normalize,
)

hf = pytest.importorskip("transformers.models.qwen3_5.modeling_qwen3_5")
from transformers import DynamicCache  # noqa: E402 - only once transformers is known to be there
from transformers.models.qwen3_5.configuration_qwen3_5 import Qwen3_5TextConfig  # noqa: E402


def _heads_second(*tensors):
    """``[B, H, T, ...]`` ↔ ``[B, T, H, ...]`` (Hugging Face's kernels take time before heads)."""
    return tuple(t.transpose(1, 2) for t in tensors)


def _rule_inputs(seed, batch=2, heads=3, seq=23, dk=8, dv=6):
    gen = generator(seed)
    q, k, v = inputs.qkv(gen, batch, heads, seq, dk, dv, dtype=torch.float64)
    return (q, k, v, inputs.decay(gen, batch, heads, seq, dtype=torch.float64),
            inputs.beta(gen, batch, heads, seq, dtype=torch.float64), inputs.state(gen, batch, heads, dk, dv, torch.float64))


@pytest.mark.parametrize("chunked", [False, True], ids=["recurrent", "chunked"])
def test_gated_delta_rules_equal_hugging_face(chunked):
    q, k, v, g, beta, state = _rule_inputs(90)
    dk = q.shape[-1]
    if chunked:
        want, want_state = hf.torch_chunk_gated_delta_rule(*_heads_second(q * dk ** 0.5, k, v, g, beta), chunk_size=8,
                                                          initial_state=state, output_final_state=True)
    else:
        want, want_state = hf.torch_recurrent_gated_delta_rule(*_heads_second(q * dk ** 0.5, k, v, g, beta),
                                                              initial_state=state, output_final_state=True)
    for rule in (gated_delta_rule, lambda *a, state: chunked_gated_delta_rule(*a, chunk_size=8, state=state)):
        o, final = rule(q, k, v, g, beta, state=state)
        # Hugging Face works in float32 whatever it is given.
        torch.testing.assert_close(o, want.transpose(1, 2).double(), atol=2e-6, rtol=1e-5)
        torch.testing.assert_close(final, want_state.double(), atol=2e-6, rtol=1e-5)


def test_hugging_faces_chunked_rule_passes_the_chunk_watch_and_its_recurrent_rule_does_not():
    """The watch that stops a per-position loop (``protocols.call_chunkwise``) on the grader's long case lets a
    real chunked implementation through, and stops the real recurrent one."""
    case = next(c for c in chunked_gated_delta_rule_check.cases() if c.args[0].shape[-2] > 200)

    def hugging_face(kernel):
        def rule(q, k, v, g, beta, chunk_size=64, state=None):
            options = {"chunk_size": chunk_size} if kernel is hf.torch_chunk_gated_delta_rule else {}
            o, final = kernel(*_heads_second(q * q.shape[-1] ** 0.5, k, v, g, beta), initial_state=state,
                              output_final_state=True, **options)
            return o.transpose(1, 2).to(q.dtype), final.to(q.dtype)
        return rule

    o, state = call_chunkwise(hugging_face(hf.torch_chunk_gated_delta_rule), case)
    want, want_state = chunked_gated_delta_rule(*case.args, **case.kwargs)
    torch.testing.assert_close(o, want, atol=2e-5, rtol=1e-4)
    torch.testing.assert_close(state, want_state, atol=2e-5, rtol=1e-4)
    with pytest.raises(PerPosition):
        call_chunkwise(hugging_face(hf.torch_recurrent_gated_delta_rule), case)


def test_l2_normalize_is_hugging_faces():
    x = torch.randn(3, 5, 16, dtype=torch.float64, generator=generator(91))
    torch.testing.assert_close(l2_normalize(x), hf.l2norm(x))


def test_causal_conv1d_equals_hugging_face_whole_and_step_by_step():
    gen = generator(92)
    x = torch.randn(2, 6, 9, generator=gen, dtype=torch.float64)
    weight = torch.randn(6, 1, 4, generator=gen, dtype=torch.float64)
    y, state = causal_conv1d(x, weight)
    torch.testing.assert_close(y, hf.causal_conv1d_fn(x, weight.squeeze(1)))
    hf_state = torch.zeros(2, 6, 4, dtype=torch.float64)  # Hugging Face keeps K positions, the course K − 1
    hf_state[..., 1:] = x[..., :3]
    step, _ = causal_conv1d(x[..., 3:4], weight, x[..., :3])
    torch.testing.assert_close(step, hf.causal_conv1d_update(x[..., 3:4], hf_state, weight.squeeze(1)))


def _hf_config(cfg):
    return Qwen3_5TextConfig(hidden_size=cfg.hidden_size, linear_num_key_heads=cfg.linear_num_key_heads,
                             linear_num_value_heads=cfg.linear_num_value_heads,
                             linear_key_head_dim=cfg.linear_key_head_dim,
                             linear_value_head_dim=cfg.linear_value_head_dim,
                             linear_conv_kernel_dim=cfg.linear_conv_kernel_dim, rms_norm_eps=cfg.rms_norm_eps,
                             num_hidden_layers=4, layer_types=["linear_attention"] * 3 + ["full_attention"])


def _pair(cfg, weights, dtype):
    """The course's layer and Hugging Face's, with the same weights (each loads the other's keys unchanged)."""
    mine = Qwen35GatedDeltaNet(cfg).to(dtype)
    mine.load_state_dict(weights)
    theirs = hf.Qwen3_5GatedDeltaNet(_hf_config(cfg), 0).to(dtype)
    theirs.load_state_dict(mine.state_dict())
    assert set(theirs.state_dict()) == set(weights)
    return mine, theirs


def _hf_decode(layer, hf_cfg, x, attention_mask, steps):
    """Hugging Face's layer through its own cache, in chunks of ``steps`` positions, as its model calls it: the
    mask (its last T columns) only for calls of more than one token."""
    cache, outputs, end = DynamicCache(config=hf_cfg), [], 0
    for n in steps:
        start, end = end, end + n
        mask = None if attention_mask is None or n == 1 else attention_mask[:, start:end]
        outputs.append(layer(x[:, start:end], cache=cache, attention_mask=mask))
    return torch.cat(outputs, dim=1)


def _course_decode(layer, x, attention_mask, steps):
    cache, outputs, end = GatedDeltaNetCache(), [], 0
    for n in steps:
        start, end = end, end + n
        out, returned = layer(x[:, start:end], attention_mask=None if attention_mask is None else attention_mask[:, :end],
                              cache=cache)
        assert returned is cache
        outputs.append(out)
    return torch.cat(outputs, dim=1), cache


def test_layer_equals_hugging_face_with_padding_and_through_the_cache():
    cfg = config(32, 2, 4, 8, 6)
    mine, theirs = _pair(cfg, random_weights(cfg, generator(93), torch.float64), torch.float64)
    x = torch.randn(2, 7, 32, generator=generator(94), dtype=torch.float64)
    left_pad = torch.tensor([[0, 0, 1, 1, 1, 1, 1], [1, 1, 1, 1, 1, 1, 1]])
    with torch.no_grad():
        torch.testing.assert_close(mine(x)[0], theirs(x), atol=1e-5, rtol=1e-5)
        want = theirs(x, attention_mask=left_pad)
        torch.testing.assert_close(mine(x, attention_mask=left_pad)[0], want, atol=1e-5, rtol=1e-5)
        hf_steps = _hf_decode(theirs, _hf_config(cfg), x, left_pad, (4, 1, 1, 1))
        decoded, cache = _course_decode(mine, x, left_pad, (4, 1, 1, 1))
    torch.testing.assert_close(hf_steps, want, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(decoded, want, atol=1e-5, rtol=1e-5)
    assert cache.conv_state.shape == (2, 2 * 16 + 24, 3) and cache.recurrent_state.shape == (2, 4, 8, 6)


@pytest.mark.slow
@pytest.mark.parametrize("layer", [0, 1, 2])
def test_qwen35_layers_equal_hugging_face(layer):
    """Layers 0-2 of the checkpoint the course finds (the stand-in without a real one), in float32, whole and
    decoding through the cache."""
    cfg = qwen35_weights.load_config()
    weights = qwen35_weights.submodule_state(
        qwen35_weights.load_linear_attention_layer(layer, dtype=torch.float32, verbose=False), "linear_attn")
    mine, theirs = _pair(cfg, weights, torch.float32)
    x = torch.randn(1, 6, cfg.hidden_size, generator=generator(95 + layer))
    with torch.no_grad():
        want = theirs(x)
        torch.testing.assert_close(mine(x)[0], want, atol=1e-5, rtol=1e-4)
        torch.testing.assert_close(_course_decode(mine, x, None, (4, 1, 1))[0], want, atol=1e-5, rtol=1e-4)
