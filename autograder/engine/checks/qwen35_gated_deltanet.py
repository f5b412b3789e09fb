"""Check of ``Qwen35GatedDeltaNet(config)``: ``forward(x, attention_mask=None, cache=None) → (out, cache)``,
Qwen3.5's Gated DeltaNet layer with Hugging Face's parameter names. On small random configurations (more value
heads than key heads, Dk ≠ Dv), with padding, decoding through the ``GatedDeltaNetCache`` next to it (the
outputs and the states it holds at the end), in three dtypes, and on Qwen3.5-0.8B's own sizes."""
from types import SimpleNamespace

import torch
import torch.nn.functional as F

from autograder.engine.inputs import modules
from autograder.engine.inputs.seeded import dtype_name, generator, randn, shape
from autograder.engine.model import Exercise, Mistake, public
from course import qwen35_weights as checkpoint
from course.protocols import DELTANET_STAGES, Case, call_recurrent_decoder
from course.qwen35 import PROMPT, PROMPT_IDS
from course.tolerances import Tolerance

# The mistakes below decode with the GatedDeltaNetCache found among this module's names (protocols.neighbour).
from solutions.gated_deltanet import (
    GatedDeltaNetCache,  # noqa: F401 - see above
    Qwen35GatedDeltaNet,
    causal_conv1d,
    chunked_gated_delta_rule,
    l2_normalize,
)
from solutions.qwen35_attention import ZeroCenteredRMSNorm

OUTPUT_NAMES = ("输出（各段的 out 沿序列维拼起来）", "解码完之后 cache.conv_state", "解码完之后 cache.recurrent_state")
LAYERS = (0, 1, 2)  # Qwen3.5-0.8B's Gated DeltaNet layers before the first full-attention layer; 0 is graded


def config(hidden, key_heads, value_heads, key_dim, value_dim, kernel=4, eps=1e-6):
    """A configuration with Hugging Face's attribute names, as ``Qwen35GatedDeltaNet`` reads them."""
    return SimpleNamespace(hidden_size=hidden, linear_num_key_heads=key_heads, linear_num_value_heads=value_heads,
                           linear_key_head_dim=key_dim, linear_value_head_dim=value_dim,
                           linear_conv_kernel_dim=kernel, rms_norm_eps=eps)


def random_weights(cfg, gen, dtype) -> dict:
    """A state dict with the real keys and shapes: projections scaled so activations stay O(1); ``A_log``,
    ``dt_bias`` such that ``exp(g)`` spreads over (0, 1); ``norm.weight`` near 1 (not at 1: w and 1 + w differ)."""
    hidden, key_dim = cfg.hidden_size, cfg.linear_num_key_heads * cfg.linear_key_head_dim
    value_heads, value_dim = cfg.linear_num_value_heads, cfg.linear_num_value_heads * cfg.linear_value_head_dim
    conv_dim, kernel = 2 * key_dim + value_dim, cfg.linear_conv_kernel_dim
    weights = modules.linear_weights(gen, {"in_proj_qkv": (conv_dim, hidden), "in_proj_z": (value_dim, hidden),
                                           "in_proj_b": (value_heads, hidden), "in_proj_a": (value_heads, hidden),
                                           "out_proj": (hidden, value_dim)}, dtype)
    return {**weights, "conv1d.weight": randn(gen, conv_dim, 1, kernel, dtype=dtype, scale=kernel ** -0.5),
            "dt_bias": randn(gen, value_heads, dtype=dtype, scale=0.5),
            # log A with A in (1, 3): a decay that forgets within a few tokens and, read as A itself, still decays.
            "A_log": torch.log(1 + 2 * torch.rand(value_heads, generator=gen, dtype=torch.float64)).to(dtype),
            "norm.weight": (1 + randn(gen, cfg.linear_value_head_dim, dtype=torch.float64, scale=0.2)).to(dtype)}


def _describe(cfg) -> str:
    return (f"hidden {cfg.hidden_size}，{cfg.linear_num_key_heads} 个 key 头，{cfg.linear_num_value_heads} 个 value 头，"
            f"Dk {cfg.linear_key_head_dim}，Dv {cfg.linear_value_head_dim}，卷积核 {cfg.linear_conv_kernel_dim}")


def _case(gen, cfg, batch, seq, dtype=torch.float32, attention_mask=None, steps=None, note="") -> Case:
    x = randn(gen, batch, seq, cfg.hidden_size, dtype=dtype)
    kwargs, said = modules.forward_arguments(attention_mask, steps)
    return Case(f"{note}随机权重：{_describe(cfg)}，x {shape(x)}，{dtype_name(dtype)}{said}",
                ((cfg,), random_weights(cfg, gen, dtype), x), kwargs)


