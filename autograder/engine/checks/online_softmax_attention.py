"""Check of ``online_softmax_attention(q, k, v, mask=None, block_size=16)`` → ``output [..., Tq, Dv]``, equal to
``attention(q, k, v, mask)[0]``, computed over blocks of keys (``protocols.call_blockwise`` stops code that holds
scores for more than one block); fully masked rows 0."""
import functools
import math

import torch

from autograder.engine.inputs.seeded import dtype_name, generator, randn, three_tokens
from autograder.engine.model import Budget, Exercise, Mistake, public
from course.protocols import Case, call_blockwise
from solutions.attention_basics import attention_scores, causal_mask, online_softmax_attention, padding_mask


def cases() -> list[Case]:
    queries, keys, values = three_tokens()
    gen = generator(6)
    left_pad = padding_mask(torch.tensor([[1] * 20, [0] * 7 + [1] * 13]))

    def qkv(lead, q_len, k_len, dim, dim_v, dtype=torch.float32, scale=1.0):
        return (randn(gen, *lead, q_len, dim, dtype=dtype, scale=scale), randn(gen, *lead, k_len, dim, dtype=dtype),
                randn(gen, *lead, k_len, dim_v, dtype=dtype))

    # Keys that grow along the sequence: the max of a later block is bigger, so what was summed must be rescaled.
    growing_k = randn(gen, 2, 2, 24, 4) * torch.linspace(0.5, 4.0, 24).unsqueeze(-1)
    growing = (randn(gen, 2, 2, 5, 4, scale=2.0), growing_k, randn(gen, 2, 2, 24, 3))
    # Every score near -1e4: exp of an unshifted score is 0 everywhere, 0/0 after the sum.
    far = (randn(gen, 2, 6, 4).abs() * 100, -randn(gen, 2, 30, 4).abs() * 100 - 20, randn(gen, 2, 30, 4))
    blind_queries = torch.tensor([[1, 1, 1, 1, 1, 1], [0, 0, 0, 1, 1, 1]]).bool()[:, None, :, None]
    seen = [
        Case("三个 token 的手算例子，causal_mask(3)，block_size=1：一次一个 key",
             (queries, keys, values, causal_mask(3)), {"block_size": 1}),
        Case("三个 token 的手算例子，mask=None，block_size=2：第二块只有一个 key", (queries, keys, values), {"block_size": 2}),
        Case("q [2, 2, 5, 4]，k 越往后越长（后面的块最大分数更大），Tk = 24，block_size=8",
             growing, {"block_size": 8}),
        Case("q [2, 2, 6, 8]，k/v [2, 2, 37, 8]，causal_mask(6, 37)，block_size=16：37 不是 16 的倍数",
             (*qkv((2, 2), 6, 37, 8, 8), causal_mask(6, 37)), {"block_size": 16}),
        Case("不给 block_size（默认 16）：q [1, 3, 4, 8]，k/v [1, 3, 40, 8]，Dv = 5，mask=None",
             (*qkv((1, 3), 4, 40, 8, 5)[:2], randn(gen, 1, 3, 40, 5))),
        Case("解码一步：q [2, 2, 1, 8]，k/v [2, 2, 19, 8]，causal_mask(1, 19)，block_size=4",
             (*qkv((2, 2), 1, 19, 8, 8), causal_mask(1, 19)), {"block_size": 4}),
        Case("k/v 比一块还短：Tk = 5，block_size=16", (*qkv((2,), 3, 5, 4, 4), causal_mask(3, 5)), {"block_size": 16}),
        Case("左侧 pad & causal：[2, 1, 20, 4]，第二句前 7 个 query 整行被遮住，输出应为 0；block_size=6",
             (*qkv((2, 1), 20, 20, 4, 4), left_pad & causal_mask(20)), {"block_size": 6}),
        Case("mask 的形状是 [2, 1, 6, 1]（只遮 query：第二句的前 3 个 query 什么都不看），Tk = 20，block_size=8",
             (*qkv((2, 1), 6, 20, 4, 4), blind_queries), {"block_size": 8}),
        Case("分数都在 −1e4 上下（q 和 k 方向相反，很长），Tk = 30，block_size=8", far, {"block_size": 8}),
        Case("分数是 ±1e4 量级，q [2, 2, 4, 8]，Tk = 33，causal_mask(4, 33)，block_size=8",
             (*qkv((2, 2), 4, 33, 8, 8, scale=300.0), causal_mask(4, 33)), {"block_size": 8}),
        Case("q/k/v [3, 7, 8] / [3, 21, 8]，float64，block_size=5", qkv((3,), 7, 21, 8, 8, torch.float64), {"block_size": 5}),
        Case(f"q [2, 2, 6, 16]，k/v [2, 2, 48, 16]，causal_mask(6, 48)，block_size=16，{dtype_name(torch.bfloat16)}",
             (*qkv((2, 2), 6, 48, 16, 16, torch.bfloat16), causal_mask(6, 48)), {"block_size": 16}),
    ]
    return public(seen + _masked_extremes(gen), 0, 1, 3, 4, 7, 8, 9, 10, 12, 13, 14)  # drawn last: the cases above keep their numbers


