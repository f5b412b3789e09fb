"""The protocols that watch how the code computes, not only what it returns: online softmax takes the keys
a block at a time (``call_blockwise``), a chunked rule updates its state once a chunk (``call_chunkwise``),
FlashAttention's passes hold one tile of scores at a time and skip the causal tiles (``call_tiled``).
Each stops the student's code, with an error saying why, at the first step the rule forbids.

The exercises of ``call_blockwise`` and ``call_tiled`` are what torch's own CPU flash attention does in C++
(``scaled_dot_product_attention``'s fused kernel, which returns the log-sum-exp too): while they are graded, that
kernel raises ``FlashKernelRefused`` (``refuse_flash_kernels``, ``flash_kernels_refused``)."""
import contextlib
import ctypes
import functools
import warnings

import torch

from course.protocols.case import Case
from course.protocols.recurrent import call_rule


def call_blockwise(fn, case: Case):
    """``fn(q, k, v, mask=None, block_size=16)``, stopped at the first matrix product that gives scores for more
    than ``block_size`` keys at once (``WholeScores``)."""
    q, k, v = case.args[:3]
    block_size = case.kwargs.get("block_size", case.args[4] if len(case.args) > 4 else 16)
    with _BlockWatch(q.shape[-2], k.shape[-2], block_size, (q.shape[-1], v.shape[-1])):
        return fn(*case.args, **case.kwargs)


class WholeScores(RuntimeError):
    """Raised in the student's code at the matrix product that gives scores for more keys than one block."""


_PRODUCTS = {torch.matmul, torch.Tensor.matmul, torch.Tensor.__matmul__, torch.Tensor.__rmatmul__, torch.bmm,
             torch.Tensor.bmm, torch.mm, torch.Tensor.mm, torch.baddbmm, torch.einsum, torch.tensordot,
             torch.nn.functional.linear}


class _ProductWatch(torch.overrides.TorchFunctionMode):
    """Hands the shape of every floating-point matrix product the code makes (a table, 2-D or more) to ``_check``,
    which raises where the rule is broken. Only products: a broadcast by mistake (a running sum without keepdim)
    makes tables of such shapes too, and is not what a watch looks for."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        result = func(*args, **(kwargs or {}))
        if func in _PRODUCTS and isinstance(result, torch.Tensor) and result.is_floating_point() and result.dim() >= 2:
            self._check(tuple(result.shape))
        return result

    def _check(self, shape: tuple[int, ...]):
        raise NotImplementedError


class _BlockWatch(_ProductWatch):
    """Watches the matrix products of an attention: one that gives scores of ``Tq`` queries for more than
    ``block_size`` keys (``[..., Tq, n]`` or ``[..., n, Tq]``, n > block_size; n is not D or Dv, which the
    products with v have), or of some queries for all ``Tk`` keys (queries taken a block at a time instead),
    means the keys were not taken a block at a time."""

    def __init__(self, q_len: int, k_len: int, block_size: int, dims: tuple[int, ...]):
        super().__init__()
        self.q_len, self.k_len, self.block_size, self.dims = q_len, k_len, block_size, dims

    def _check(self, shape: tuple[int, ...]):
        rows, cols = shape[-2:]
        width = (cols if rows == self.q_len or cols == self.k_len else
                 rows if cols == self.q_len or rows == self.k_len else 0)
        if width > self.block_size and width not in self.dims:
            raise WholeScores(f"这一步算出了形状 {list(shape)} 的浮点张量：一次处理了 {width} 个 key，可 block_size = "
                              f"{self.block_size}。online softmax 每次只处理 block_size 个 key：分数、exp 和它们的和都按块算，"
                              "再用 running max 和 running sum 把各块接起来。")


def call_chunkwise(fn, case: Case) -> tuple:
    """``call_rule`` for a chunked rule ``fn(q, k, v, g, beta, chunk_size=64, state=None)``, stopped once a call
    has made more state-shaped tensors than a few per chunk (``PerPosition``): the recurrent loop, one position
    at a time, gives the same numbers but is not the chunked form. Watched only where the shapes are unambiguous."""
    q, v = case.args[0], case.args[2]
    key_dim, value_dim = q.shape[-1], v.shape[-1]
    chunk_size = case.kwargs.get("chunk_size", 64)
    split = case.kwargs.get("split")
    lengths = {q.shape[-2]} if split is None else {split, q.shape[-2] - split}
    ambiguous = {length for t in lengths for length in (t, min(t, chunk_size), t % chunk_size)}
    if key_dim == value_dim or {key_dim, value_dim} & ambiguous:
        return call_rule(fn, case)

    @functools.wraps(fn)
    def watched(q, *args, **kwargs):
        with _StateWatch(key_dim, value_dim, q.shape[-2], chunk_size):
            return fn(q, *args, **kwargs)
    return call_rule(watched, case)


class PerPosition(RuntimeError):
    """Raised in the student's code once it has made more state-shaped tensors than a chunked rule would."""


