"""Check of ``padding_mask(attention_mask)``: ``[B, Tk]`` of 0/1 → bool ``[B, 1, 1, Tk]``."""
import torch

from autograder.engine.model import Exercise, Mistake, public
from course.protocols import Case
from solutions.attention_basics import padding_mask


def _case(rows, dtype=torch.long, note=""):
    mask = torch.tensor(rows, dtype=dtype)
    return Case(f"attention_mask = {rows}（{str(dtype).removeprefix('torch.')}）{note}", (mask,))


def cases() -> list[Case]:
    return public([
        _case([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0]], note="：第二句后面补了两个 pad"),
        _case([[1, 1, 1, 1]]),
        _case([[0, 0, 1, 1], [1, 1, 1, 1], [0, 1, 1, 1]], note="：左侧 padding"),
        _case([[1, 0, 1]], dtype=torch.int32),
        _case([[True, True, False]], dtype=torch.bool),
    ], 0, 2, 4)


def _keep(m):
    return m != 0


MISTAKES = (
    Mistake("掩码反了：把 pad 标成了可以看", "attention_mask 里 1 = 真实 token，对应 True（可以看）。",
            lambda m: (m == 0)[:, None, None, :]),
    Mistake("没有加出 head 和 query 两个维度", "返回 [B, 1, 1, Tk]，它才能和 [B, H, Tq, Tk] 的分数对齐广播。",
            _keep),
    Mistake("只加了一个维度：[B, 1, Tk]", "[B, 1, Tk] 和 [B, H, Tq, Tk] 广播时 batch 维会对到 head 维上，要写成 [B, 1, 1, Tk]。",
            lambda m: _keep(m)[:, None, :]),
    Mistake("遮住的是 query 而不是 key", "pad 的是 key 这一维（最后一维）：[B, 1, 1, Tk]，不是 [B, 1, Tk, 1]。",
            lambda m: _keep(m)[:, None, :, None]),
    Mistake("返回的不是 bool", "用 attention_mask != 0 或 .bool() 得到 torch.bool。",
            lambda m: _keep(m)[:, None, None, :].to(m.dtype if m.dtype != torch.bool else torch.long)),
)

EXERCISE = Exercise("padding_mask", 2, padding_mask, cases, MISTAKES)
