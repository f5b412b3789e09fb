"""Reference for 02_multi_head: split and merge heads, and multi-head attention with its output projection.

Shapes: hidden states ``[B, T, hidden]``; per-head tensors ``[B, H, T, D]`` with ``hidden = H·D``.
"""
import torch
from torch import nn

from solutions.attention_basics import attention, causal_mask, padding_mask


def split_heads(x: torch.Tensor, num_heads: int) -> torch.Tensor:
    """``[B, T, H·D]`` -> ``[B, H, T, D]``: head ``h`` gets features ``h·D … (h+1)·D − 1`` of every token."""
    batch, seq, width = x.shape
    return x.reshape(batch, seq, num_heads, width // num_heads).permute(0, 2, 1, 3)


def merge_heads(x: torch.Tensor) -> torch.Tensor:
    """``[B, H, T, D]`` -> ``[B, T, H·D]``, the inverse of ``split_heads``: each token's heads side by side."""
    batch, heads, seq, dim = x.shape
    return x.permute(0, 2, 1, 3).reshape(batch, seq, heads * dim)


def attention_mask_for(q_len: int, k_len: int, attention_mask: torch.Tensor | None = None,
                       causal: bool = True) -> torch.Tensor | None:
    """The bool mask a module applies: causal (offset when ``k_len > q_len``) and/or key padding.

    ``attention_mask``: ``[B, k_len]`` of 0/1 or None. Returns a mask broadcastable to
    ``[B, H, q_len, k_len]``, or None when nothing is masked.
    """
    mask = causal_mask(q_len, k_len) if causal else None
    if attention_mask is not None:
        keys = padding_mask(attention_mask)
        mask = keys if mask is None else mask & keys
    return mask


class MultiHeadAttention(nn.Module):
    """Multi-head self-attention: ``H`` heads of width ``D = hidden / H``, concatenated, then ``o_proj``."""

    def __init__(self, hidden_size: int, num_heads: int):
        super().__init__()
        if hidden_size % num_heads:
            raise ValueError(f"hidden_size {hidden_size} is not divisible by num_heads {num_heads}")
        self.num_heads = num_heads
        self.q_proj = nn.Linear(hidden_size, hidden_size, bias=False)
        self.k_proj = nn.Linear(hidden_size, hidden_size, bias=False)
        self.v_proj = nn.Linear(hidden_size, hidden_size, bias=False)
        self.o_proj = nn.Linear(hidden_size, hidden_size, bias=False)

    def forward(self, x: torch.Tensor, attention_mask: torch.Tensor | None = None,
                causal: bool = True) -> torch.Tensor:
        """``x [B, T, hidden]``, ``attention_mask [B, T]`` of 0/1 -> ``[B, T, hidden]``."""
        q, k, v = (split_heads(proj(x), self.num_heads) for proj in (self.q_proj, self.k_proj, self.v_proj))
        mask = attention_mask_for(x.shape[1], x.shape[1], attention_mask, causal)
        out, _ = attention(q, k, v, mask)
        return self.o_proj(merge_heads(out))
