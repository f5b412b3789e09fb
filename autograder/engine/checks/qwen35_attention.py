"""Check of ``Qwen35Attention(config)``: the Qwen3.5 gated-attention layer, on small random
configurations, on the real shape (8 / 2 / 256 / rotary 64) and on the layer-3 weights."""
import functools
from types import SimpleNamespace

import torch

from autograder.engine.checks import ATTENTION_BASICS
from autograder.engine.inputs.modules import linear_weights, padding_query_rows
from autograder.engine.inputs.seeded import dtype_name, generator, randn
from autograder.engine.model import Exercise, Mistake, public
from course import qwen35_weights as checkpoint
from course.protocols import LAYER_STAGES, Case, call_layer
from course.qwen35 import PROMPT, PROMPT_IDS
from solutions.qwen35_attention import Qwen35Attention, ZeroCenteredRMSNorm, apply_partial_rope, rope_cos_sin


def config(hidden, heads, kv_heads, head_dim, eps=1e-6):
    """A configuration with Hugging Face attribute names, as ``Qwen35Attention`` reads them."""
    return SimpleNamespace(hidden_size=hidden, num_attention_heads=heads, num_key_value_heads=kv_heads,
                           head_dim=head_dim, rms_norm_eps=eps)


def random_weights(cfg, gen, dtype) -> dict:
    """A state dict with the real keys: projections scaled so activations stay O(1), norms near 0."""
    width, kv_width = cfg.num_attention_heads * cfg.head_dim, cfg.num_key_value_heads * cfg.head_dim
    weights = linear_weights(gen, {"q_proj": (2 * width, cfg.hidden_size), "k_proj": (kv_width, cfg.hidden_size),
                                   "v_proj": (kv_width, cfg.hidden_size), "o_proj": (cfg.hidden_size, width)}, dtype)
    return {**weights, "q_norm.weight": randn(gen, cfg.head_dim, dtype=dtype, scale=0.2),
            "k_norm.weight": randn(gen, cfg.head_dim, dtype=dtype, scale=0.2)}


def _random_case(gen, label, cfg, batch, seq, rotary_dim, dtype=torch.float32, attention_mask=None, theta=10_000.0):
    cos, sin = rope_cos_sin(torch.arange(seq), rotary_dim, theta)
    x = randn(gen, batch, seq, cfg.hidden_size, dtype=dtype)
    args = (cfg, random_weights(cfg, gen, dtype), x, cos, sin, attention_mask)
    return Case(f"{label}：hidden {cfg.hidden_size}，{cfg.num_attention_heads} 个 query 头，"
                f"{cfg.num_key_value_heads} 个 KV 头，head_dim {cfg.head_dim}，rotary_dim {rotary_dim}，"
                f"x [{batch}, {seq}, {cfg.hidden_size}]，{dtype_name(dtype)}", args)


def layer3_input(dtype: torch.dtype, path=None):
    """The prompt's layer-3 input: embedding rows through input_layernorm, ``[1, T, hidden]``, with the
    config and the attention weights, all read from the one checkpoint ``path`` (or the one found)."""
    cfg = checkpoint.load_config(path)
    weights = checkpoint.load_attention_layer(3, path, dtype=dtype, verbose=False)
    norm = ZeroCenteredRMSNorm(cfg.hidden_size, cfg.rms_norm_eps).to(dtype)
    norm.load_state_dict({"weight": weights["input_layernorm.weight"]})
    with torch.no_grad():
        x = norm(checkpoint.load_embedding_rows(PROMPT_IDS, path, dtype=dtype, verbose=False))[None]
    return cfg, checkpoint.submodule_state(weights, "self_attn"), x


def _layer3_case(found: checkpoint.Checkpoint, dtype: torch.dtype) -> Case:
    cfg, weights, x = layer3_input(dtype, found.folder)
    cos, sin = rope_cos_sin(torch.arange(x.shape[1]), cfg.rotary_dim, cfg.rope_theta)
    source = "合成的替身权重" if found.synthetic else "真实的 Qwen3.5-0.8B"
    return Case(f"第 3 层（{source}），输入是「{PROMPT}」的 {x.shape[1]} 个 token 过 input_layernorm，"
                f"{dtype_name(dtype)}", (cfg, weights, x, cos, sin, None))


