"""Seeded inputs of 08's linear-attention rules: ``q, k [B, H, T, Dk]``, ``v [B, H, T, Dv]``, and per position
``g, beta [B, H, T]``, drawn as Qwen3.5's layer makes them, so that the state stays bounded however long
the input: keys of unit length, queries of length about one, ``β = sigmoid(·)`` in (0, 1) and
``g = −exp(·)·softplus(·) < 0``."""
import torch

from autograder.engine.inputs.seeded import dtype_name, randn


def unit(x: torch.Tensor) -> torch.Tensor:
    """``x`` scaled to unit length along the last dim (computed in float64, kept in x's dtype)."""
    x64 = x.double()
    return (x64 / x64.norm(dim=-1, keepdim=True)).to(x.dtype)


def qkv(gen: torch.Generator, batch: int, heads: int, seq: int, dk: int, dv: int, dtype=torch.float32) -> tuple:
    """``q, k, v``: unit keys, queries of length about one, values of unit size per entry."""
    q = randn(gen, batch, heads, seq, dk, dtype=dtype, scale=dk ** -0.5)
    k = unit(randn(gen, batch, heads, seq, dk, dtype=torch.float64)).to(dtype)
    return q, k, randn(gen, batch, heads, seq, dv, dtype=dtype)


def beta(gen: torch.Generator, batch: int, heads: int, seq: int, dtype=torch.float32) -> torch.Tensor:
    """Write strengths in (0, 1), ``[B, H, T]``."""
    return torch.sigmoid(randn(gen, batch, heads, seq, dtype=torch.float64)).to(dtype)


def decay(gen: torch.Generator, batch: int, heads: int, seq: int, dtype=torch.float32) -> torch.Tensor:
    """Log decays ``g < 0``, ``[B, H, T]``: ``exp(g)`` mostly between 0.3 and 1, as Qwen3.5's gates give."""
    a = randn(gen, batch, heads, seq, dtype=torch.float64)
    return (-torch.exp(randn(gen, heads, 1, dtype=torch.float64) * 0.5 - 1.0) * torch.nn.functional.softplus(a)).to(dtype)


def state(gen: torch.Generator, batch: int, heads: int, dk: int, dv: int, dtype=torch.float32) -> torch.Tensor:
    """A state to start from, ``[B, H, Dk, Dv]``, of the size a few writes leave."""
    return randn(gen, batch, heads, dk, dv, dtype=dtype, scale=0.5)


def describe(q: torch.Tensor, v: torch.Tensor) -> str:
    """How a case's label says its shapes and dtype."""
    batch, heads, seq, dk = q.shape
    return f"B={batch}，H={heads}，T={seq}，Dk={dk}，Dv={v.shape[-1]}，{dtype_name(q.dtype)}"