def _qwen35_case() -> Case:
    """On Qwen3.5-0.8B's own sizes: layer 0 of the checkpoint the course finds (the stand-in when there is no real
    one) on the prompt's embeddings through its input_layernorm, decoded through the cache in float32. (bfloat16 is graded on a small config: on these
    weights its rounding hides mistakes.)"""
    found = checkpoint.find_checkpoint()
    cfg = checkpoint.load_config(found.folder)
    source = "合成的替身权重" if found.synthetic else "真实的 Qwen3.5-0.8B"
    weights = checkpoint.load_linear_attention_layer(LAYERS[0], found.folder, verbose=False)
    # Named by file where the sandbox can read them (40 MB in float32 that no job then carries), else carried.
    layer = (checkpoint.stored_linear_attention(LAYERS[0], found.folder)
             or {name: t.float() for name, t in checkpoint.submodule_state(weights, "linear_attn").items()})
    norm = ZeroCenteredRMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
    norm.load_state_dict({"weight": weights["input_layernorm.weight"].float()})
    with torch.no_grad():
        x = norm(checkpoint.load_embedding_rows(PROMPT_IDS, found.folder, dtype=torch.float32, verbose=False))[None]
    kwargs, said = modules.forward_arguments(None, (4, 1, 1))
    return Case(f"第 {LAYERS[0]} 层（{source}），输入是「{PROMPT}」的 {x.shape[1]} 个 token 过 input_layernorm，"
                f"{dtype_name(torch.float32)}{said}", ((cfg,), layer, x),
                kwargs)


def cases() -> list[Case]:
    gen = generator(86)
    left_pad = torch.tensor([[0, 0, 1, 1, 1, 1], [1, 1, 1, 1, 1, 1]])
    right_pad = torch.tensor([[1, 1, 1, 1, 1, 1], [1, 1, 1, 1, 0, 0]])
    small, grouped = config(32, 2, 2, 8, 8), config(32, 2, 4, 8, 6)
    return public([
        _case(gen, small, 1, 5, note="小配置，"),
        _case(gen, grouped, 2, 6, note="value 头比 key 头多、Dk ≠ Dv，"),
        _case(gen, grouped, 2, 1, note="只有一个 token，"),
        _case(gen, grouped, 2, 6, attention_mask=left_pad, note="左侧 padding，"),
        _case(gen, small, 2, 6, attention_mask=right_pad, note="右侧 padding，"),
        _case(gen, grouped, 2, 5, steps=(3, 1, 1)),
        _case(gen, grouped, 2, 6, attention_mask=left_pad, steps=(4, 1, 1), note="左侧 padding，"),
        _case(gen, config(24, 1, 2, 4, 8, kernel=3), 1, 4, steps=(1, 1, 1, 1), note="从空缓存开始逐个 token，"),
        _case(gen, grouped, 2, 5, dtype=torch.float64, steps=(3, 2)),
        _case(gen, grouped, 2, 6, dtype=torch.bfloat16, attention_mask=left_pad, steps=(4, 1, 1)),
        # Longer than the 64-position chunks the layer's rule takes by default: the state must cross a chunk.
        _case(gen, small, 1, 70, note="70 个 token（超过一块 64 个位置），"),
        # Its own generator, so that the cases above keep their numbers.
        _case(generator(87), config(32, 2, 2, 8, 8, eps=0.01), 1, 5, note="rms_norm_eps = 0.01（不是常见的 1e-6），"),
        _qwen35_case(),
    ], 0, 3, 5, 8, 9, 10, 11)


