"""Check of ``linear_attention(q, k, v)``: causal linear attention in its parallel form,
``o_t = Σ_{j≤t} (q_t·k_j) v_j``, on the hand example, seeded shapes (T = 1, Dk ≠ Dv) and three dtypes."""
import torch

from autograder.engine.combined import variants
from autograder.engine.inputs import linear_attention as inputs
from autograder.engine.inputs.seeded import generator, three_tokens
from autograder.engine.model import Exercise, Mistake, public
from course.protocols import Case
from solutions.gated_deltanet import linear_attention


def hand_case() -> Case:
    """今天 / 天气 / 不错 of 01 as one head: ``[1, 1, 3, 2]`` each."""
    q, k, v = three_tokens()
    return Case("小例子：「今天 / 天气 / 不错」的 q、k、v（01 的手算例子），[1, 1, 3, 2]", (q[None, None], k[None, None], v[None, None]))


def cases() -> list[Case]:
    gen = generator(80)
    found = [hand_case()]
    for shape, dtype in [((2, 3, 6, 4, 4), torch.float32), ((1, 2, 7, 4, 6), torch.float32),
                         ((2, 2, 1, 8, 3), torch.float32), ((1, 2, 9, 6, 5), torch.float64),
                         ((2, 2, 8, 8, 8), torch.bfloat16)]:
        q, k, v = inputs.qkv(gen, *shape, dtype=dtype)
        found.append(Case(inputs.describe(q, v), (q, k, v)))
    return public(found, 0, 2, 3, 5)


@variants
def _wrong(*, mask="causal", scaled=False, softmax=False, normalised=False, feature_map=False, swapped=False):
    """Linear attention written out, right by default, with one thing changed: ``mask`` "none" (no mask) or
    "strict" (j < t only); ``scaled`` divides the scores by √Dk; ``softmax`` takes a softmax over the visible
    scores; ``normalised`` divides by the sum of the weights; ``feature_map`` puts Katharopoulos et al.'s
    φ(x) = elu(x) + 1 on q and k; ``swapped`` scores k @ qᵀ."""
    def wrong(q, k, v):
        if feature_map:
            q, k = torch.nn.functional.elu(q) + 1, torch.nn.functional.elu(k) + 1
        q, k = (k, q) if swapped else (q, k)
        ones = torch.ones(q.shape[-2], q.shape[-2], dtype=torch.bool)
        keep = {"causal": ones.tril(), "none": ones, "strict": ones.tril(-1)}[mask]
        scores = q @ k.transpose(-2, -1) * (q.shape[-1] ** -0.5 if scaled else 1.0)
        if softmax:
            return torch.softmax(scores.masked_fill(~keep, float("-inf")), dim=-1) @ v
        weights = scores.masked_fill(~keep, 0.0)
        return weights @ v / (weights.sum(-1, keepdim=True) if normalised else 1.0)
    return wrong


MISTAKES = (
    Mistake("没有因果掩码", "位置 t 只能用 j ≤ t 的 key 和 value：分数矩阵乘 v 之前，把上三角（j > t）置 0。",
            _wrong(mask="none")),
    Mistake("掩码把对角线也去掉了（只用了 j < t）", "o_t 的求和包括 j = t 自己：保留下三角和对角线（tril()，不是 tril(-1)）。",
            _wrong(mask="strict")),
    Mistake("用了 softmax", "线性注意力去掉了 softmax：直接用 q_t·k_j 当权重，被遮住的位置置 0，不是 −inf。", _wrong(softmax=True)),
    Mistake("分数除以了 √Dk", "这里的函数照原样用 q：1/√Dk 由 Gated DeltaNet 层在外面乘到 q 上。", _wrong(scaled=True)),
    Mistake("除以了权重之和（归一化的线性注意力）", "这门课的线性注意力不归一化：o_t = Σ_{j≤t} (q_t·k_j) v_j，"
            "不除以 Σ_j q_t·k_j。", _wrong(normalised=True)),
    Mistake("用了 Katharopoulos 等人的特征映射 φ(x) = elu(x) + 1", "那篇论文用 φ(q)·φ(k) 代替 exp(q·k)，还要除以归一化项；"
            "这门课（和 DeltaNet、Gated DeltaNet 一样）直接用 q_t·k_j，不加特征映射，也不归一化。", _wrong(feature_map=True)),
    Mistake("分数算成了 k @ qᵀ（q、k 的位置反了）", "位置 t 用自己的 query 去读前面的 key：分数 [t, j] = q_t·k_j，即 q @ kᵀ，"
            "再只留下 j ≤ t。", _wrong(swapped=True)),
)

EXERCISE = Exercise("linear_attention", 2, linear_attention, cases, MISTAKES)
