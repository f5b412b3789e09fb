"""Reference for 01_attention_basics: scores, masks, softmax and the weighted sum.

Conventions: attention tensors are ``[..., seq, head_dim]``; masks are ``torch.bool`` with
True = may attend, broadcastable against the ``[..., Tq, Tk]`` scores.
"""
import math

import torch


def attention_scores(q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    """``q [..., Tq, D]``, ``k [..., Tk, D]`` -> scores ``[..., Tq, Tk]`` scaled by ``1/sqrt(D)``."""
    return torch.matmul(q, k.transpose(-2, -1)) / math.sqrt(q.shape[-1])


def causal_mask(q_len: int, k_len: int | None = None) -> torch.Tensor:
    """Bool ``[Tq, Tk]``: query ``i`` sits at position ``k_len - q_len + i`` and sees keys up to it."""
    k_len = q_len if k_len is None else k_len
    query_pos = torch.arange(k_len - q_len, k_len).unsqueeze(1)
    key_pos = torch.arange(k_len).unsqueeze(0)
    return key_pos <= query_pos


def padding_mask(attention_mask: torch.Tensor) -> torch.Tensor:
    """``[B, Tk]`` of 0/1 (1 = real token) -> bool ``[B, 1, 1, Tk]``."""
    return (attention_mask != 0)[:, None, None, :]


def masked_softmax(scores: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
    """Softmax over the last dim of ``[..., Tq, Tk]``; masked entries and fully masked rows are 0."""
    if mask is None:
        return torch.softmax(scores, dim=-1)
    # Softmax of an all -inf row is NaN: compute on a filled copy, then zero what is masked.
    filled = scores.masked_fill(~mask, float("-inf"))
    row_has_key = mask.any(dim=-1, keepdim=True)
    filled = filled.masked_fill(~row_has_key, 0.0)
    return torch.softmax(filled, dim=-1).masked_fill(~mask, 0.0)


def attention(q, k, v, mask=None):
    """``q [..., Tq, D]``, ``k [..., Tk, D]``, ``v [..., Tk, Dv]`` -> ``(out [..., Tq, Dv], weights [..., Tq, Tk])``."""
    weights = masked_softmax(attention_scores(q, k), mask)
    return torch.matmul(weights, v), weights