def _masked_extremes(gen) -> list[Case]:
    """Where the masked keys decide what a careless running max does (bugs shipped in real kernels): a row whose
    first blocks are all masked before scores far below 0, and masked keys that score far above the visible ones."""
    pad = padding_mask(torch.tensor([[0] * 10 + [1] * 22, [1] * 32]))
    q_far = randn(gen, 2, 1, 6, 4).abs() * 100
    k_far = -randn(gen, 2, 1, 32, 4).abs() * 100 - 20
    q_pos = randn(gen, 2, 2, 5, 8).abs() + 0.5
    k_big = randn(gen, 2, 2, 16, 8)
    k_big[0, :, :6] = 300.0  # the first sentence's padding keys, lined up with every (positive) query
    pad_big = padding_mask(torch.tensor([[0] * 6 + [1] * 10, [1] * 16]))
    return [
        Case("左侧 pad：第一句前 10 个 key 被遮住（block_size=8，第一块整块被遮住），看得见的分数都在 −1e4 上下",
             (q_far, k_far, randn(gen, 2, 1, 32, 4), pad), {"block_size": 8}),
        Case("左侧 pad：第一句被遮住的 6 个 key 分数最大（+983 到 +1371），看得见的分数很普通；block_size=4",
             (q_pos, k_big, randn(gen, 2, 2, 16, 8), pad_big & causal_mask(5, 16)), {"block_size": 4}),
    ]


def _blocks(q, k, v, mask, block_size, fill=float("-inf")):
    """(scores, raw scores, v) of each block of keys: the scores masked with ``fill`` (-inf), and as they were."""
    if mask is not None:
        mask = mask.expand(*mask.shape[:-1], k.shape[-2])
    for start in range(0, k.shape[-2], block_size):
        block = slice(start, start + block_size)
        raw = attention_scores(q, k[..., block, :])
        scores = raw if mask is None else raw.masked_fill(~mask[..., block], fill)
        yield scores, raw, v[..., block, :]


def _online(q, k, v, mask=None, block_size=16, *, rescale_out=True, rescale_sum=True, start_max=float("-inf"),
            guard_shift=True, guard_divide=True, keep_shift=False, max_before_mask=False, inverted=False,
            block_max_only=False, shift_by_block=False, shift_by_old=False, fill=float("-inf"), divide=True):
    """The running-max loop with one of its parts left out or wrong (each flag changed is one mistake):
    ``keep_shift`` keeps the shift (0 for a row that has seen no key yet) as the running max;
    ``max_before_mask`` takes each block's max over the scores before masking; ``inverted`` rescales by
    ``exp(m′ − m)`` instead of ``exp(m − m′)``; ``block_max_only`` shifts each block by its own max, never the max
    of the blocks before it; ``shift_by_block`` shifts the block's exponentials by the block's own max while the
    sums are rescaled to the running max; ``shift_by_old`` shifts them by the running max before this block's;
    ``fill`` is what masked scores are set to (``"lowest"``: the dtype's lowest number); without ``divide`` the sum
    of the weighted values is returned as it is."""
    fill = torch.finfo(q.dtype).min if fill == "lowest" else fill
    rows = (q @ k[..., :1, :].mT).shape[:-1]
    running_max = torch.full((*rows, 1), start_max, dtype=q.dtype)
    running_sum = torch.zeros(*rows, 1, dtype=q.dtype)
    out = torch.zeros(*rows, v.shape[-1], dtype=q.dtype)
    for scores, raw, values in _blocks(q, k, v, mask, block_size, fill):
        block_max = (raw if max_before_mask else scores).amax(dim=-1, keepdim=True)
        new_max = block_max if block_max_only else torch.maximum(running_max, block_max)
        shift = new_max.nan_to_num(neginf=0.0) if guard_shift else new_max
        own = (block_max.nan_to_num(neginf=0.0) if shift_by_block else
               running_max.nan_to_num(neginf=0.0) if shift_by_old else shift)
        weights = torch.exp(scores - own)
        rescale = torch.exp(shift - running_max) if inverted else torch.exp(running_max - shift)
        running_sum = running_sum * (rescale if rescale_sum else 1.0) + weights.sum(dim=-1, keepdim=True)
        out = out * (rescale if rescale_out else 1.0) + weights @ values
        running_max = shift if keep_shift else new_max
    if not divide:
        return out
    if guard_divide:
        return torch.where(running_sum > 0, out / running_sum, 0.0)
    return out / running_sum


