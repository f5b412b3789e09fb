"""Check of ``mla_cache_bytes(batch, seq_len, num_layers, kv_lora_rank, qk_rope_head_dim, bytes_per_elem)`` → int."""
from autograder.engine.model import Exercise, Mistake, public
from course.output_rules import bytes_as_int
from course.protocols import Case
from solutions.rope_mla import mla_cache_bytes

_ARGS = ("batch", "seq_len", "num_layers", "kv_lora_rank", "qk_rope_head_dim", "bytes_per_elem")


def _case(note: str, *args: int) -> Case:
    named = "，".join(f"{name}={value}" for name, value in zip(_ARGS, args))
    return Case(f"{note}：{named}", args)


def cases() -> list[Case]:
    return public([
        _case("教程里的例子：一层一个 token，按元素个数算（64 维 latent + 26 维 rope key = 90）", 1, 1, 1, 64, 26, 1),
        _case("DeepSeek-V2 一层一个 token，按元素个数算（512 + 64 = 576）", 1, 1, 1, 512, 64, 1),
        _case("每个参数都不同（float32，4 字节）", 3, 5, 7, 16, 8, 4),
        _case("DeepSeek-V2：60 层，bf16，batch 4，32768 个 token", 4, 32768, 60, 512, 64, 2),
        _case("很大的缓存：结果超过 2³¹，用 Python 的 int 不会溢出", 16, 131072, 61, 512, 64, 2),
    ], 0, 2, 4)


def _dropping(position: int):
    """mla_cache_bytes with the argument at ``position`` left out of the product."""
    return lambda *args: mla_cache_bytes(*(1 if i == position else a for i, a in enumerate(args)))


MISTAKES = (
    Mistake("返回了 float 而不是 int", "字节数是整数：全用整数相乘，不要用 / 或浮点数。",
            matches=lambda case, got: isinstance(got, float) and got == mla_cache_bytes(*case.args)),
    Mistake("忘了 rope key", "每个位置除了 latent，还要存一个所有头共用的 rope key：kv_lora_rank + qk_rope_head_dim 个数。",
            lambda b, t, n, r, d, e: mla_cache_bytes(b, t, n, r, 0, e)),
    Mistake("乘了 2：MLA 不再分别存 K 和 V", "K 和 V 都从同一个 latent 里还原出来：每个位置只存一份 latent（和一个 rope key）。",
            lambda *args: 2 * mla_cache_bytes(*args)),
    Mistake("忘了乘 bytes_per_elem：算的是元素个数，不是字节数", "每个数占 bytes_per_elem 个字节（bf16 是 2）。",
            _dropping(5)),
    Mistake("忘了乘层数", "每一层都有自己的缓存。", _dropping(2)),
    Mistake("忘了乘 batch", "batch 里每条序列都有自己的缓存。", _dropping(0)),
    Mistake("忘了乘 seq_len", "缓存里每个位置都存一份。", _dropping(1)),
)

EXERCISE = Exercise("mla_cache_bytes", 1, mla_cache_bytes, cases, MISTAKES, verify=bytes_as_int)
