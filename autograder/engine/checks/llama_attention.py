"""Check of ``LlamaAttention(config)``: ``forward(x, attention_mask=None, cache=None) → (out, cache)`` — grouped-query
attention with RoPE over the whole head — on small random configurations and SmolLM2's shape, then on a real
layer of SmolLM2-135M-Instruct (its trained weights and the hidden states of two real sentences), whole and
decoding through the student's own ``KVCache``, with padding, in float32 and bfloat16."""
import functools
from types import SimpleNamespace

import torch

from autograder.engine.checks import ATTENTION_BASICS, grouped_query_attention
from autograder.engine.inputs import modules, smollm2
from autograder.engine.inputs.seeded import dtype_name, generator, randn, shape
from autograder.engine.model import Exercise, Mistake, public
from course.protocols import Case, call_decoder
from course.tolerances import Tolerance
from solutions.attention_basics import masked_softmax

# The mistakes below decode with the KVCache next to 03's forward, which they run (protocols.neighbour).
from solutions.real_model import LlamaAttention
from solutions.rope_mla import apply_rope

OUTPUT_NAMES = ("输出（各步的 out 沿序列维拼起来）", "解码完之后的 len(cache)",
                "每次交给 cache.update 的 k、v 的形状（各是 [B, KV 头数, T, D]）")


def config(hidden, heads, kv_heads, head_dim, theta=10_000.0):
    """A configuration with Hugging Face's Llama attribute names."""
    return SimpleNamespace(hidden_size=hidden, num_attention_heads=heads, num_key_value_heads=kv_heads,
                           head_dim=head_dim, rope_theta=theta)


def _random_case(gen, cfg, batch, seq, dtype=torch.float32, attention_mask=None, steps=None, note="") -> Case:
    heads, kv_heads, dim, hidden = cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim, cfg.hidden_size
    weights = modules.linear_weights(gen, {"q_proj": (heads * dim, hidden), "k_proj": (kv_heads * dim, hidden),
                                           "v_proj": (kv_heads * dim, hidden), "o_proj": (hidden, heads * dim)}, dtype)
    x = randn(gen, batch, seq, hidden, dtype=dtype)
    kwargs, extra = modules.forward_arguments(attention_mask, steps)
    label = (f"{note}随机权重：hidden {hidden}，{heads} 个 query 头，{kv_heads} 个 KV 头，head_dim {dim}，"
             f"rope_theta {cfg.rope_theta:g}，x {shape(x)}，{dtype_name(dtype)}{extra}")
    return Case(label, ((cfg,), weights, x), kwargs)


def _real_case(layer: smollm2.RealLayer, dtype: torch.dtype, steps=None) -> Case:
    weights = layer.weights if dtype == torch.float32 else _in_dtype(layer, dtype)
    x = layer.x.to(dtype)
    kwargs, extra = modules.forward_arguments(layer.attention_mask, steps)
    label = (f"SmolLM2-135M-Instruct 第 {layer.index} 层的真实权重，输入是两句真实文本在这一层的 hidden states "
             f"（第二句左侧 padding），x {shape(x)}，{dtype_name(dtype)}{extra}")
    return Case(label, ((layer.config,), weights, x), kwargs)


@functools.lru_cache(maxsize=2)
def _in_dtype(layer: smollm2.RealLayer, dtype: torch.dtype) -> dict:
    """The layer's weights in ``dtype``, one copy shared by the cases that use it (pickled once)."""
    return {name: tensor.to(dtype) for name, tensor in layer.weights.items()}


def cases() -> list[Case]:
    gen = generator(71)
    right_pad = torch.tensor([[1, 1, 1, 1, 1, 1], [1, 1, 1, 1, 0, 0]])
    left_pad = torch.tensor([[0, 0, 1, 1, 1, 1], [1, 1, 1, 1, 1, 1]])
    smollm2_shape = config(576, 9, 3, 64, theta=100_000.0)
    layer = smollm2.real_layer()  # the weights: a grader problem, before anything is graded, when missing
    decode = (layer.x.shape[1] - 4, 1, 1, 1, 1)  # prefill, then the last four tokens one by one
    return public([
        _random_case(gen, config(16, 4, 2, 4, theta=10.0), 1, 4, note="小例子，"),
        _random_case(gen, config(32, 4, 2, 8), 2, 5),
        _random_case(gen, config(32, 4, 4, 8), 2, 5, note="MHA，"),
        _random_case(gen, config(32, 4, 1, 8), 2, 6, attention_mask=right_pad, note="MQA，"),
        _random_case(gen, config(24, 4, 2, 8, theta=100.0), 2, 6, attention_mask=left_pad,
                     note="H·D ≠ hidden，左侧 padding，"),
        _random_case(gen, config(16, 4, 2, 4), 2, 1, note="只有一个 token，"),
        _random_case(gen, config(32, 4, 2, 8, theta=100.0), 2, 5, steps=(3, 1, 1)),
        _random_case(gen, config(32, 4, 2, 8, theta=10.0), 2, 6, attention_mask=left_pad, steps=(4, 1, 1)),
        _random_case(gen, config(32, 8, 2, 4), 1, 4, steps=(1, 1, 1, 1), note="从空缓存开始逐个 token，"),
        _random_case(gen, config(32, 4, 2, 8), 2, 5, dtype=torch.float64, attention_mask=right_pad[:, 1:], steps=(3, 2)),
        _random_case(gen, config(64, 4, 2, 16), 2, 6, dtype=torch.bfloat16, attention_mask=right_pad, steps=(4, 1, 1)),
        _random_case(gen, smollm2_shape, 1, 5, steps=(3, 1, 1), note="SmolLM2 的形状，"),
        _real_case(layer, torch.float32),
        _real_case(layer, torch.float32, steps=decode),
        _real_case(layer, torch.bfloat16),
        _real_case(layer, torch.bfloat16, steps=decode),
    ], 0, 4, 9, 10)