def _wrong(**how):
    """``_online`` with the flags ``how`` (one mistake), called as the exercise is."""
    return lambda q, k, v, m=None, block_size=16: _online(q, k, v, m, block_size, **how)


def _per_block(q, k, v, mask=None, block_size=16, mean=False):
    """Each block's own softmax, the block outputs added up (or averaged)."""
    outs = [torch.softmax(s, dim=-1).nan_to_num(0.0) @ values for s, _, values in _blocks(q, k, v, mask, block_size)]
    return sum(outs) / (len(outs) if mean else 1)


def _last_block_dropped(q, k, v, mask=None, block_size=16):
    whole = k.shape[-2] // block_size * block_size
    if whole == 0:
        return torch.zeros(*(q @ k[..., :1, :].mT).shape[:-1], v.shape[-1], dtype=q.dtype)
    return _online(q, k[..., :whole, :], v[..., :whole, :], None if mask is None else
                   mask.expand(*mask.shape[:-1], k.shape[-2])[..., :whole], block_size)


UNDERFLOW = -746.0  # exp of anything below is 0, even in float64


def _overflowed(case: Case, got) -> bool:
    """exp of raw scores: where some score is far from 0, masked or not, the output is not finite or it is zero on a
    row that sees keys (exp overflowed to inf, then inf/inf or inf·0; or it underflowed to 0, then z = 0). Where
    every visible score lies below −745, exp underflows on every row, so every row that sees keys is lost."""
    q, k = case.args[:2]
    mask = case.args[3] if len(case.args) > 3 else None
    scores = attention_scores(q.double(), k.double())
    if not isinstance(got, torch.Tensor) or got.shape[:-1] != scores.shape[:-1] or scores.abs().max() < 100:
        return False
    sees = torch.ones(scores.shape[:-1], dtype=torch.bool) if mask is None else mask.expand(scores.shape).any(-1)
    lost = ~got.isfinite().all(-1) | (got == 0).all(-1)
    return bool(lost[sees].all() if _scores_below(case, UNDERFLOW) else lost[sees].any())


def _scores_below(case: Case, bound: float) -> bool:
    """Whether every score a query may attend to in ``case`` lies below ``bound``."""
    q, k = case.args[:2]
    mask = case.args[3] if len(case.args) > 3 else None
    scores = attention_scores(q.double(), k.double())
    seen = scores if mask is None else scores.masked_select(mask.expand(scores.shape))
    return bool(seen.numel()) and bool((seen < bound).all())


def _unscaled(q, k, v, mask=None, block_size=16):
    return _online(q * math.sqrt(q.shape[-1]), k, v, mask, block_size)


_FROM_ZERO = "running max 从 0 开始，而不是 −inf"
_FROM_ZERO_HINT = ("running max 要从 −inf 开始：从 0 开始时，分数全都远小于 0 的行 exp 全部下溢成 0，z = 0，这一行就什么也没取到。"
                   "整行被遮住的 NaN 要在平移时处理：max 还是 −inf 时按 0 来平移。")

WHOLE_SCORES = Mistake("一次算出了多于 block_size 个 key 的分数", "online softmax 的意义就在于每次只持有一块分数 "
                       "[..., Tq, block_size]：按 block_size 切开 k、v（和 mask 的最后一维），一块一块地更新。",
                       error="WholeScores")

