"""The protocols that watch how the code computes, not only what it returns: online softmax takes the keys
a block at a time (``call_blockwise``), a chunked rule updates its state once a chunk (``call_chunkwise``).
Each stops the student's code, with an error saying why, at the first step the rule forbids."""
import functools

import torch

from autograder.engine.protocols.case import Case
from autograder.engine.protocols.recurrent import call_rule


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


class _BlockWatch(torch.overrides.TorchFunctionMode):
    """Watches the matrix products of an attention: one that gives scores of ``Tq`` queries for more than
    ``block_size`` keys (``[..., Tq, n]`` or ``[..., n, Tq]``, n > block_size; n is not D or Dv, which the
    products with v have), or of some queries for all ``Tk`` keys (queries taken a block at a time instead),
    means the keys were not taken a block at a time. Only products: a broadcast by mistake (a running sum
    without keepdim) makes tables of that shape too, and is not this."""

    def __init__(self, q_len: int, k_len: int, block_size: int, dims: tuple[int, ...]):
        super().__init__()
        self.q_len, self.k_len, self.block_size, self.dims = q_len, k_len, block_size, dims

    def __torch_function__(self, func, types, args=(), kwargs=None):
        result = func(*args, **(kwargs or {}))
        if func in _PRODUCTS and isinstance(result, torch.Tensor) and result.is_floating_point() and result.dim() >= 2:
            self._check(tuple(result.shape))
        return result

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
