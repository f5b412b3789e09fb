"""Check of ``ZeroCenteredRMSNorm(dim, eps)``: ``x · rsqrt(mean(x²) + eps) · (1 + weight)``, computed in
float32 and cast back; the weight starts at zero."""
import torch
from torch import nn

from autograder.engine.inputs.seeded import dtype_name, generator, randn, shape
from autograder.engine.model import Exercise, Mistake, public
from course.protocols import Case, call_norm
from course.tolerances import Tolerance
from solutions.qwen35_attention import ZeroCenteredRMSNorm

TOLERANCES = {
    # Float32 arithmetic rounded once to bfloat16 is within half a bfloat16 step (0.4%); arithmetic
    # done in bfloat16 itself rounds at every step and lands outside this bound.
    torch.bfloat16: Tolerance(atol=1e-3, rtol=8e-3),
}


def cases() -> list[Case]:
    gen = generator(61)
    found = [Case("刚初始化的 norm（不加载权重）：weight 应为 0，缩放正好是 1", (8, 1e-6, None, randn(gen, 2, 3, 8)))]
    for lead, dim, eps, dtype, scale in [((2, 3), 8, 1e-6, torch.float32, 1.0),
                                         ((2, 4, 3), 16, 1e-6, torch.float64, 1.0),
                                         ((2, 5), 32, 0.5, torch.float32, 0.3),
                                         ((2, 3), 64, 1e-6, torch.float16, 400.0),
                                         ((1, 8, 6), 256, 1e-6, torch.bfloat16, 1.0)]:
        weight = randn(gen, dim, dtype=dtype, scale=0.3)
        x = randn(gen, *lead, dim, dtype=dtype, scale=scale)
        note = "，数值在几百的量级（x² 会超出 float16 的范围）" if dtype == torch.float16 else ""
        note += f"，eps={eps}" if eps != 1e-6 else ""
        found.append(Case(f"随机 x {shape(x)}、随机 weight [{dim}]，{dtype_name(dtype)}{note}",
                          (dim, eps, weight, x)))
    return public(found, 0, 2, 3, 4, 5)


class _Variant(ZeroCenteredRMSNorm):
    """The reference with one step changed by ``native``, ``normalise`` or ``scale``."""

    native = False  # compute in the input's dtype instead of float32

    def forward(self, x):
        x32 = x if self.native else x.float()
        return self.scale(self.normalise(x32), self.weight.to(x32.dtype)).to(x.dtype)

    def normalise(self, x):
        return x * torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + self.eps)

    def scale(self, normed, weight):
        return normed * (1.0 + weight)


def _variant(**overrides):
    return type("Mistake", (_Variant,), overrides)


def _init_ones(dim, eps):
    norm = ZeroCenteredRMSNorm(dim, eps)
    nn.init.ones_(norm.weight)
    return norm


MISTAKES = (
    Mistake("乘的是 weight 而不是 (1 + weight)", "Qwen3.5 的 norm 是零中心的：权重存的是相对 1 的偏移，要乘 (1 + weight)。",
            _variant(scale=lambda self, normed, weight: normed * weight)),
    Mistake("weight 没有初始化成 0", "零中心 norm 的 weight 初始化为 0（nn.Parameter(torch.zeros(dim))），"
            "这样一开始乘的是 1 + 0 = 1。",
            _init_ones),
    Mistake("没有在 float32 里计算", "先 x.float()，算完再 .to(x.dtype)：float16 下 x² 会溢出成 inf，bfloat16 下每一步都在丢精度。",
            _variant(native=True), native_dtype=True),
    Mistake("eps 加在了根号外面", "是 rsqrt(mean(x²) + eps)：eps 在根号里面。",
            _variant(normalise=lambda self, x: x / (x.pow(2).mean(dim=-1, keepdim=True).sqrt() + self.eps))),
    Mistake("均方根是对整个张量求的，不是每个向量各自求", "mean(x²) 只在最后一维上求：x.pow(2).mean(dim=-1, keepdim=True)，"
            "每个 token（每个头）各有自己的缩放。",
            _variant(normalise=lambda self, x: x * torch.rsqrt(x.pow(2).mean() + self.eps))),
    Mistake("用 x.var() 代替了 mean(x²)", "var 先减去均值，默认还除以 n − 1：那是方差，不是均方。RMSNorm 除以 "
            "√(mean(x²) + eps)：x.pow(2).mean(dim=-1, keepdim=True)。",
            _variant(normalise=lambda self, x: x * torch.rsqrt(x.var(-1, keepdim=True) + self.eps))),
    Mistake("减去了均值（那是 LayerNorm）", "RMSNorm 不减均值，只除以均方根。",
            _variant(normalise=lambda self, x: (x - x.mean(-1, keepdim=True)) * torch.rsqrt(
                x.var(-1, keepdim=True, unbiased=False) + self.eps))),
    Mistake("乘上了均方根，不是除以它（sqrt 写成了 rsqrt 的位置）", "归一化是 x / √(mean(x²) + eps)："
            "乘 torch.rsqrt(...)，或者除以 torch.sqrt(...)；乘 torch.sqrt(...) 会把向量放大而不是归一。",
            _variant(normalise=lambda self, x: x * torch.sqrt(x.pow(2).mean(dim=-1, keepdim=True) + self.eps))),
)

EXERCISE = Exercise("ZeroCenteredRMSNorm", 3, ZeroCenteredRMSNorm, cases, MISTAKES, call=call_norm,
                    tolerance_overrides=TOLERANCES, works_in_float32=True)
