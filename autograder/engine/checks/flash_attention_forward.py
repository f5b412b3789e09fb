"""Check of ``flash_attention_forward(q, k, v, causal=False, block_q=16, block_k=16)`` → ``(o [..., Tq, Dv],
lse [..., Tq])``: softmax attention one ``[block_q, block_k]`` tile of scores at a time (``protocols.call_tiled``
stops larger tables, and causal tiles that should have been skipped), with the log-sum-exp of each row; rows that
see no key give o = 0 and lse = −inf."""
import math

import torch

from autograder.engine.checks.online_softmax_attention import FLASH_KERNEL_USED
from autograder.engine.combined import variants
from autograder.engine.inputs import flash
from autograder.engine.inputs.seeded import generator
from autograder.engine.model import Exercise, Mistake, public
from course.protocols import Case, call_tiled
from solutions.flash_attention import flash_attention_forward

OUTPUT_NAMES = ("输出 o", "log-sum-exp lse")


def cases() -> list[Case]:
    gen = generator(90)
    found = [
        Case("三个 token 的手算例子（今天 / 天气 / 不错），causal=True，block_q=2，block_k=1", flash.three_tokens(),
             {"causal": True, "block_q": 2, "block_k": 1}),
        Case("三个 token 的手算例子，causal=False，block_q=1，block_k=2：第二块只有一个 key", flash.three_tokens(),
             {"block_q": 1, "block_k": 2}),
        Case("k 越往后越长（后面的块最大分数更大），causal=False，block_q=8，block_k=8，" + "q [2, 3, 20, 6]，k/v 长 45",
             flash.growing(gen), {"block_q": 8, "block_k": 8}),
    ]
    for label, lead, q_len, k_len, causal, block_q, block_k, dtype, scale in flash.SHAPES:
        q, k, v = flash.qkv(gen, lead, q_len, k_len, dtype=dtype, scale=scale)
        blocks = {} if block_q is None else {"block_q": block_q, "block_k": block_k}
        found.append(Case(label + flash.layout(q, v, causal, block_q, block_k), (q, k, v), {"causal": causal, **blocks}))
    return public(found, 0, 5, 6, 10)


def hidden(q_start: int, rows: int, k_start: int, cols: int, offset: int, diagonal: bool = True) -> torch.Tensor:
    """The causal mask of one tile, ``[rows, cols]``, True where a key is hidden: after the query's position
    ``offset + i`` (at it too when ``diagonal`` is False, a mistake). The variants of both passes mask with it."""
    positions = torch.arange(q_start, q_start + rows).unsqueeze(-1) + offset
    keys = torch.arange(k_start, k_start + cols)
    return keys > positions if diagonal else keys >= positions


