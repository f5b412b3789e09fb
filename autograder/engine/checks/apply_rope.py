"""Check of ``apply_rope(x, cos, sin)``: rotate-half RoPE over every dim of ``x [..., T, D]`` with
``cos/sin [T, D]`` cast to ``x``'s dtype."""
import torch

from autograder.engine.inputs.seeded import dtype_name, generator, randn, shape
from autograder.engine.model import Exercise, Mistake, public
from course.protocols import Case
from solutions.rope_mla import apply_rope, rope_cos_sin


def cases() -> list[Case]:
    gen = generator(41)
    # One pair by hand: x = (1, 0) at position 1 with a single frequency of 1 rad turns to (cos 1, sin 1).
    found = [Case("手算的例子：x = (1, 0)，位置 1，rotary_dim 2，theta 任意（只有一个频率，角度是 1 弧度）",
                  (torch.tensor([[1.0, 0.0]]), *rope_cos_sin(torch.tensor([1]), 2, 10_000.0)))]
    for lead, seq, dim, start, theta, dtype in [((1, 2), 4, 8, 0, 10_000.0, torch.float32),
                                                ((2, 4), 5, 16, 7, 10_000.0, torch.float32),
                                                ((2,), 6, 4, 0, 100.0, torch.float32),       # a shared rope key [B, T, D]
                                                ((1, 1), 1, 32, 11, 10_000.0, torch.float32),  # one new token
                                                ((2, 2), 5, 12, 3, 10_000.0, torch.float64),
                                                ((1, 2), 3, 64, 0, 10_000_000.0, torch.float32),
                                                ((1, 2), 4, 16, 5, 10_000.0, torch.bfloat16)]:
        x = randn(gen, *lead, seq, dim, dtype=dtype)
        cos, sin = rope_cos_sin(torch.arange(start, start + seq), dim, theta)
        found.append(Case(f"x {shape(x)}，cos/sin [{seq}, {dim}]（float32），位置从 {start} 开始，theta {theta:g}，"
                          f"{dtype_name(dtype)}", (x, cos, sin)))
    return public(found, 0, 5, 7)


def interleaved(frequencies):
    """Adjacent dims (2i, 2i + 1) rotated as a pair, pair i taking the angle ``frequencies(table)[..., i]``."""
    def rotate(x, cos, sin):
        even, odd = x[..., 0::2], x[..., 1::2]
        c, s = frequencies(cos).to(x.dtype), frequencies(sin).to(x.dtype)
        return torch.stack([even * c - odd * s, even * s + odd * c], dim=-1).flatten(-2)
    return rotate


def _backwards(x, cos, sin):
    x1, x2 = x.chunk(2, dim=-1)
    return x * cos.to(x.dtype) + torch.cat([x2, -x1], dim=-1) * sin.to(x.dtype)


MISTAKES = (
    *(Mistake("按相邻两维一组旋转（交错式），不是 rotate-half", "本课程（和 Llama、Qwen 的 Hugging Face 权重）用 rotate-half："
              "第 i 维和第 i + D/2 维配成一对，rotate_half(x) = cat(−x2, x1)。交错式是同一种旋转换了维度的排法，"
              "两者差一个维度的排列，权重只认其中一种。", interleaved(columns))
      for columns in (lambda t: t[..., :t.shape[-1] // 2], lambda t: t[..., 0::2])),
    Mistake("rotate_half 的符号反了", "rotate_half(x) = cat(−x2, x1)：(x1, x2) 转 90° 得到 (−x2, x1)。", _backwards),
    Mistake("cos 和 sin 用反了", "x·cos + rotate_half(x)·sin。", lambda x, cos, sin: apply_rope(x, sin, cos)),
    Mistake("没有把 cos/sin 转成 x 的 dtype", "cos、sin 是 float32 的表：先 .to(x.dtype)，否则 bfloat16 的输入会变成 float32 的输出。",
            matches=lambda case, got: (isinstance(got, torch.Tensor) and got.dtype == torch.float32
                                       and case.dtype != torch.float32)),
)

EXERCISE = Exercise("apply_rope", 2, apply_rope, cases, MISTAKES)
