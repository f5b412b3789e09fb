"""Check of ``attention_scores(q, k)``: ``[..., Tq, D] × [..., Tk, D] → [..., Tq, Tk]`` over √D."""
import math

import torch

from autograder.engine.inputs.seeded import dtype_name, generator, randn, shape, three_tokens
from autograder.engine.model import Exercise, Mistake, public
from course.protocols import Case
from solutions.attention_basics import attention_scores


def cases() -> list[Case]:
    queries, keys, _ = three_tokens()
    found = [
        Case("三个 token 的手算例子：「不错」的 query (0, 4) 对三个 key 打分", (queries[2:], keys)),
        Case("三个 token 的手算例子：三个 query 一起算", (queries, keys)),
    ]
    gen = generator(1)
    for lead, q_len, k_len, dim, dtype in [
        ((2, 3), 4, 4, 8, torch.float32),
        ((2, 2), 3, 5, 16, torch.float32),  # q_len != k_len
        ((1, 2), 1, 6, 4, torch.float32),   # one query, as when decoding
        ((), 6, 3, 5, torch.float32),       # no batch or head dims
        ((3,), 4, 2, 7, torch.float64),
        ((2, 2), 4, 6, 16, torch.bfloat16),
    ]:
        q = randn(gen, *lead, q_len, dim, dtype=dtype)
        k = randn(gen, *lead, k_len, dim, dtype=dtype)
        found.append(Case(f"随机输入：q {shape(q)}、k {shape(k)}，{dtype_name(dtype)}", (q, k)))
    return public(found, 0, 1, 3, 6, 7)


def _unscaled(q, k):
    return q @ k.transpose(-2, -1)


MISTAKES = (
    Mistake("忘了除以 √D", "分数要除以 head_dim 的平方根：q.shape[-1] ** 0.5。",
            _unscaled),
    Mistake("除以了 D 而不是 √D", "缩放因子是 1/√D，不是 1/D。",
            lambda q, k: _unscaled(q, k) / q.shape[-1]),
    Mistake("乘了 √D 而不是除以 √D", "缩放是把分数变小：除以 √D。",
            lambda q, k: _unscaled(q, k) * math.sqrt(q.shape[-1])),
    Mistake("用序列长度代替了 head_dim 来缩放", "√D 里的 D 是最后一维 q.shape[-1]，不是 k.shape[-2]。",
            lambda q, k: _unscaled(q, k) / math.sqrt(k.shape[-2])),
    Mistake("分数矩阵转置了（算成了 K·Qᵀ）", "第 i 行应该是第 i 个 query 对所有 key 的分数：q @ k.transpose(-2, -1)。",
            lambda q, k: attention_scores(k, q)),
    Mistake("用了 k.T", "k.T 把所有维度倒过来：[B, H, T, D] 会变成 [D, T, H, B]，只有二维的 k 才碰巧对。"
            "只交换最后两维：k.transpose(-2, -1)（或 k.mT）。", error=r"\bk\.T\b"),
)

EXERCISE = Exercise("attention_scores", 2, attention_scores, cases, MISTAKES)
