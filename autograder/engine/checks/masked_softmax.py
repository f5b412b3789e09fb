"""Check of ``masked_softmax(scores, mask=None)``: softmax over the last dim, masked entries exactly 0,
finite for scores of ±1e4, all zeros (never NaN) on a fully masked row."""
import torch

from autograder.engine.inputs.seeded import dtype_name, generator, randn, shape, three_tokens
from autograder.engine.model import Exercise, Mistake, public
from course.output_rules import masked_are_zero
from course.protocols import Case
from solutions.attention_basics import attention_scores, causal_mask, masked_softmax, padding_mask


def cases() -> list[Case]:
    queries, keys, _ = three_tokens()
    gen = generator(4)
    left_pad = padding_mask(torch.tensor([[1, 1, 1, 1, 1], [0, 0, 1, 1, 1]]))
    some_rows_blind = torch.rand(2, 3, 4, 6, generator=gen) > 0.5
    some_rows_blind[:, :, 1] = False
    big = randn(gen, 2, 2, 4, 5, scale=1e4)
    return public([
        Case("三个 token 的手算例子：「不错」的分数 [0, 2.83, 1.41]，没有 mask", (attention_scores(queries[2:], keys),)),
        Case("随机分数 [2, 3, 4, 6]，mask=None", (randn(gen, 2, 3, 4, 6, scale=3),)),
        Case("随机分数 [2, 3, 4, 4] + causal_mask(4)（[4, 4] 广播到每个 batch 和 head）",
             (randn(gen, 2, 3, 4, 4, scale=3), causal_mask(4))),
        Case("随机分数 [1, 2, 3, 7] + causal_mask(3, 7)，float64",
             (randn(gen, 1, 2, 3, 7, dtype=torch.float64, scale=3), causal_mask(3, 7))),
        Case("随机分数 [2, 2, 5, 5] + padding_mask（第二句左侧有两个 pad）& causal：有的行整行都被遮住",
             (randn(gen, 2, 2, 5, 5, scale=3), left_pad & causal_mask(5))),
        Case(f"随机分数 [2, 3, 4, 6] + 随机 mask {shape(some_rows_blind)}，第 2 行整行都被遮住",
             (randn(gen, 2, 3, 4, 6, scale=3), some_rows_blind)),
        Case("分数是 ±1e4 量级的大数 [2, 2, 4, 5] + causal_mask(4, 5)", (big, causal_mask(4, 5))),
        Case(f"随机分数 [2, 2, 5, 5] + padding & causal，{dtype_name(torch.bfloat16)}",
             (randn(gen, 2, 2, 5, 5, dtype=torch.bfloat16, scale=3), left_pad & causal_mask(5))),
    ], 0, 2, 4, 6, 7)


def uniform_when_blind(scores, mask=None):
    """Softmax with a big negative fill instead of a real mask: a fully masked row comes out uniform."""
    if mask is None:
        return torch.softmax(scores, dim=-1)
    return torch.softmax(scores.masked_fill(~mask, torch.finfo(scores.dtype).min), dim=-1)


def _overflowed(case: Case, got) -> bool:
    """Not finite on large scores, where exp() of a raw score overflows."""
    scores = case.args[0]
    return bool(scores.abs().max() > 100 and isinstance(got, torch.Tensor) and not got.isfinite().all())


MISTAKES = (
    Mistake("softmax 做在了倒数第二维", "每个 query（每一行）的权重加起来是 1：softmax(dim=-1)。",
            lambda s, m=None: torch.softmax(s if m is None else s.masked_fill(~m, float("-inf")), dim=-2).nan_to_num(0.0)),
    Mistake("整行都被遮住时得到了 NaN", "一整行都是 −inf 时 softmax 是 0/0 = NaN：这样的行要直接输出全 0。",
            lambda s, m=None: torch.softmax(s if m is None else s.masked_fill(~m, float("-inf")), dim=-1)),
    Mistake("用一个很大的负数代替了真正的掩码", "填 −1e9 这样的数，整行都被遮住时会得到均匀分布而不是全 0；"
            "被遮住的位置也要正好是 0。", uniform_when_blind),
    Mistake("在 softmax 之后才用 mask", "先把不能看的位置排除，再做 softmax；之后再清零会让每行加起来不到 1。",
            lambda s, m=None: torch.softmax(s, dim=-1) if m is None else torch.softmax(s, dim=-1).masked_fill(~m, 0.0)),
    Mistake("掩码用反了：遮住了 True 的位置", "约定 True = 可以看，要遮住的是 ~mask。",
            lambda s, m=None: masked_softmax(s, None if m is None else ~m)),
    Mistake("没有用 mask", "mask 不是 None 时，把 mask 为 False 的位置排除在 softmax 之外。",
            lambda s, m=None: torch.softmax(s, dim=-1)),
    Mistake("exp 溢出了：没有先减去每行的最大值", "直接 exp(1e4) 会变成 inf；用 torch.softmax，或先减去每行最大值。",
            matches=_overflowed),
)

EXERCISE = Exercise("masked_softmax", 3, masked_softmax, cases, MISTAKES, verify=masked_are_zero)
