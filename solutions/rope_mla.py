"""Reference for 04_rope_mla: rotary position embeddings (RoPE), then multi-head latent attention (MLA)
as DeepSeek-V2 defines it, with Hugging Face's DeepSeek-V3 module names.

Shapes: hidden states ``[B, T, hidden]``; per head ``[B, H, T, ·]``. MLA caches, per token, one latent
``[kv_lora_rank]`` (normalised) and one rotated rope key ``[qk_rope_head_dim]`` shared by every head.
Each head's query is ``[nope | rope]``; each head's slice of ``kv_b_proj``'s output is ``[k_nope | v]``.
"""
import torch
from torch import nn

from solutions.attention_basics import masked_softmax
from solutions.multi_head import attention_mask_for


def rope_cos_sin(positions: torch.Tensor, rotary_dim: int, theta: float):
    """``positions [T]`` -> ``(cos, sin)``, each ``[T, rotary_dim]`` in float32.

    Frequency ``i`` is ``theta^(-2i/rotary_dim)``; the table repeats the ``rotary_dim/2`` angles twice
    (``cat(freqs, freqs)``) to match rotate-half.
    """
    inv_freq = 1.0 / theta ** (torch.arange(0, rotary_dim, 2, dtype=torch.float32) / rotary_dim)
    angles = positions.float()[:, None] * inv_freq[None, :]
    table = torch.cat([angles, angles], dim=-1)
    return table.cos(), table.sin()


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    """``[x1, x2] -> [-x2, x1]`` over the last dim."""
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat([-x2, x1], dim=-1)


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate every dim of ``x [..., T, D]`` by the angles of ``cos/sin [T, D]`` (rotate-half pairing:
    dim ``i`` with dim ``i + D/2``)."""
    cos, sin = cos.to(x.dtype), sin.to(x.dtype)
    return x * cos + rotate_half(x) * sin


class LatentKVCache:
    """What MLA keeps per position: the normalised latent ``[B, T, kv_lora_rank]`` and the rotated rope key
    ``[B, T, qk_rope_head_dim]`` (one layer). Nothing per head."""

    def __init__(self):
        self.latent: torch.Tensor | None = None
        self.k_rope: torch.Tensor | None = None

    def update(self, latent: torch.Tensor, k_rope: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Append ``latent [B, T_new, r]`` and ``k_rope [B, T_new, d_rope]`` along T; return everything cached."""
        if self.latent is None:
            self.latent, self.k_rope = latent, k_rope
        else:
            self.latent = torch.cat([self.latent, latent], dim=1)
            self.k_rope = torch.cat([self.k_rope, k_rope], dim=1)
        return self.latent, self.k_rope

    def __len__(self) -> int:
        """The number of cached positions."""
        return 0 if self.latent is None else self.latent.shape[1]


