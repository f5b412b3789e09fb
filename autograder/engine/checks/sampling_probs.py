"""Check of ``sampling_probs(logits, temperature=1.0, top_k=None, top_p=None)``: the next-token distribution a
sampler draws from, ``[B, V]``: temperature, then top-k, then top-p (keeping the token that crosses p), each on
the renormalised result of the step before; removed tokens exactly 0.

No case has a tie at the top-k or top-p boundary (the contract leaves ties undefined), and every boundary
lies far enough from the nearest probability that rounding in the case's own dtype cannot move it
(``tests/checks/test_seeded_mistakes.py`` checks both)."""
import torch

from autograder.engine.combined import variants
from autograder.engine.inputs.seeded import dtype_name, generator, randn, shape
from autograder.engine.model import Exercise, Mistake, public
from course.output_rules import sampled_removed_are_zero
from course.protocols import Case
from solutions.real_model import sampling_probs

# Five tokens, three rows with distinct logits: small enough to work out by hand (row 0 gives
# 0.563, 0.207, 0.126, 0.076, 0.028).
HAND = torch.tensor([[2.0, 1.0, 0.5, 0.0, -1.0],
                     [0.0, 3.0, 1.0, 2.0, -2.0],
                     [1.0, -1.0, 0.0, 2.5, 0.3]])
VOCAB = 49_152  # SmolLM2's vocabulary


def _options(temperature=1.0, top_k=None, top_p=None) -> dict:
    return {"temperature": temperature, "top_k": top_k, "top_p": top_p}


def _said(options: dict) -> str:
    return "，".join(f"{name}={value}" for name, value in options.items())


def _case(what: str, logits: torch.Tensor, **options) -> Case:
    options = _options(**options)
    return Case(f"{what}：logits {shape(logits)}，{_said(options)}", (logits,), options)


def _spread(gen: torch.Generator, rows: int, vocab: int, step: float, dtype=torch.float32) -> torch.Tensor:
    """Logits ``[rows, vocab]`` that are a shuffled ladder ``0, step, 2·step, …`` per row: no two are close, so
    rounding in ``dtype`` keeps their order and no boundary falls on a tie."""
    ladder = torch.arange(vocab, dtype=torch.float64) * step - vocab * step / 2
    return torch.stack([ladder[torch.randperm(vocab, generator=gen)] for _ in range(rows)]).to(dtype)


def _large(gen: torch.Generator) -> torch.Tensor:
    """Logits of about ±1e4: a few tokens just below 1e4, the rest at −1e4 (exp of the raw logits overflows)."""
    logits = torch.full((2, 30), -1e4, dtype=torch.float64) - torch.rand(2, 30, generator=gen, dtype=torch.float64)
    logits[0, [3, 11, 17, 25]] = torch.tensor([1e4, 1e4 - 0.7, 1e4 - 1.9, 1e4 - 3.1], dtype=torch.float64)
    logits[1, [0, 8, 29]] = torch.tensor([1e4 - 0.4, 1e4, 1e4 - 2.6], dtype=torch.float64)
    return logits.float()