def _rope_adjacent_pairs(x, cos, sin):
    """RoPE that turns adjacent dims (2i, 2i + 1) together, by the angle of pair i (the interleaved layout)."""
    half = x.shape[-1] // 2
    c, s = cos[..., :half].to(x.dtype), sin[..., :half].to(x.dtype)
    even, odd = x[..., 0::2], x[..., 1::2]
    return torch.stack([even * c - odd * s, even * s + odd * c], dim=-1).flatten(-2)


class _Variant(grouped_query_attention.Variant, LlamaAttention):
    """Llama's attention written out step by step: 03's grouped-query attention (its steps, mistakes included)
    with RoPE and the scale as steps of their own; ``_variant`` replaces one step with a mistake."""

    rope = staticmethod(apply_rope)
    positions_from_cache = True
    rotate_keys = True
    rotate_values = False
    scale_of = staticmethod(lambda head_dim: head_dim ** -0.5)

    def positioned(self, q, k, v, x, cache):
        cos, sin = self.rope_tables(x, cache if self.positions_from_cache else None)
        return (self.rope(q, cos, sin), self.rope(k, cos, sin) if self.rotate_keys else k,
                self.rope(v, cos, sin) if self.rotate_values else v)

    def attend(self, q, k, v, mask):
        return masked_softmax(q @ k.transpose(-2, -1) * self.scale_of(self.head_dim), mask) @ v


def _variant(**steps):
    return grouped_query_attention.variant(_Variant, **steps)


ROPE_HINT = "RoPE 转 query 和 key 的每一维：rotate-half，第 i 维和第 i + D/2 维配成一对（apply_rope）。"
MISTAKES = (
    Mistake("解码时 RoPE 的位置从 0 重新开始", "新来的第 i 个 token 在位置 len(cache) + i：rope_cos_sin(len(cache) + "
            "arange(T), ...)。从 0 数的话，新 token 和缓存里最前面的 token 像是站在同一个位置上。",
            _variant(positions_from_cache=False)),
    Mistake("KV 头重复成了 0, 1, 0, 1 的顺序（整组平铺，像 repeat），应是 0, 0, 1, 1",
            "query 头 h 读 KV 头 h // n_rep：KV 头要挨着重复（0, 0, 0, 1, 1, 1, …），repeat 给的是 (0, 1, 2, 0, 1, 2, …)。",
            _variant(share=lambda t, n: t.repeat(1, n, 1, 1))),
    Mistake("带缓存解码时因果掩码没有偏移", "缓存里已有 k_len − T 个位置时，新来的第 i 个 query 在位置 k_len − T + i："
            "用 causal_mask(T, k_len)，而不是从左上角开始的下三角。", _variant(offset_causal=False)),
    Mistake("RoPE 按相邻两维配对（交错式），而权重是 rotate-half 的排法",
            ROPE_HINT + "把 (0, 1)、(2, 3) … 配对是 Meta 原版 Llama 和 llama.cpp 的写法；Hugging Face 的权重在转换时已经把"
            "q_proj、k_proj 的行重新排成了 rotate-half，再按交错式转就错了。", _variant(rope=_rope_adjacent_pairs)),
    Mistake("分数没有除以 √head_dim", "缩放是 head_dim^(−1/2)，和作业 01 一样。", _variant(scale_of=lambda head_dim: 1.0)),
    Mistake("分数除以了 head_dim 而不是 √head_dim", "缩放是 head_dim^(−1/2)。",
            _variant(scale_of=lambda head_dim: 1.0 / head_dim)),
    Mistake("key 没有做 RoPE", ROPE_HINT + "query 和 key 都要转，分数里才会出现它们的相对距离。", _variant(rotate_keys=False)),
    Mistake("value 也做了 RoPE", "RoPE 只转 query 和 key：位置信息进的是分数，value 原样加权求和。",
            _variant(rotate_values=True)),
    Mistake("忽略了 attention_mask（padding 掩码没有生效）",
            "用 padding_mask(attention_mask) 转成 [B, 1, 1, k_len]，和因果掩码用 & 合并。", _variant(use_padding=False)),
    Mistake("没有加因果掩码", "这个模块总要自己加因果掩码：query 只能看它自己和它之前的位置。", _variant(causal=False)),
    Mistake("缓存里放的是 repeat_kv 之后的 K/V", "先 cache.update 再 repeat_kv：缓存只存 num_key_value_heads 个头。",
            _variant(share_before_cache=True)),
)

# A real layer in bfloat16 rounds q, k and scores of up to ~100 to 8 bits: honest implementations (the reference
# in bfloat16, SDPA, a float32 softmax) land up to 0.14 from the float64 answer on outputs of up to 15. The
# float32 cases before them are what tell right from wrong.
BFLOAT16 = Tolerance(atol=0.2, rtol=0.05)

EXERCISE = Exercise("LlamaAttention", 6, LlamaAttention, cases, MISTAKES, output_names=OUTPUT_NAMES,
                    tolerance_overrides={torch.bfloat16: BFLOAT16}, call=call_decoder,
                    free=lambda case: modules.padding_query_rows(case.kwargs.get("attention_mask")),
                    uses=("rope_cos_sin", "apply_rope", "repeat_kv", "KVCache", "GroupedQueryAttention", "split_heads", "merge_heads", *ATTENTION_BASICS))