class _StateWatch(torch.overrides.TorchFunctionMode):
    """Counts the float tensors shaped like the state, ``[..., Dk, Dv]`` or ``[..., Dv, Dk]``, that the code
    makes: a rule that works a chunk at a time makes a few per chunk (the decayed state, the chunk's write, their
    sum), one that steps through the positions makes at least one per position. Only sound where no other
    tensor of the rule can have that shape: Dk ≠ Dv, and neither is T or a chunk's length (see ``call_chunkwise``)."""

    PER_CHUNK, SPARE = 8, 8  # generous: Hugging Face's chunked rule makes 3 per chunk and 2 more

    def __init__(self, key_dim: int, value_dim: int, length: int, chunk_size: int):
        super().__init__()
        self.shapes = {(key_dim, value_dim), (value_dim, key_dim)}
        self.length, self.chunk_size, self.made = length, chunk_size, 0
        self.chunks = -(-length // chunk_size)
        self.limit = self.PER_CHUNK * self.chunks + self.SPARE

    def __torch_function__(self, func, types, args=(), kwargs=None):
        result = func(*args, **(kwargs or {}))
        if (isinstance(result, torch.Tensor) and result.is_floating_point() and result.dim() >= 2
                and tuple(result.shape[-2:]) in self.shapes):
            self.made += 1
            if self.made > self.limit:
                raise PerPosition(f"到这一步，代码已经算出了 {self.made} 个状态形状 {list(result.shape)} 的张量，可 T = "
                                  f"{self.length}、chunk_size = {self.chunk_size} 只有 {self.chunks} 块：按块计算时，每块只更新"
                                  "一次状态（块内用矩阵乘法一次算完），不会每个位置都更新一次。")
        return result


def call_tiled(fn, case: Case):
    """``fn(q, k, v, ..., causal=False, block_q=16, block_k=16)`` (09's two passes), stopped at the first matrix
    product that gives a table of scores larger than one ``[block_q, block_k]`` tile (``TileTooLarge``), or once
    it has made more tiles than the causal rule leaves to compute (``TilesNotSkipped``). Watched only where the
    shapes are unambiguous (``TileWatch.sound``)."""
    q, k, v = case.args[:3]
    settings = {"causal": False, "block_q": 16, "block_k": 16, **case.kwargs}
    backward = len(case.args) > 3  # (q, k, v, o, lse, do): it makes dP beside each S
    watch = TileWatch(q, k, v, settings["causal"], settings["block_q"], settings["block_k"], 3 if backward else 2)
    with watch if watch.sound else contextlib.nullcontext():
        return fn(*case.args, **case.kwargs)


class TileTooLarge(RuntimeError):
    """Raised in the student's code at the matrix product that gives a table larger than one score tile."""


class TilesNotSkipped(RuntimeError):
    """Raised in the student's code once it has made more score tiles than the causal rule leaves to compute."""


class TileWatch(_ProductWatch):
    """Watches the matrix products of FlashAttention's passes. A product whose last two dims are a number of
    queries and a number of keys (the whole lengths, or the lengths of their tiles), either way round, is a table
    of scores (S, or dP = dO Vᵀ in the backward pass): it may be no larger than one tile, and there may be no more
    than ``per_tile`` of them for each tile that the causal rule leaves to compute, so that the tiles wholly above
    the diagonal are skipped. ``per_tile``: S once, and once more for code that multiplies it out twice (2); the
    backward pass also makes dP (3)."""

    SPARE = 2

    def __init__(self, q, k, v, causal: bool, block_q: int, block_k: int, per_tile: int):
        super().__init__()
        q_len, k_len = q.shape[-2], k.shape[-2]
        self.block_q, self.block_k = block_q, block_k
        self.q_sizes, self.k_sizes = _tile_lengths(q_len, block_q), _tile_lengths(k_len, block_k)
        others = {*q.shape[:-2], q.shape[-1], v.shape[-1], 1}
        self.sound = not others & (self.q_sizes | self.k_sizes)
        offset = k_len - q_len
        self.needed = sum(1 for q_start in range(0, q_len, block_q) for k_start in range(0, k_len, block_k)
                          if not causal or k_start <= offset + min(q_start + block_q, q_len) - 1)
        self.causal, self.per_tile = causal, per_tile
        self.limit, self.made = per_tile * self.needed + self.SPARE, 0

    def _check(self, shape: tuple[int, ...]):
        rows, cols = shape[-2:]
        queries_first = rows in self.q_sizes and cols in self.k_sizes
        keys_first = rows in self.k_sizes and cols in self.q_sizes
        if not (queries_first or keys_first):
            return
        if not ((queries_first and rows <= self.block_q and cols <= self.block_k)
                or (keys_first and rows <= self.block_k and cols <= self.block_q)):
            raise TileTooLarge(f"这一步的矩阵乘法得到了形状 {list(shape)} 的表（query 数 × key 数），比一块 [block_q, block_k] = "
                               f"[{self.block_q}, {self.block_k}] 大。FlashAttention 每次只持有一块分数：query 按 block_q、"
                               "key 按 block_k 切开，一块一块地算。")
        self.made += 1
        if self.made > self.limit:
            why = ("causal=True 时，一块 key 的第一个位置在这一块 query 的最后一个位置（Tk − Tq + q_end − 1）之后，整块都被遮住："
                   "跳过它，不要算完再 mask。" if self.causal else "每一块的分数只需要乘出一次（反向传播里再加一次 dP）。")
            raise TilesNotSkipped(f"到这一步，矩阵乘法已经得到了 {self.made} 张块大小的表（query 数 × key 数），可这个例子只有 "
                                  f"{self.needed} 块要算，每块最多 {self.per_tile} 张（另有 {self.SPARE} 张余量）。{why}")


def _tile_lengths(length: int, block: int) -> set[int]:
    """The whole ``length`` and the lengths of its tiles of ``block``."""
    return {length, min(block, length), length % block or min(block, length)}


# torch's CPU flash attention, forward and backward, as the dispatcher names them.
FLASH_KERNELS = ("_scaled_dot_product_flash_attention_for_cpu", "_scaled_dot_product_flash_attention_for_cpu_backward")
# The protocols whose exercises may not call them.
REFUSING_FLASH = ("call_blockwise", "call_tiled")


class FlashKernelRefused(RuntimeError):
    """Raised by torch's CPU flash-attention kernels while an exercise of ``REFUSING_FLASH`` is graded."""


def _refuse(*args, **kwargs):
    raise FlashKernelRefused("这一题不能用 torch 自带的 flash attention（scaled_dot_product_attention 在 CPU 上调用的融合内核）："
                             "它在 C++ 里替你做了这一题要写的按块计算。请自己写出分数、running max 和 running sum 的循环。")


def _refusing():
    """A registration (torch's ``_DispatchModule``) that makes ``FLASH_KERNELS`` raise, until it is reset."""
    module = torch._C._dispatch_library("IMPL", "aten", "CPU", __file__, 0)
    with warnings.catch_warnings():  # torch warns that a kernel is overridden
        warnings.simplefilter("ignore")
        for name in FLASH_KERNELS:
            module.impl(name, "CPU", _refuse, False)
    return module


def refuse_flash_kernels() -> None:
    """Make ``FLASH_KERNELS`` raise for the rest of this process: the sandbox's child calls this before the
    student's code runs. The registration is held by a reference no Python object holds (a ``_DispatchModule`` is
    no object the garbage collector tracks), so the code under test can neither find it nor undo it."""
    ctypes.pythonapi.Py_IncRef(ctypes.py_object(_refusing()))


@contextlib.contextmanager
def flash_kernels_refused(call: str):
    """Inside, ``FLASH_KERNELS`` raise when ``call`` (a protocol's name) is one of ``REFUSING_FLASH``; they work
    again after (the notebook's check, in the student's kernel)."""
    if call not in REFUSING_FLASH:
        yield
        return
    module = _refusing()
    try:
        yield
    finally:
        module.reset()