class RMSNorm(nn.Module):
    """``x · rsqrt(mean(x²) + eps) · weight`` over the last dim, in float32, cast back; weight starts at 1."""

    def __init__(self, dim: int, eps: float = 1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x32 = x.float()
        normed = x32 * torch.rsqrt(x32.pow(2).mean(dim=-1, keepdim=True) + self.eps)
        return (normed * self.weight.float()).to(x.dtype)


class MultiHeadLatentAttention(nn.Module):
    """DeepSeek-V2's MLA. ``config`` has Hugging Face DeepSeek attribute names (``q_lora_rank`` None: one
    ``q_proj``)."""

    def __init__(self, config):
        super().__init__()
        self.num_heads = config.num_attention_heads
        self.kv_lora_rank = config.kv_lora_rank
        self.nope, self.rope = config.qk_nope_head_dim, config.qk_rope_head_dim
        self.v_head_dim = config.v_head_dim
        self.rope_theta = config.rope_theta
        self.scale = (self.nope + self.rope) ** -0.5  # the dot product runs over nope + rope dims
        hidden, heads = config.hidden_size, config.num_attention_heads
        query_width = heads * (self.nope + self.rope)
        if config.q_lora_rank is None:
            self.q_proj = nn.Linear(hidden, query_width, bias=False)
        else:
            self.q_a_proj = nn.Linear(hidden, config.q_lora_rank, bias=False)
            self.q_a_layernorm = RMSNorm(config.q_lora_rank, config.rms_norm_eps)
            self.q_b_proj = nn.Linear(config.q_lora_rank, query_width, bias=False)
        self.kv_a_proj_with_mqa = nn.Linear(hidden, self.kv_lora_rank + self.rope, bias=False)
        self.kv_a_layernorm = RMSNorm(self.kv_lora_rank, config.rms_norm_eps)
        self.kv_b_proj = nn.Linear(self.kv_lora_rank, heads * (self.nope + self.v_head_dim), bias=False)
        self.o_proj = nn.Linear(heads * self.v_head_dim, hidden, bias=False)

    def query(self, x):
        """``x [B, T, hidden]`` -> ``q_nope [B, H, T, nope]`` and ``q_rope [B, H, T, rope]`` (not yet rotated)."""
        q = self.q_proj(x) if hasattr(self, "q_proj") else self.q_b_proj(self.q_a_layernorm(self.q_a_proj(x)))
        q = q.unflatten(-1, (self.num_heads, self.nope + self.rope)).transpose(1, 2)
        return q.split([self.nope, self.rope], dim=-1)

    def positions(self, x, cache):
        """The rotary tables of the new positions, which follow the ``len(cache)`` cached ones."""
        start = 0 if cache is None else len(cache)
        return rope_cos_sin(torch.arange(start, start + x.shape[1]), self.rope, self.rope_theta)

    def compress(self, x, cos, sin):
        """``x [B, T, hidden]`` -> the normalised latent ``[B, T, r]`` and the rotated rope key ``[B, T, rope]``."""
        latent, k_rope = self.kv_a_proj_with_mqa(x).split([self.kv_lora_rank, self.rope], dim=-1)
        return self.kv_a_layernorm(latent), apply_rope(k_rope, cos, sin)

    def prepare(self, x, attention_mask, cache):
        """Everything both paths share: the query parts (rope rotated), the latents and rope keys of every
        position (cached and new), and the mask."""
        cos, sin = self.positions(x, cache)
        q_nope, q_rope = self.query(x)
        latent, k_rope = self.compress(x, cos, sin)
        if cache is not None:
            latent, k_rope = cache.update(latent, k_rope)
        return q_nope, apply_rope(q_rope, cos, sin), latent, k_rope, self.mask(x.shape[1], latent.shape[1],
                                                                               attention_mask)

    def mask(self, q_len, k_len, attention_mask):
        """Causal, with the ``q_len`` new queries at the last positions, and key padding."""
        return attention_mask_for(q_len, k_len, attention_mask)

    def finish(self, heads):
        """``[B, H, T, v]`` -> ``[B, T, hidden]``."""
        return self.o_proj(heads.transpose(1, 2).flatten(-2))

    def forward(self, x, attention_mask=None, cache=None):
        """``x [B, T, hidden]`` -> ``(out [B, T, hidden], cache)``: per-head keys and values rebuilt from the latents."""
        q_nope, q_rope, latent, k_rope, mask = self.prepare(x, attention_mask, cache)
        kv = self.kv_b_proj(latent).unflatten(-1, (self.num_heads, self.nope + self.v_head_dim)).transpose(1, 2)
        k_nope, value = kv.split([self.nope, self.v_head_dim], dim=-1)
        scores = (q_nope @ k_nope.transpose(-2, -1) + q_rope @ k_rope[:, None].transpose(-2, -1)) * self.scale
        return self.finish(masked_softmax(scores, mask) @ value), cache

    def forward_absorbed(self, x, attention_mask=None, cache=None):
        """The same as ``forward``, in latent space: ``kv_b_proj``'s key part folded into the query, its value
        part applied after the weighted sum of latents. No per-head key or value is ever built."""
        q_nope, q_rope, latent, k_rope, mask = self.prepare(x, attention_mask, cache)
        up = self.kv_b_proj.weight.unflatten(0, (self.num_heads, self.nope + self.v_head_dim))  # [H, nope + v, r]
        up_k, up_v = up.split([self.nope, self.v_head_dim], dim=1)  # [H, nope, r], [H, v, r]
        q_latent = q_nope @ up_k  # [B, H, T, r]: q_nope · (W_uk c) = (q_nope W_uk) · c
        scores = (q_latent @ latent[:, None].transpose(-2, -1)
                  + q_rope @ k_rope[:, None].transpose(-2, -1)) * self.scale
        mixed = masked_softmax(scores, mask) @ latent[:, None]  # [B, H, T, r]
        return self.finish(mixed @ up_v.transpose(-2, -1)), cache


def mla_cache_bytes(batch: int, seq_len: int, num_layers: int, kv_lora_rank: int, qk_rope_head_dim: int,
                    bytes_per_elem: int) -> int:
    """Bytes of an MLA cache: per position and layer, one latent and one rope key, whatever the head count."""
    return batch * seq_len * num_layers * (kv_lora_rank + qk_rope_head_dim) * bytes_per_elem
