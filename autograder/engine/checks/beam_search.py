"""Check of ``beam_search(next_log_probs, input_ids, num_beams, max_new_tokens)`` → ``(tokens [num_beams,
max_new_tokens], scores [num_beams])``, best first, on toy language models (``protocols.call_beam``: a table of the
next token's log-probabilities after each pair of tokens).

No two candidates of a case lie within ``MARGIN`` of each other (``BF16_MARGIN`` in bfloat16, whose sums round by a
few hundredths) where the beam keeps some and drops others, so that rounding never decides which beam survives: the
seeded tables are drawn again until that holds."""
import itertools

import torch

from autograder.engine.combined import variants
from autograder.engine.inputs.seeded import dtype_name, generator
from autograder.engine.model import Exercise, Mistake, public
from course.protocols import Case, call_beam
from solutions.real_model import beam_search

OUTPUT_NAMES = ("tokens", "scores")
MARGIN = 1e-3
BF16_MARGIN = 0.25


def hand_table() -> torch.Tensor:
    """Four tokens; what follows depends on the last token only. After the prompt's last token 0, token 1 is the
    likelier (0.5 against 0.4), but after 1 the best is 0.4 while after 2 it is 0.9: greedy takes 1 then 0.4
    (0.20 in all), a beam of two keeps 2 and finds 2 then 0.9 (0.36). The logarithms are taken in float64: a
    CPU's float32 ``log`` may round the last bit its own way, and the case must be the same on every machine."""
    # [previous, last, next]: the previous token does not matter
    rows = torch.tensor([[0.05, 0.5, 0.4, 0.05],    # after 0
                         [0.3, 0.25, 0.05, 0.4],    # after 1
                         [0.02, 0.03, 0.05, 0.9],   # after 2
                         [0.25, 0.25, 0.3, 0.2]])   # after 3
    return rows.double().log().float().expand(4, 4, 4).clone()