def cases() -> list[Case]:
    gen = generator(70)
    return public([
        _case("手算的例子（V=5，两行），只做 softmax", HAND[:2]),
        _case("手算的例子（V=5，三行），只留最可能的 2 个", HAND, top_k=2),
        _case("手算的例子，top-p：第 0 行前两个 token 加起来才越过 0.6，另外两行最可能的那个一个就越过了", HAND, top_p=0.6),
        _case("top_k=1：每行只剩最可能的那个（one-hot）", randn(gen, 3, 12, scale=2), top_k=1),
        _case("top_p 很小：每行只剩最可能的那个", randn(gen, 3, 12, scale=2), top_p=1e-3),
        _case("只有温度（放平分布）", randn(gen, 3, 20, scale=2), temperature=2.0),
        _case("温度 0.7，top_p=1.0：一个也不去掉", randn(gen, 2, 40, scale=2), temperature=0.7, top_p=1.0),
        _case("温度 0.5，再 top-k、top-p", _spread(gen, 4, 40, 0.1), temperature=0.5, top_k=8, top_p=0.7),
        _case(f"温度 1.5，再 top-k、top-p，{dtype_name(torch.float64)}", randn(gen, 3, 1000, dtype=torch.float64, scale=3),
              temperature=1.5, top_k=20, top_p=0.9),
        _case("logits 是 ±1e4 量级的大数", _large(gen), temperature=1.0, top_p=0.9),
        _case(f"温度 0.7，再 top-k、top-p，{dtype_name(torch.bfloat16)}", _spread(gen, 2, 64, 0.25, torch.bfloat16),
              temperature=0.7, top_k=10, top_p=0.73),
        _case(f"和 SmolLM2 一样大的词表 V={VOCAB:,}", randn(gen, 2, VOCAB, scale=3), temperature=0.8, top_k=50,
              top_p=0.95),
        _case("top_k 比词表还大：一个也不去掉", randn(gen, 2, 10, scale=2), top_k=50),
    ], 0, 1, 8, 9, 10, 12)


@variants
def _filtered(*, temperature_on="logits", k_shift=0, k_dim=-1, p_on="renormalised", crossing=True, keep_first=False,
              ranked=True, renormalise=True, top_p_first=False, softmax_dim=-1):
    """``sampling_probs`` with one thing done differently: the temperature on ``"logits"`` (right), ``"times"``
    (logits multiplied by it), ``"twice"`` (logits divided by its square) or ``"none"`` (no effect); top-k keeping
    ``k + k_shift`` tokens along ``k_dim``; top-p on the ``"renormalised"`` top-k result (right), or on the
    ``"untempered"`` distribution; ``crossing``: top-p keeps the token that crosses p; ``keep_first``: it keeps
    the most likely token whatever p is (the guard real samplers have); ``ranked``: top-p adds probabilities from
    the most likely down (else in vocabulary order); ``renormalise``: rows divided by their sum (at all;
    ``"top_p_only"``: only in top-p's step); ``top_p_first``: top-p before top-k."""
    def fn(logits, temperature=1.0, top_k=None, top_p=None):
        scaled = {"logits": logits / temperature, "times": logits * temperature, "twice": logits / temperature ** 2,
                  "none": logits}[temperature_on]
        probs = torch.softmax(scaled, dim=softmax_dim)
        chooses = torch.softmax(logits, dim=softmax_dim) if p_on == "untempered" else probs

        def normal(p, step="end"):
            wanted = renormalise is True or (renormalise == "top_p_only" and step == "end" and top_p is not None)
            return p / p.sum(dim=-1, keepdim=True) if wanted else p

        def top_k_of(p):
            if top_k is None or top_k + k_shift >= p.shape[-1]:
                return p
            kth = p.topk(top_k + k_shift, dim=k_dim).values.narrow(k_dim, top_k + k_shift - 1, 1)
            return normal(p.masked_fill(p < kth, 0.0), "top_k")

        def top_p_of(p):
            if top_p is None:
                return p
            ordered, order = p.sort(dim=-1, descending=True) if ranked else (p, torch.arange(p.shape[-1]).expand_as(p))
            total = ordered.cumsum(dim=-1)
            kept = (total - ordered < top_p) if crossing else (total < top_p)
            kept[..., 0] |= keep_first
            return p.masked_fill(~torch.zeros_like(p, dtype=torch.bool).scatter(-1, order, kept), 0.0)

        kept = top_k_of(top_p_of(chooses)) if top_p_first else top_p_of(top_k_of(chooses))
        return normal(probs.masked_fill(kept == 0, 0.0))
    return fn


_ORDER = "顺序是：先温度（softmax(logits / temperature)），再 top-k，再 top-p，每一步都在上一步重新归一化后的分布上做。"