# Also FlashAttention's (09): the same loop, done for the student by torch's own kernel (protocols.REFUSING_FLASH).
FLASH_KERNEL_USED = Mistake("用了 torch 自带的 flash attention（scaled_dot_product_attention），没有自己按块算",
                            "F.scaled_dot_product_attention 在 CPU 上调用的融合内核，正是这一题要你自己写的按块计算：评分时它会报错。"
                            "用 for 循环按块切开 k、v，自己维护 running max、running sum 和加权的 v。", error="FlashKernelRefused")

MISTAKES = (
    Mistake("最大值变大时，累加的输出没有跟着缩放", "新的块把 running max 从 m 抬到 m′ 时，之前累加的 Σ exp(s − m)·v 都要乘 exp(m − m′)，"
            "和 running sum 一样。", _wrong(rescale_out=False)),
    Mistake("最大值变大时，running sum 没有跟着缩放", "新的块把 running max 从 m 抬到 m′ 时，之前的和 Σ exp(s − m) 也要乘 exp(m − m′)，"
            "和累加的输出一样。", _wrong(rescale_sum=False)),
    Mistake("最大值变大时，running sum 和累加的输出都没有跟着缩放", "之前的 z 和 a 都是按旧的 m 平移过的：running max 从 m 抬到 m′ 时，"
            "两个都要乘 exp(m − m′)，换到新的基准上。",
            _wrong(rescale_out=False, rescale_sum=False)),
    *(Mistake(_FROM_ZERO, _FROM_ZERO_HINT, _wrong(start_max=0.0, guard_divide=guard)) for guard in (True, False)),
    Mistake("缩放因子写反了：乘的是 exp(m′ − m)", "running max 从 m 变成 m′ ≥ m 时，之前按 m 平移的和要换到 m′ 上："
            "exp(s − m) · exp(m − m′) = exp(s − m′)，所以乘 exp(m − m′) ≤ 1，不是 exp(m′ − m)。",
            _wrong(inverted=True)),
    Mistake("每一块只用这一块自己的最大值平移，没有和之前的 running max 取较大的", "m′ = max(m, 这一块的最大值)："
            "running max 只能变大。只用这一块的最大值时，后面的块分数小得多，exp(m − m′) 就会溢出成 inf。",
            _wrong(block_max_only=True)),
    Mistake("每一块的 exp 减的是这一块自己的最大值，不是 running max", "之前的和按 m′ 换了基准，这一块的 exp(s − m_块) "
            "也要在同一个基准上：p = exp(s − m′)，m′ = max(m, m_块)。减 m_块 时，最大值比 m′ 小的块权重大了 exp(m′ − m_块) 倍。",
            _wrong(shift_by_block=True)),
    Mistake("这一块的 exp 减的是更新之前的 running max", "先把 running max 更新成 m′ = max(m, 这一块的最大值)，再算这一块的 "
            "p = exp(s − m′)：之前的和乘 exp(m − m′) 换到了 m′ 上，这一块的 exp 也要在 m′ 上，两者才能相加。",
            _wrong(shift_by_old=True)),
    Mistake("被遮住的分数填的是 0，不是 −inf", "填 0 的 key 仍然有 exp(0 − m) 的权重，也就仍然被看见了：被遮住的分数要填 "
            "float(\"-inf\")，exp 之后才正好是 0。", _wrong(fill=0.0)),
    Mistake("被遮住的分数填的是 dtype 的最小值（torch.finfo(dtype).min），不是 −inf",
            "有看得见的 key 时两者一样；可整行都被遮住时，running max 就是这个最小值，每个被遮住的 key 都得到 exp(0) = 1，"
            "输出成了 v 的平均，而不是 0。online softmax 里填 float(\"-inf\")，平移时把 −inf 的 max 换成 0，最后只在 z > 0 处相除。",
            _wrong(fill="lowest")),
    Mistake("最后没有除以 running sum", "循环结束时 a = Σ exp(s − m)·v 只是分子：输出是 a / z（z 是 running sum），"
            "整行被遮住（z = 0）的地方输出 0。", _wrong(divide=False)),
    Mistake("每一块单独做了 softmax，再把各块的输出平均", "各块的 softmax 分母不一样，块里 exp 的总量也不一样，不能等权平均："
            "用同一个 running max 累加分子和分母，最后除一次。", functools.partial(_per_block, mean=True)),
    Mistake("每一块单独做了 softmax，再把各块的输出加起来", "各块的 softmax 分母不一样，不能分开归一化：先用同一个 running max "
            "累加分子和分母，最后除一次。", _per_block),
    *(Mistake("running max 还是 −inf 时直接拿它平移：exp(−inf − (−inf)) 是 NaN",
              "一个 query 到目前为止看得见的 key 全被遮住时，running max 还是 −inf：这时按 0 来平移"
              "（m_new.masked_fill(m_new == float(\"-inf\"), 0.0)），exp(−inf − 0) = 0，不会出 NaN。",
              _wrong(guard_shift=False, guard_divide=guard))
      for guard in (False, True)),
    Mistake("整行都被遮住时得到了 NaN：最后的 a / z 是 0/0", "整行都被遮住的 query 一个 key 也没看到，z = 0：只在 z > 0 的地方相除，"
            "其余输出 0（torch.where(z > 0, a / z, 0.0)）。",
            _wrong(guard_divide=False)),
    Mistake("最后一个不满 block_size 的块被丢掉了", "Tk 不是 block_size 的倍数时，最后一块比 block_size 短，也要算："
            "range(0, Tk, block_size) 加切片 [start:start + block_size] 会自动处理。", _last_block_dropped,
            # With fewer keys than one block nothing is left; what such code returns then is its own business.
            tried_on=lambda case: case.args[1].shape[-2] >= case.kwargs.get("block_size", 16)),
    Mistake("一个 key 也还没看到的行，running max 被记成了 0（应该还是 −inf）",
            "平移时把 −inf 换成 0 是对的，可 running max 本身要保持 −inf：记成 0 之后，后面看得见的分数都远小于 0 时，"
            "exp(s − 0) 全部下溢成 0，这一行就什么也没取到。用换过的值去平移，running max 仍然记 m_new。",
            _wrong(keep_shift=True)),
    Mistake("每块的最大值是在 mask 之前取的：被遮住的 key 也算进了 running max",
            "先 mask（被遮住的分数填 −inf），再取这一块的最大值：被遮住的 key 分数最大时，用它平移会让看得见的 exp 全部下溢成 0。",
            _wrong(max_before_mask=True)),
    Mistake("exp 之前没有减去 running max", "分数上 1e4 时 exp 会溢出成 inf（远小于 0 时下溢成 0）：每一块都减去当前的 "
            "running max 再 exp，和 masked_softmax 里减去每行最大值是同一个道理。", matches=_overflowed,
            # Every score below −745: exp underflows even in float64, so such code cannot come out right there.
            tried_on=lambda case: _scores_below(case, UNDERFLOW)),
    Mistake("忘了除以 √D", "每一块的分数也是 q·k/√D：用 attention_scores 算每一块的分数。", _unscaled),
    WHOLE_SCORES,
    FLASH_KERNEL_USED,
)

