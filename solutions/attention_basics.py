"""Reference for 01_attention_basics: scores, masks, softmax and the weighted sum.

Conventions: attention tensors are ``[..., seq, head_dim]``; masks are ``torch.bool`` with
True = may attend, broadcastable against the ``[..., Tq, Tk]`` scores.
"""
import math

import torch


def attention_scores(q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    """``q [..., Tq, D]``, ``k [..., Tk, D]`` -> scores ``[..., Tq, Tk]`` scaled by ``1/sqrt(D)``."""
    return torch.matmul(q, k.transpose(-2, -1)) / math.sqrt(q.shape[-1])


def causal_mask(q_len: int, k_len: int | None = None, window: int | None = None) -> torch.Tensor:
    """Bool ``[Tq, Tk]``: query ``i`` sits at position ``p = k_len - q_len + i`` and sees keys ``j <= p``; with a
    sliding ``window`` of ``w``, only the last ``w`` of them, ``p - w < j <= p``."""
    k_len = q_len if k_len is None else k_len
    query_pos = torch.arange(k_len - q_len, k_len).unsqueeze(1)
    key_pos = torch.arange(k_len).unsqueeze(0)
    visible = key_pos <= query_pos
    if window is not None:
        visible &= key_pos > query_pos - window
    return visible


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


def online_softmax_attention(q, k, v, mask=None, block_size: int = 16):
    """``attention(q, k, v, mask)[0]`` computed over blocks of ``block_size`` keys, holding one block of scores
    ``[..., Tq, block_size]`` at a time: a running max ``m`` and sum ``l`` per query (``[..., Tq, 1]``) rescale
    what was accumulated whenever the max grows. Returns ``[..., Tq, Dv]``; fully masked rows are 0."""
    k_len = k.shape[-2]
    rows = (q @ k[..., :1, :].mT).shape[:-1]  # [..., Tq]: the leading dims of q and k broadcast
    # Low-precision inputs keep their statistics in float32, as FlashAttention does.
    acc = torch.promote_types(q.dtype, torch.float32)
    running_max = torch.full((*rows, 1), float("-inf"), dtype=acc)
    running_sum = torch.zeros(*rows, 1, dtype=acc)
    out = torch.zeros(*rows, v.shape[-1], dtype=acc)
    if mask is not None:
        mask = mask.expand(*mask.shape[:-1], k_len)
    for start in range(0, k_len, block_size):
        block = slice(start, start + block_size)
        scores = attention_scores(q.to(acc), k[..., block, :].to(acc))
        if mask is not None:
            scores = scores.masked_fill(~mask[..., block], float("-inf"))
        new_max = torch.maximum(running_max, scores.amax(dim=-1, keepdim=True))
        # Where every key so far is masked the max is still -inf: shift by 0 there, so exp gives 0, not NaN.
        shift = new_max.masked_fill(new_max == float("-inf"), 0.0)
        weights = torch.exp(scores - shift)
        rescale = torch.exp(running_max - shift)
        running_sum = running_sum * rescale + weights.sum(dim=-1, keepdim=True)
        out = out * rescale + weights @ v[..., block, :].to(acc)
        running_max = new_max
    seen = running_sum > 0
    return torch.where(seen, out / running_sum.masked_fill(~seen, 1.0), 0.0).to(q.dtype)
