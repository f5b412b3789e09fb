"""Check of ``apply_partial_rope(x, cos, sin)``: rotate-half on the first ``rotary_dim`` dims of
``x [B, H, T, D]``, the other dims passed through."""
import torch

from autograder.engine.inputs.seeded import dtype_name, generator, randn, shape
from autograder.engine.model import Exercise, Mistake, public
from course.protocols import Case
from solutions.qwen35_attention import apply_partial_rope
from solutions.rope_mla import rope_cos_sin


def cases() -> list[Case]:
    gen = generator(63)
    found = []
    for lead, seq, dim, rotary_dim, theta, dtype in [((1, 2), 4, 8, 4, 10_000.0, torch.float32),
                                                     ((1, 8), 6, 256, 64, 10_000_000.0, torch.float32),
                                                     ((2, 2), 5, 16, 16, 10_000.0, torch.float64),
                                                     ((2, 3), 1, 12, 4, 10_000.0, torch.float32),
                                                     ((1, 2), 3, 32, 8, 10_000.0, torch.bfloat16)]:
        x = randn(gen, *lead, seq, dim, dtype=dtype)
        cos, sin = rope_cos_sin(torch.arange(seq) + 3, rotary_dim, theta)
        note = "（全部旋转）" if rotary_dim == dim else f"（只转前 {rotary_dim} 维）"
        found.append(Case(f"x {shape(x)}，cos/sin [{seq}, {rotary_dim}]{note}，位置从 3 开始，{dtype_name(dtype)}",
                          (x, cos, sin)))
    return public(found, 0, 2, 4)


def _split(x, cos):
    return x[..., :cos.shape[-1]], x[..., cos.shape[-1]:]


def _last_dims(x, cos, sin):
    rotary_dim = cos.shape[-1]
    passed, rotated = x[..., :-rotary_dim], x[..., -rotary_dim:]
    return torch.cat([passed, apply_partial_rope(rotated, cos, sin)], dim=-1)


def _interleaved(frequencies):
    """Adjacent dims (2i, 2i + 1) rotated as a pair, pair i taking the angle ``frequencies(table)[..., i]``."""
    def rotate(x, cos, sin):
        rotated, passed = _split(x, cos)
        even, odd = rotated[..., 0::2], rotated[..., 1::2]
        c, s = frequencies(cos).to(x.dtype), frequencies(sin).to(x.dtype)
        pairs = torch.stack([even * c - odd * s, even * s + odd * c], dim=-1).flatten(-2)
        return torch.cat([pairs, passed], dim=-1)
    return rotate


def _backwards(x, cos, sin):
    rotated, passed = _split(x, cos)
    x1, x2 = rotated.chunk(2, dim=-1)
    rotated = rotated * cos.to(x.dtype) + torch.cat([x2, -x1], dim=-1) * sin.to(x.dtype)
    return torch.cat([rotated, passed], dim=-1)


MISTAKES = (
    Mistake("转的是最后 rotary_dim 维", "Qwen3.5 旋转的是每个头的前 rotary_dim 维（前 64 维），后面的原样保留。",
            _last_dims),
    # Pair i at frequency i (the first half of the table, as GPT-J and Meta's Llama code lay it out), or
    # at every other column of the table.
    *(Mistake("按相邻两维一组旋转（交错式），不是 rotate-half", "Qwen3.5 用 rotate-half：第 i 维和第 i + rotary_dim/2 维"
              "配对，rotate_half(x) = cat(−x2, x1)。两种排法差的是维度的一个排列，checkpoint 的权重只认其中一种。",
              _interleaved(columns))
      for columns in (lambda t: t[..., :t.shape[-1] // 2], lambda t: t[..., 0::2])),
    Mistake("rotate_half 的符号反了", "rotate_half(x) = cat(−x2, x1)，不是 cat(x2, −x1)。", _backwards),
    Mistake("丢掉了不旋转的那些维", "输出要和输入一样是 [..., D]：把旋转过的前 rotary_dim 维和剩下的维拼回去。",
            lambda x, cos, sin: apply_partial_rope(x, cos, sin)[..., :cos.shape[-1]]),
    Mistake("cos 和 sin 用反了", "x·cos + rotate_half(x)·sin。", lambda x, cos, sin: apply_partial_rope(x, sin, cos)),
)

EXERCISE = Exercise("apply_partial_rope", 3, apply_partial_rope, cases, MISTAKES,
                    uses=("apply_rope",))
