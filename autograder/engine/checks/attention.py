"""Check of ``attention(q, k, v, mask=None)`` → ``(output [..., Tq, Dv], weights [..., Tq, Tk])``."""
import torch

from autograder.engine.checks.masked_softmax import uniform_when_blind
from autograder.engine.inputs.seeded import dtype_name, generator, randn, three_tokens
from autograder.engine.model import Exercise, Mistake, public
from course.protocols import Case
from solutions.attention_basics import attention, attention_scores, causal_mask, masked_softmax, padding_mask


def cases() -> list[Case]:
    queries, keys, values = three_tokens()
    gen = generator(5)
    pad = padding_mask(torch.tensor([[1, 1, 1, 1, 1, 1], [1, 1, 1, 1, 0, 0]]))
    left_pad = padding_mask(torch.tensor([[0, 1, 1, 1], [1, 1, 1, 1]]))

    def qkv(lead, q_len, k_len, dim, dim_v, dtype=torch.float32):
        return (randn(gen, *lead, q_len, dim, dtype=dtype), randn(gen, *lead, k_len, dim, dtype=dtype),
                randn(gen, *lead, k_len, dim_v, dtype=dtype))

    return public([
        Case("三个 token 的手算例子：「不错」的 query (0, 4)，没有 mask", (queries[2:], keys, values)),
        Case("三个 token 的手算例子：三个 query 一起算，带 causal_mask(3)", (queries, keys, values, causal_mask(3))),
        Case("随机 q/k/v [2, 3, 4, 8]，mask=None", qkv((2, 3), 4, 4, 8, 8)),
        Case("随机 q/k/v [2, 3, 5, 8]，带 causal_mask(5)", (*qkv((2, 3), 5, 5, 8, 8), causal_mask(5))),
        Case("q [2, 2, 3, 8]，k [2, 2, 6, 8]，v 的最后一维是 5（Dv ≠ D），带 causal_mask(3, 6)",
             (*qkv((2, 2), 3, 6, 8, 5), causal_mask(3, 6))),
        Case("解码一步：q [2, 2, 1, 8]，k/v [2, 2, 6, 8]，带 causal_mask(1, 6)",
             (*qkv((2, 2), 1, 6, 8, 8), causal_mask(1, 6))),
        Case("随机 q/k/v [2, 2, 6, 4]，padding_mask（第二句最后两个是 pad）& causal",
             (*qkv((2, 2), 6, 6, 4, 4), pad & causal_mask(6))),
        Case("随机 q/k/v [2, 1, 4, 4]，左侧 pad & causal：第一个 query 整行被遮住，输出应为 0",
             (*qkv((2, 1), 4, 4, 4, 4), left_pad & causal_mask(4))),
        Case("随机 q/k/v [3, 4, 8]，float64", qkv((), 3, 4, 8, 8, torch.float64)[:3]),
        Case(f"随机 q/k/v [2, 2, 5, 16]，带 causal_mask(5)，{dtype_name(torch.bfloat16)}",
             (*qkv((2, 2), 5, 5, 16, 16, torch.bfloat16), causal_mask(5))),
    ], 0, 1, 4, 7, 9)


def _with_weights(weights, v):
    return weights @ v, weights


MISTAKES = (
    Mistake("返回顺序反了", "返回 (output, weights)：先输出，后权重。",
            lambda q, k, v, m=None: attention(q, k, v, m)[::-1]),
    Mistake("没有用 mask", "把 mask 传给 masked_softmax。",
            lambda q, k, v, m=None: attention(q, k, v)),
    Mistake("忘了除以 √D", "分数要用 attention_scores（它会除以 √D）。",
            lambda q, k, v, m=None: _with_weights(masked_softmax(q @ k.transpose(-2, -1), m), v)),
    Mistake("又除了一次 √D（attention_scores 已经除过了）", "attention_scores 的结果已经除以 √D，"
            "attention 里直接把它交给 masked_softmax，不要再缩放一次。",
            lambda q, k, v, m=None: _with_weights(masked_softmax(attention_scores(q, k) / q.shape[-1] ** 0.5, m), v)),
    Mistake("softmax 做在了倒数第二维", "每个 query（每一行）的权重加起来是 1：softmax(dim=-1)。",
            lambda q, k, v, m=None: _with_weights(torch.softmax(
                attention_scores(q, k).masked_fill(~m if m is not None else torch.zeros((), dtype=torch.bool),
                                                   float("-inf")), dim=-2).nan_to_num(0.0), v)),
    Mistake("用的 masked_softmax 在整行被遮住时没有给出全 0", "attention 调用的是你自己的 masked_softmax："
            "整行都被遮住的 query（左侧 padding 的 pad 位置）应得到全 0 的权重和输出，它却给了均匀分布——"
            "多半是用 −1e9 之类的大负数代替了真正的遮盖。先让 masked_softmax 通过，这一题会跟着通过。",
            lambda q, k, v, m=None: _with_weights(uniform_when_blind(attention_scores(q, k), m), v)),
    Mistake("权重转置后才乘 V", "输出是 weights @ v：第 i 行权重混合所有 value。",
            lambda q, k, v, m=None: (masked_softmax(attention_scores(q, k), m).transpose(-2, -1) @ v,
                                     masked_softmax(attention_scores(q, k), m))),
)

EXERCISE = Exercise("attention", 3, attention, cases, MISTAKES, output_names=("output（第 1 个返回值）", "weights（第 2 个返回值）"),
                    uses=("attention_scores", "masked_softmax"))
