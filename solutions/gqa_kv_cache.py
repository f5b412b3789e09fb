"""Reference for 03_gqa_kv_cache: sharing KV heads (MHA / GQA / MQA in one module), the KV cache, its
size, and the FLOPs of one attention layer.

Shapes: hidden states ``[B, T, hidden]``; queries ``[B, H, T, D]``; keys and values ``[B, Hkv, T, D]``,
with ``H`` a multiple of ``Hkv``. Query head ``h`` reads KV head ``h // (H / Hkv)``.
"""
import torch
from torch import nn

from solutions.attention_basics import attention
from solutions.multi_head import attention_mask_for, merge_heads, split_heads


def repeat_kv(x: torch.Tensor, n_rep: int) -> torch.Tensor:
    """``[B, Hkv, T, D]`` -> ``[B, Hkv·n_rep, T, D]``: the ``n_rep`` copies of each KV head side by side."""
    batch, kv_heads, seq, dim = x.shape
    return x[:, :, None].expand(batch, kv_heads, n_rep, seq, dim).reshape(batch, kv_heads * n_rep, seq, dim)


class KVCache:
    """The keys and values of every position seen so far, ``[B, Hkv, T_cached, D]`` each (one layer)."""

    def __init__(self):
        self.k: torch.Tensor | None = None
        self.v: torch.Tensor | None = None

    def update(self, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Append ``k, v [B, Hkv, T_new, D]`` along the sequence dim; return all cached ``(k, v)``."""
        if self.k is None:
            self.k, self.v = k, v
        else:
            self.k, self.v = torch.cat([self.k, k], dim=-2), torch.cat([self.v, v], dim=-2)
        return self.k, self.v

    def __len__(self) -> int:
        """The number of cached positions."""
        return 0 if self.k is None else self.k.shape[-2]


class GroupedQueryAttention(nn.Module):
    """Causal attention with ``num_heads`` query heads sharing ``num_kv_heads`` key/value heads.

    ``num_kv_heads == num_heads`` is MHA, ``1`` is MQA. ``head_dim`` defaults to ``hidden / num_heads``.
    """

    def __init__(self, hidden_size: int, num_heads: int, num_kv_heads: int, head_dim: int | None = None):
        super().__init__()
        if num_heads % num_kv_heads:
            raise ValueError(f"num_heads {num_heads} is not a multiple of num_kv_heads {num_kv_heads}")
        self.num_heads, self.num_kv_heads = num_heads, num_kv_heads
        self.head_dim = head_dim or hidden_size // num_heads
        self.q_proj = nn.Linear(hidden_size, num_heads * self.head_dim, bias=False)
        self.k_proj = nn.Linear(hidden_size, num_kv_heads * self.head_dim, bias=False)
        self.v_proj = nn.Linear(hidden_size, num_kv_heads * self.head_dim, bias=False)
        self.o_proj = nn.Linear(num_heads * self.head_dim, hidden_size, bias=False)

    def forward(self, x: torch.Tensor, attention_mask: torch.Tensor | None = None,
                cache: KVCache | None = None) -> tuple[torch.Tensor, KVCache | None]:
        """``x [B, T, hidden]`` (the new positions), ``attention_mask [B, T_cached + T]`` of 0/1.

        Returns ``(out [B, T, hidden], cache)``; ``cache`` now also holds the new keys and values.
        """
        q = split_heads(self.q_proj(x), self.num_heads)
        k = split_heads(self.k_proj(x), self.num_kv_heads)
        v = split_heads(self.v_proj(x), self.num_kv_heads)
        if cache is not None:
            k, v = cache.update(k, v)  # the cache keeps Hkv heads: sharing is what makes it small
        mask = attention_mask_for(x.shape[1], k.shape[-2], attention_mask)
        n_rep = self.num_heads // self.num_kv_heads
        out, _ = attention(q, repeat_kv(k, n_rep), repeat_kv(v, n_rep), mask)
        return self.o_proj(merge_heads(out)), cache


def kv_cache_bytes(batch: int, seq_len: int, num_layers: int, num_kv_heads: int, head_dim: int,
                   bytes_per_elem: int) -> int:
    """Bytes a KV cache takes: a key and a value vector per position, KV head and layer."""
    return 2 * batch * seq_len * num_layers * num_kv_heads * head_dim * bytes_per_elem


def attention_flops(batch: int, q_len: int, k_len: int, hidden_size: int, num_heads: int, num_kv_heads: int,
                    head_dim: int) -> int:
    """FLOPs of one attention layer on ``q_len`` new tokens that attend to ``k_len`` positions (cached and new),
    2 per multiply-add; softmax, masking and scaling are not counted.

    Projections of the new tokens: ``q_proj`` and ``o_proj`` are ``hidden × H·D`` each, ``k_proj`` and ``v_proj``
    ``hidden × Hkv·D`` each. Per head, ``Q·Kᵀ`` and ``weights·V`` are ``q_len × k_len × D`` multiply-adds each.
    """
    if num_heads % num_kv_heads:
        raise ValueError(f"num_heads {num_heads} is not a multiple of num_kv_heads {num_kv_heads}")
    if k_len < q_len:
        raise ValueError(f"k_len {k_len} < q_len {q_len}: the keys include the new tokens themselves")
    weights = hidden_size * head_dim * (2 * num_heads + 2 * num_kv_heads)  # q, o + k, v
    per_token = weights + 2 * num_heads * k_len * head_dim  # projections + Q·Kᵀ and weights·V
    return 2 * batch * q_len * per_token
