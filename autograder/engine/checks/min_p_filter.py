"""Check of ``min_p_filter(probs, min_p)``: min-p sampling's filter on ``probs [B, V]``: keep the tokens whose
probability is at least ``min_p`` times the row's largest, renormalise, removed tokens exactly 0.

The rows of a case differ in how sure they are (one peaked, one flat), so that a threshold taken from the whole
batch, or an absolute one, keeps a different set; no probability lies on a boundary but where a case says so
(``min_p = 1`` keeps the top token, which is its own threshold; one case puts two tokens exactly on it: halving is
exact in every dtype)."""
import torch

from autograder.engine.combined import variants
from autograder.engine.inputs.seeded import dtype_name, generator, randn, shape
from autograder.engine.model import Exercise, Mistake, public
from course.output_rules import min_p_removed_are_zero
from course.protocols import Case
from solutions.real_model import min_p_filter

# Two rows of five: a sure one (0.6 at the top) and an unsure one (0.3): min_p = 0.5 keeps 1 and 3 tokens.
HAND = torch.tensor([[0.6, 0.2, 0.1, 0.06, 0.04],
                     [0.25, 0.3, 0.2, 0.14, 0.11]])
VOCAB = 49_152  # SmolLM2's vocabulary


def _case(what: str, probs: torch.Tensor, min_p: float) -> Case:
    return Case(f"{what}：probs {shape(probs)}，min_p={min_p}", (probs,), {"min_p": min_p})


def _softmax(gen: torch.Generator, rows: int, vocab: int, scales: list[float], dtype=torch.float32) -> torch.Tensor:
    """A distribution per row, from logits of its own scale (a large scale gives a peaked row, a small one a flat
    row), with no probability within 2 % of min_p times the top (``cases`` picks min_p away from them)."""
    logits = torch.stack([randn(gen, vocab, dtype=torch.float64, scale=s) for s in scales[:rows]])
    return torch.softmax(logits, dim=-1).to(dtype)


def _clear(probs: torch.Tensor, min_p: float) -> torch.Tensor:
    """``probs`` with every probability near the row's threshold moved 3 % away from it, renormalised: no case
    leaves rounding to decide whether a token is kept."""
    top = probs.amax(dim=-1, keepdim=True)
    ratio = probs / top
    nudged = torch.where((ratio - min_p).abs() < 0.03 * min_p, torch.where(ratio < min_p, ratio * 0.95, ratio * 1.05), ratio)
    out = nudged * top
    return (out / out.sum(dim=-1, keepdim=True)).to(probs.dtype)


def cases() -> list[Case]:
    gen = generator(89)
    mixed = _clear(_softmax(gen, 3, 40, [4.0, 1.0, 2.5]), 0.1)
    return public([
        _case("手算的例子（两行各 5 个 token，第 0 行最大 0.6，第 1 行最大 0.3）", HAND, 0.5),
        _case("手算的例子，min_p 小一些", HAND, 0.2),
        _case("min_p = 0：一个也不去掉", _softmax(gen, 2, 12, [2.0, 1.0]), 0.0),
        _case("min_p = 1：每行只剩最可能的那个", _softmax(gen, 3, 12, [3.0, 1.0, 0.5]), 1.0),
        _case("一批三行：一行很确定、一行很平、一行居中", mixed, 0.1),
        _case("一行有两个 token 刚好和最大的一样大", torch.tensor([[0.3, 0.3, 0.2, 0.1, 0.1]]), 0.5),
        _case("门槛正好落在两个 token 上（0.5 × 0.4 = 0.2）：等于门槛的要留下", torch.tensor([[0.4, 0.2, 0.2, 0.1, 0.1]]), 0.5),
        _case(f"{dtype_name(torch.float64)}", _clear(_softmax(gen, 2, 100, [3.0, 1.5], torch.float64), 0.05), 0.05),
        _case(f"{dtype_name(torch.bfloat16)}", _clear(_softmax(gen, 2, 64, [3.0, 1.0]), 0.2).to(torch.bfloat16), 0.2),
        _case(f"和 SmolLM2 一样大的词表 V={VOCAB:,}", _clear(_softmax(gen, 2, VOCAB, [3.0, 1.5]), 0.05), 0.05),
    ], 0, 3, 7, 8)