def cases() -> list[Case]:
    gen = generator(64)
    right_pad = torch.tensor([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0]])
    left_pad = torch.tensor([[1, 1, 1, 1, 1], [0, 0, 1, 1, 1]])
    found = checkpoint.find_checkpoint()  # looked up once: both layer-3 cases read the same files
    return public([
        _random_case(gen, "小配置（hidden = H·D）", config(32, 4, 2, 8), 1, 5, 4),
        _random_case(gen, "小配置，第二句右侧 padding", config(32, 4, 2, 8), 2, 5, 4, attention_mask=right_pad),
        _random_case(gen, "小配置，第二句左侧 padding（pad 的 query 整行被遮住）", config(24, 2, 2, 12), 2, 5, 4,
                     attention_mask=left_pad),
        _random_case(gen, "MQA（1 个 KV 头）", config(48, 4, 1, 16), 2, 4, 8, dtype=torch.float64),
        _random_case(gen, "真实形状、随机权重", config(1024, 8, 2, 256), 1, 4, 64, theta=10_000_000.0),
        _random_case(gen, "小配置", config(64, 4, 2, 16), 2, 6, 8, dtype=torch.bfloat16),
        _layer3_case(found, torch.float32),
        _layer3_case(found, torch.bfloat16),
    ], 0, 2, 3, 5)


class _Variant(Qwen35Attention):
    """The reference with one of its steps replaced (see each mistake)."""


def _variant(**steps):
    return type("Mistake", (_Variant,), steps)


def _half_split(self, x):
    query, gate = self.q_proj(x).chunk(2, dim=-1)
    shape = (self.num_heads, self.head_dim)
    key = self.k_proj(x).unflatten(-1, (self.num_kv_heads, self.head_dim))
    value = self.v_proj(x).unflatten(-1, (self.num_kv_heads, self.head_dim))
    return query.unflatten(-1, shape), gate.unflatten(-1, shape), key, value


def _norm_after_rope(self, query, key, cos, sin):
    return (self.q_norm(apply_partial_rope(query.transpose(1, 2), cos, sin)),
            self.k_norm(apply_partial_rope(key.transpose(1, 2), cos, sin)))


def _k_norm_for_both(self, query, key, cos, sin):
    return (apply_partial_rope(self.k_norm(query).transpose(1, 2), cos, sin),
            apply_partial_rope(self.k_norm(key).transpose(1, 2), cos, sin))


def _rope_last_dims(self, query, key, cos, sin):
    def rotate(t):
        rotary_dim = cos.shape[-1]
        return torch.cat([t[..., :-rotary_dim], apply_partial_rope(t[..., -rotary_dim:], cos, sin)], dim=-1)
    return rotate(self.q_norm(query).transpose(1, 2)), rotate(self.k_norm(key).transpose(1, 2))


def _attend_with(*, repeat=torch.repeat_interleave, causal=True, padding=True, scale=None):
    """An ``attend`` step that shares KV heads with ``repeat(t, n_rep, dim=1)``, and may skip masks or rescale."""
    def attend(self, query, key, value, attention_mask):
        n_rep = self.num_heads // self.num_kv_heads
        key, value = repeat(key, n_rep, dim=1), repeat(value.transpose(1, 2), n_rep, dim=1)
        scores = query @ key.transpose(-2, -1) * (scale(self) if scale else self.head_dim ** -0.5)
        seq = query.shape[-2]
        mask = torch.ones(seq, seq, dtype=torch.bool).tril() if causal else torch.ones(seq, seq, dtype=torch.bool)
        if attention_mask is not None and padding:
            mask = mask & (attention_mask != 0)[:, None, None, :]
        weights = torch.softmax(scores.masked_fill(~mask, float("-inf")), dim=-1).nan_to_num(0.0)
        return weights @ value
    return attend


def _gate_after_o_proj(self, out, gate):
    return self.o_proj(out.transpose(1, 2).flatten(-2)) * torch.sigmoid(gate.flatten(-2))


class _WeightNorm(ZeroCenteredRMSNorm):
    def forward(self, x):
        x32 = x.float()
        return (x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight.float()).to(x.dtype)


class _PlainWeightNorms(Qwen35Attention):
    def __init__(self, cfg):
        super().__init__(cfg)
        self.q_norm, self.k_norm = _WeightNorm(cfg.head_dim, cfg.rms_norm_eps), _WeightNorm(cfg.head_dim, cfg.rms_norm_eps)


