"""Check of ``flash_attention_backward(q, k, v, o, lse, do, causal=False, block_q=16, block_k=16)`` → ``(dq, dk,
dv)``: the gradients of softmax attention, each tile's probabilities recomputed from q, k and the forward's lse
(``protocols.call_tiled`` stops a table larger than a tile, and causal tiles that should have been skipped)."""
import math

import torch

from autograder.engine.checks.flash_attention_forward import (
    DIAGONAL,
    NOT_SKIPPED,
    NOT_SKIPPED_NAME,
    POSITION,
    SKIP,
    SKIP_OFFSET,
    TOO_LARGE,
    hidden,
)
from autograder.engine.checks.online_softmax_attention import FLASH_KERNEL_USED
from autograder.engine.combined import variants
from autograder.engine.inputs import flash
from autograder.engine.inputs.seeded import generator, randn
from autograder.engine.model import Exercise, Mistake, public
from course.protocols import Case, call_tiled
from solutions.flash_attention import flash_attention_backward, flash_attention_forward

OUTPUT_NAMES = ("dq", "dk", "dv")


def with_forward(gen, q, k, v, causal: bool) -> tuple:
    """``(q, k, v, o, lse, do)``: the forward's o and lse computed in float64 and given in q's dtype, and an
    upstream gradient ``do``."""
    o, lse = flash_attention_forward(q.double(), k.double(), v.double(), causal)
    return q, k, v, o.to(q.dtype), lse.to(q.dtype), randn(gen, *o.shape, dtype=q.dtype)


def cases() -> list[Case]:
    gen = generator(91)
    tokens = flash.three_tokens()
    found = [
        Case("三个 token 的手算例子，causal=True，block_q=2，block_k=1", with_forward(gen, *tokens, True),
             {"causal": True, "block_q": 2, "block_k": 1}),
        Case("k 越往后越长，causal=False，block_q=8，block_k=8，q [2, 3, 20, 6]，k/v 长 45",
             with_forward(gen, *flash.growing(gen), False), {"block_q": 8, "block_k": 8}),
    ]
    for label, lead, q_len, k_len, causal, block_q, block_k, dtype, scale in flash.SHAPES:
        # Scores in the thousands in float32 round S − lse by 1e-4 (an ulp of 1000), whoever computes them: float64.
        dtype = torch.float64 if scale > 1 else dtype
        q, k, v = flash.qkv(gen, lead, q_len, k_len, dtype=dtype, scale=scale)
        blocks = {} if block_q is None else {"block_q": block_q, "block_k": block_k}
        found.append(Case(label + flash.layout(q, v, causal, block_q, block_k), with_forward(gen, q, k, v, causal),
                          {"causal": causal, **blocks}))
    return public(found, 0, 5, 8)