# The long-keys case: the whole table of scores is 256 MiB in float32 (its softmax as much again), one block of
# them 2 MiB. Code held to one block at a time rises by about 20-40 MiB (its imports included).
_LONG = {"q_len": 1024, "k_len": 65536, "dim": 8, "block_size": 512}
_TABLE_MIB = _LONG["q_len"] * _LONG["k_len"] * 4 // 2**20


def _long_keys() -> list[Case]:
    gen = generator(7)
    q_len, k_len, dim, block_size = _LONG.values()
    return [Case(f"很长的 k/v：q [1, 1, {q_len}, {dim}]，k/v [1, 1, {k_len}, {dim}]，mask=None，block_size={block_size}",
                 (randn(gen, 1, 1, q_len, dim), randn(gen, 1, 1, k_len, dim), randn(gen, 1, 1, k_len, dim)),
                 {"block_size": block_size})]


BUDGET = Budget(_long_keys, WHOLE_SCORES,
                f"整张分数表 [{_LONG['q_len']}, {_LONG['k_len']}] 在 float32 下就有 {_TABLE_MIB} MiB，一块 "
                f"[{_LONG['q_len']}, {_LONG['block_size']}] 只有 {_TABLE_MIB * _LONG['block_size'] // _LONG['k_len']} MiB。"
                "这个上限是评分的沙盒在你的进程之外量的：一块一块地算才放得下。", memory_bytes=160 * 2**20)

EXERCISE = Exercise("online_softmax_attention", 3, online_softmax_attention, cases, MISTAKES,
                    call=call_blockwise, uses=("attention_scores",), budget=BUDGET)
