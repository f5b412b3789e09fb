"""Check of ``repeat_kv(x, n_rep)``: ``[B, Hkv, T, D] → [B, Hkv·n_rep, T, D]``, query head h reading KV head
h // n_rep."""
import torch

from autograder.engine.inputs.seeded import dtype_name, generator, randn, shape
from autograder.engine.model import Exercise, Mistake, public
from course.protocols import Case
from solutions.gqa_kv_cache import repeat_kv


def cases() -> list[Case]:
    gen = generator(31)
    # KV head j holds the number j everywhere, so the output shows which KV head each query head reads.
    numbered = torch.arange(2, dtype=torch.float32)[None, :, None, None].expand(1, 2, 3, 2).clone()
    found = [Case("小例子：2 个 KV 头（头 j 的每个数都是 j），n_rep = 4，像 Qwen3.5 的 8 个 query 头共享 2 个 KV 头",
                  (numbered, 4))]
    for (batch, kv_heads, seq, dim), n_rep, dtype in [
        ((2, 2, 5, 4), 4, torch.float32),
        ((2, 3, 4, 4), 2, torch.float32),
        ((1, 1, 3, 8), 8, torch.float32),   # MQA: one KV head for all
        ((2, 4, 3, 4), 1, torch.float32),   # MHA: nothing to repeat
        ((2, 2, 1, 4), 3, torch.float32),   # one position
        ((2, 2, 4, 8), 2, torch.float64),
        ((1, 2, 5, 8), 4, torch.bfloat16),
    ]:
        x = randn(gen, batch, kv_heads, seq, dim, dtype=dtype)
        found.append(Case(f"随机输入 x {shape(x)}，n_rep = {n_rep}，{dtype_name(dtype)}", (x, n_rep)))
    return public(found, 0, 6, 7)


MISTAKES = (
    Mistake("KV 头重复成了 0, 1, 0, 1 的顺序（整组平铺，像 repeat），应是 0, 0, 1, 1",
            "query 头 h 读 KV 头 h // n_rep：KV 头要挨着重复（0, 0, 1, 1），repeat 给的是 (0, 1, 0, 1)。"
            "用 x.repeat_interleave(n_rep, dim=1)，或 x[:, :, None].expand(...) 再 reshape。",
            lambda x, n: x.repeat(1, n, 1, 1)),
    Mistake("在序列维（dim=2）上重复了", "要重复的是头这一维：dim=1。",
            lambda x, n: x.repeat_interleave(n, dim=2)),
    Mistake("在 head_dim（最后一维）上重复了", "要重复的是头这一维：dim=1。",
            lambda x, n: x.repeat_interleave(n, dim=-1)),
    Mistake("在 batch 维（dim=0）上重复了", "要重复的是头这一维：dim=1。",
            lambda x, n: x.repeat_interleave(n, dim=0)),
)

EXERCISE = Exercise("repeat_kv", 2, repeat_kv, cases, MISTAKES)