@variants
def backward_variant(*, delta="rowsum", jacobian=True, scale_dq=True, scale_dk=True, scale_s=True, recompute="lse",
                     mask=True, diagonal=True, guard=True, position="end", skip_by="last", skip_offset=True,
                     skip_with="continue", dq_add=True):
    """The backward pass with one step changed: ``delta`` is D = rowsum(dO ∘ O) ("rowsum"), left out ("none"), or
    rowsum(P ∘ dP) over this key tile only ("tile"), or subtracted outside the product ("outside": dS = P ∘ dP −
    D); ``jacobian`` False takes dS = dP; ``diagonal`` False masks each query's own key too; ``scale_dq`` / ``scale_dk``
    False leave 1/√D out of dq / dk; ``recompute`` is how P comes back: exp(S − lse) ("lse"), the tile's own
    softmax ("tile_softmax", "tile_softmax_nan" without turning a fully masked tile row's NaN into 0) or exp(S)
    ("no_shift"); ``scale_s`` False recomputes S without 1/√D; ``mask`` False leaves the diagonal tiles unmasked;
    ``guard`` False subtracts an lse of −inf (NaN); ``skip_with`` "break" leaves the query loop at the first
    skipped tile; ``dq_add`` False assigns each key tile's share of dq instead of adding it; ``position``,
    ``skip_by`` and ``skip_offset`` as in the forward's variants."""
    def backward(q, k, v, o, lse, do, causal=False, block_q=16, block_k=16):
        q_len, k_len = q.shape[-2], k.shape[-2]
        offset = k_len - q_len if position == "end" else 0
        skip_at = offset if skip_offset else 0
        scale = 1 / math.sqrt(q.shape[-1])
        full_delta = (do * o).sum(-1)
        shift = lse.masked_fill(lse == float("-inf"), 0.0) if guard else lse
        dq, dk, dv = torch.zeros_like(q), torch.zeros_like(k), torch.zeros_like(v)
        for k_start in range(0, k_len, block_k):
            k_tile, v_tile = k[..., k_start:k_start + block_k, :], v[..., k_start:k_start + block_k, :]
            for q_start in range(0, q_len, block_q):
                rows = slice(q_start, q_start + block_q)
                q_tile, do_tile = q[..., rows, :], do[..., rows, :]
                count = q_tile.shape[-2]
                if causal and k_start > skip_at + q_start + (count - 1 if skip_by == "last" else 0):
                    if skip_with == "break":
                        break
                    continue
                scores = q_tile @ k_tile.mT * (scale if scale_s else 1.0)
                if causal and mask:
                    scores = scores.masked_fill(hidden(q_start, count, k_start, k_tile.shape[-2], offset, diagonal),
                                                float("-inf"))
                if recompute == "lse":
                    p = torch.exp(scores - shift[..., rows].unsqueeze(-1))
                elif recompute == "tile_softmax":
                    p = torch.softmax(scores, dim=-1).nan_to_num(0.0)
                elif recompute == "tile_softmax_nan":
                    p = torch.softmax(scores, dim=-1)
                else:
                    p = torch.exp(scores)
                dv[..., k_start:k_start + block_k, :] += p.mT @ do_tile
                dp = do_tile @ v_tile.mT
                row_delta = full_delta[..., rows].unsqueeze(-1)
                if not jacobian:
                    ds = dp
                elif delta == "outside":
                    ds = p * dp - row_delta
                else:
                    ds = p * (dp - {"rowsum": row_delta, "none": 0.0, "tile": (p * dp).sum(-1, keepdim=True)}[delta])
                share = ds @ k_tile * (scale if scale_dq else 1.0)
                if dq_add:
                    dq[..., rows, :] += share
                else:
                    dq[..., rows, :] = share
                dk[..., k_start:k_start + block_k, :] += ds.mT @ q_tile * (scale if scale_dk else 1.0)
        return dq, dk, dv
    return backward


DELTA = ("softmax 的雅可比：dS_ij = P_ij (dP_ij − D_i)，D_i = Σ_j P_ij dP_ij。这个和要对整行的 key 求，可整行的 P 从来不在"
         "手上：它等于 rowsum(dO ∘ O)（O_i = Σ_j P_ij V_j，所以 Σ_j P_ij (dO_i · V_j) = dO_i · O_i），在循环之前用 do 和 o 算好。")
SCALE = "S = Q Kᵀ/√D，所以 dQ = dS K/√D，dK = dSᵀ Q/√D：两个梯度都要乘 1/√D。"
RECOMPUTE = ("反向传播不存 P，而是用 forward 存下的 lse 重算：P = exp(S − lse)。lse 是整行的 log-sum-exp，减去它得到的就是"
             "整行 softmax 的概率；只在这一块里做 softmax 得到的是这一块自己的归一化，不是 P。")

