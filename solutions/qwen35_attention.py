"""Reference for 06_qwen35_attention: zero-centred RMSNorm, partial RoPE and the Qwen3.5 gated
attention layer (the full-attention layers 3, 7, ..., 23 of Qwen3.5-0.8B).

Shapes: hidden states ``[B, T, hidden]``; inside the layer ``[B, H, T, D]`` with ``H`` query heads,
``Hkv`` key/value heads and head dim ``D``; RoPE tables ``[T, rotary_dim]``.
"""
import torch
from torch import nn

from solutions.attention_basics import attention, causal_mask, padding_mask
from solutions.output_gate import apply_output_gate, split_query_gate
from solutions.rope_mla import rope_cos_sin, rotate_half  # noqa: F401 - rope_cos_sin: 06 uses 04's answer


class ZeroCenteredRMSNorm(nn.Module):
    """``x · rsqrt(mean(x²) + eps) · (1 + weight)`` over the last dim, in float32, cast back.

    The weight starts at zero, so a fresh norm scales by exactly 1.
    """

    def __init__(self, dim: int, eps: float = 1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.zeros(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x32 = x.float()
        normed = x32 * torch.rsqrt(x32.pow(2).mean(dim=-1, keepdim=True) + self.eps)
        return (normed * (1.0 + self.weight.float())).to(x.dtype)


def apply_partial_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate the first ``rotary_dim`` dims of ``x [B, H, T, D]``; pass the other ``D - rotary_dim`` through."""
    rotary_dim = cos.shape[-1]
    cos, sin = cos.to(x.dtype), sin.to(x.dtype)
    rotated, passed = x[..., :rotary_dim], x[..., rotary_dim:]
    rotated = rotated * cos + rotate_half(rotated) * sin
    return torch.cat([rotated, passed], dim=-1)


class Qwen35Attention(nn.Module):
    """Gated attention with GQA, QK-Norm and partial RoPE. ``config`` has Hugging Face attribute names."""

    def __init__(self, config):
        super().__init__()
        self.num_heads = config.num_attention_heads
        self.num_kv_heads = config.num_key_value_heads
        self.head_dim = config.head_dim
        hidden, width = config.hidden_size, self.num_heads * self.head_dim
        self.q_proj = nn.Linear(hidden, 2 * width, bias=False)  # query and gate, head by head
        self.k_proj = nn.Linear(hidden, self.num_kv_heads * self.head_dim, bias=False)
        self.v_proj = nn.Linear(hidden, self.num_kv_heads * self.head_dim, bias=False)
        self.o_proj = nn.Linear(width, hidden, bias=False)
        self.q_norm = ZeroCenteredRMSNorm(self.head_dim, config.rms_norm_eps)
        self.k_norm = ZeroCenteredRMSNorm(self.head_dim, config.rms_norm_eps)

    def project(self, x):
        """``x [B, T, hidden]`` -> query, gate ``[B, T, H, D]`` and key, value ``[B, T, Hkv, D]``."""
        query, gate = split_query_gate(self.q_proj(x), self.num_heads, self.head_dim)
        key = self.k_proj(x).unflatten(-1, (self.num_kv_heads, self.head_dim))
        value = self.v_proj(x).unflatten(-1, (self.num_kv_heads, self.head_dim))
        return query, gate, key, value

    def position(self, query, key, cos, sin):
        """QK-Norm per head, then partial RoPE; returns ``[B, H, T, D]`` and ``[B, Hkv, T, D]``."""
        query = apply_partial_rope(self.q_norm(query).transpose(1, 2), cos, sin)
        key = apply_partial_rope(self.k_norm(key).transpose(1, 2), cos, sin)
        return query, key

    def attend(self, query, key, value, attention_mask):
        """Causal (and padding) attention, KV heads shared by groups of query heads: ``[B, H, T, D]``."""
        n_rep = self.num_heads // self.num_kv_heads
        key = key.repeat_interleave(n_rep, dim=1)
        value = value.transpose(1, 2).repeat_interleave(n_rep, dim=1)
        mask = causal_mask(query.shape[-2], key.shape[-2])
        if attention_mask is not None:
            mask = mask & padding_mask(attention_mask)
        return attention(query, key, value, mask)[0]

    def gate_and_project(self, out, gate):
        """``out [B, H, T, D]`` gated by ``sigmoid(gate [B, T, H, D])``, merged, through o_proj."""
        gated = apply_output_gate(out.transpose(1, 2), gate)
        return self.o_proj(gated.flatten(-2))

    def forward(self, x, cos, sin, attention_mask=None):
        """``x [B, T, hidden]``, ``cos/sin [T, rotary_dim]``, ``attention_mask [B, T]`` of 0/1 -> ``[B, T, hidden]``."""
        query, gate, key, value = self.project(x)
        query, key = self.position(query, key, cos, sin)
        return self.gate_and_project(self.attend(query, key, value, attention_mask), gate)
