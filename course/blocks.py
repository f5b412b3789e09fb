"""Building blocks from earlier assignments, ready for the later notebooks to import.

A notebook of assignment N uses these in place of re-typing what assignments 01..N-1 had students
write. Shapes follow the course conventions: attention tensors ``[batch, heads, seq, head_dim]``;
masks ``torch.bool`` with True = may attend.
"""
import math

import torch


def attention_scores(q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    """``[..., Tq, D] × [..., Tk, D] → [..., Tq, Tk]``, divided by √D (01)."""
    return q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])


def causal_mask(q_len: int, k_len: int | None = None) -> torch.Tensor:
    """Bool ``[Tq, Tk]``: query i at position ``k_len - q_len + i`` sees keys up to it (01)."""
    k_len = q_len if k_len is None else k_len
    return torch.ones(q_len, k_len, dtype=torch.bool).tril(diagonal=k_len - q_len)


def padding_mask(attention_mask: torch.Tensor) -> torch.Tensor:
    """``[B, Tk]`` of 0/1 (1 = real token) → bool ``[B, 1, 1, Tk]`` (01)."""
    return attention_mask.bool()[:, None, None, :]


def masked_softmax(scores: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
    """Softmax over the last dim; masked entries exactly 0, a fully masked row all 0 (01)."""
    if mask is None:
        return torch.softmax(scores, dim=-1)
    weights = torch.softmax(torch.where(mask, scores, torch.finfo(scores.dtype).min), dim=-1)
    return torch.where(mask, weights, 0.0)


def attention(q, k, v, mask=None):
    """``(output [..., Tq, Dv], weights [..., Tq, Tk])`` of scaled dot-product attention (01)."""
    weights = masked_softmax(attention_scores(q, k), mask)
    return weights @ v, weights


def repeat_kv(x: torch.Tensor, n_rep: int) -> torch.Tensor:
    """``[B, Hkv, T, D] → [B, Hkv·n_rep, T, D]``: query head h reads KV head ``h // n_rep`` (03)."""
    return x.repeat_interleave(n_rep, dim=1)


def split_query_gate(q_out: torch.Tensor, num_heads: int, head_dim: int):
    """``[B, T, H·2D] → (query, gate)``, each ``[B, T, H, D]``; head h's outputs are ``[query_h | gate_h]`` (05)."""
    per_head = q_out.view(*q_out.shape[:-1], num_heads, 2 * head_dim)
    return per_head[..., :head_dim], per_head[..., head_dim:]


def apply_output_gate(attn_out: torch.Tensor, gate: torch.Tensor) -> torch.Tensor:
    """``attn_out * sigmoid(gate)``, elementwise (05)."""
    return attn_out * torch.sigmoid(gate)