MISTAKES = (
    Mistake("softmax 做在了 batch 那一维", "每一行（每个 batch 元素）是一个词表上的分布：softmax(…, dim=-1)。",
            _filtered(softmax_dim=0)),
    Mistake("温度没有起作用", "温度要除在 logits 上：softmax(logits / temperature)。除在 softmax 之后的概率上（probs / T），"
            "重新归一化时又被约掉了，等于没加。（probs ** (1 / T) 再归一化倒是对的：它正好等于 softmax(logits / T)。）",
            _filtered(temperature_on="none")),
    Mistake("温度乘在了 logits 上", "是除以温度：logits / temperature。温度大于 1 让分布更平，小于 1 让它更尖。",
            _filtered(temperature_on="times")),
    Mistake("温度除了两次（logits / T²）", "温度只除一次：softmax(logits / temperature)。logits 在别处（比如取出最后一个位置时）"
            "已经除过一次温度的话，这里就不要再除。", _filtered(temperature_on="twice")),
    Mistake("top-k 留下了 k + 1 个 token", "只留概率最大的 top_k 个：第 top_k 大的概率是 topk(top_k).values[..., -1]，"
            "比它小的都去掉。", _filtered(k_shift=1)),
    Mistake("top-k 少留了一个 token", "要留 top_k 个，不是 top_k − 1 个：第 top_k 大的那个本身要留下（比它小的才去掉，"
            "用 <，不是 <=）。", _filtered(k_shift=-1)),
    Mistake("top-k 做在了 batch 那一维", "每一行各自在词表里挑最大的 top_k 个：topk(top_k, dim=-1)。",
            _filtered(k_dim=0)),
    Mistake("top-p 丢掉了越过 p 的那个 token", "要留下累计概率达到 p 的最小集合，包括让累计概率越过 p 的那个 token："
            "看它前面的 token 加起来是否还小于 p（cumsum − 自己 < p），不是包括自己的 cumsum < p。"
            "否则最可能的 token 一个就超过 p 时，整行都被去掉了。", _filtered(crossing=False)),
    Mistake("top-p 丢掉了越过 p 的那个 token（只保底留下了最可能的一个）", "要留下累计概率达到 p 的最小集合，包括让累计概率"
            "越过 p 的那个 token：判断条件是它前面的 token 加起来是否还小于 p（cumsum − 自己 < p）。这样最可能的 token 自然"
            "总会留下，不用另外保底；用包括自己的 cumsum < p 再保底留一个，前几个 token 加起来才越过 p 时还是少留了一个。",
            _filtered(crossing=False, keep_first=True)),
    Mistake("top-p 累加前没有按概率从大到小排序", "nucleus 是最可能的那些 token：先 sort(descending=True)，在排好的顺序上 "
            "cumsum，再用 scatter 放回原来的位置。", _filtered(ranked=False)),
    Mistake("top-p 用的是 top-k 之前的概率，或没有先重新归一化", "top-k 去掉一些 token 之后，先把剩下的重新归一化（加起来是 1），"
            "再在它上面做 top-p。" + _ORDER, _filtered(top_p_first=True)),
    Mistake("top-p 做在了加温度之前", "温度改变分布的形状：同一个 p，在放平的分布里要圈进更多 token。" + _ORDER,
            _filtered(p_on="untempered")),
    Mistake("没有重新归一化", "去掉一些 token 之后，剩下的概率加起来不到 1：除以每行的和（probs / probs.sum(-1, keepdim=True)），"
            "top-p 也要在归一化后的分布上做。", _filtered(renormalise=False)),
    Mistake("只在 top-p 里重新归一化了（只用 top-k 时概率加起来不到 1）", "top-k 去掉一些 token 之后就要重新归一化：只给 top_k "
            "时，留下的概率也要加起来是 1；给了 top_p 时，top-p 也要在归一化后的分布上累加。",
            _filtered(renormalise="top_p_only")),
)

OUTPUT_NAMES = ("probs [B, V]",)

EXERCISE = Exercise("sampling_probs", 3, sampling_probs, cases, MISTAKES, verify=sampled_removed_are_zero)
