"""Toy data for 01_attention_basics.

The three-token example: 今天 / 天气 / 不错 with 2-dimensional keys, values and queries, small
enough to work through by hand. And deterministic query/key/value vectors for any list of tokens,
so that heatmaps of longer sentences look the same on every machine.

Every function returns fresh tensors: a cell that edits one in place cannot change what another
cell, or the grader, gets.
"""
import zlib

import torch

# Width of the per-token embedding that sentence_qkv projects to q, k and v.
_EMBED_DIM = 16


def words() -> list[str]:
    """The three tokens of the hand-worked example, in sentence order."""
    return ["今天", "天气", "不错"]


def keys(dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """Keys of 今天 / 天气 / 不错, shape ``[3, 2]``: (1, 0), (0, 1), (0.5, 0.5)."""
    return torch.tensor([[1.0, 0.0], [0.0, 1.0], [0.5, 0.5]], dtype=dtype)


def values(dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """Values of 今天 / 天气 / 不错, shape ``[3, 2]``: (2, 0), (0, 2), (1, 1)."""
    return torch.tensor([[2.0, 0.0], [0.0, 2.0], [1.0, 1.0]], dtype=dtype)


def query(dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """The query of 不错, shape ``[2]``: (0, 4), which only looks along the axis where 天气's key points."""
    return torch.tensor([0.0, 4.0], dtype=dtype)


def queries(dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """One query per token, shape ``[3, 2]``: (0, 0) for 今天, (3, 0) for 天气, (0, 4) for 不错."""
    return torch.tensor([[0.0, 0.0], [3.0, 0.0], [0.0, 4.0]], dtype=dtype)


def sentence_qkv(
    tokens: list[str], head_dim: int = 8, seed: int = 0, dtype: torch.dtype = torch.float32
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Deterministic toy ``(q, k, v)`` for a list of tokens, each of shape ``[len(tokens), head_dim]``.

    Every token gets a fixed random embedding seeded by its own text, so the same token has the
    same vectors in every sentence and at every position (there is no positional information).
    Three fixed random matrices, seeded by ``seed``, project the embeddings to q, k and v. The
    numbers mean nothing linguistically; they only make the plots reproducible.
    """
    embeddings = torch.stack([_token_embedding(token, seed) for token in tokens])
    generator = torch.Generator().manual_seed(seed)
    # Scaled so that q and k entries have unit variance, which keeps the scores' spread near 1.
    projections = torch.randn(3, _EMBED_DIM, head_dim, generator=generator) / _EMBED_DIM**0.5
    q, k, v = (embeddings @ projection for projection in projections)
    return q.to(dtype), k.to(dtype), v.to(dtype)


def _token_embedding(token: str, seed: int) -> torch.Tensor:
    """A ``[_EMBED_DIM]`` vector that depends only on the token's text and ``seed``."""
    # crc32 rather than hash(): Python salts str hashes per process, which would change the plots.
    generator = torch.Generator().manual_seed((seed << 32) | zlib.crc32(token.encode("utf-8")))
    return torch.randn(_EMBED_DIM, generator=generator)
