"""Check of ``merge_heads(x)``: ``[B, H, T, D] → [B, T, H·D]``, the inverse of ``split_heads``."""
import torch

from autograder.engine.inputs.seeded import dtype_name, generator, randn, shape
from autograder.engine.model import Exercise, Mistake, public
from course.protocols import Case
from solutions.multi_head import merge_heads


def cases() -> list[Case]:
    gen = generator(22)
    numbered = torch.arange(2 * 2 * 3 * 2, dtype=torch.float32).reshape(2, 2, 3, 2)
    found = [Case("小例子：x = arange(24).reshape(2, 2, 3, 2)（batch 2、2 个头、3 个 token、head_dim 2）", (numbered,))]
    for dims, dtype in [
        ((2, 4, 5, 3), torch.float32),
        ((2, 8, 5, 64), torch.float32),   # back from seed 004's 8 heads of 64 to [2, 5, 512]
        ((1, 4, 1, 2), torch.float32),    # one token
        ((3, 1, 4, 6), torch.float32),    # one head
        ((2, 3, 6, 4), torch.float64),
        ((2, 2, 4, 8), torch.bfloat16),
    ]:
        x = randn(gen, *dims, dtype=dtype)
        found.append(Case(f"随机输入 x {shape(x)}，{dtype_name(dtype)}", (x,)))
    found.append(Case("x 是 transpose 得到的（内存不连续）：[2, 3, 4, 5] 的 transpose(1, 2)",
                      (randn(gen, 2, 4, 3, 5).transpose(1, 2),)))
    return public(found, 0, 5, 6)


def _batch_seq(x):
    return x.shape[0], x.shape[2]


MISTAKES = (
    Mistake("没有先 transpose 就 reshape，各头的结果被打乱了",
            "[B, H, T, D] 直接 reshape 成 [B, T, H·D] 会把同一个头不同 token 的结果拼成一行："
            "先 transpose(1, 2) 成 [B, T, H, D]，再 reshape。",
            lambda x: x.reshape(*_batch_seq(x), -1)),
    Mistake("拼接顺序反了：每个 token 的特征按 [D, H] 而不是 [H, D] 排",
            "transpose(1, 2) 之后是 [B, T, H, D]，reshape 时把 H 和 D 合并，头 0 的 D 个数在最前面。",
            lambda x: x.permute(0, 2, 3, 1).reshape(*_batch_seq(x), -1)),
    Mistake("transpose 的是最后两维（-2, -1），不是头和时间（1, 2）",
            "[B, H, T, D] 里要换到后面的是 H：transpose(1, 2) 得到 [B, T, H, D]，再 reshape 成 [B, T, H·D]。"
            "transpose(-2, -1) 得到的是 [B, H, D, T]，reshape 以后每一行混着不同的 token。",
            lambda x: x.transpose(-2, -1).reshape(*_batch_seq(x), -1)),
    Mistake("从第 1 维起全部展平了：得到 [B, T·H·D]", "flatten(1) 把时间也并了进去：先 transpose(1, 2) 成 "
            "[B, T, H, D]，再只合并最后两维：flatten(2) 或 reshape(B, T, H·D)。",
            lambda x: x.transpose(1, 2).flatten(1)),
    Mistake("把各头加在一起了，而不是拼接", "多头的输出是并排拼接成 H·D 维，不是求和或平均。",
            lambda x: x.sum(dim=1)),
    Mistake("把各头平均了，而不是拼接", "多头的输出是并排拼接成 H·D 维，不是求和或平均。",
            lambda x: x.mean(dim=1)),
    Mistake("先 reshape 成 [B, H·D, T] 再 transpose：每个位置拿到的是别的位置的数",
            "先 transpose(1, 2) 成 [B, T, H, D]，再 reshape 成 [B, T, H·D]：顺序反过来，reshape 切的是头和时间混在一起的内存。",
            lambda x: x.reshape(x.shape[0], x.shape[1] * x.shape[3], x.shape[2]).transpose(1, 2)),
)

EXERCISE = Exercise("merge_heads", 2, merge_heads, cases, MISTAKES)