def _kept_apart(table: torch.Tensor, prompt: torch.Tensor, num_beams: int, steps: int, margin: float) -> bool:
    """Whether, at every step of the reference's search, the candidates kept and those dropped are ``margin`` apart."""
    beams, scores = prompt.reshape(1, -1), None
    for _ in range(steps):
        log_probs = table.double()[beams[:, -2], beams[:, -1]]
        candidates = (log_probs if scores is None else scores[:, None] + log_probs).flatten()
        ordered = candidates.sort(descending=True).values
        if len(ordered) > num_beams and ordered[num_beams - 1] - ordered[num_beams] < margin:
            return False
        scores, flat = candidates.topk(num_beams)
        beams = torch.cat([beams[flat // table.shape[-1]], (flat % table.shape[-1])[:, None]], dim=-1)
    return True


def _table(gen, vocab: int, prompt: torch.Tensor, num_beams: int, steps: int, dtype) -> torch.Tensor:
    """A random table ``[V, V, V]`` of log-probabilities (peaked enough to matter), drawn until it is kept apart."""
    for _ in itertools.count():
        table = (torch.randn(vocab, vocab, vocab, generator=gen, dtype=torch.float64) * 2).log_softmax(-1).to(dtype)
        if _kept_apart(table, prompt, num_beams, steps, BF16_MARGIN if dtype == torch.bfloat16 else MARGIN):
            return table


def cases() -> list[Case]:
    gen = generator(93)
    found = [Case("手算的例子：4 个 token，提示词 [3, 0]，num_beams=2，max_new_tokens=2（贪心走 1 再 3：0.5 × 0.4；beam 找到 2 再 3："
                  "0.4 × 0.9）", (hand_table(), torch.tensor([3, 0]), 2, 2)),
             Case("手算的例子，num_beams=1（就是贪心），max_new_tokens=2", (hand_table(), torch.tensor([3, 0]), 1, 2))]
    for vocab, prompt_len, num_beams, steps, dtype in ((7, 2, 3, 4, torch.float32), (7, 3, 2, 1, torch.float32),
                                                        (8, 2, 5, 3, torch.float32), (6, 4, 1, 5, torch.float32),
                                                        (9, 2, 4, 6, torch.float64), (5, 2, 3, 10, torch.float32),
                                                        (7, 2, 7, 2, torch.float32), (5, 2, 2, 3, torch.bfloat16)):
        prompt = torch.randint(vocab, (prompt_len,), generator=gen)
        table = _table(gen, vocab, prompt, num_beams, steps, dtype)
        found.append(Case(f"V = {vocab} 的三元语言模型，提示词 {prompt.tolist()}，num_beams={num_beams}，max_new_tokens={steps}，"
                          f"{dtype_name(dtype)}", (table, prompt, num_beams, steps)))
    return public(found, 0, 6, 9)


@variants
def beam_variant(*, start="prompt", branch=True, accumulate=True, combine="add", score_parent=True, reorder=True,
                 parent_by="vocab", score="sum", extra_step=False, prompt_kept=False,
                 order="best_first"):
    """Beam search with one step changed: ``start`` "copies" starts from ``num_beams`` copies of the prompt;
    ``branch`` False extends each beam by its own best token only; ``accumulate`` False ranks the candidates by the
    step's log-probability alone (and returns the last step's); ``combine`` "multiply" multiplies the beam's score
    by the token's log-probability; ``score_parent`` False adds the kept token's log-probability to the score of
    the beam in its row, not its parent's; ``reorder`` False appends each kept token to the beam at its rank, not
    to its parent (after the first step, which makes the beams out of the prompt); ``parent_by`` "beams" takes the
    parent as index // num_beams; ``score`` "mean" divides by the length, "prob" returns the product of the
    probabilities; ``extra_step`` runs one step more; ``prompt_kept`` returns the prompt too; ``order`` "worst_first" returns the beams in
    ascending order."""
    def search(next_log_probs, input_ids, num_beams, max_new_tokens):
        beams = input_ids.reshape(1, -1).repeat(num_beams if start == "copies" else 1, 1)
        scores = torch.zeros(beams.shape[0], dtype=torch.float64) if start == "copies" else None
        new = torch.empty(beams.shape[0], 0, dtype=torch.int64)
        dtype = None
        for step in range(max_new_tokens + extra_step):
            log_probs = next_log_probs(beams)
            vocab, dtype = log_probs.shape[-1], log_probs.dtype
            if not branch and step > 0:
                best, token = log_probs.max(dim=-1)
                scores, parent = scores + best, torch.arange(len(token))
            else:
                if scores is None or not accumulate:
                    candidates = log_probs
                elif combine == "multiply":
                    candidates = scores[:, None].to(log_probs.dtype) * log_probs
                else:
                    candidates = scores[:, None].to(log_probs.dtype) + log_probs
                top, flat = candidates.flatten().topk(num_beams)
                parent = flat // (vocab if parent_by == "vocab" else num_beams)
                token = flat % vocab
                scores = top if score_parent or scores is None else scores + log_probs[parent, token]
            # Without reordering, the first step still has to make num_beams rows out of the prompt.
            follow = reorder or step == 0
            beams = torch.cat([beams[parent] if follow else beams, token[:, None]], dim=-1)
            new = torch.cat([new[parent] if follow else new, token[:, None]], dim=-1)
        scores = scores.to(dtype)
        scores = scores / max_new_tokens if score == "mean" else scores.exp() if score == "prob" else scores
        tokens = beams[:, -(input_ids.numel() + max_new_tokens):] if prompt_kept else new
        if order == "worst_first":
            return tokens.flip(0), scores.flip(0)
        return tokens, scores
    return search


def _scores_dtype(got):
    """The dtype of the scores a beam search returned (None when it returned no pair of tensors)."""
    if isinstance(got, (tuple, list)) and len(got) == 2 and isinstance(got[1], torch.Tensor):
        return got[1].dtype
    return None


KEEP = ("每一步把每个 beam 接上词表里的每个 token，候选的分数是 beam 的分数加上这个 token 的 log 概率；所有 beam 的候选放在一起，"
        "留下最好的 num_beams 个（candidates.flatten().topk(num_beams)）。")
PARENT = ("topk 在拉平的 [num_beams × V] 上挑出的下标 i，父 beam 是 i // V、token 是 i % V：新 token 要接在它的父 beam 后面"
          "（beams[parent]），beam 的历史要跟着重新排。")

MISTAKES = (
    Mistake("一开始就有 num_beams 个一样的提示词（第一步选出了重复的 beam）", "第一步只有一个 beam（提示词本身）：直接从它的 log 概率里"
            "选最好的 num_beams 个 token。从 num_beams 个一样的 beam 出发，每个都挑出同一个最好的 token，beam 就重复了"
            "（Hugging Face 把第 2 个以后的 beam 的初始分数设成 −1e9，也是为了这个）。", beam_variant(start="copies")),
    Mistake("每个 beam 只接了它自己最好的一个 token（成了几条并行的贪心）", KEEP, beam_variant(branch=False)),
    Mistake("候选的分数没有加上 beam 已有的分数（只比了这一步的 log 概率）", "beam search 比的是整条序列的 log 概率："
            "候选的分数 = 父 beam 的分数 + 这个 token 的 log 概率。只比这一步的，前面走过的路就不算数了。", beam_variant(accumulate=False)),
    Mistake("新 token 接在了同一行的 beam 后面，没有接在它的父 beam 后面", PARENT, beam_variant(reorder=False)),
    Mistake("父 beam 用 i // num_beams 算了（应是 i // V）", PARENT, beam_variant(parent_by="beams")),
    Mistake("分数除以了长度", "scores 是新 token 的 log 概率之和，不除以长度：所有 beam 一样长，除不除不改变排序，可返回的分数不对。"
            "（Hugging Face 的 length_penalty 只在 beam 长度不同、遇到结束符时才起作用。）", beam_variant(score="mean")),
    Mistake("返回的是概率的乘积，不是 log 概率的和", "scores 是 log 概率的和（log 空间里累加，长序列的概率乘积会下溢成 0）。",
            beam_variant(score="prob")),
    Mistake("log 概率相乘了（应该相加）", "概率相乘，对应的是 log 概率相加：score(beam + t) = score(beam) + log p(t)。两个负的 log "
            "概率相乘是正数，排序就反了。", beam_variant(combine="multiply")),
    Mistake("新的分数加在了同一行的 beam 上，不是父 beam 的分数", "留下的候选的分数是父 beam 的分数加上新 token 的 log 概率："
            "scores[parent] + log_probs[parent, token]（也就是 topk 返回的值）。用 scores + …，第 i 行加的是第 i 条旧 beam 的分数。",
            beam_variant(score_parent=False)),
    Mistake("多生成了一步", "每条 beam 正好生成 max_new_tokens 个新 token：连第一步（从提示词扩展）在内，一共 max_new_tokens 步。",
            beam_variant(extra_step=True)),
    Mistake("scores 的 dtype 不是 next_log_probs 输出的 dtype", "分数从 next_log_probs 的输出开始累加，dtype 跟着它走："
            "第一步直接用 log_probs，或者初始分数用 log_probs.new_zeros(...)。torch.zeros(1) 是 float32，会把 bfloat16 的分数升成 float32。",
            # A float32 start promotes only low-precision scores: told by their dtype, on the cases in bfloat16.
            matches=lambda case, got: _scores_dtype(got) == torch.float32,
            tried_on=lambda case: case.dtype == torch.bfloat16),
    Mistake("只把最后一个 token 交给了 next_log_probs", "next_log_probs 要看整条序列（提示词加上已经生成的 token）：模型的下一个 token "
            "取决于前面所有的 token，不只是最后一个。传 beams 本身，不要切成 beams[:, -1:]。", error="要看整条序列"),
    Mistake("返回的 token 里带着提示词", "只返回新生成的 max_new_tokens 个 token：[num_beams, max_new_tokens]。",
            beam_variant(prompt_kept=True)),
    Mistake("beam 没有按分数从高到低排", "返回时最好的 beam 在第 0 行：topk 给出的顺序就是从高到低。", beam_variant(order="worst_first")),
)

EXERCISE = Exercise("beam_search", 2, beam_search, cases, MISTAKES, output_names=OUTPUT_NAMES, call=call_beam)