class _Variant(Qwen35GatedDeltaNet):
    """The layer written out in one piece, right by default; ``_variant`` changes one step (see MISTAKES)."""

    l2 = "heads"  # over each head's Dk ("heads"), over all key dims at once ("whole"), or not at all (None)
    q_scale = -0.5  # q is scaled by Dk ** q_scale
    tile = False  # key heads repeated as a whole (0, 1, 0, 1) instead of each in turn (0, 0, 1, 1)
    softplus, dt_bias_used, exp_a, sigmoid_beta, conv_silu, use_mask = True, True, True, True, True, True
    gate = staticmethod(F.silu)
    norm_plus_one = False
    gate_before_norm = False
    default_eps = False
    carry_conv, carry_state = True, True
    cache_only_for_one_token = False  # several tokens at once are taken as a fresh prompt, the cache ignored

    def forward(self, x, attention_mask=None, cache=None):
        batch, seq, _ = x.shape
        if attention_mask is not None and self.use_mask:
            x = x * attention_mask[:, -seq:, None].to(x.dtype)
        carry_conv, carry_state = ((False, False) if self.cache_only_for_one_token and seq > 1
                                   else (self.carry_conv, self.carry_state))
        past = cache.conv_state if cache is not None and carry_conv else None
        y, conv_state = causal_conv1d(self.in_proj_qkv(x).transpose(1, 2), self.conv1d.weight, past)
        qkv = (F.silu(y) if self.conv_silu else y).transpose(1, 2)
        q, k, v = qkv.split([self.key_dim, self.key_dim, self.value_dim], dim=-1)
        if self.l2 == "whole":
            q, k = l2_normalize(q), l2_normalize(k)
        q, k = (t.unflatten(-1, (self.num_k_heads, self.head_k_dim)).transpose(1, 2) for t in (q, k))
        if self.l2 == "heads":
            q, k = l2_normalize(q), l2_normalize(k)
        q = q * self.head_k_dim ** self.q_scale
        n_rep = self.num_v_heads // self.num_k_heads
        share = (lambda t: t.repeat(1, n_rep, 1, 1)) if self.tile else (lambda t: t.repeat_interleave(n_rep, dim=1))
        q, k = share(q), share(k)
        v = v.unflatten(-1, (self.num_v_heads, self.head_v_dim)).transpose(1, 2)
        b = self.in_proj_b(x)
        beta = (torch.sigmoid(b) if self.sigmoid_beta else b).transpose(1, 2)
        a = self.in_proj_a(x) + (self.dt_bias if self.dt_bias_used else 0.0)
        g = -(self.A_log.exp() if self.exp_a else self.A_log) * (F.softplus(a) if self.softplus else a)
        state = cache.recurrent_state if cache is not None and carry_state else None
        o, state = chunked_gated_delta_rule(q, k, v, g.transpose(1, 2), beta, state=state)
        if cache is not None:
            cache.update(conv_state, state)
        z = self.in_proj_z(x).unflatten(-1, (self.num_v_heads, self.head_v_dim))
        o = o.transpose(1, 2)
        if self.gate_before_norm:
            o = o * self.gate(z)
        eps = 1e-6 if self.default_eps else self.norm.eps
        normed = o * torch.rsqrt(o.pow(2).mean(-1, keepdim=True) + eps)
        normed = normed * (1 + self.norm.weight if self.norm_plus_one else self.norm.weight)
        out = normed if self.gate_before_norm else normed * self.gate(z)
        return self.out_proj(out.flatten(-2)), cache


def _variant(**steps):
    return type("Mistake", (_Variant,), {name: staticmethod(s) if callable(s) else s for name, s in steps.items()})


