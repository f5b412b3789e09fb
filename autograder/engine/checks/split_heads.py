"""Check of ``split_heads(x, num_heads)``: ``[B, T, H·D] → [B, H, T, D]``, head h taking features h·D … (h+1)·D − 1."""
import torch

from autograder.engine.inputs.seeded import dtype_name, generator, randn, shape
from autograder.engine.model import Exercise, Mistake, public
from course.protocols import Case
from solutions.multi_head import split_heads


def cases() -> list[Case]:
    gen = generator(21)
    numbered = torch.arange(2 * 3 * 4, dtype=torch.float32).reshape(2, 3, 4)
    found = [Case("小例子：x = arange(24).reshape(2, 3, 4)（编号就是原来的位置），2 个头", (numbered, 2))]
    for (batch, seq, heads, dim), dtype in [
        ((2, 5, 4, 3), torch.float32),
        ((2, 5, 8, 64), torch.float32),   # seed 004's walk: [2, 5, 512] into 8 heads of 64
        ((1, 1, 4, 2), torch.float32),    # one token
        ((3, 4, 1, 6), torch.float32),    # one head
        ((2, 6, 3, 4), torch.float64),
        ((2, 4, 2, 8), torch.bfloat16),
    ]:
        x = randn(gen, batch, seq, heads * dim, dtype=dtype)
        found.append(Case(f"随机输入 x {shape(x)}，{heads} 个头，{dtype_name(dtype)}", (x, heads)))
    return public(found, 0, 5, 6)


def _head_dim(x, num_heads):
    return x.shape[-1] // num_heads


MISTAKES = (
    Mistake("直接 view 成了 [B, H, T, D]，没有先拆成 [B, T, H, D] 再 transpose",
            "内存里同一个 token 的 H·D 个数是挨着的：先 view(B, T, H, D)，再 transpose(1, 2)，"
            "否则一个头里会混进别的 token 的特征。",
            lambda x, h: x.reshape(x.shape[0], h, x.shape[1], _head_dim(x, h))),
    Mistake("少了 transpose：返回的是 [B, T, H, D]", "view(B, T, H, D) 之后还要 transpose(1, 2)，把头换到第 1 维。",
            lambda x, h: x.reshape(*x.shape[:2], h, _head_dim(x, h))),
    Mistake("头和 head_dim 的顺序拆反了（view 成了 [B, T, D, H]）",
            "第 h 个头是连续的一段特征 h·D … (h+1)·D − 1：view(B, T, H, D)，H 在前。",
            lambda x, h: x.reshape(*x.shape[:2], _head_dim(x, h), h).permute(0, 3, 1, 2)),
    Mistake("transpose 的是最后两维（-2, -1），不是时间和头（1, 2）：返回的是 [B, T, D, H]",
            "view(B, T, H, D) 之后要把 H 换到 T 前面：transpose(1, 2) 得到 [B, H, T, D]。",
            lambda x, h: x.reshape(*x.shape[:2], h, _head_dim(x, h)).transpose(-2, -1)),
    Mistake("先 transpose 成 [B, H·D, T] 再 reshape：每个头里混进了别的位置和特征",
            "先 view(B, T, H, D)，再 transpose(1, 2)：transpose 放在前面，reshape 切的就是转置后的内存顺序。",
            lambda x, h: x.transpose(1, 2).reshape(x.shape[0], h, x.shape[1], _head_dim(x, h))),
    Mistake("x.split(num_heads, dim=-1) 切出的是宽 num_heads 的块，不是 num_heads 块",
            "split 的第一个参数是每块的宽度：切成 H 块要写 x.split(D, dim=-1)，或者直接 view(B, T, H, D).transpose(1, 2)。",
            lambda x, h: torch.stack(x.split(h, dim=-1), dim=1)),
)

EXERCISE = Exercise("split_heads", 2, split_heads, cases, MISTAKES)