MISTAKES = (
    Mistake("query 和门按整个 q_proj 的前一半 / 后一半切开了", "q_proj 的输出按头交错：每个头 2D 个输出里前 D 个是 "
            "query、后 D 个是门（split_query_gate）。", _variant(project=_half_split)),
    Mistake("门乘在了 o_proj 之后", "门逐维乘在各头的注意力输出上，然后才进 o_proj。",
            _variant(gate_and_project=_gate_after_o_proj)),
    Mistake("门没有过 sigmoid", "输出乘的是 sigmoid(gate)。",
            _variant(gate_and_project=lambda self, out, gate: self.o_proj((out.transpose(1, 2) * gate).flatten(-2)))),
    Mistake("忘了 o_proj", "各头合并成 [B, T, H·D] 之后还要过 o_proj 回到 hidden_size。",
            _variant(gate_and_project=lambda self, out, gate: (out.transpose(1, 2) * torch.sigmoid(gate)).flatten(-2))),
    Mistake("q_norm / k_norm 乘的是 weight 而不是 (1 + weight)", "Qwen3.5 的 norm 是零中心的：乘 (1 + weight)。",
            _PlainWeightNorms),
    Mistake("QK-Norm 放在了 RoPE 之后", "顺序是先 q_norm / k_norm，再做 RoPE。", _variant(position=_norm_after_rope)),
    Mistake("query 也用 k_norm 做了归一化", "q_norm 和 k_norm 各有各的权重：query 过 q_norm，key 过 k_norm。",
            _variant(position=_k_norm_for_both)),
    Mistake("RoPE 转的是最后 rotary_dim 维", "只转每个头的前 rotary_dim 维。", _variant(position=_rope_last_dims)),
    Mistake("KV 头重复成了 0, 1, 0, 1 的顺序（整组平铺，像 repeat），应是 0, 0, 1, 1", "query 头 h 读的是 KV 头 h // n_rep："
            "repeat_interleave(n_rep, dim=1)，repeat 会把头的顺序排错。",
            _variant(attend=_attend_with(repeat=lambda t, n_rep, dim: t.repeat(1, n_rep, 1, 1)))),
    Mistake("没有因果掩码", "这一层总要自己加因果掩码：query i 只能看 j ≤ i 的 key。",
            _variant(attend=_attend_with(causal=False))),
    Mistake("没有用 attention_mask（padding）", "把 attention_mask 转成 padding_mask，和因果掩码一起用。",
            _variant(attend=_attend_with(padding=False))),
    Mistake("分数没有除以 √head_dim", "缩放是 head_dim^(−1/2)。", _variant(attend=_attend_with(scale=lambda self: 1.0))),
    Mistake("分数除以了 head_dim 而不是 √head_dim", "缩放是 head_dim^(−1/2)。",
            _variant(attend=_attend_with(scale=lambda self: 1.0 / self.head_dim))),
)

STAGES = (("split", "q_norm 收到的 query（应是按头拆出来、还没做 RoPE 的 query）"),
          ("norm", "q_norm、k_norm 的输出"),
          ("rope", "apply_partial_rope 的输出"),
          ("attention", "attention 的输出"),
          ("gate", "o_proj 收到的输入（乘过门、合并了头之后）"))
assert tuple(key for key, _ in STAGES) == LAYER_STAGES
STAGE_USES = {"split": ("split_query_gate",), "norm": ("ZeroCenteredRMSNorm",),
              "rope": ("rope_cos_sin", "apply_rope", "apply_partial_rope"),
              "attention": ("repeat_kv", "KVCache", "split_heads", "merge_heads", *ATTENTION_BASICS),
              "gate": ("apply_output_gate",)}


@functools.cache
def _on_base(fn, name: str, base):
    """``fn`` (the reference or a mistake) with its q_norm and k_norm made by ``base``, a known mistake of
    ``ZeroCenteredRMSNorm`` written as a subclass (Exercise.on_base): swapped in once built, weights kept."""
    if name != "ZeroCenteredRMSNorm" or not (isinstance(base, type) and issubclass(base, ZeroCenteredRMSNorm)):
        return None

    class OnBase(fn):
        def __init__(self, cfg):
            super().__init__(cfg)
            for norm in (self.q_norm, self.k_norm):
                if type(norm) is ZeroCenteredRMSNorm:
                    norm.__class__ = base
    return OnBase


EXERCISE = Exercise("Qwen35Attention", 6, Qwen35Attention, cases, MISTAKES, call=call_layer,
                    free=lambda case: padding_query_rows(case.args[5]), stages=STAGES, stage_uses=STAGE_USES,
                    uses=("split_query_gate", "ZeroCenteredRMSNorm", "rope_cos_sin", "apply_rope", "apply_partial_rope", "apply_output_gate", "repeat_kv", "KVCache", "split_heads", "merge_heads", *ATTENTION_BASICS),
                    on_base=_on_base)
