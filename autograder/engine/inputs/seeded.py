"""Seeded inputs for the cases, so every run grades exactly the same numbers."""
import torch

from course import toy

SEED = 20260


def generator(salt: int) -> torch.Generator:
    """A generator seeded per exercise (``salt``) so that cases do not share their numbers."""
    return torch.Generator().manual_seed(SEED + salt)


def randn(gen: torch.Generator, *shape: int, dtype: torch.dtype = torch.float32, scale: float = 1.0) -> torch.Tensor:
    return (torch.randn(*shape, generator=gen, dtype=torch.float64) * scale).to(dtype)


def shape(t: torch.Tensor) -> str:
    return str(list(t.shape))


def dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def three_tokens():
    """The hand-calculation example: the three queries, keys and values of 今天 / 天气 / 不错, ``[3, 2]`` each."""
    return toy.queries(), toy.keys(), toy.values()