MISTAKES = (
    Mistake("dS 里少了 D 这一项（dS = P ∘ dP）", DELTA, backward_variant(delta="none")),
    Mistake("dS 没有乘 softmax 的雅可比（dS = dP）", DELTA, backward_variant(jacobian=False)),
    Mistake("D 只在这一块 key 里求和（rowsum(P ∘ dP) 按块算）", DELTA, backward_variant(delta="tile")),
    Mistake("D 减在了括号外面（dS = P ∘ dP − D）", "dS_ij = P_ij (dP_ij − D_i)：D 也要乘上 P_ij。减在外面时，P = 0 的位置"
            "（被遮住的 key）也有了梯度 −D_i。", backward_variant(delta="outside")),
    Mistake("causal 时 query 自己位置上的 key 也被遮住了", DIAGONAL, backward_variant(diagonal=False)),
    Mistake("dq 和 dk 都没有乘 1/√D", SCALE, backward_variant(scale_dq=False, scale_dk=False)),
    Mistake("dq 没有乘 1/√D", "S = Q Kᵀ/√D，所以 dQ = dS K/√D：dq 这一项少了 1/√D。", backward_variant(scale_dq=False)),
    Mistake("dk 没有乘 1/√D", "S = Q Kᵀ/√D，所以 dK = dSᵀ Q/√D：dk 这一项少了 1/√D。", backward_variant(scale_dk=False)),
    Mistake("重算 P 时在这一块里做了 softmax，没有用 lse", RECOMPUTE, backward_variant(recompute="tile_softmax")),
    Mistake("重算 P 时在这一块里做了 softmax，没有用 lse", RECOMPUTE, backward_variant(recompute="tile_softmax_nan")),
    Mistake("重算 P 时没有减 lse（P = exp(S)）", RECOMPUTE, backward_variant(recompute="no_shift")),
    Mistake("重算分数时没有除以 √D", "反向重算的 S 要和前向的一模一样：S = Q_i K_jᵀ/√D，再减 lse。少了 1/√D，P 就不是前向的概率。",
            backward_variant(scale_s=False)),
    Mistake("dq 每块都被覆盖了（= 而不是 +=）", "dQ_i 从每一块 key 都收到一份 dS K_j/√D：要加起来（+=），用 = 只剩最后一块 key 的那份。",
            backward_variant(dq_add=False)),
    Mistake("key 块在外层时，跳过一块 query 用了 break", "key 块在外层、query 块在内层时，前面的 query 块在对角线上方（被跳过），"
            "后面的 query 块反而看得见这块 key：内层用 continue，不能 break。", backward_variant(skip_with="break")),
    Mistake("跳过整块的条件忘了 Tk − Tq 的偏移", SKIP_OFFSET, backward_variant(skip_offset=False)),
    Mistake("反向传播里对角线上的块没有 mask", "跳过整块被遮住的块之后，对角线上的块里仍有一部分 key 在 query 之后："
            "和 forward 一样把它们的分数填 −inf，P 才是 0。", backward_variant(mask=False)),
    Mistake("看不见任何 key 的行（lse = −inf）得到了 NaN", "lse = −inf 的行每个分数也都是 −inf：exp(−inf − (−inf)) 是 NaN。"
            "先把这些行的 lse 换成 0（lse.masked_fill(lse == float(\"-inf\"), 0.0)），P 就是 0，梯度也是 0。",
            backward_variant(guard=False)),
    Mistake("causal 时把 query i 放在了位置 i（忘了 Tk − Tq 的偏移）", POSITION, backward_variant(position="start")),
    Mistake("跳过整块的条件用了这一块第一个 query 的位置（少算了对角线上的块）", SKIP, backward_variant(skip_by="first")),
    Mistake(TOO_LARGE, "反向传播也不存 [Tq, Tk] 的 P：对每一块 (key 块, query 块) "
            "用 q、k 和 lse 重算这一块的 P，算出 dP、dS，把贡献加进 dq、dk、dv。", error="TileTooLarge"),
    Mistake(NOT_SKIPPED_NAME, NOT_SKIPPED, error="TilesNotSkipped"),
    FLASH_KERNEL_USED,
)

EXERCISE = Exercise("flash_attention_backward", 4, flash_attention_backward, cases, MISTAKES, output_names=OUTPUT_NAMES,
                    call=call_tiled)
