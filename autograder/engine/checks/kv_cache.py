"""Check of ``KVCache``: ``update(k, v)`` appends along the sequence dim and returns everything cached;
``len()`` is the number of cached positions. Each case makes three updates and records what comes back."""
import torch

from autograder.engine.inputs.seeded import dtype_name, generator, randn, three_tokens
from autograder.engine.model import Exercise, Mistake, public
from course.protocols import Case, call_cache
from solutions.gqa_kv_cache import KVCache

UPDATES = 3
OUTPUT_NAMES = ("空缓存的 len()",) + tuple(
    name for step in range(1, UPDATES + 1)
    for name in (f"第 {step} 次 update 返回的 k", f"第 {step} 次 update 返回的 v", f"第 {step} 次 update 之后的 len()"))


def _steps(gen, batch, kv_heads, dim, lengths, dtype):
    return tuple((randn(gen, batch, kv_heads, n, dim, dtype=dtype), randn(gen, batch, kv_heads, n, dim, dtype=dtype))
                 for n in lengths)


def cases() -> list[Case]:
    _, keys, values = three_tokens()
    one_by_one = tuple((keys[None, None, t:t + 1], values[None, None, t:t + 1]) for t in range(3))
    gen = generator(32)
    found = [Case("小例子：「今天 / 天气 / 不错」的 key 和 value 逐个放进缓存，每次 [1, 1, 1, 2]", (one_by_one,))]
    for (batch, kv_heads, dim), lengths, dtype, note in [
        ((2, 3, 4), (4, 1, 1), torch.float32, "先放进 4 个位置（prefill），再逐个来 1 个"),
        ((1, 2, 8), (2, 3, 1), torch.float64, "分块放进 2、3、1 个位置"),
        ((3, 1, 8), (5, 1, 1), torch.bfloat16, "只有 1 个 KV 头（MQA），先放进 5 个位置，再逐个来 1 个"),
    ]:
        steps = _steps(gen, batch, kv_heads, dim, lengths, dtype)
        found.append(Case(f"k/v 形状 [{batch}, {kv_heads}, T, {dim}]，{note}，{dtype_name(dtype)}", (steps,)))
    assert all(len(case.args[0]) == UPDATES for case in found), "OUTPUT_NAMES names the outputs of UPDATES updates"
    return public(found, 0, 2, 3)


def _concat_on(dim):
    class Wrong(KVCache):
        def update(self, k, v):
            if self.k is None:
                self.k, self.v = k, v
            else:
                self.k, self.v = torch.cat([self.k, k], dim=dim), torch.cat([self.v, v], dim=dim)
            return self.k, self.v
    return Wrong


class _NewFirst(KVCache):
    def update(self, k, v):
        if self.k is not None:
            k, v = torch.cat([k, self.k], dim=-2), torch.cat([v, self.v], dim=-2)
        self.k, self.v = k, v
        return k, v


class _ReturnsOnlyNew(KVCache):
    def update(self, k, v):
        super().update(k, v)
        return k, v


class _CountsUpdates(KVCache):
    def __init__(self):
        super().__init__()
        self.updates = 0

    def update(self, k, v):
        self.updates += 1
        return super().update(k, v)

    def __len__(self):
        return self.updates


def _length_from(dim, base=KVCache):
    class Wrong(base):
        def __len__(self):
            return 0 if self.k is None else self.k.shape[dim]
    return Wrong


_SEQ_DIM = "缓存的形状是 [B, Hkv, T, D]，新位置接在序列维上：torch.cat([self.k, k], dim=2)（或 dim=-2）。"

MISTAKES = (
    Mistake("缓存拼接在了 head 维（dim=1）上", _SEQ_DIM, fn=_concat_on(1)),
    Mistake("缓存拼接在了 head_dim（最后一维）上", _SEQ_DIM, fn=_concat_on(-1)),
    Mistake("缓存拼接在了 batch 维（dim=0）上", _SEQ_DIM, fn=_concat_on(0)),
    Mistake("新位置拼在了缓存的前面", "新来的位置在序列的最后：torch.cat([旧的, 新的], dim=2)。", fn=_NewFirst),
    Mistake("update 只返回了新来的 k、v", "update 要返回缓存里全部的 (k, v)：注意力要看所有之前的位置。",
            fn=_ReturnsOnlyNew),
    Mistake("len() 数的是 update 的次数，不是缓存的位置数", "一次 update 可以放进好几个位置（prefill）：len() 是 k.shape[2]。",
            fn=_CountsUpdates),
    Mistake("len() 取错了维度", "缓存的位置数是序列维的长度：k.shape[2]，不是 batch 或头数。", fn=_length_from(0)),
    # Two mistakes that come together: the cache grows along the heads, and len() counts what grows.
    Mistake("缓存拼接在了 head 维（dim=1）上，len() 数的也是这一维", _SEQ_DIM + "len() 是序列维的长度 k.shape[2]。",
            fn=_length_from(1, _concat_on(1))),
)

EXERCISE = Exercise("KVCache", 2, KVCache, cases, MISTAKES, output_names=OUTPUT_NAMES, call=call_cache)
