"""Check of ``causal_mask(q_len, k_len=None)``: bool ``[Tq, Tk]``, query i at position ``k_len - q_len + i``."""
import torch

from autograder.engine.exercise import Exercise, Mistake
from autograder.engine.protocols import Case
from solutions.attention_basics import causal_mask


def cases() -> list[Case]:
    found = [Case(f"causal_mask({q})", (q,)) for q in (3, 1, 5)]
    found += [Case(f"causal_mask({q}, {k})：k_len > q_len，前面已经有 {k - q} 个缓存的位置", (q, k))
              for q, k in ((1, 6), (3, 7), (2, 9))]
    found.append(Case("causal_mask(4, 4)", (4, 4)))
    return found


def _lower(q_len, k_len=None, diagonal=0):
    """A lower-triangular mask anchored at the top-left corner."""
    return torch.ones(q_len, q_len if k_len is None else k_len, dtype=torch.bool).tril(diagonal)


def _offset(q_len, k_len=None):
    return (q_len if k_len is None else k_len) - q_len


MISTAKES = (
    Mistake("掩码反了：True 标在了不能看的位置", "约定是 True = 可以看（和 scaled_dot_product_attention 一样）。",
            lambda q, k=None: ~causal_mask(q, k)),
    Mistake("上下三角弄反了：query 看到的是未来而不是过去", "第 i 行应该只在 j ≤ i 的列上为 True（下三角，tril）。",
            lambda q, k=None: torch.ones(q, q if k is None else k, dtype=torch.bool).triu(_offset(q, k))),
    Mistake("掩码转置了：行应该是 query，列是 key", "返回 [Tq, Tk]：第 i 行第 j 列表示 query i 能否看 key j。",
            lambda q, k=None: causal_mask(q, k).mT),
    Mistake("k_len > q_len 时没有偏移", "query i 的绝对位置是 k_len − q_len + i：解码时唯一的新 query 要能看到所有 key。",
            _lower),
    Mistake("对角线被遮住了：token 看不到自己", "每个 token 可以看自己：j ≤ 位置，包括等号。",
            lambda q, k=None: _lower(q, k, _offset(q, k) - 1)),
    Mistake("返回了 0/1 的浮点数而不是 bool", "用 torch.bool：True = 可以看。",
            lambda q, k=None: causal_mask(q, k).float()),
    Mistake("返回了加性掩码（0 / −inf）而不是 bool", "这个练习要的是 bool 掩码；−inf 留到 masked_softmax 里用。",
            lambda q, k=None: torch.zeros(causal_mask(q, k).shape).masked_fill(~causal_mask(q, k), float("-inf"))),
)

EXERCISE = Exercise("causal_mask", 2, causal_mask, cases, MISTAKES)