@variants
def _filtered(*, relative=True, top_over="row", strict=False, renormalise=True, reference="max", sorted_out=False):
    """``min_p_filter`` with one thing done differently: ``relative`` False compares each probability with
    ``min_p`` itself; ``top_over`` ``"row"`` (right), ``"column"`` (each token's largest over the batch, dim=0) or ``"batch"`` (the
    largest of the whole batch);
    ``strict``: keeps only probabilities strictly above the threshold; ``renormalise`` False leaves the kept
    probabilities as they were; ``reference`` ``"max"`` (right) or ``"sum"`` (min_p times the row's sum, 1);
    ``sorted_out``: the row returned sorted from most to least likely (never put back in the vocabulary's order)."""
    def fn(probs, min_p):
        top = {"row": probs.amax(dim=-1, keepdim=True), "column": probs.amax(dim=0, keepdim=True),
               "batch": probs.amax()}[top_over]
        if reference == "sum":
            top = probs.sum(dim=-1, keepdim=True)
        threshold = min_p * top if relative else torch.full_like(top, min_p)
        drop = probs <= threshold if strict else probs < threshold
        kept = probs.masked_fill(drop, 0.0)
        if sorted_out:
            kept = kept.sort(dim=-1, descending=True).values
        return kept / kept.sum(dim=-1, keepdim=True) if renormalise else kept
    return fn


MISTAKES = (
    Mistake("门槛是 min_p 本身，没有乘这一行最大的概率", "min-p 的门槛随这一行的把握变化：p ≥ min_p × max(p)。模型很确定时"
            "门槛高、留下的少；很犹豫时门槛低、留下的多。直接拿 min_p 当门槛，就和 top-p 一样不看最大的那个了。",
            _filtered(relative=False)),
    Mistake("最大概率取的是整个 batch 的，不是每一行自己的", "每一行（每条生成）有自己的分布：max 沿 dim=-1、keepdim=True 取，"
            "不要对整个张量取 max。", _filtered(top_over="batch")),
    Mistake("最大概率沿 dim=0（batch 那一维）取了", "要的是每一行在词表上的最大值：max 沿 dim=-1、keepdim=True 取，"
            "得到 [B, 1]。沿 dim=0 取得到的是每个 token 在各行里的最大值。", _filtered(top_over="column")),
    Mistake("门槛用了 >（严格大于），等于门槛的 token 被去掉了", "留下的是 p ≥ min_p × max(p) 的 token：min_p = 1 时最可能的那个"
            "正好等于门槛，必须留下，否则整行都被去掉了。", _filtered(strict=True)),
    Mistake("没有重新归一化", "去掉一些 token 之后，剩下的概率加起来不到 1：除以每行的和（kept / kept.sum(-1, keepdim=True)）。",
            _filtered(renormalise=False)),
    Mistake("门槛乘的是这一行的和（也就是 1），不是最大的概率", "门槛是 min_p × max(p)：用 amax（或 max(...).values），"
            "不是 sum。", _filtered(reference="sum")),
    Mistake("过滤后的概率还是排好序的顺序，没有放回词表里原来的位置", "min-p 不用排序：直接拿每个 token 的概率和门槛比，"
            "位置不动。排了序的话（像 top-p 那样），最后要用 scatter 按原来的下标放回去，第 j 个位置才是 token j 的概率。",
            _filtered(sorted_out=True)),
)

OUTPUT_NAMES = ("probs [B, V]",)

EXERCISE = Exercise("min_p_filter", 2, min_p_filter, cases, MISTAKES, verify=min_p_removed_are_zero)