@variants
def forward_variant(*, rescale_acc=True, rescale_sum=True, guard=True, o_where=True, lse_where=True, divide=True,
                    scaled=True, scale_dim="qk", fill="-inf", position="end", diagonal=True, skip_by="last",
                    skip_offset=True, carry_max=True, last_tile=True, last_q_tile=True, lse="full", empty_lse="-inf"):
    """The forward pass with one step changed: ``rescale_acc`` / ``rescale_sum`` False leave the output / the sum
    as they were when the max grows; ``guard`` False shifts by a max of −inf (NaN); ``o_where`` / ``lse_where``
    False leave out the ``where(ℓ > 0, …)`` around o / lse; ``divide`` False returns the unnormalised sum;
    ``scaled`` False leaves out 1/√D, ``scale_dim`` "v" divides by √Dv; ``fill`` is what masked scores are set
    to; ``position`` "start" puts query i at position i (as if Tq = Tk); ``diagonal`` False masks each query's own
    key too; ``skip_by`` "first" skips a key tile after the tile's first query (not its last); ``skip_offset``
    False leaves Tk − Tq out of the skip (not the mask); ``carry_max`` False never keeps the new max;
    ``last_tile`` / ``last_q_tile`` False drop a last key / query tile shorter than ``block_k`` / ``block_q``
    (its queries keep o = 0 and lse = −inf); ``lse`` is "full" (m + log ℓ), "max"
    (m), "log_sum" (log ℓ) or "before_last" (m + log ℓ before the last key tile was added); ``empty_lse`` is the
    lse of a row that sees no key."""
    def forward(q, k, v, causal=False, block_q=16, block_k=16):
        q_len, k_len, dim = q.shape[-2], k.shape[-2], q.shape[-1]
        offset = k_len - q_len if position == "end" else 0
        skip_at = offset if skip_offset else 0
        tiled = k_len if last_tile else k_len // block_k * block_k
        q_tiled = q_len if last_q_tile else q_len // block_q * block_q
        scale = math.sqrt(v.shape[-1] if scale_dim == "v" else dim) if scaled else 1.0
        o = q.new_zeros(*q.shape[:-1], v.shape[-1])
        out_lse = q.new_full(q.shape[:-1], float("-inf"))
        for q_start in range(0, q_tiled, block_q):
            q_tile = q[..., q_start:q_start + block_q, :]
            rows = q_tile.shape[-2]
            m = q.new_full(q_tile.shape[:-1], float("-inf"))
            total = q.new_zeros(q_tile.shape[:-1])
            acc = q.new_zeros(*q_tile.shape[:-1], v.shape[-1])
            last = q_start + (rows - 1 if skip_by == "last" else 0)
            before = (m, total)
            for k_start in range(0, tiled, block_k):
                if causal and k_start > skip_at + last:
                    break
                k_tile = k[..., k_start:k_start + block_k, :]
                scores = (q_tile @ k_tile.mT) / scale
                if causal:
                    scores = scores.masked_fill(hidden(q_start, rows, k_start, k_tile.shape[-2], offset, diagonal),
                                                float(fill))
                new_m = torch.maximum(m, scores.amax(-1))
                shift = new_m.masked_fill(new_m == float("-inf"), 0.0) if guard else new_m
                p = torch.exp(scores - shift.unsqueeze(-1))
                rescale = torch.exp(m - shift)
                before = (m, total)
                total = total * (rescale if rescale_sum else 1.0) + p.sum(-1)
                acc = acc * (rescale.unsqueeze(-1) if rescale_acc else 1.0) + p @ v[..., k_start:k_start + block_k, :]
                m = new_m if carry_max else m
            seen = total > 0
            divided = acc / (total.masked_fill(~seen, 1.0) if o_where else total).unsqueeze(-1)
            o[..., q_start:q_start + rows, :] = (torch.where(seen.unsqueeze(-1), divided, 0.0) if o_where else divided
                                                 ) if divide else acc
            kept = {"full": m + torch.log(total), "max": m, "log_sum": torch.log(total),
                    "before_last": before[0] + torch.log(before[1])}[lse]
            out_lse[..., q_start:q_start + rows] = torch.where(seen, kept, float(empty_lse)) if lse_where else kept
        return o, out_lse
    return forward


RESCALE = ("新的一块把 running max 从 m 抬到 m′ 时，之前按 m 平移的和都要换到 m′ 上：running sum ℓ 和累加的输出都乘 "
           "exp(m − m′)。")
LSE = ("lse 是这一行全部分数的 log-sum-exp：log Σ_j exp(s_j) = m + log ℓ，m 是最后的 running max，ℓ 是按 m 平移后的"
       " running sum。反向传播用它重算 P = exp(S − lse)，所以两部分都要有。")
EMPTY = ("一个 key 也看不见的行（causal 且 Tq > Tk 时，query i < Tq − Tk）：ℓ = 0，输出 0，lse = −inf"
         "（log 0 = −inf，softmax 的分母是 0）。running max 还是 −inf 时按 0 平移，exp(−inf − 0) = 0，不会出 NaN。")
POSITION = ("causal 的规则和 causal_mask 一样：query i 的绝对位置是 Tk − Tq + i，它能看见位置 ≤ 它的 key。"
            "Tq = Tk 时这就是 i；带缓存的预填充（Tk > Tq）和 Tq > Tk 时不是。")
SKIP = ("一块 key 整块被遮住，当且仅当它的第一个 key 在这一块 query 的**最后一个** query 之后："
        "k_start > (Tk − Tq) + q_end − 1 时才能跳过。用这一块第一个 query 的位置来判断，会把后面几个 query 看得见的 key 跳掉。")
DIAGONAL = ("query 能看见位置不超过它自己的 key，包括它自己：被遮住的是 key 位置 > query 位置（cols > rows），不是 ≥。"
            "遮掉对角线，Tq = Tk 时第一个 query 就什么都看不见了。")
SKIP_OFFSET = ("跳过的条件和 mask 一样，用的是 query 的绝对位置：k_start > (Tk − Tq) + q_end − 1。忘了 Tk − Tq，"
               "带缓存的预填充（Tk > Tq）时会跳过看得见的块；Tq > Tk 时又白算了整块被遮住的块。")
# One name for each watch's stop, in all three checks: a FlashAttention stopped inside its own forward pass is then
# explained by that pass's check (``judging``: a base that names the same mistake).
TOO_LARGE = "一次算出了比一块 [block_q, block_k] 更大的表"
NOT_SKIPPED_NAME = "causal 时整块被遮住的块没有跳过"
NOT_SKIPPED = ("causal=True 时，第一个 key 在这一块最后一个 query 之后（k_start > (Tk − Tq) + q_end − 1）的 key 块整块都被遮住："
               "跳过它，后面的块也一样。算完再 mask 结果相同，可这些块白算了，评分会数你算了几块。")

