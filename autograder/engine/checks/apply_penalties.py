"""Check of ``apply_penalties(logits, generated, repetition_penalty=1.0, frequency_penalty=0.0,
presence_penalty=0.0)``: ``logits [B, V]`` lowered for the tokens in ``generated [B, n]``, row by row: the
repetition penalty first (divide a positive logit, multiply a negative one, once per token), then minus the
frequency penalty times the count and minus the presence penalty once.

The cases put seen tokens on both sides of zero, repeat some tokens three times, give each row of a batch its own
tokens, and have small positive logits that the frequency penalty pushes below zero (where the order of the two
steps decides the result)."""
import torch

from autograder.engine.combined import variants
from autograder.engine.inputs.seeded import dtype_name, generator, randn, shape
from autograder.engine.model import Exercise, Mistake, public
from course.protocols import Case
from solutions.real_model import apply_penalties

# Six tokens, one row; tokens 2 (twice), 4 and 1 were generated: small enough to work out by hand.
HAND_LOGITS = torch.tensor([[1.5, -0.5, 2.0, 0.3, -1.2, 0.8]])
HAND_IDS = torch.tensor([[2, 2, 4, 1]])
HAND_SEEN = "（logits [1.5, −0.5, 2.0, 0.3, −1.2, 0.8]；token 2 出现了两次，1 和 4 各一次）"
VOCAB = 49_152  # SmolLM2's vocabulary


def _said(options: dict) -> str:
    return "，".join(f"{name}={value}" for name, value in options.items()) or "参数都用默认值"


def _case(what: str, logits: torch.Tensor, ids: torch.Tensor, **options) -> Case:
    return Case(f"{what}：logits {shape(logits)}，generated {shape(ids)}，{_said(options)}", (logits, ids), options)


def _ids(gen: torch.Generator, rows: int, length: int, vocab: int) -> torch.Tensor:
    return torch.randint(0, vocab, (rows, length), generator=gen)


