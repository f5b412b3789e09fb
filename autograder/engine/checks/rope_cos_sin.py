"""Check of ``rope_cos_sin(positions, rotary_dim, theta)``: ``cos, sin`` of shape ``[T, rotary_dim]``."""
import torch

from autograder.engine.model import Exercise, Mistake, public
from course.protocols import Case
from course.tolerances import Tolerance
from solutions.rope_mla import rope_cos_sin

# Angles reach position × 1 rad; float32 holds them to about position × 6e-8, so the bound grows
# with the largest position used below (300).
TOLERANCES = {torch.float32: Tolerance(atol=1e-4, rtol=0.0)}


def cases() -> list[Case]:
    return public([
        Case("小例子：positions = arange(3)，rotary_dim = 4，theta = 100（角度都不大，方便手算）",
             (torch.arange(3), 4, 100.0)),
        Case("positions = arange(6)，rotary_dim = 64，theta = 1e7（Qwen3.5 的设置）", (torch.arange(6), 64, 10_000_000.0)),
        Case("positions = arange(5)，rotary_dim = 8，theta = 10000", (torch.arange(5), 8, 10_000.0)),
        Case("只有一个位置：positions = [0]，rotary_dim = 4", (torch.tensor([0]), 4, 10_000.0)),
        Case("解码时的位置 positions = [10, 11, 12, 13]，rotary_dim = 16", (torch.arange(10, 14), 16, 10_000.0)),
        Case("positions = arange(300)，rotary_dim = 32，theta = 1e6", (torch.arange(300), 32, 1_000_000.0)),
    ], 0, 4)


def _angles(positions, rotary_dim, theta, steps):
    inv_freq = theta ** (-steps / rotary_dim)
    return positions.double()[:, None] * inv_freq[None, :]


# Beyond about this many radians, float32 rounding of the angle alone moves a cosine by more than the tolerance.
FLOAT32_EXACT_ANGLE = 500.0


def _largest_reversed_angle(positions, rotary_dim, theta) -> float:
    """The largest angle of the table with the exponent's sign reversed: max position × theta^((d − 2) / d)."""
    return float(positions.abs().max()) * theta ** ((rotary_dim - 2) / rotary_dim)


def _from_angles(table):
    return table.cos().float(), table.sin().float()


MISTAKES = (
    Mistake("角度是交错排列的（repeat_interleave），不是 cat(freqs, freqs)", "rotate-half 的写法要求前一半和后一半"
            "用同一组频率：torch.cat([freqs, freqs], dim=-1)。",
            lambda p, d, t: _from_angles(_angles(p, d, t, torch.arange(0, d, 2.0)).repeat_interleave(2, dim=-1))),
    Mistake("频率没有复制成两份", "freqs 只有 rotary_dim / 2 列，要 cat(freqs, freqs) 拼成 rotary_dim 列。",
            lambda p, d, t: _from_angles(_angles(p, d, t, torch.arange(0, d, 2.0)))),
    Mistake("指数的符号反了", "inv_freq = theta^(−2i/rotary_dim)：频率从 1 开始越来越小。",
            lambda p, d, t: _from_angles(torch.cat([_angles(p, d, 1 / t, torch.arange(0, d, 2.0))] * 2, -1)),
            tried_on=lambda case: _largest_reversed_angle(*case.args) < FLOAT32_EXACT_ANGLE),
    Mistake("cos 和 sin 的顺序反了", "返回 (cos, sin)。", lambda p, d, t: rope_cos_sin(p, d, t)[::-1]),
    Mistake("没有用传进来的 positions，而是从 0 数了 len(positions) 个位置", "角度是 positions × inv_freq：解码时"
            "新 token 的位置是 len(cache) + i，不是从 0 开始，所以要用传进来的 positions 本身。",
            lambda p, d, t: rope_cos_sin(torch.arange(len(p)), d, t)),
    Mistake("指数用了 arange(0, rotary_dim / 2) 而不是 arange(0, rotary_dim, 2)",
            "第 i 个频率的指数是 2i / rotary_dim。",
            lambda p, d, t: _from_angles(torch.cat([_angles(p, d, t, torch.arange(0, d // 2, 1.0))] * 2, -1))),
)

EXERCISE = Exercise("rope_cos_sin", 2, rope_cos_sin, cases, MISTAKES, output_names=("cos", "sin"),
                    tolerance_overrides=TOLERANCES)