GATE = "g = −exp(A_log) · softplus(a + dt_bias)：A_log 是 A 的对数，softplus 让括号里的量为正，所以 g < 0、exp(g) 在 0 和 1 之间。"
MISTAKES = (
    Mistake("q、k 没有做 L2 归一化", "卷积和 SiLU 之后，每个头的 q、k 各自除以自己的 L2 范数（x · rsqrt(Σx² + 1e-6)），"
            "然后 q 再乘 Dk^(−1/2)。", _variant(l2=None)),
    Mistake("L2 归一化做在了拆成头之前（对所有 key 维一起）", "按头归一化：先 reshape 成 [B, T, H_k, Dk]，在每个头的 Dk 维上归一化。",
            _variant(l2="whole")),
    Mistake("L2 归一化之后 q 没有乘 Dk^(−1/2)", "L2 归一化之后 q 还要乘 Dk^(−1/2)（乘在归一化之前会被归一化抵掉，等于没乘）；这门课的 delta rule 函数照原样用 q，"
            "所以缩放由这一层在调用之前做（Hugging Face 的 kernel 在里面做）。", _variant(q_scale=0.0)),
    Mistake("q 缩放了两次（乘了 1/Dk）", "q 只乘一次 Dk^(−1/2)。", _variant(q_scale=-1.0)),
    # Without softplus g > 0 wherever a + dt_bias < 0, and the state grows by exp(g) at each step: after a few
    # decoded tokens, or a few dozen in one pass, the student's own float32 rounding decides the numbers.
    Mistake("g 里忘了 softplus", GATE, _variant(softplus=False),
            tried_on=lambda case: "steps" not in case.kwargs and case.args[2].shape[1] <= 16),
    Mistake("g 里忘了 dt_bias", GATE, _variant(dt_bias_used=False)),
    Mistake("A_log 没有取 exp", GATE, _variant(exp_a=False)),
    Mistake("β 没有过 sigmoid", "β = sigmoid(in_proj_b(x))，在 0 和 1 之间。", _variant(sigmoid_beta=False)),
    Mistake("卷积之后没有做 SiLU", "in_proj_qkv 的输出过因果卷积之后要做 SiLU，再切成 q、k、v。", _variant(conv_silu=False)),
    Mistake("输出门用了 sigmoid(z)，应是 SiLU(z)", "Gated DeltaNet 的输出门是 norm(o) · SiLU(z)（z = in_proj_z(x)），"
            "不是 06 注意力层的 sigmoid 门。", _variant(gate=torch.sigmoid)),
    Mistake("输出的 RMSNorm 乘的是 (1 + weight)", "这里的 norm 是普通 RMSNorm，weight 从 1 开始，直接乘 weight；"
            "第 3 层那种零中心的 (1 + weight) 不适用于它。", _variant(norm_plus_one=True)),
    Mistake("输出 norm 的 weight 没有从 1 开始", "输出的 norm 是普通 RMSNorm：weight = nn.Parameter(torch.ones(dim))，"
            "和 Hugging Face 的 Qwen3_5RMSNormGated 一样；从 0 开始、乘 (1 + weight) 的是作业 06 的零中心 norm。",
            error=r"weight 应从 1 开始"),
    Mistake("输出 norm 的 eps 没有用 config.rms_norm_eps", "建 norm 时把 config.rms_norm_eps 传进去："
            "GatedRMSNorm(head_v_dim, config.rms_norm_eps)；不传就是默认的 1e-6，配置换了 eps 结果就不对。",
            _variant(default_eps=True)),
    Mistake("门乘在了 RMSNorm 之前", "先对 o 做 RMSNorm（乘 weight），再乘 SiLU(z)。", _variant(gate_before_norm=True)),
    Mistake("key 头重复成了 0, 1, 0, 1 的顺序（整组平铺，像 repeat），应是 0, 0, 1, 1", "value 头 h 读 key 头 "
            "h // (H_v / H_k)：repeat_interleave(n_rep, dim=1)。", _variant(tile=True)),
    Mistake("忽略了 attention_mask（padding 没有清零）", "有 attention_mask 时，先把 padding 位置的 x 乘 0（取 mask 的最后 T 列），"
            "否则 padding 会进入卷积和状态，改变后面真实 token 的输出。", _variant(use_mask=False)),
    Mistake("解码时没有用 cache 里的 conv_state", "卷积要接着上一段最后 K − 1 个输入：把 cache.conv_state 交给 causal_conv1d，"
            "再把返回的新 conv_state 存回 cache。", _variant(carry_conv=False)),
    Mistake("解码时没有用 cache 里的 recurrent_state", "delta rule 要从 cache.recurrent_state 接着算，算完把新的状态存回 cache。",
            _variant(carry_state=False)),
    Mistake("缓存里已有内容时，一次来几个 token 就把 conv_state 和 recurrent_state 都当成了空的", "只有一个 token 时才从缓存接着算"
            "是不够的：缓存不是空的，不管这次来几个 token，卷积都要接上 cache.conv_state，delta rule 都要从 "
            "cache.recurrent_state 开始（判断的是缓存里有没有东西，不是 T 是不是 1）。", _variant(cache_only_for_one_token=True)),
)

def _free(case: Case):
    """The output rows of padding tokens (any finite value is right there; the states are graded whole)."""
    rows = modules.padding_query_rows(case.kwargs.get("attention_mask"))
    return rows if "steps" not in case.kwargs else (rows, None, None)


# bfloat16 rounds q, k, the gates and the state's reads to 8 bits: honest layers in bfloat16 (the reference run
# in it, a float32 core as Hugging Face's) land within 0.02 + 0.02·|out| of float64 on these cases; Qwen3.5's
# outputs are small (~0.07 on the stand-in), so the default 0.03 absolute bound would hide mistakes there.
BFLOAT16 = Tolerance(atol=0.02, rtol=0.02)

STAGES = (("convolve", "convolve 返回的 qkv（因果卷积和 SiLU 之后）"),
          ("heads", "heads 返回的 q、k、v（拆头、L2 归一化、q 乘 Dk^(−1/2)、重复 key 头之后）"),
          ("gates", "gates 返回的 β、g"),
          ("core", "core 返回的 o（delta rule 的输出）"),
          ("norm", "norm 的输出（门控 RMSNorm 之后，out_proj 之前）"))
assert tuple(key for key, _ in STAGES) == DELTANET_STAGES
STAGE_USES = {"convolve": ("causal_conv1d",), "core": ("chunked_gated_delta_rule", "gated_delta_rule", "delta_rule")}

EXERCISE = Exercise("Qwen35GatedDeltaNet", 6, Qwen35GatedDeltaNet, cases, MISTAKES, output_names=OUTPUT_NAMES,
                    tolerance_overrides={torch.bfloat16: BFLOAT16}, call=call_recurrent_decoder,
                    free=_free, stages=STAGES, stage_uses=STAGE_USES,
                    uses=("causal_conv1d", "chunked_gated_delta_rule", "gated_delta_rule", "delta_rule"))
