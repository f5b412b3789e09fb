"""Check of ``kv_cache_bytes(batch, seq_len, num_layers, num_kv_heads, head_dim, bytes_per_elem)`` → int."""
from autograder.engine.model import Exercise, Mistake, public
from course.output_rules import bytes_as_int
from course.protocols import Case
from solutions.gqa_kv_cache import kv_cache_bytes

_ARGS = ("batch", "seq_len", "num_layers", "num_kv_heads", "head_dim", "bytes_per_elem")


def _case(note: str, *args: int) -> Case:
    named = "，".join(f"{name}={value}" for name, value in zip(_ARGS, args))
    return Case(f"{note}：{named}", args)


def cases() -> list[Case]:
    return public([
        # Seed 003's example, counted in numbers (bytes_per_elem=1): d_model 256, 8 heads of 32.
        _case("种子 003 的例子，MHA：8 个 KV 头，一层一个 token，按元素个数算", 1, 1, 1, 8, 32, 1),
        _case("种子 003 的例子，MQA：1 个 KV 头", 1, 1, 1, 1, 32, 1),
        _case("每个参数都不同（float32，4 字节）", 3, 5, 7, 2, 16, 4),
        _case("Qwen3.5-0.8B 一层、一个 token，按元素个数算（GQA，2 个 KV 头）", 1, 1, 1, 2, 256, 1),
        _case("Qwen3.5-0.8B 每个 token：6 个全注意力层，bf16", 1, 1, 6, 2, 256, 2),
        _case("Qwen3.5-0.8B，batch 4，32768 个 token", 4, 32768, 6, 2, 256, 2),
        _case("很大的缓存：结果超过 2³¹，用 Python 的 int 不会溢出", 8, 131072, 32, 8, 128, 2),
    ], 0, 2, 6)


def _dropping(position: int):
    """kv_cache_bytes with the argument at ``position`` left out of the product."""
    return lambda *args: kv_cache_bytes(*(1 if i == position else a for i, a in enumerate(args)))


MISTAKES = (
    Mistake("返回了 float 而不是 int", "字节数是整数：全用整数相乘，不要用 / 或浮点数。",
            matches=lambda case, got: isinstance(got, float) and got == kv_cache_bytes(*case.args)),
    Mistake("忘了乘 2：K 和 V 各存一份", "每个位置、每个 KV 头、每层都要存一个 key 向量和一个 value 向量。",
            lambda *args: kv_cache_bytes(*args) // 2),
    Mistake("忘了乘 bytes_per_elem：算的是元素个数，不是字节数", "每个数占 bytes_per_elem 个字节（bf16 是 2）。",
            _dropping(5)),
    Mistake("忘了乘层数", "每一层都有自己的 KV cache。", _dropping(2)),
    Mistake("忘了乘 batch", "batch 里每条序列都有自己的缓存。", _dropping(0)),
    Mistake("忘了乘 seq_len", "缓存里每个位置都存一份。", _dropping(1)),
)

EXERCISE = Exercise("kv_cache_bytes", 1, kv_cache_bytes, cases, MISTAKES, verify=bytes_as_int)