MISTAKES = (
    Mistake("最大值变大时，累加的输出没有跟着缩放", RESCALE, forward_variant(rescale_acc=False)),
    Mistake("最大值变大时，running sum ℓ 没有跟着缩放", RESCALE, forward_variant(rescale_sum=False)),
    Mistake("最大值变大时，ℓ 和累加的输出都没有跟着缩放", RESCALE + "这个因子要用更新之前的 m 来算：先把 m 换成 m′ 再算 "
            "exp(m − m′)，得到的是 1，等于没有缩放。", forward_variant(rescale_acc=False, rescale_sum=False)),
    Mistake("最后没有除以 ℓ", "循环结束时累加的 Σ exp(s − m)·v 只是分子：o = acc / ℓ；ℓ = 0 的行输出 0。",
            forward_variant(divide=False)),
    Mistake("忘了除以 √D", "每一块的分数都是 q·kᵀ/√D（D 是 head_dim）。", forward_variant(scaled=False)),
    Mistake("除的是 √Dv（v 的维数），不是 √D", "缩放的是 q·k 的点积：D 是 q 和 k 的最后一维（q.shape[-1]），"
            "v 的维数 Dv 可以不一样。", forward_variant(scale_dim="v")),
    Mistake("causal 时 query 自己位置上的 key 也被遮住了", DIAGONAL, forward_variant(diagonal=False)),
    Mistake("最后一个不满 block_q 的 query 块被丢掉了", "Tq 不是 block_q 的倍数时，最后一块 query 比 block_q 短，也要算："
            "range(0, Tq, block_q) 加切片会自动处理（range(Tq // block_q) 会漏掉它）。", forward_variant(last_q_tile=False)),
    Mistake("被遮住的分数填的是 0，不是 −inf", "填 0 的 key 仍然有 exp(0 − m) 的权重：被遮住的分数要填 float(\"-inf\")，"
            "exp 之后才正好是 0。", forward_variant(fill="0.0")),
    Mistake("causal 时把 query i 放在了位置 i（忘了 Tk − Tq 的偏移）", POSITION, forward_variant(position="start")),
    Mistake("跳过整块的条件用了这一块第一个 query 的位置（少算了对角线上的块）", SKIP, forward_variant(skip_by="first")),
    Mistake("lse 存的只是 running max m（少了 log ℓ）", LSE, forward_variant(lse="max")),
    Mistake("lse 存的只是 log ℓ（少了 running max m）", LSE, forward_variant(lse="log_sum")),
    Mistake("lse 是在最后一块加进来之前存的", LSE + "等所有 key 块都处理完（最后一次缩放之后）再算 lse。",
            forward_variant(lse="before_last")),
    Mistake("看不见任何 key 的行 lse 是 0，不是 −inf", EMPTY, forward_variant(empty_lse="0.0")),
    Mistake("看不见任何 key 的行得到了 NaN", EMPTY, forward_variant(guard=False, o_where=False, lse_where=False)),
    Mistake("running max 还是 −inf 时直接拿它平移：exp(−inf − (−inf)) 是 NaN", EMPTY,
            forward_variant(guard=False, lse_where=False)),
    Mistake("跳过整块的条件忘了 Tk − Tq 的偏移", SKIP_OFFSET, forward_variant(skip_offset=False)),
    Mistake("running max 没有更新（m 一直是 −inf）", "每一块处理完都要把 m 换成 m′ = max(m, 这一块的最大值)：不更新时，下一块的 "
            "exp(m − m′) = 0，之前累加的 ℓ 和输出都被清零，只剩最后一块。", forward_variant(carry_max=False)),
    Mistake("最后一个不满 block_k 的 key 块被丢掉了", "Tk 不是 block_k 的倍数时，最后一块比 block_k 短，也要算："
            "range(0, Tk, block_k) 加切片 [k_start:k_start + block_k] 会自动处理（range(Tk // block_k) 会漏掉它）。",
            forward_variant(last_tile=False)),
    Mistake(TOO_LARGE, "FlashAttention 的意义在于每次只持有一块分数：query 按 "
            "block_q 切、key 按 block_k 切，两层循环，一块一块地更新 running max、ℓ 和输出。", error="TileTooLarge"),
    Mistake(NOT_SKIPPED_NAME, NOT_SKIPPED, error="TilesNotSkipped"),
    FLASH_KERNEL_USED,
)

EXERCISE = Exercise("flash_attention_forward", 3, flash_attention_forward, cases, MISTAKES, output_names=OUTPUT_NAMES,
                    call=call_tiled)
