"""Check of ``LatentKVCache``: ``update(latent, k_rope)`` appends both along T and returns everything cached;
``len()`` is the number of cached positions. Each case makes three updates and records what comes back."""
import torch

from autograder.engine.inputs.seeded import dtype_name, generator, randn
from autograder.engine.model import Exercise, Mistake, public
from course.protocols import Case, call_cache
from solutions.rope_mla import LatentKVCache

UPDATES = 3
OUTPUT_NAMES = ("空缓存的 len()",) + tuple(
    name for step in range(1, UPDATES + 1)
    for name in (f"第 {step} 次 update 返回的 latent", f"第 {step} 次 update 返回的 k_rope",
                 f"第 {step} 次 update 之后的 len()"))


def cases() -> list[Case]:
    gen = generator(42)
    found = []
    for batch, rank, rope, lengths, dtype, note in [
        (1, 4, 2, (1, 1, 1), torch.float32, "小例子：逐个放进 3 个位置"),
        (2, 16, 8, (4, 1, 1), torch.float32, "先放进 4 个位置（prefill），再逐个来 1 个"),
        (1, 8, 4, (2, 3, 1), torch.float64, "分块放进 2、3、1 个位置"),
        (3, 32, 16, (5, 1, 1), torch.bfloat16, "batch 3，先放进 5 个位置"),
    ]:
        steps = tuple((randn(gen, batch, n, rank, dtype=dtype), randn(gen, batch, n, rope, dtype=dtype))
                      for n in lengths)
        found.append(Case(f"latent [{batch}, T, {rank}]、k_rope [{batch}, T, {rope}]，{note}，{dtype_name(dtype)}",
                          (steps,)))
    assert all(len(case.args[0]) == UPDATES for case in found), "OUTPUT_NAMES names the outputs of UPDATES updates"
    return public(found, 0, 2, 3)


def _concat_on(dim):
    class Wrong(LatentKVCache):
        def update(self, latent, k_rope):
            if self.latent is None:
                self.latent, self.k_rope = latent, k_rope
            else:
                self.latent = torch.cat([self.latent, latent], dim=dim)
                self.k_rope = torch.cat([self.k_rope, k_rope], dim=dim)
            return self.latent, self.k_rope
    return Wrong


class _NewFirst(LatentKVCache):
    def update(self, latent, k_rope):
        if self.latent is not None:
            latent, k_rope = torch.cat([latent, self.latent], dim=1), torch.cat([k_rope, self.k_rope], dim=1)
        self.latent, self.k_rope = latent, k_rope
        return latent, k_rope


class _ReturnsOnlyNew(LatentKVCache):
    def update(self, latent, k_rope):
        super().update(latent, k_rope)
        return latent, k_rope


class _CountsUpdates(LatentKVCache):
    def __init__(self):
        super().__init__()
        self.updates = 0

    def update(self, latent, k_rope):
        self.updates += 1
        return super().update(latent, k_rope)

    def __len__(self):
        return self.updates


_SEQ_DIM = "latent 是 [B, T, kv_lora_rank]，k_rope 是 [B, T, rope]：新位置接在 T 这一维上，torch.cat([旧的, 新的], dim=1)。"

MISTAKES = (
    *(Mistake("拼接在了错误的维度上", _SEQ_DIM, fn=_concat_on(dim)) for dim in (-1, 0)),
    Mistake("新位置拼在了缓存的前面", "新来的位置在序列的最后：torch.cat([旧的, 新的], dim=1)。", fn=_NewFirst),
    Mistake("update 只返回了新来的 latent 和 k_rope", "update 要返回缓存里全部的位置：每个新 query 都要看所有之前的位置。",
            fn=_ReturnsOnlyNew),
    Mistake("len() 数的是 update 的次数，不是缓存的位置数", "一次 update 可以放进好几个位置（prefill）：len() 是 T 这一维的长度。",
            fn=_CountsUpdates),
)

EXERCISE = Exercise("LatentKVCache", 2, LatentKVCache, cases, MISTAKES, output_names=OUTPUT_NAMES, call=call_cache)