def _crossing(gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """Small positive logits for tokens seen three times: the frequency penalty takes them below zero, so
    multiplying by the repetition penalty after subtracting differs from dividing before."""
    logits = randn(gen, 2, 16, scale=2.0)
    ids = torch.tensor([[3, 3, 3, 7, 9, 9], [0, 5, 5, 5, 12, 3]])
    logits[0, 3], logits[0, 9], logits[1, 5], logits[1, 12] = 0.4, 0.2, 0.3, 1.0
    return logits, ids


def cases() -> list[Case]:
    gen = generator(88)
    repeated = _ids(gen, 1, 12, 8)  # eight tokens, twelve draws: several repeat
    crossing = _crossing(gen)
    return public([
        _case(f"手算的例子{HAND_SEEN}，只有 repetition penalty", HAND_LOGITS, HAND_IDS, repetition_penalty=1.3),
        _case(f"手算的例子{HAND_SEEN}，只有 frequency penalty", HAND_LOGITS, HAND_IDS, frequency_penalty=0.5),
        _case(f"手算的例子{HAND_SEEN}，只有 presence penalty", HAND_LOGITS, HAND_IDS, presence_penalty=0.2),
        _case(f"手算的例子{HAND_SEEN}，三种一起", HAND_LOGITS, HAND_IDS, repetition_penalty=1.3, frequency_penalty=0.5,
              presence_penalty=0.2),
        _case("参数都用默认值：什么都不变", randn(gen, 2, 10, scale=2.0), _ids(gen, 2, 5, 10)),
        _case("还没有生成任何 token（n = 0）", randn(gen, 2, 10, scale=2.0), torch.zeros(2, 0, dtype=torch.int64),
              repetition_penalty=1.5, frequency_penalty=0.3, presence_penalty=0.4),
        _case("一个 token 出现了好几次", randn(gen, 1, 8, scale=2.0), repeated, repetition_penalty=1.2,
              frequency_penalty=0.4, presence_penalty=0.1),
        _case("一批三行，每行生成过的 token 各不相同", randn(gen, 3, 12, scale=2.0),
              torch.tensor([[0, 1, 2, 2], [5, 6, 6, 6], [9, 10, 11, 0]]), repetition_penalty=1.4, frequency_penalty=0.3),
        _case("小的正 logit 被 frequency penalty 减成负数", *crossing, repetition_penalty=2.0, frequency_penalty=0.5),
        _case("repetition_penalty 小于 1（鼓励重复）", randn(gen, 2, 10, scale=2.0), _ids(gen, 2, 6, 10),
              repetition_penalty=0.8),
        _case(f"{dtype_name(torch.float64)}", randn(gen, 2, 30, dtype=torch.float64, scale=3.0), _ids(gen, 2, 20, 30),
              repetition_penalty=1.1, frequency_penalty=0.2, presence_penalty=0.6),
        _case(f"{dtype_name(torch.bfloat16)}", randn(gen, 2, 30, dtype=torch.bfloat16, scale=3.0), _ids(gen, 2, 20, 30),
              repetition_penalty=1.3, frequency_penalty=0.25, presence_penalty=0.5),
        _case(f"和 SmolLM2 一样大的词表 V={VOCAB:,}，生成过 200 个 token", randn(gen, 2, VOCAB, scale=3.0),
              _ids(gen, 2, 200, 300), repetition_penalty=1.2, frequency_penalty=0.1, presence_penalty=0.3),
    ], 0, 10, 11)


@variants
def _penalized(*, negative="multiply", per_occurrence=False, frequency="count", presence="once", sign=-1,
               rows="own", where="seen", repetition_first=True, repetition_on="seen", presence_on="seen"):
    """``apply_penalties`` with one thing done differently: a seen negative logit ``"multiply"``-ed by r (right),
    ``"divide"``-d like a positive one, or the two swapped (``"swapped"``: positive multiplied, negative divided);
    ``per_occurrence``: the repetition penalty applied once per appearance (r to the power of the count);
    ``frequency`` times the ``"count"`` (right) or times ``"once"`` (0/1); ``presence`` ``"once"`` (right) or times the
    ``"count"``; ``sign`` -1 subtracts (right), +1 adds; ``rows`` ``"own"`` (right) or ``"all"`` (every row counts
    the whole batch's tokens); ``where`` the tokens penalised, ``"seen"`` (right) or ``"unseen"``;
    ``repetition_first`` False subtracts before the repetition penalty; ``repetition_on`` and ``presence_on``
    ``"all"``: that penalty applied to every token, seen or not."""
    def fn(logits, generated, repetition_penalty=1.0, frequency_penalty=0.0, presence_penalty=0.0):
        ids = generated if rows == "own" else generated.reshape(1, -1).expand(logits.shape[0], -1)
        counts = torch.zeros(logits.shape, dtype=torch.int64).scatter_add_(-1, ids, torch.ones_like(ids))
        seen = counts > 0 if where == "seen" else counts == 0
        times = counts.clamp(min=1) if per_occurrence else 1
        r = repetition_penalty ** times
        repeated = seen if repetition_on == "seen" else torch.ones_like(seen)

        def repeat(values):
            down = {"multiply": values * r, "divide": values / r, "swapped": values / r}[negative]
            up = values * r if negative == "swapped" else values / r
            return torch.where(repeated, torch.where(values > 0, up, down), values)

        frequency_times = counts if frequency == "count" else seen.to(torch.int64)
        presence_times = counts if presence == "count" else seen.to(torch.int64)
        if presence_on == "all":
            presence_times = torch.ones_like(presence_times)
        shift = sign * (frequency_penalty * frequency_times.to(logits.dtype) + presence_penalty * presence_times.to(logits.dtype))
        if where == "unseen":
            shift = shift * (counts == 0)
        return repeat(logits) + shift if repetition_first else repeat(logits + shift)
    return fn


_HF = ("repetition penalty 的规则（Hugging Face 的实现）：出现过的 token，logit 为正就除以 r，为负就乘以 r——"
       "两种情况都让它变小。")

MISTAKES = (
    Mistake("负的 logit 也除以了 repetition_penalty（反而变大了）", "除以 r 只对正的 logit 是惩罚；负的 logit 除以 r 会更接近 0，"
            "概率反而升高。" + _HF + "CTRL 论文里的公式对所有 logit 都除以 r，正是这个毛病。", _penalized(negative="divide")),
    Mistake("正负弄反了：正的 logit 乘以了 repetition_penalty、负的除以了它", _HF, _penalized(negative="swapped")),
    Mistake("repetition penalty 按出现次数叠加了（r 的 count 次方）", "repetition penalty 只看出现过没有：出现过的 token 除以"
            "（或乘以）r 一次，不管出现了几次。按次数加罚是 frequency penalty 的事。", _penalized(per_occurrence=True)),
    Mistake("frequency penalty 没有按出现次数算（每个 token 只减了一次）", "frequency penalty 减的是 frequency_penalty × 出现次数："
            "次数要用 scatter_add_（或 bincount）累加，scatter_ 只会写 1。只减一次的是 presence penalty。",
            _penalized(frequency="once")),
    Mistake("presence penalty 按出现次数乘了", "presence penalty 只看出现过没有：出现过就减一次 presence_penalty，"
            "和次数无关。按次数减的是 frequency penalty。", _penalized(presence="count")),
    Mistake("frequency / presence penalty 加在了 logits 上（应该减）", "惩罚是让出现过的 token 更不容易再被选中："
            "logits − frequency_penalty × 次数 − presence_penalty × [出现过]。", _penalized(sign=1)),
    Mistake("整个 batch 的 token 一起计数了", "每一行是一条独立的生成：第 b 行只看 generated[b] 里的 token。"
            "在 dim=-1 上按行 scatter_add_，不要把整批摊平了一起数。", _penalized(rows="all")),
    Mistake("惩罚加在了没出现过的 token 上", "只有 generated 里出现过的 token 才受罚，其余 token 的 logit 原样返回。",
            _penalized(where="unseen")),
    Mistake("repetition penalty 用在了所有 token 上，不只是出现过的", "repetition penalty 只改出现过的 token：先用计数得到"
            "「出现过」的掩码（counts > 0），torch.where(出现过, 除以或乘以 r 的结果, 原来的 logit)。",
            _penalized(repetition_on="all")),
    Mistake("presence penalty 从所有 token 上都减了", "presence penalty 只减在出现过的 token 上：减的是 presence_penalty × "
            "[出现过]（掩码转成 logits 的 dtype），不是整行都减。整行减同一个数，softmax 之后什么都没变，等于没加。",
            _penalized(presence_on="all")),
    Mistake("先减了 frequency / presence penalty，再做 repetition penalty", "顺序是：先 repetition penalty（按 logit 的正负"
            "除以或乘以 r），再减 frequency 和 presence penalty。先减的话，减掉的量也跟着被除以（或乘以）r；小的正 logit "
            "还会被减成负数，接着被乘以 r 而不是除以 r。",
            _penalized(repetition_first=False)),
)

OUTPUT_NAMES = ("惩罚后的 logits [B, V]",)

EXERCISE = Exercise("apply_penalties", 2, apply_penalties, cases, MISTAKES)
