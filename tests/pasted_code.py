"""Answer cells as students paste them: each exercise written the way a well-known public codebase writes it
(Hugging Face transformers, DeepSeek-V3, nanoGPT, Meta's llama, vLLM, torch's SDPA and FlopCounterMode, fla,
Dao's causal-conv1d reference, rasbt's LLMs-from-scratch, PyTorch's safe softmax, the FlashAttention-2 paper's algorithms and Triton's fused-attention
tutorial), kept to the course's names,
signatures and conventions (tensors ``[batch, heads, seq, head_dim]``, bool masks with True = may attend,
rotate-half RoPE, Qwen3.5's per-head query/gate split, ``(o, state)`` from the 08 rules).

Each ``Pasted`` is one whole answer cell, imports and helpers included. The correct ones must earn every point
of their notebook; the ones with ``fails`` reproduce a bug that shipped in public code (``origin`` says where)
and must fail exactly the exercises named there. ``tests/checks/test_pasted_code.py`` grades them through the released
notebooks.
"""
from dataclasses import dataclass

from tests.natural_mistakes.entry import patch


@dataclass(frozen=True)
class Pasted:
    origin: str        # where this style comes from, e.g. "nanoGPT CausalSelfAttention (SDPA)"
    assignment: str    # "01_attention_basics" ...
    exercise: str      # the answer cell's exercise name (the solution_<name> grade_id in the notebook)
    code: str          # the whole answer cell, as pasted (imports included)
    fails: tuple = ()  # for a real bug: the exercises whose verdict must fail; () for correct code


A01, A02, A03, A04 = "01_attention_basics", "02_multi_head", "03_gqa_kv_cache", "04_rope_mla"
A05, A06, A07, A08 = "05_output_gate", "06_qwen35_attention", "07_real_model", "08_gated_deltanet"
A09 = "09_flash_attention"


# --- 01_attention_basics ---------------------------------------------------------------------------------------

# Two correct answers that real bugs below are small edits of.
_FLASH_2 = '''
import math

import torch


def online_softmax_attention(q, k, v, mask=None, block_size=16):
    out_dtype = q.dtype
    acc_dtype = torch.promote_types(q.dtype, torch.float32)  # keep the statistics in fp32 at least
    sm_scale = 1.0 / math.sqrt(q.shape[-1])
    n_ctx = k.shape[-2]
    lead = torch.broadcast_shapes(q.shape[:-2], k.shape[:-2])
    m_i = torch.full((*lead, q.shape[-2], 1), float("-inf"), dtype=acc_dtype)
    l_i = torch.zeros((*lead, q.shape[-2], 1), dtype=acc_dtype)
    acc = torch.zeros((*lead, q.shape[-2], v.shape[-1]), dtype=acc_dtype)
    q = q.to(acc_dtype)
    if mask is not None:
        mask = mask.expand(*mask.shape[:-1], n_ctx)
    for start_n in range(0, n_ctx, block_size):
        k_blk = k[..., start_n:start_n + block_size, :].to(acc_dtype)
        v_blk = v[..., start_n:start_n + block_size, :].to(acc_dtype)
        qk = (q @ k_blk.transpose(-1, -2)) * sm_scale
        if mask is not None:
            qk = qk.masked_fill(~mask[..., start_n:start_n + block_size], float("-inf"))
        m_ij = torch.maximum(m_i, qk.amax(dim=-1, keepdim=True))
        # a row that has seen no key yet still has m_ij = -inf: shift it by 0, but remember -inf
        m_shift = torch.where(m_ij == float("-inf"), torch.zeros_like(m_ij), m_ij)
        p = torch.exp(qk - m_shift)
        alpha = torch.exp(m_i - m_shift)
        l_i = l_i * alpha + p.sum(dim=-1, keepdim=True)
        acc = acc * alpha + p @ v_blk
        m_i = m_ij
    out = torch.where(l_i > 0, acc / l_i, torch.zeros_like(acc))
    return out.to(out_dtype)
'''

_MEMORY_EFFICIENT = '''
import math

import torch


def _summarize_chunk(query, key, value, mask):
    """One key chunk: its exp-weighted values, their sum and the chunk's max (taken after masking)."""
    attn_weights = torch.einsum("...qd,...kd->...qk", query, key)
    if mask is not None:
        attn_weights = torch.where(mask, attn_weights, float("-inf"))
    max_score = attn_weights.amax(dim=-1, keepdim=True)
    shift = torch.where(max_score == float("-inf"), torch.zeros_like(max_score), max_score)
    exp_weights = torch.exp(attn_weights - shift)
    exp_values = torch.einsum("...qk,...kf->...qf", exp_weights, value)
    return exp_values, exp_weights.sum(dim=-1, keepdim=True), max_score


def online_softmax_attention(q, k, v, mask=None, block_size=16):
    dtype = torch.promote_types(q.dtype, torch.float32)
    query = q.to(dtype) / math.sqrt(q.shape[-1])
    num_kv = k.shape[-2]
    if mask is not None:
        mask = mask.expand(*mask.shape[:-1], num_kv)
    chunks = [_summarize_chunk(query, k[..., i:i + block_size, :].to(dtype), v[..., i:i + block_size, :].to(dtype),
                               None if mask is None else mask[..., i:i + block_size])
              for i in range(0, num_kv, block_size)]
    chunk_values = torch.stack([c[0] for c in chunks])
    chunk_weights = torch.stack([c[1] for c in chunks])
    chunk_max = torch.stack([c[2] for c in chunks])
    global_max = chunk_max.amax(dim=0, keepdim=True)
    global_max = torch.where(global_max == float("-inf"), torch.zeros_like(global_max), global_max)
    max_diffs = torch.exp(chunk_max - global_max)  # 0 for a chunk with no visible key
    all_values = (chunk_values * max_diffs).sum(dim=0)
    all_weights = (chunk_weights * max_diffs).sum(dim=0)
    out = torch.where(all_weights > 0, all_values / all_weights, torch.zeros_like(all_values))
    return out.to(q.dtype)
'''

_01 = [
    Pasted("Hugging Face eager_attention_forward (matmul, then * head_dim ** -0.5)", A01, "attention_scores", '''
import torch


def attention_scores(q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    """Scores as transformers' eager attention computes them: one matmul, then the scaling factor."""
    scaling = q.shape[-1] ** -0.5
    return torch.matmul(q, k.transpose(-2, -1)) * scaling
'''),
    Pasted("einsum over broadcast leading dims", A01, "attention_scores", '''
import math

import torch


def attention_scores(q, k):
    # "..." stands for any leading (batch, head) dims; einsum broadcasts them like @ does
    return torch.einsum("...qd,...kd->...qk", q, k) / math.sqrt(q.size(-1))
'''),
    Pasted("nanoGPT CausalSelfAttention (manual path)", A01, "attention_scores", '''
import math
import torch


def attention_scores(q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
    return att
'''),

    Pasted("nanoGPT's tril mask, shifted for cached keys, with a triu band for the window", A01, "causal_mask", '''
import torch


def causal_mask(q_len: int, k_len: int | None = None, window: int | None = None) -> torch.Tensor:
    if k_len is None:
        k_len = q_len
    offset = k_len - q_len  # the new queries are the last q_len positions
    mask = torch.tril(torch.ones(q_len, k_len, dtype=torch.bool), diagonal=offset)
    if window is not None:
        # keep only keys with j > p - window, i.e. j - i >= offset - window + 1
        mask &= torch.triu(torch.ones(q_len, k_len, dtype=torch.bool), diagonal=offset - window + 1)
    return mask
'''),
    Pasted("Hugging Face masking_utils (causal_mask_function + sliding_window_overlay on cache_position)", A01,
           "causal_mask", '''
from collections.abc import Callable

import torch


def causal_mask_function(q_idx: torch.Tensor, kv_idx: torch.Tensor) -> torch.Tensor:
    """A query may look at its own position and every earlier one."""
    return kv_idx <= q_idx


def sliding_window_overlay(sliding_window: int) -> Callable:
    """The window on top of causality: only the last `sliding_window` positions, the query's own included."""
    def inner_mask(q_idx: torch.Tensor, kv_idx: torch.Tensor) -> torch.Tensor:
        return kv_idx > q_idx - sliding_window
    return inner_mask


def causal_mask(q_len: int, k_len: int | None = None, window: int | None = None) -> torch.Tensor:
    k_len = q_len if k_len is None else k_len
    cache_position = torch.arange(k_len - q_len, k_len)  # absolute positions of the new queries
    kv_arange = torch.arange(k_len)
    q_idx, kv_idx = cache_position[:, None], kv_arange[None, :]
    allowed = causal_mask_function(q_idx, kv_idx)
    if window is not None:
        allowed = allowed & sliding_window_overlay(window)(q_idx, kv_idx)
    return allowed
'''),
    Pasted("rasbt LLMs-from-scratch (triu 'masked' matrix, Gemma-3 style far-past band), inverted", A01,
           "causal_mask", '''
import torch


def causal_mask(q_len, k_len=None, window=None):
    k_len = q_len if k_len is None else k_len
    offset = k_len - q_len
    # rasbt's convention: True marks what is masked out (the future) ...
    mask_global = torch.triu(torch.ones(q_len, k_len, dtype=torch.bool), diagonal=offset + 1)
    if window is not None:
        # ... and, for local layers, also the far past: j <= p - window
        far_past = torch.tril(torch.ones(q_len, k_len, dtype=torch.bool), diagonal=offset - window)
        mask_global = mask_global | far_past
    # the course's convention is the opposite: True = may attend
    return ~mask_global
'''),

    Pasted("Hugging Face attention_mask[:, None, None, :] expansion", A01, "padding_mask", '''
import torch


def padding_mask(attention_mask: torch.Tensor) -> torch.Tensor:
    # [bsz, src_len] -> [bsz, 1, 1, src_len], broadcast over heads and query rows
    return attention_mask[:, None, None, :].to(dtype=torch.bool)
'''),
    Pasted("unsqueeze chain", A01, "padding_mask", '''
import torch


def padding_mask(attention_mask):
    return attention_mask.ne(0).unsqueeze(1).unsqueeze(2)
'''),

    Pasted("PyTorch's safe softmax (-inf fill, fully masked rows set to 0)", A01, "masked_softmax", '''
import torch


def _safe_softmax(x: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """softmax, except that a row made only of -inf gives zeros instead of NaN (as torch's _safe_softmax)."""
    out = torch.softmax(x, dim=dim)
    masked_rows = (x == float("-inf")).all(dim=dim, keepdim=True)
    return torch.where(masked_rows, torch.zeros_like(out), out)


def masked_softmax(scores: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
    if mask is None:
        return torch.softmax(scores, dim=-1)
    return _safe_softmax(torch.where(mask, scores, float("-inf")), dim=-1)
'''),
    Pasted("Hugging Face eager attention (additive finfo.min mask, softmax in float32, cast back)", A01,
           "masked_softmax", '''
import torch
from torch import nn


def masked_softmax(scores, mask=None):
    attn_weights = scores
    if mask is not None:
        min_dtype = torch.finfo(torch.float32).min
        causal_mask = torch.zeros(mask.shape, dtype=torch.float32).masked_fill(~mask, min_dtype)
        attn_weights = attn_weights.to(torch.float32) + causal_mask
    attn_weights = nn.functional.softmax(attn_weights, dim=-1, dtype=torch.float32)
    if mask is not None:
        # finfo.min leaves a fully masked row uniform: zero what may not be attended
        attn_weights = attn_weights.masked_fill(~mask, 0.0)
    return attn_weights.to(scores.dtype)
'''),
    Pasted("rasbt LLMs-from-scratch (masked_fill -inf, softmax, nan_to_num)", A01, "masked_softmax", '''
import torch


def masked_softmax(scores, mask=None):
    if mask is not None:
        scores = torch.where(mask, scores, -torch.inf)
    attn_weights = torch.softmax(scores, dim=-1)
    # a row with every key masked is all -inf: softmax gives NaN there
    return torch.nan_to_num(attn_weights, nan=0.0)
'''),

    Pasted("Hugging Face eager_attention_forward behind the course's interface", A01, "attention", '''
import torch
from torch import nn


def eager_attention_forward(query, key, value, attention_mask, scaling: float, dropout: float = 0.0):
    attn_weights = torch.matmul(query, key.transpose(-2, -1)) * scaling
    if attention_mask is not None:
        attn_weights = attn_weights + attention_mask
    attn_weights = nn.functional.softmax(attn_weights, dim=-1, dtype=torch.float32).to(query.dtype)
    attn_weights = nn.functional.dropout(attn_weights, p=dropout, training=False)
    attn_output = torch.matmul(attn_weights, value)
    return attn_output, attn_weights


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
              mask: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    additive = None
    if mask is not None:
        additive = torch.zeros(mask.shape, dtype=q.dtype).masked_fill(~mask, torch.finfo(q.dtype).min)
    _, weights = eager_attention_forward(q, k, v, additive, scaling=q.shape[-1] ** -0.5)
    if mask is not None:
        weights = weights.masked_fill(~mask, 0.0)  # exact zeros; a fully masked row takes nothing
    return weights @ v, weights
'''),
    Pasted("einsum for weights @ V over my own masked_softmax", A01, "attention", '''
import torch


def attention(q, k, v, mask=None):
    weights = masked_softmax(attention_scores(q, k), mask)
    output = torch.einsum("...qk,...kd->...qd", weights, v)
    return output, weights
'''),
    Pasted("torch F.scaled_dot_product_attention for the output, my masked_softmax for the weights", A01,
           "attention", '''
import torch
import torch.nn.functional as F


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None = None):
    # SDPA takes the same bool convention (True = may attend) and gives 0 for a fully masked row
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    weights = masked_softmax(attention_scores(q, k), mask)  # SDPA does not return them; the plots need them
    return out, weights
'''),

    Pasted("FlashAttention-2 forward loop (m_i, l_i, acc, alpha as in the paper's Algorithm 1)", A01,
           "online_softmax_attention", _FLASH_2),
    Pasted("memory-efficient attention (Rabe & Staats): summarize each key chunk, then combine by the global max",
           A01, "online_softmax_attention", _MEMORY_EFFICIENT),
    Pasted("flashinfer / vLLM merge_attn_states: per-block (output, lse) merged with logaddexp", A01,
           "online_softmax_attention", '''
import torch


def merge_state(v_a: torch.Tensor, s_a: torch.Tensor, v_b: torch.Tensor, s_b: torch.Tensor):
    """Merge two partial attention states (normalised output, log-sum-exp of their scores)."""
    s_max = torch.logaddexp(s_a, s_b)
    s_ref = torch.where(s_max == float("-inf"), torch.zeros_like(s_max), s_max)  # both empty: nothing to weigh
    return v_a * torch.exp(s_a - s_ref) + v_b * torch.exp(s_b - s_ref), s_max


def online_softmax_attention(q, k, v, mask=None, block_size=16):
    dtype = torch.promote_types(q.dtype, torch.float32)
    q32 = q.to(dtype)
    if mask is not None:
        mask = mask.expand(*mask.shape[:-1], k.shape[-2])
    o, lse = None, None
    for start in range(0, k.shape[-2], block_size):
        s = attention_scores(q32, k[..., start:start + block_size, :].to(dtype))
        if mask is not None:
            s = s.masked_fill(~mask[..., start:start + block_size], float("-inf"))
        lse_blk = torch.logsumexp(s, dim=-1, keepdim=True)
        p = torch.softmax(s, dim=-1).nan_to_num(0.0)  # a block with nothing visible contributes nothing
        o_blk = p @ v[..., start:start + block_size, :].to(dtype)
        o, lse = (o_blk, lse_blk) if o is None else merge_state(o, lse, o_blk, lse_blk)
    return o.to(q.dtype)
'''),

    # Real bugs.
    Pasted("sliding window one key too wide (p - w <= j), as in mlx-lm before PR #390 and the eager Mistral mask "
           "discussed in transformers#29623", A01, "causal_mask", '''
import torch


def causal_mask(q_len, k_len=None, window=None):
    k_len = q_len if k_len is None else k_len
    offset = k_len - q_len
    mask = torch.ones(q_len, k_len, dtype=torch.bool).tril(offset)
    if window is not None:
        mask = mask & torch.ones(q_len, k_len, dtype=torch.bool).triu(offset - window)  # j >= p - window
    return mask
''', fails=("causal_mask",)),
    Pasted("torch.nn.MultiheadAttention's -inf fill without a guard: NaN for a fully masked row "
           "(pytorch/pytorch#24816, #26098)", A01, "masked_softmax", '''
import torch


def masked_softmax(scores, mask=None):
    if mask is not None:
        scores = torch.where(mask, scores, float("-inf"))
    return torch.softmax(scores, dim=-1)
''', fails=("masked_softmax", "attention")),
    Pasted("flash-attention issue #2082: a running max of -inf replaced by 0, and the 0 kept as the running max",
           A01, "online_softmax_attention", patch(_FLASH_2, (
        """        # a row that has seen no key yet still has m_ij = -inf: shift it by 0, but remember -inf
        m_shift = torch.where(m_ij == float("-inf"), torch.zeros_like(m_ij), m_ij)
        p = torch.exp(qk - m_shift)
        alpha = torch.exp(m_i - m_shift)
""", """        m_ij = torch.where(m_ij == float("-inf"), torch.zeros_like(m_ij), m_ij)  # avoid -inf - -inf
        p = torch.exp(qk - m_ij)
        alpha = torch.exp(m_i - m_ij)
""")), fails=("online_softmax_attention",)),
    Pasted("memory-efficient-attention before its fix: each chunk's max taken over the scores before masking", A01,
           "online_softmax_attention", patch(_MEMORY_EFFICIENT, (
        """    attn_weights = torch.einsum("...qd,...kd->...qk", query, key)
""", """    attn_weights = torch.einsum("...qd,...kd->...qk", query, key)
    max_score = attn_weights.amax(dim=-1, keepdim=True)  # masked keys count towards the max
"""), ("""    max_score = attn_weights.amax(dim=-1, keepdim=True)
    shift = torch.where(max_score == float("-inf"), torch.zeros_like(max_score), max_score)
    exp_weights = torch.exp(attn_weights - shift)
""", """    exp_weights = torch.exp(attn_weights - max_score)
""")), fails=("online_softmax_attention",)),
]


# --- 02_multi_head ---------------------------------------------------------------------------------------------

_02 = [
    Pasted("nanoGPT CausalSelfAttention (.view(B, T, n_head, C // n_head).transpose(1, 2))", A02, "split_heads", '''
import torch


def split_heads(x: torch.Tensor, num_heads: int) -> torch.Tensor:
    B, T, C = x.size()
    return x.view(B, T, num_heads, C // num_heads).transpose(1, 2)  # (B, nh, T, hs)
'''),
    Pasted("Hugging Face hidden_shape = (*input_shape, -1, head_dim)", A02, "split_heads", '''
import torch


def split_heads(x, num_heads):
    input_shape = x.shape[:-1]
    head_dim = x.shape[-1] // num_heads
    hidden_shape = (*input_shape, -1, head_dim)
    return x.view(hidden_shape).transpose(1, 2)
'''),
    Pasted("unflatten + permute (einops-free rearrange 'b t (h d) -> b h t d')", A02, "split_heads", '''
import torch


def split_heads(x: torch.Tensor, num_heads: int) -> torch.Tensor:
    return x.unflatten(-1, (num_heads, -1)).permute(0, 2, 1, 3)
'''),

    Pasted("nanoGPT (y.transpose(1, 2).contiguous().view(B, T, C))", A02, "merge_heads", '''
import torch


def merge_heads(x: torch.Tensor) -> torch.Tensor:
    B, nh, T, hs = x.size()
    return x.transpose(1, 2).contiguous().view(B, T, nh * hs)  # re-assemble all head outputs side by side
'''),
    Pasted("Hugging Face attn_output.transpose(1, 2).reshape(*input_shape, -1).contiguous()", A02, "merge_heads", '''
import torch


def merge_heads(x):
    input_shape = (x.shape[0], x.shape[2])
    attn_output = x.transpose(1, 2)
    return attn_output.reshape(*input_shape, -1).contiguous()
'''),
    Pasted("permute + flatten (rearrange 'b h t d -> b t (h d)')", A02, "merge_heads", '''
import torch


def merge_heads(x: torch.Tensor) -> torch.Tensor:
    return x.permute(0, 2, 1, 3).flatten(start_dim=2)
'''),

    Pasted("nanoGPT CausalSelfAttention with F.scaled_dot_product_attention(is_causal=...)", A02,
           "MultiHeadAttention", '''
import torch
import torch.nn as nn
from torch.nn import functional as F


class MultiHeadAttention(nn.Module):

    def __init__(self, hidden_size: int, num_heads: int):
        super().__init__()
        assert hidden_size % num_heads == 0
        # key, query, value projections for all heads (kept separate so Hugging Face names load)
        self.q_proj = nn.Linear(hidden_size, hidden_size, bias=False)
        self.k_proj = nn.Linear(hidden_size, hidden_size, bias=False)
        self.v_proj = nn.Linear(hidden_size, hidden_size, bias=False)
        # output projection
        self.o_proj = nn.Linear(hidden_size, hidden_size, bias=False)
        self.n_head = num_heads
        self.n_embd = hidden_size

    def forward(self, x, attention_mask=None, causal=True):
        B, T, C = x.size()  # batch size, sequence length, embedding dimensionality (n_embd)
        q = self.q_proj(x).view(B, T, self.n_head, C // self.n_head).transpose(1, 2)  # (B, nh, T, hs)
        k = self.k_proj(x).view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        v = self.v_proj(x).view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        if attention_mask is None:
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=causal)
        else:
            # SDPA refuses attn_mask together with is_causal: fold causality into the bool mask
            keep = attention_mask.bool()[:, None, None, :]
            if causal:
                keep = keep & torch.ones(T, T, dtype=torch.bool, device=x.device).tril()
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=keep, dropout_p=0.0)
        y = y.transpose(1, 2).contiguous().view(B, T, C)  # re-assemble all head outputs side by side
        return self.o_proj(y)
'''),
    Pasted("Hugging Face BertSelfAttention/LlamaAttention eager path (additive mask, fp32 softmax)", A02,
           "MultiHeadAttention", '''
import torch
from torch import nn


def eager_attention_forward(module, query, key, value, attention_mask, scaling, dropout=0.0):
    attn_weights = torch.matmul(query, key.transpose(2, 3)) * scaling
    if attention_mask is not None:
        attn_weights = attn_weights + attention_mask
    attn_weights = nn.functional.softmax(attn_weights, dim=-1, dtype=torch.float32).to(query.dtype)
    attn_weights = nn.functional.dropout(attn_weights, p=dropout, training=module.training)
    attn_output = torch.matmul(attn_weights, value)
    attn_output = attn_output.transpose(1, 2).contiguous()
    return attn_output, attn_weights


class MultiHeadAttention(nn.Module):
    def __init__(self, hidden_size: int, num_heads: int):
        super().__init__()
        self.num_heads = num_heads
        self.head_dim = hidden_size // num_heads
        self.scaling = self.head_dim ** -0.5
        self.q_proj = nn.Linear(hidden_size, num_heads * self.head_dim, bias=False)
        self.k_proj = nn.Linear(hidden_size, num_heads * self.head_dim, bias=False)
        self.v_proj = nn.Linear(hidden_size, num_heads * self.head_dim, bias=False)
        self.o_proj = nn.Linear(num_heads * self.head_dim, hidden_size, bias=False)

    def forward(self, hidden_states: torch.Tensor, attention_mask: torch.Tensor | None = None,
                causal: bool = True) -> torch.Tensor:
        input_shape = hidden_states.shape[:-1]
        hidden_shape = (*input_shape, -1, self.head_dim)
        query_states = self.q_proj(hidden_states).view(hidden_shape).transpose(1, 2)
        key_states = self.k_proj(hidden_states).view(hidden_shape).transpose(1, 2)
        value_states = self.v_proj(hidden_states).view(hidden_shape).transpose(1, 2)

        seq_len = input_shape[-1]
        allowed = torch.ones(seq_len, seq_len, dtype=torch.bool, device=hidden_states.device)
        if causal:
            allowed = allowed.tril()
        if attention_mask is not None:
            allowed = allowed & attention_mask.bool()[:, None, None, :]
        dtype = hidden_states.dtype
        additive = torch.zeros(allowed.shape, dtype=dtype).masked_fill(~allowed, torch.finfo(dtype).min)

        attn_output, _ = eager_attention_forward(self, query_states, key_states, value_states, additive,
                                                 scaling=self.scaling)
        attn_output = attn_output.reshape(*input_shape, -1).contiguous()
        return self.o_proj(attn_output)
'''),
    Pasted("rasbt LLMs-from-scratch MultiHeadAttention (view, transpose(2, 3), masked_fill -inf)", A02,
           "MultiHeadAttention", '''
import torch
import torch.nn as nn


class MultiHeadAttention(nn.Module):
    def __init__(self, hidden_size, num_heads):
        super().__init__()
        assert hidden_size % num_heads == 0, "d_out must be divisible by num_heads"
        self.d_out = hidden_size
        self.num_heads = num_heads
        self.head_dim = hidden_size // num_heads  # Reduce the projection dim to match desired output dim
        self.q_proj = nn.Linear(hidden_size, hidden_size, bias=False)
        self.k_proj = nn.Linear(hidden_size, hidden_size, bias=False)
        self.v_proj = nn.Linear(hidden_size, hidden_size, bias=False)
        self.o_proj = nn.Linear(hidden_size, hidden_size, bias=False)  # Linear layer to combine head outputs

    def forward(self, x, attention_mask=None, causal=True):
        b, num_tokens, d_in = x.shape
        keys = self.k_proj(x)  # Shape: (b, num_tokens, d_out)
        queries = self.q_proj(x)
        values = self.v_proj(x)

        # Unroll last dim: (b, num_tokens, d_out) -> (b, num_tokens, num_heads, head_dim), then transpose
        keys = keys.view(b, num_tokens, self.num_heads, self.head_dim).transpose(1, 2)
        values = values.view(b, num_tokens, self.num_heads, self.head_dim).transpose(1, 2)
        queries = queries.view(b, num_tokens, self.num_heads, self.head_dim).transpose(1, 2)

        attn_scores = queries @ keys.transpose(2, 3)  # Dot product for each head

        mask_bool = torch.zeros(num_tokens, num_tokens, dtype=torch.bool)  # True = masked out (rasbt's way)
        if causal:
            mask_bool = torch.triu(torch.ones(num_tokens, num_tokens, dtype=torch.bool), diagonal=1)
        if attention_mask is not None:
            mask_bool = mask_bool | (attention_mask == 0)[:, None, None, :]
        attn_scores = attn_scores.masked_fill(mask_bool, -torch.inf)

        attn_weights = torch.softmax(attn_scores / keys.shape[-1] ** 0.5, dim=-1)
        attn_weights = torch.nan_to_num(attn_weights, nan=0.0)  # padding queries that see nothing

        context_vec = (attn_weights @ values).transpose(1, 2)  # Shape: (b, num_tokens, num_heads, head_dim)
        context_vec = context_vec.contiguous().view(b, num_tokens, self.d_out)
        return self.o_proj(context_vec)
'''),

    # Real bug.
    Pasted("rasbt LLMs-from-scratch#1062 before the fix: the True-means-masked triu mask handed to SDPA, "
           "whose True means may attend", A02, "MultiHeadAttention", '''
import torch
import torch.nn as nn
import torch.nn.functional as F


class MultiHeadAttention(nn.Module):
    def __init__(self, hidden_size, num_heads):
        super().__init__()
        self.num_heads = num_heads
        self.head_dim = hidden_size // num_heads
        self.q_proj = nn.Linear(hidden_size, hidden_size, bias=False)
        self.k_proj = nn.Linear(hidden_size, hidden_size, bias=False)
        self.v_proj = nn.Linear(hidden_size, hidden_size, bias=False)
        self.o_proj = nn.Linear(hidden_size, hidden_size, bias=False)

    def forward(self, x, attention_mask=None, causal=True):
        b, num_tokens, d_in = x.shape
        q = self.q_proj(x).view(b, num_tokens, self.num_heads, self.head_dim).transpose(1, 2)
        k = self.k_proj(x).view(b, num_tokens, self.num_heads, self.head_dim).transpose(1, 2)
        v = self.v_proj(x).view(b, num_tokens, self.num_heads, self.head_dim).transpose(1, 2)
        mask = torch.zeros(num_tokens, num_tokens, dtype=torch.bool)
        if causal:
            mask = torch.triu(torch.ones(num_tokens, num_tokens, dtype=torch.bool), diagonal=1)
        if attention_mask is not None:
            mask = mask | (attention_mask == 0)[:, None, None, :]
        context_vec = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=0.0)
        context_vec = context_vec.transpose(1, 2).contiguous().view(b, num_tokens, -1)
        return self.o_proj(context_vec)
''', fails=("MultiHeadAttention",)),
]


# --- 03_gqa_kv_cache -------------------------------------------------------------------------------------------

_03 = [
    Pasted("Hugging Face DynamicLayer (lazy initialization, torch.cat on dim=-2, get_seq_length)", A03, "KVCache", '''
import torch


class KVCache:
    """One layer of a dynamic cache: keys and values [batch, kv_heads, seq, head_dim] grow along seq."""

    def __init__(self):
        self.keys: torch.Tensor | None = None
        self.values: torch.Tensor | None = None
        self.is_initialized = False

    def lazy_initialization(self, key_states: torch.Tensor, value_states: torch.Tensor):
        self.dtype, self.device = key_states.dtype, key_states.device
        self.keys = torch.tensor([], dtype=self.dtype, device=self.device)
        self.values = torch.tensor([], dtype=value_states.dtype, device=self.device)
        self.is_initialized = True

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        self.keys = torch.cat([self.keys, key_states], dim=-2)
        self.values = torch.cat([self.values, value_states], dim=-2)
        return self.keys, self.values

    def get_seq_length(self) -> int:
        if not self.is_initialized or self.keys.numel() == 0:
            return 0
        return self.keys.shape[-2]

    def __len__(self) -> int:
        return self.get_seq_length()
'''),
    Pasted("Meta llama cache_k / cache_v buffers written at start_pos (grown by doubling)", A03, "KVCache", '''
import torch


class KVCache:
    def __init__(self, max_seq_len: int = 32):
        self.max_seq_len = max_seq_len
        self.cache_k = None
        self.cache_v = None
        self.start_pos = 0

    def _reserve(self, xk: torch.Tensor, xv: torch.Tensor, seqlen: int) -> None:
        needed = self.start_pos + seqlen
        if self.cache_k is not None and needed <= self.cache_k.shape[2]:
            return
        capacity = max(self.max_seq_len, 2 * needed)
        bsz, n_kv_heads, _, head_dim = xk.shape
        cache_k = xk.new_zeros(bsz, n_kv_heads, capacity, head_dim)
        cache_v = xv.new_zeros(bsz, n_kv_heads, capacity, xv.shape[-1])
        if self.cache_k is not None:
            cache_k[:, :, :self.start_pos] = self.cache_k[:, :, :self.start_pos]
            cache_v[:, :, :self.start_pos] = self.cache_v[:, :, :self.start_pos]
        self.cache_k, self.cache_v = cache_k, cache_v

    def update(self, xk: torch.Tensor, xv: torch.Tensor):
        seqlen = xk.shape[2]
        self._reserve(xk, xv, seqlen)
        self.cache_k[:, :, self.start_pos:self.start_pos + seqlen] = xk
        self.cache_v[:, :, self.start_pos:self.start_pos + seqlen] = xv
        self.start_pos += seqlen
        keys = self.cache_k[:, :, :self.start_pos]
        values = self.cache_v[:, :, :self.start_pos]
        return keys, values

    def __len__(self):
        return self.start_pos
'''),
    Pasted("list of chunks, concatenated on read", A03, "KVCache", '''
import torch


class KVCache:
    def __init__(self):
        self._keys: list[torch.Tensor] = []
        self._values: list[torch.Tensor] = []

    def update(self, k, v):
        self._keys.append(k)
        self._values.append(v)
        return torch.cat(self._keys, dim=2), torch.cat(self._values, dim=2)

    def __len__(self):
        return sum(k.shape[2] for k in self._keys)
'''),

    Pasted("Hugging Face repeat_kv (expand a new axis, then reshape)", A03, "repeat_kv", '''
import torch


def repeat_kv(hidden_states: torch.Tensor, n_rep: int) -> torch.Tensor:
    """
    The equivalent of torch.repeat_interleave(x, dim=1, repeats=n_rep): (batch, num_key_value_heads, seqlen,
    head_dim) -> (batch, num_attention_heads, seqlen, head_dim)
    """
    batch, num_key_value_heads, slen, head_dim = hidden_states.shape
    if n_rep == 1:
        return hidden_states
    hidden_states = hidden_states[:, :, None, :, :].expand(batch, num_key_value_heads, n_rep, slen, head_dim)
    return hidden_states.reshape(batch, num_key_value_heads * n_rep, slen, head_dim)
'''),
    Pasted("Meta llama repeat_kv ([bs, seqlen, n_kv_heads, head_dim] layout), wrapped with transposes", A03,
           "repeat_kv", '''
import torch


def _repeat_kv_bshd(x: torch.Tensor, n_rep: int) -> torch.Tensor:
    """torch.repeat_interleave(x, dim=2, repeats=n_rep) on Meta's layout"""
    bs, slen, n_kv_heads, head_dim = x.shape
    if n_rep == 1:
        return x
    return (
        x[:, :, :, None, :]
        .expand(bs, slen, n_kv_heads, n_rep, head_dim)
        .reshape(bs, slen, n_kv_heads * n_rep, head_dim)
    )


def repeat_kv(x: torch.Tensor, n_rep: int) -> torch.Tensor:
    # the course keeps heads before positions: [B, Hkv, T, D]
    return _repeat_kv_bshd(x.transpose(1, 2), n_rep).transpose(1, 2)
'''),
    Pasted("rasbt LLMs-from-scratch GroupedQueryAttention (repeat_interleave on the head dim)", A03, "repeat_kv", '''
import torch


def repeat_kv(x, n_rep):
    return x.repeat_interleave(n_rep, dim=1)  # Shape: (b, num_heads, num_tokens, head_dim)
'''),

    Pasted("torch F.scaled_dot_product_attention(enable_gqa=True) with an explicit bottom-right causal mask", A03,
           "GroupedQueryAttention", '''
import torch
import torch.nn.functional as F
from torch import nn


class GroupedQueryAttention(nn.Module):
    def __init__(self, hidden_size: int, num_heads: int, num_kv_heads: int, head_dim: int | None = None):
        super().__init__()
        self.num_heads, self.num_kv_heads = num_heads, num_kv_heads
        self.head_dim = head_dim or hidden_size // num_heads
        self.q_proj = nn.Linear(hidden_size, num_heads * self.head_dim, bias=False)
        self.k_proj = nn.Linear(hidden_size, num_kv_heads * self.head_dim, bias=False)
        self.v_proj = nn.Linear(hidden_size, num_kv_heads * self.head_dim, bias=False)
        self.o_proj = nn.Linear(num_heads * self.head_dim, hidden_size, bias=False)

    def forward(self, x: torch.Tensor, attention_mask: torch.Tensor | None = None, cache=None):
        bsz, q_len, _ = x.shape
        q = self.q_proj(x).view(bsz, q_len, self.num_heads, self.head_dim).transpose(1, 2)
        k = self.k_proj(x).view(bsz, q_len, self.num_kv_heads, self.head_dim).transpose(1, 2)
        v = self.v_proj(x).view(bsz, q_len, self.num_kv_heads, self.head_dim).transpose(1, 2)
        if cache is not None:
            k, v = cache.update(k, v)
        k_len = k.shape[-2]
        # is_causal=True would align the triangle top-left; with a cache the queries sit bottom-right
        allowed = torch.ones(q_len, k_len, dtype=torch.bool, device=x.device).tril(diagonal=k_len - q_len)
        if attention_mask is not None:
            allowed = allowed & attention_mask.bool()[:, None, None, :]
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=allowed, enable_gqa=True)
        return self.o_proj(out.transpose(1, 2).reshape(bsz, q_len, -1)), cache
'''),
    Pasted("Hugging Face LlamaAttention eager path (num_key_value_groups, repeat_kv, fp32 softmax)", A03,
           "GroupedQueryAttention", '''
import torch
from torch import nn


def eager_attention_forward(module, query, key, value, attention_mask, scaling, dropout=0.0):
    key_states = repeat_kv(key, module.num_key_value_groups)
    value_states = repeat_kv(value, module.num_key_value_groups)
    attn_weights = torch.matmul(query, key_states.transpose(2, 3)) * scaling
    if attention_mask is not None:
        attn_weights = attn_weights + attention_mask
    attn_weights = nn.functional.softmax(attn_weights, dim=-1, dtype=torch.float32).to(query.dtype)
    attn_weights = nn.functional.dropout(attn_weights, p=dropout, training=module.training)
    attn_output = torch.matmul(attn_weights, value_states)
    attn_output = attn_output.transpose(1, 2).contiguous()
    return attn_output, attn_weights


class GroupedQueryAttention(nn.Module):
    def __init__(self, hidden_size, num_heads, num_kv_heads, head_dim=None):
        super().__init__()
        self.head_dim = hidden_size // num_heads if head_dim is None else head_dim
        self.num_key_value_groups = num_heads // num_kv_heads
        self.scaling = self.head_dim ** -0.5
        self.q_proj = nn.Linear(hidden_size, num_heads * self.head_dim, bias=False)
        self.k_proj = nn.Linear(hidden_size, num_kv_heads * self.head_dim, bias=False)
        self.v_proj = nn.Linear(hidden_size, num_kv_heads * self.head_dim, bias=False)
        self.o_proj = nn.Linear(num_heads * self.head_dim, hidden_size, bias=False)

    def forward(self, hidden_states, attention_mask=None, cache=None):
        input_shape = hidden_states.shape[:-1]
        hidden_shape = (*input_shape, -1, self.head_dim)
        query_states = self.q_proj(hidden_states).view(hidden_shape).transpose(1, 2)
        key_states = self.k_proj(hidden_states).view(hidden_shape).transpose(1, 2)
        value_states = self.v_proj(hidden_states).view(hidden_shape).transpose(1, 2)
        if cache is not None:
            key_states, value_states = cache.update(key_states, value_states)

        # the 4D mask Hugging Face builds from the 2D one: 0 where allowed, finfo.min elsewhere
        q_len, kv_len = query_states.shape[-2], key_states.shape[-2]
        allowed = causal_mask(q_len, kv_len)
        if attention_mask is not None:
            allowed = allowed & padding_mask(attention_mask)
        dtype = hidden_states.dtype
        causal_4d = torch.zeros(allowed.shape, dtype=dtype).masked_fill(~allowed, torch.finfo(dtype).min)

        attn_output, _ = eager_attention_forward(self, query_states, key_states, value_states, causal_4d,
                                                 scaling=self.scaling)
        attn_output = attn_output.reshape(*input_shape, -1).contiguous()
        return self.o_proj(attn_output), cache
'''),
    Pasted("rasbt LLMs-from-scratch GroupedQueryAttention (group_size, repeat_interleave, -inf + nan_to_num)", A03,
           "GroupedQueryAttention", '''
import torch
import torch.nn as nn


class GroupedQueryAttention(nn.Module):
    def __init__(self, hidden_size, num_heads, num_kv_heads, head_dim=None):
        super().__init__()
        assert num_heads % num_kv_heads == 0, "num_heads must be divisible by num_kv_groups"
        self.num_heads = num_heads
        self.num_kv_groups = num_kv_heads
        self.group_size = num_heads // num_kv_heads
        self.head_dim = head_dim if head_dim is not None else hidden_size // num_heads
        self.d_out = num_heads * self.head_dim
        self.q_proj = nn.Linear(hidden_size, self.d_out, bias=False)
        self.k_proj = nn.Linear(hidden_size, num_kv_heads * self.head_dim, bias=False)
        self.v_proj = nn.Linear(hidden_size, num_kv_heads * self.head_dim, bias=False)
        self.o_proj = nn.Linear(self.d_out, hidden_size, bias=False)

    def forward(self, x, attention_mask=None, cache=None):
        b, num_tokens, _ = x.shape
        queries = self.q_proj(x).view(b, num_tokens, self.num_heads, self.head_dim).transpose(1, 2)
        keys = self.k_proj(x).view(b, num_tokens, self.num_kv_groups, self.head_dim).transpose(1, 2)
        values = self.v_proj(x).view(b, num_tokens, self.num_kv_groups, self.head_dim).transpose(1, 2)
        if cache is not None:
            keys, values = cache.update(keys, values)  # cache the KV groups, before expanding them
        keys = keys.repeat_interleave(self.group_size, dim=1)
        values = values.repeat_interleave(self.group_size, dim=1)

        attn_scores = queries @ keys.transpose(2, 3)
        num_keys = keys.shape[2]
        offset = num_keys - num_tokens
        mask = torch.triu(torch.ones(num_tokens, num_keys, dtype=torch.bool), diagonal=offset + 1)
        if attention_mask is not None:
            mask = mask | (attention_mask == 0)[:, None, None, :]
        attn_scores = attn_scores.masked_fill(mask, -torch.inf)
        attn_weights = torch.softmax(attn_scores / self.head_dim ** 0.5, dim=-1)
        attn_weights = torch.nan_to_num(attn_weights, nan=0.0)

        context = (attn_weights @ values).transpose(1, 2).reshape(b, num_tokens, self.d_out)
        return self.o_proj(context), cache
'''),

    Pasted("KV cache size formula as in Hugging Face's cache docs (2 x layers x kv_heads x head_dim x tokens)", A03,
           "kv_cache_bytes", '''
def kv_cache_bytes(batch: int, seq_len: int, num_layers: int, num_kv_heads: int, head_dim: int,
                   bytes_per_elem: int) -> int:
    per_token = 2 * num_layers * num_kv_heads * head_dim * bytes_per_elem  # K and V, every layer
    return batch * seq_len * per_token
'''),
    Pasted("meta-device tensors shaped like a DynamicCache layer, counted with numel()", A03, "kv_cache_bytes", '''
import torch


def kv_cache_bytes(batch, seq_len, num_layers, num_kv_heads, head_dim, bytes_per_elem):
    # one key and one value tensor [B, Hkv, T, D] per layer; on the meta device nothing is allocated
    layer = torch.empty(batch, num_kv_heads, seq_len, head_dim, device="meta")
    return 2 * num_layers * layer.numel() * bytes_per_elem
'''),
    Pasted("math.prod over the cache's shape", A03, "kv_cache_bytes", '''
import math


def kv_cache_bytes(batch, seq_len, num_layers, num_kv_heads, head_dim, bytes_per_elem):
    return math.prod((2, num_layers, batch, num_kv_heads, seq_len, head_dim, bytes_per_elem))
'''),

    Pasted("torch.utils.flop_counter.FlopCounterMode over meta tensors", A03, "attention_flops", '''
import torch
import torch.nn.functional as F
from torch.utils.flop_counter import FlopCounterMode


def attention_flops(batch: int, q_len: int, k_len: int, hidden_size: int, num_heads: int, num_kv_heads: int,
                    head_dim: int) -> int:
    """Run the layer's matrix products on meta tensors and let torch count them (2 FLOPs per multiply-add)."""
    meta = {"device": "meta"}
    x = torch.empty(batch, q_len, hidden_size, **meta)
    w_q = torch.empty(num_heads * head_dim, hidden_size, **meta)
    w_kv = torch.empty(num_kv_heads * head_dim, hidden_size, **meta)
    w_o = torch.empty(hidden_size, num_heads * head_dim, **meta)
    # the k_len cached keys and values, already repeated to every query head
    keys = torch.empty(batch, num_heads, k_len, head_dim, **meta)
    values = torch.empty(batch, num_heads, k_len, head_dim, **meta)
    with FlopCounterMode(display=False) as counter:
        q = F.linear(x, w_q).view(batch, q_len, num_heads, head_dim).transpose(1, 2)
        F.linear(x, w_kv)  # k_proj of the new tokens
        F.linear(x, w_kv)  # v_proj
        scores = q @ keys.transpose(-2, -1)
        out = scores @ values
        F.linear(out.transpose(1, 2).reshape(batch, q_len, num_heads * head_dim), w_o)
    return counter.get_total_flops()
'''),
    Pasted("Kaplan et al. / nanoGPT estimate_mfu style: 2 x multiply-accumulates, term by term", A03,
           "attention_flops", '''
def attention_flops(batch, q_len, k_len, hidden_size, num_heads, num_kv_heads, head_dim):
    d_attn = num_heads * head_dim
    d_kv = num_kv_heads * head_dim
    # multiply-accumulates per sequence
    mac_qo = 2 * q_len * hidden_size * d_attn   # q_proj and o_proj
    mac_kv = 2 * q_len * hidden_size * d_kv     # k_proj and v_proj
    mac_attn = 2 * num_heads * q_len * k_len * head_dim  # Q K^T and weights V
    return 2 * batch * (mac_qo + mac_kv + mac_attn)
'''),

    # Real bugs.
    Pasted("onnx/onnx Attention op before onnx#7274: KV heads tiled (repeat) instead of interleaved", A03,
           "repeat_kv", '''
import torch


def repeat_kv(x: torch.Tensor, n_rep: int) -> torch.Tensor:
    return x.repeat(1, n_rep, 1, 1)  # heads come out 0, 1, 0, 1 ... instead of 0, 0, 1, 1 ...
''', fails=("repeat_kv", "GroupedQueryAttention")),
    Pasted("pytorch/pytorch#144858: SDPA is_causal=True with a KV cache (its triangle is aligned top-left)", A03,
           "GroupedQueryAttention", '''
import torch
import torch.nn.functional as F
from torch import nn


class GroupedQueryAttention(nn.Module):
    def __init__(self, hidden_size, num_heads, num_kv_heads, head_dim=None):
        super().__init__()
        self.num_heads, self.num_kv_heads = num_heads, num_kv_heads
        self.head_dim = head_dim or hidden_size // num_heads
        self.q_proj = nn.Linear(hidden_size, num_heads * self.head_dim, bias=False)
        self.k_proj = nn.Linear(hidden_size, num_kv_heads * self.head_dim, bias=False)
        self.v_proj = nn.Linear(hidden_size, num_kv_heads * self.head_dim, bias=False)
        self.o_proj = nn.Linear(num_heads * self.head_dim, hidden_size, bias=False)

    def forward(self, x, attention_mask=None, cache=None):
        bsz, q_len, _ = x.shape
        q = self.q_proj(x).view(bsz, q_len, self.num_heads, self.head_dim).transpose(1, 2)
        k = self.k_proj(x).view(bsz, q_len, self.num_kv_heads, self.head_dim).transpose(1, 2)
        v = self.v_proj(x).view(bsz, q_len, self.num_kv_heads, self.head_dim).transpose(1, 2)
        if cache is not None:
            k, v = cache.update(k, v)
        if attention_mask is None:
            out = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        else:
            k_len = k.shape[-2]
            allowed = torch.ones(q_len, k_len, dtype=torch.bool).tril(k_len - q_len)
            allowed = allowed & attention_mask.bool()[:, None, None, :]
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=allowed, enable_gqa=True)
        return self.o_proj(out.transpose(1, 2).reshape(bsz, q_len, -1)), cache
''', fails=("GroupedQueryAttention",)),
]


# --- 04_rope_mla -----------------------------------------------------------------------------------------------

_04 = [
    Pasted("Hugging Face LlamaRotaryEmbedding (default inv_freq, inv_freq @ position_ids, cat(freqs, freqs))", A04,
           "rope_cos_sin", '''
import torch


def _compute_default_rope_parameters(base: float, dim: int) -> torch.Tensor:
    # the inverse frequencies of transformers' "default" rope type
    return 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.int64).to(dtype=torch.float) / dim))


def rope_cos_sin(positions: torch.Tensor, rotary_dim: int, theta: float) -> tuple[torch.Tensor, torch.Tensor]:
    inv_freq = _compute_default_rope_parameters(theta, rotary_dim)
    inv_freq_expanded = inv_freq[:, None].float()       # [dim / 2, 1]
    position_ids_expanded = positions[None, :].float()  # [1, T]
    freqs = (inv_freq_expanded @ position_ids_expanded).transpose(0, 1)  # [T, dim / 2]
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos(), emb.sin()
'''),
    Pasted("Meta llama precompute_freqs_cis (torch.polar), read back as rotate-half tables", A04, "rope_cos_sin", '''
import torch


def precompute_freqs_cis(dim: int, positions: torch.Tensor, theta: float = 10000.0) -> torch.Tensor:
    freqs = 1.0 / (theta ** (torch.arange(0, dim, 2)[: (dim // 2)].float() / dim))
    t = positions.to(torch.float32)
    freqs = torch.outer(t, freqs).float()
    return torch.polar(torch.ones_like(freqs), freqs)  # complex64, e^(i m theta_j)


def rope_cos_sin(positions, rotary_dim, theta):
    freqs_cis = precompute_freqs_cis(rotary_dim, positions, theta)
    # Meta pairs adjacent dims; rotate-half wants both halves to carry the same angles
    cos, sin = freqs_cis.real, freqs_cis.imag
    return torch.cat([cos, cos], dim=-1), torch.cat([sin, sin], dim=-1)
'''),
    Pasted("rasbt LLMs-from-scratch compute_rope_params", A04, "rope_cos_sin", '''
import torch


def rope_cos_sin(positions, rotary_dim, theta):
    head_dim = rotary_dim
    assert head_dim % 2 == 0, "Embedding dimension must be even"

    # Compute the inverse frequencies
    inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.float32)[: (head_dim // 2)] / head_dim))

    # Compute the angles
    angles = positions.to(torch.float32)[:, None] * inv_freq[None, :]  # Shape: (context_length, head_dim // 2)

    # Expand angles to match the head_dim
    angles = torch.cat([angles, angles], dim=1)  # Shape: (context_length, head_dim)

    # Precompute sine and cosine
    cos = torch.cos(angles)
    sin = torch.sin(angles)
    return cos, sin
'''),

    Pasted("Hugging Face rotate_half + apply_rotary_pos_emb, one tensor at a time", A04, "apply_rope", '''
import torch


def rotate_half(x):
    """Rotates half the hidden dims of the input."""
    x1 = x[..., : x.shape[-1] // 2]
    x2 = x[..., x.shape[-1] // 2 :]
    return torch.cat((-x2, x1), dim=-1)


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    cos, sin = cos.to(x.dtype), sin.to(x.dtype)
    return (x * cos) + (rotate_half(x) * sin)
'''),
    Pasted("transformers' own llama apply_rotary_pos_emb, imported inside the function", A04, "apply_rope", '''
import torch


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

    # it rotates (q, k) together and unsqueezes the tables at `unsqueeze_dim`: at 0, [T, D] becomes [1, T, D],
    # which broadcasts over x given one more leading dim (x may have none of its own)
    x_embed, _ = apply_rotary_pos_emb(x[None], x[None], cos.to(x.dtype), sin.to(x.dtype), unsqueeze_dim=0)
    return x_embed[0]
'''),
    Pasted("rasbt LLMs-from-scratch apply_rope (computed against the float32 tables, cast back at the end)", A04,
           "apply_rope", '''
import torch


def apply_rope(x, cos, sin):
    *_, seq_len, head_dim = x.shape
    assert head_dim % 2 == 0, "Head dimension must be even"

    # Split x into first half and second half
    x1 = x[..., : head_dim // 2]  # First half
    x2 = x[..., head_dim // 2 :]  # Second half

    # Adjust sin and cos shapes
    cos = cos[:seq_len, :]  # Shape: (seq_len, head_dim), broadcast over the leading dims
    sin = sin[:seq_len, :]

    # Apply the rotary transformation
    rotated = torch.cat((-x2, x1), dim=-1)
    x_rotated = (x * cos) + (rotated * sin)

    # It's ok to use lower-precision after applying cos and sin rotation
    return x_rotated.to(dtype=x.dtype)
'''),

    Pasted("Hugging Face cache layer for MLA (latent and rope key concatenated along the sequence)", A04,
           "LatentKVCache", '''
import torch


class LatentKVCache:
    def __init__(self):
        self.compressed_kv: torch.Tensor | None = None
        self.k_pe: torch.Tensor | None = None

    def update(self, compressed_kv: torch.Tensor, k_pe: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        if self.compressed_kv is None:
            self.compressed_kv, self.k_pe = compressed_kv, k_pe
        else:
            self.compressed_kv = torch.cat([self.compressed_kv, compressed_kv], dim=-2)
            self.k_pe = torch.cat([self.k_pe, k_pe], dim=-2)
        return self.compressed_kv, self.k_pe

    def __len__(self) -> int:
        return 0 if self.compressed_kv is None else self.compressed_kv.shape[-2]
'''),
    Pasted("DeepSeek-V3 inference kv_cache / pe_cache buffers (absorb mode), grown on demand", A04,
           "LatentKVCache", '''
import torch


class LatentKVCache:
    def __init__(self, max_seq_len: int = 16):
        self.max_seq_len = max_seq_len
        self.kv_cache = None
        self.pe_cache = None
        self.end_pos = 0

    def update(self, kv: torch.Tensor, k_pe: torch.Tensor):
        bsz, seqlen, _ = kv.shape
        start_pos, end_pos = self.end_pos, self.end_pos + seqlen
        if self.kv_cache is None or end_pos > self.kv_cache.shape[1]:
            size = max(self.max_seq_len, 2 * end_pos)
            kv_cache = kv.new_zeros(bsz, size, kv.shape[-1])
            pe_cache = k_pe.new_zeros(bsz, size, k_pe.shape[-1])
            if self.kv_cache is not None:
                kv_cache[:, :start_pos] = self.kv_cache[:, :start_pos]
                pe_cache[:, :start_pos] = self.pe_cache[:, :start_pos]
            self.kv_cache, self.pe_cache = kv_cache, pe_cache
        self.kv_cache[:bsz, start_pos:end_pos] = kv
        self.pe_cache[:bsz, start_pos:end_pos] = k_pe
        self.end_pos = end_pos
        return self.kv_cache[:bsz, :end_pos], self.pe_cache[:bsz, :end_pos]

    def __len__(self):
        return self.end_pos
'''),

    Pasted("Hugging Face DeepseekV3Attention (q_pass / q_rot, compressed_kv, k_rot expanded, eager attention)", A04,
           "MultiHeadLatentAttention", '''
import torch
from torch import nn


def eager_attention_forward(module, query, key, value, attention_mask, scaling, dropout=0.0):
    attn_weights = torch.matmul(query, key.transpose(2, 3)) * scaling
    if attention_mask is not None:
        attn_weights = attn_weights + attention_mask
    attn_weights = nn.functional.softmax(attn_weights, dim=-1, dtype=torch.float32).to(query.dtype)
    attn_weights = nn.functional.dropout(attn_weights, p=dropout, training=module.training)
    attn_output = torch.matmul(attn_weights, value)
    return attn_output.transpose(1, 2).contiguous(), attn_weights


class MultiHeadLatentAttention(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.num_heads = config.num_attention_heads
        self.q_lora_rank = config.q_lora_rank
        self.rank = config.kv_lora_rank
        self.d_nope, self.d_rope, self.d_v = config.qk_nope_head_dim, config.qk_rope_head_dim, config.v_head_dim
        self.qk_head_dim = self.d_nope + self.d_rope
        self.theta = config.rope_theta
        self.scaling = self.qk_head_dim ** (-0.5)

        if self.q_lora_rank is None:
            self.q_proj = nn.Linear(config.hidden_size, self.num_heads * self.qk_head_dim, bias=False)
        else:
            self.q_a_proj = nn.Linear(config.hidden_size, config.q_lora_rank, bias=False)
            self.q_a_layernorm = RMSNorm(config.q_lora_rank, config.rms_norm_eps)
            self.q_b_proj = nn.Linear(config.q_lora_rank, self.num_heads * self.qk_head_dim, bias=False)

        self.kv_a_proj_with_mqa = nn.Linear(config.hidden_size, self.rank + self.d_rope, bias=False)
        self.kv_a_layernorm = RMSNorm(self.rank, config.rms_norm_eps)
        self.kv_b_proj = nn.Linear(self.rank, self.num_heads * (self.d_nope + self.d_v), bias=False)
        self.o_proj = nn.Linear(self.num_heads * self.d_v, config.hidden_size, bias=False)

    def prepare(self, hidden_states, attention_mask, cache):
        batch_size, seq_length = hidden_states.shape[:-1]
        query_shape = (batch_size, seq_length, -1, self.qk_head_dim)
        past_seen_tokens = 0 if cache is None else len(cache)
        position_ids = torch.arange(past_seen_tokens, past_seen_tokens + seq_length)
        cos, sin = rope_cos_sin(position_ids, self.d_rope, self.theta)

        if self.q_lora_rank is None:
            q_states = self.q_proj(hidden_states)
        else:
            q_states = self.q_b_proj(self.q_a_layernorm(self.q_a_proj(hidden_states)))
        q_states = q_states.view(query_shape).transpose(1, 2)
        q_pass, q_rot = torch.split(q_states, [self.d_nope, self.d_rope], dim=-1)

        compressed_kv = self.kv_a_proj_with_mqa(hidden_states)
        k_pass, k_rot = torch.split(compressed_kv, [self.rank, self.d_rope], dim=-1)
        k_pass = self.kv_a_layernorm(k_pass)
        q_rot, k_rot = apply_rope(q_rot, cos, sin), apply_rope(k_rot, cos, sin)
        if cache is not None:
            k_pass, k_rot = cache.update(k_pass, k_rot)  # the latent cache: what MLA is for

        mask = causal_mask(seq_length, k_pass.shape[1])
        if attention_mask is not None:
            mask = mask & padding_mask(attention_mask)
        return q_pass, q_rot, k_pass, k_rot, mask

    def forward(self, hidden_states, attention_mask=None, cache=None):
        batch_size, seq_length = hidden_states.shape[:-1]
        q_pass, q_rot, latent, k_rot, mask = self.prepare(hidden_states, attention_mask, cache)
        kv_length = latent.shape[1]
        key_shape = (batch_size, kv_length, -1, self.d_nope + self.d_v)
        k_pass = self.kv_b_proj(latent).view(key_shape).transpose(1, 2)
        k_pass, value_states = torch.split(k_pass, [self.d_nope, self.d_v], dim=-1)

        k_rot = k_rot.view(batch_size, 1, kv_length, self.d_rope).expand(*k_pass.shape[:-1], -1)
        query_states = torch.cat((q_pass, q_rot), dim=-1)
        key_states = torch.cat((k_pass, k_rot), dim=-1)

        dtype = hidden_states.dtype
        causal_4d = torch.zeros(mask.shape, dtype=dtype).masked_fill(~mask, torch.finfo(dtype).min)
        attn_output, _ = eager_attention_forward(self, query_states, key_states, value_states, causal_4d,
                                                 scaling=self.scaling)
        attn_output = attn_output.reshape(batch_size, seq_length, -1).contiguous()
        return self.o_proj(attn_output), cache
'''),
    Pasted("DeepSeek-V3 inference MLA, attn_impl='naive' (bshd layout, einsum 'bshd,bthd->...')", A04,
           "MultiHeadLatentAttention", '''
import torch
from torch import nn


class MultiHeadLatentAttention(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.dim = config.hidden_size
        self.num_heads = config.num_attention_heads
        self.q_lora_rank = config.q_lora_rank
        self.rank = config.kv_lora_rank
        self.d_nope = config.qk_nope_head_dim
        self.d_rope = config.qk_rope_head_dim
        self.d_v = config.v_head_dim
        self.qk_head_dim = self.d_nope + self.d_rope
        self.theta = config.rope_theta
        self.softmax_scale = self.qk_head_dim ** -0.5
        # DeepSeek's wq / wq_a / q_norm / wq_b / wkv_a / kv_norm / wkv_b / wo, under Hugging Face's names
        if self.q_lora_rank is None:
            self.q_proj = nn.Linear(self.dim, self.num_heads * self.qk_head_dim, bias=False)
        else:
            self.q_a_proj = nn.Linear(self.dim, self.q_lora_rank, bias=False)
            self.q_a_layernorm = RMSNorm(self.q_lora_rank, config.rms_norm_eps)
            self.q_b_proj = nn.Linear(self.q_lora_rank, self.num_heads * self.qk_head_dim, bias=False)
        self.kv_a_proj_with_mqa = nn.Linear(self.dim, self.rank + self.d_rope, bias=False)
        self.kv_a_layernorm = RMSNorm(self.rank, config.rms_norm_eps)
        self.kv_b_proj = nn.Linear(self.rank, self.num_heads * (self.d_nope + self.d_v), bias=False)
        self.o_proj = nn.Linear(self.num_heads * self.d_v, self.dim, bias=False)

    def prepare(self, x, attention_mask, cache):
        bsz, seqlen, _ = x.size()
        start_pos = 0 if cache is None else len(cache)
        end_pos = start_pos + seqlen
        cos, sin = rope_cos_sin(torch.arange(start_pos, end_pos), self.d_rope, self.theta)
        if self.q_lora_rank is None:
            q = self.q_proj(x)
        else:
            q = self.q_b_proj(self.q_a_layernorm(self.q_a_proj(x)))
        q = q.view(bsz, seqlen, self.num_heads, self.qk_head_dim)
        q_nope, q_pe = torch.split(q, [self.d_nope, self.d_rope], dim=-1)
        q_pe = apply_rope(q_pe.transpose(1, 2), cos, sin)  # rotate-half wants [..., T, d_rope]
        kv = self.kv_a_proj_with_mqa(x)
        kv, k_pe = torch.split(kv, [self.rank, self.d_rope], dim=-1)
        kv = self.kv_a_layernorm(kv)
        k_pe = apply_rope(k_pe, cos, sin)
        if cache is not None:
            kv, k_pe = cache.update(kv, k_pe)
        mask = causal_mask(seqlen, kv.shape[1])
        if attention_mask is not None:
            mask = mask & padding_mask(attention_mask)
        return q_nope.transpose(1, 2), q_pe, kv, k_pe, mask

    def forward(self, x, attention_mask=None, cache=None):
        bsz, seqlen, _ = x.size()
        q_nope, q_pe, kv, k_pe, mask = self.prepare(x, attention_mask, cache)
        q = torch.cat([q_nope, q_pe], dim=-1).transpose(1, 2)  # back to DeepSeek's bshd
        end_pos = kv.shape[1]
        kv = self.kv_b_proj(kv).view(bsz, end_pos, self.num_heads, self.d_nope + self.d_v)
        k_nope, v = torch.split(kv, [self.d_nope, self.d_v], dim=-1)
        k = torch.cat([k_nope, k_pe.unsqueeze(2).expand(-1, -1, self.num_heads, -1)], dim=-1)
        scores = torch.einsum("bshd,bthd->bhst", q, k) * self.softmax_scale
        scores = scores.masked_fill(~mask, torch.finfo(scores.dtype).min)
        scores = scores.softmax(dim=-1, dtype=torch.float32).type_as(x)
        x = torch.einsum("bhst,bthd->bshd", scores, v)
        return self.o_proj(x.flatten(2)), cache
'''),

    Pasted("DeepSeek-V3 inference MLA, attn_impl='absorb' (wkv_b folded in with einsum)", A04, "forward_absorbed", '''
import torch


class MultiHeadLatentAttention(MultiHeadLatentAttention):
    def forward_absorbed(self, x, attention_mask=None, cache=None):
        q_nope, q_pe, kv, k_pe, mask = self.prepare(x, attention_mask, cache)
        wkv_b = self.kv_b_proj.weight.view(self.num_heads, -1, self.rank)  # [H, nope + v, r]
        q_nope = torch.einsum("bhsd,hdc->bhsc", q_nope, wkv_b[:, :self.d_nope])
        scores = (torch.einsum("bhsc,btc->bhst", q_nope, kv) +
                  torch.einsum("bhsr,btr->bhst", q_pe, k_pe)) * (self.d_nope + self.d_rope) ** -0.5
        scores = scores.masked_fill(~mask, torch.finfo(scores.dtype).min)
        scores = scores.softmax(dim=-1, dtype=torch.float32).type_as(x)
        x = torch.einsum("bhst,btc->bhsc", scores, kv)
        x = torch.einsum("bhsc,hdc->bhsd", x, wkv_b[:, -self.d_v:])
        return self.o_proj(x.transpose(1, 2).flatten(2)), cache
'''),
    Pasted("vLLM MLA W_UK_T / W_UV (kv_b_proj.weight.T viewed [r, H, nope + v], batched matmuls)", A04,
           "forward_absorbed", '''
import math

import torch


class MultiHeadLatentAttention(MultiHeadLatentAttention):
    def _absorbed_weights(self):
        kv_b_proj_weight = self.kv_b_proj.weight.T  # [kv_lora_rank, H * (nope + v)]
        kv_b_proj_weight = kv_b_proj_weight.view(self.rank, self.num_heads, self.d_nope + self.d_v)
        W_UK, W_UV = kv_b_proj_weight.split([self.d_nope, self.d_v], dim=-1)  # [r, H, nope], [r, H, v]
        W_UV = W_UV.transpose(0, 1)        # [H, r, v]
        W_UK_T = W_UK.permute(1, 2, 0)     # [H, nope, r]
        return W_UK_T, W_UV

    def forward_absorbed(self, x, attention_mask=None, cache=None):
        q_nope, q_pe, latent, k_pe, mask = self.prepare(x, attention_mask, cache)
        W_UK_T, W_UV = self._absorbed_weights()
        ql_nope = torch.matmul(q_nope, W_UK_T)                    # [B, H, T, r]: decoding is MQA on the latent
        scores = ql_nope @ latent[:, None].transpose(-2, -1) + q_pe @ k_pe[:, None].transpose(-2, -1)
        weights = masked_softmax(scores / math.sqrt(self.d_nope + self.d_rope), mask)
        attn_out = torch.matmul(weights @ latent[:, None], W_UV)  # [B, H, T, v]
        return self.o_proj(attn_out.transpose(1, 2).flatten(-2)), cache
'''),

    Pasted("DeepSeek-V3 inference cache buffers on the meta device, counted with numel()", A04, "mla_cache_bytes", '''
import torch


def mla_cache_bytes(batch, seq_len, num_layers, kv_lora_rank, qk_rope_head_dim, bytes_per_elem):
    # per layer: kv_cache [B, T, kv_lora_rank] and pe_cache [B, T, qk_rope_head_dim], nothing per head
    kv_cache = torch.empty(batch, seq_len, kv_lora_rank, device="meta")
    pe_cache = torch.empty(batch, seq_len, qk_rope_head_dim, device="meta")
    return num_layers * (kv_cache.numel() + pe_cache.numel()) * bytes_per_elem
'''),
    Pasted("the DeepSeek-V2 paper's (d_c + d_h^R) elements per token and layer", A04, "mla_cache_bytes", '''
def mla_cache_bytes(batch: int, seq_len: int, num_layers: int, kv_lora_rank: int, qk_rope_head_dim: int,
                    bytes_per_elem: int) -> int:
    per_token_per_layer = kv_lora_rank + qk_rope_head_dim  # d_c + d_h^R
    return batch * seq_len * num_layers * per_token_per_layer * bytes_per_elem
'''),

    # Real bug.
    Pasted("GPT-J / Meta-llama interleaved RoPE (view_as_complex on adjacent dims) on rotate-half weights: "
           "pytorch/torchtitan#801, transformers#25199", A04, "apply_rope", '''
import torch


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    # Meta's apply_rotary_emb: dims (2i, 2i + 1) form one complex number, turned by e^(i m theta_i)
    half = x.shape[-1] // 2
    freqs_cis = torch.complex(cos[..., :half].float(), sin[..., :half].float())
    x_ = torch.view_as_complex(x.float().reshape(*x.shape[:-1], -1, 2))
    return torch.view_as_real(x_ * freqs_cis).flatten(-2).type_as(x)
''', fails=("apply_rope", "MultiHeadLatentAttention", "forward_absorbed")),
]


# --- 05_output_gate --------------------------------------------------------------------------------------------

_05 = [
    Pasted("Hugging Face Qwen3-Next / Qwen3.5 attention (torch.chunk of a [..., -1, head_dim * 2] view)", A05,
           "split_query_gate", '''
import torch


def split_query_gate(q_out: torch.Tensor, num_heads: int, head_dim: int) -> tuple[torch.Tensor, torch.Tensor]:
    input_shape = q_out.shape[:-1]
    query_states, gate = torch.chunk(q_out.view(*input_shape, -1, head_dim * 2), 2, dim=-1)
    return query_states, gate
'''),
    Pasted("rasbt LLMs-from-scratch Qwen3.5 (q_and_gate.view(b, num_tokens, num_heads, 2 * head_dim), split)", A05,
           "split_query_gate", '''
import torch


def split_query_gate(q_out, num_heads, head_dim):
    b, num_tokens, _ = q_out.shape
    q_and_gate = q_out.view(b, num_tokens, num_heads, head_dim * 2)
    queries, gate = torch.split(q_and_gate, [head_dim, head_dim], dim=-1)
    return queries, gate
'''),

    Pasted("Hugging Face Qwen3-Next (attn_output * torch.sigmoid(gate))", A05, "apply_output_gate", '''
import torch


def apply_output_gate(attn_out: torch.Tensor, gate: torch.Tensor) -> torch.Tensor:
    attn_output = attn_out * torch.sigmoid(gate)
    return attn_output
'''),
    Pasted("torch.nn.functional.sigmoid with torch.mul", A05, "apply_output_gate", '''
import torch
import torch.nn.functional as F


def apply_output_gate(attn_out, gate):
    return torch.mul(attn_out, F.sigmoid(gate))
'''),

    Pasted("hand-written backward through local derivatives, summed with einsum", A05, "gate_gradient", '''
import torch


def gate_gradient(x: torch.Tensor, w: torch.Tensor, r: torch.Tensor, o: torch.Tensor, t: torch.Tensor):
    z = x @ w                     # [N] gate scores
    g = torch.sigmoid(z)          # [N] gates
    y = r + g * o                 # [N] outputs
    dL_dy = y - t                 # d/dy of (y - t)^2 / 2
    dy_dg = o
    dg_dz = g * (1 - g)           # sigmoid'
    dL_dz = dL_dy * dy_dg * dg_dz
    return torch.einsum("n,nf->f", dL_dz, x)  # dz_n/dw = x_n, summed over tokens
'''),
    Pasted("micrograd / ARENA style: upstream gradient times the local Jacobian, x.T @ grad", A05, "gate_gradient", '''
import torch


def gate_gradient(x, w, r, o, t):
    gate = torch.sigmoid(x @ w)
    y = r + gate * o
    grad_y = y - t
    grad_gate = grad_y * o
    grad_z = grad_gate * torch.sigmoid(x @ w) * torch.sigmoid(-(x @ w))  # sigmoid(z) (1 - sigmoid(z))
    return x.T @ grad_z
'''),

    # Real bug.
    Pasted("llmman before PR #16: Qwen3.5's q_proj cut in half (all queries, then all gates)", A05,
           "split_query_gate", '''
import torch


def split_query_gate(q_out, num_heads, head_dim):
    b, t, _ = q_out.shape
    query, gate = q_out.chunk(2, dim=-1)  # first H * D outputs taken as queries, the rest as gates
    return query.view(b, t, num_heads, head_dim), gate.view(b, t, num_heads, head_dim)
''', fails=("split_query_gate",)),
]


# --- 06_qwen35_attention ---------------------------------------------------------------------------------------

_06 = [
    Pasted("Hugging Face Qwen3_5RMSNorm (_norm in float32, * (1.0 + weight.float()), type_as)", A06,
           "ZeroCenteredRMSNorm", '''
import torch
from torch import nn


class ZeroCenteredRMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float = 1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.zeros(dim))

    def _norm(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)

    def forward(self, x):
        output = self._norm(x.float())
        # Llama does x.to(float16) * w whilst Qwen3.5 is (x * w).to(float16)
        output = output * (1.0 + self.weight.float())
        return output.type_as(x)

    def extra_repr(self):
        return f"{tuple(self.weight.shape)}, eps={self.eps}"
'''),
    Pasted("transformers' own Qwen3_5RMSNorm, subclassed to the course's signature", A06, "ZeroCenteredRMSNorm", '''
from transformers.models.qwen3_5.modeling_qwen3_5 import Qwen3_5RMSNorm


class ZeroCenteredRMSNorm(Qwen3_5RMSNorm):
    """Hugging Face's zero-centred norm: weight starts at zeros, scale is 1 + weight, computed in float32."""

    def __init__(self, dim: int, eps: float = 1e-6):
        super().__init__(dim, eps=eps)
'''),
    Pasted("rasbt LLMs-from-scratch RMSNorm with unit offset (Gemma 3 / Qwen3.5)", A06, "ZeroCenteredRMSNorm", '''
import torch
import torch.nn as nn


class ZeroCenteredRMSNorm(nn.Module):
    def __init__(self, dim, eps=1e-6):
        super().__init__()
        self.eps = eps
        # zero-centred: the checkpoint stores the offset from 1 (named weight, as the state dict has it)
        self.weight = nn.Parameter(torch.zeros(dim))

    def forward(self, x):
        input_dtype = x.dtype
        x_f = x.float()
        var = x_f.pow(2).mean(dim=-1, keepdim=True)
        x_norm = x_f * torch.rsqrt(var + self.eps)
        out = x_norm * (1.0 + self.weight.float())
        return out.to(input_dtype)
'''),

    Pasted("Hugging Face Qwen3-Next apply_rotary_pos_emb (rotary_dim = cos.shape[-1], rot / pass halves)", A06,
           "apply_partial_rope", '''
import torch


def rotate_half(x):
    """Rotates half the hidden dims of the input."""
    x1 = x[..., : x.shape[-1] // 2]
    x2 = x[..., x.shape[-1] // 2 :]
    return torch.cat((-x2, x1), dim=-1)


def apply_partial_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    cos, sin = cos.to(x.dtype), sin.to(x.dtype)
    # Keep half or full tensor for later concatenation
    rotary_dim = cos.shape[-1]
    x_rot, x_pass = x[..., :rotary_dim], x[..., rotary_dim:]
    # Apply rotary embeddings on the first half or full tensor
    x_embed = (x_rot * cos) + (rotate_half(x_rot) * sin)
    # Concatenate back to full shape
    return torch.cat([x_embed, x_pass], dim=-1)
'''),
    Pasted("transformers' own qwen3_5 apply_rotary_pos_emb behind the course's interface", A06,
           "apply_partial_rope", '''
import torch
from transformers.models.qwen3_5.modeling_qwen3_5 import apply_rotary_pos_emb


def apply_partial_rope(x, cos, sin):
    # transformers expects tables [batch, seq, rotary_dim] and unsqueezes the head dim (unsqueeze_dim=1)
    cos, sin = cos[None].to(x.dtype), sin[None].to(x.dtype)
    x_embed, _ = apply_rotary_pos_emb(x, x, cos, sin, unsqueeze_dim=1)
    return x_embed
'''),
    Pasted("GPT-NeoX partial rotary (rotary_ndims, query_rot / query_pass)", A06, "apply_partial_rope", '''
import torch


def apply_partial_rope(x, cos, sin):
    rotary_ndims = cos.shape[-1]
    query_rot = x[..., :rotary_ndims]
    query_pass = x[..., rotary_ndims:]
    half = rotary_ndims // 2
    rotated = torch.cat((-query_rot[..., half:], query_rot[..., :half]), dim=-1)
    query_rot = query_rot * cos.to(x.dtype) + rotated * sin.to(x.dtype)
    return torch.cat((query_rot, query_pass), dim=-1)
'''),

    Pasted("transformers' own Qwen3_5Attention (sdpa attention interface, bool mask) behind the course's interface",
           A06, "Qwen35Attention", '''
import torch
from transformers.models.qwen3_5.configuration_qwen3_5 import Qwen3_5TextConfig
from transformers.models.qwen3_5.modeling_qwen3_5 import Qwen3_5Attention


class Qwen35Attention(Qwen3_5Attention):
    def __init__(self, config):
        hf_config = Qwen3_5TextConfig(
            hidden_size=config.hidden_size,
            num_attention_heads=config.num_attention_heads,
            num_key_value_heads=config.num_key_value_heads,
            head_dim=config.head_dim,
            rms_norm_eps=config.rms_norm_eps,
            attention_bias=False,
            attention_dropout=0.0,
        )
        hf_config._attn_implementation = "sdpa"
        super().__init__(hf_config, layer_idx=3)

    def forward(self, x, cos, sin, attention_mask=None):
        seq_len = x.shape[1]
        allowed = torch.ones(seq_len, seq_len, dtype=torch.bool, device=x.device).tril()[None, None]
        if attention_mask is not None:
            allowed = allowed & attention_mask.bool()[:, None, None, :]
        position_embeddings = (cos[None].to(x.dtype), sin[None].to(x.dtype))  # [1, T, rotary_dim]
        attn_output, _ = super().forward(x, position_embeddings, allowed)
        return attn_output
'''),
    Pasted("rasbt LLMs-from-scratch Qwen3.5 gated attention (q_and_gate split, repeat_interleave, sigmoid gate)",
           A06, "Qwen35Attention", '''
import torch
import torch.nn as nn


class Qwen35Attention(nn.Module):
    def __init__(self, config):
        super().__init__()
        d_in = config.hidden_size
        self.num_heads = config.num_attention_heads
        self.num_kv_groups = config.num_key_value_heads
        self.group_size = self.num_heads // self.num_kv_groups
        self.head_dim = config.head_dim
        self.d_out = self.num_heads * self.head_dim

        self.q_proj = nn.Linear(d_in, self.d_out * 2, bias=False)  # queries and their output gates
        self.k_proj = nn.Linear(d_in, self.num_kv_groups * self.head_dim, bias=False)
        self.v_proj = nn.Linear(d_in, self.num_kv_groups * self.head_dim, bias=False)
        self.o_proj = nn.Linear(self.d_out, d_in, bias=False)
        self.q_norm = ZeroCenteredRMSNorm(self.head_dim, eps=config.rms_norm_eps)
        self.k_norm = ZeroCenteredRMSNorm(self.head_dim, eps=config.rms_norm_eps)

    def forward(self, x, cos, sin, attention_mask=None):
        b, num_tokens, _ = x.shape

        q_and_gate = self.q_proj(x).view(b, num_tokens, self.num_heads, self.head_dim * 2)
        queries, gate = torch.split(q_and_gate, [self.head_dim, self.head_dim], dim=-1)
        keys = self.k_proj(x).view(b, num_tokens, self.num_kv_groups, self.head_dim)
        values = self.v_proj(x).view(b, num_tokens, self.num_kv_groups, self.head_dim)

        # QK-Norm per head, then heads before tokens
        queries = self.q_norm(queries).transpose(1, 2)
        keys = self.k_norm(keys).transpose(1, 2)
        values = values.transpose(1, 2)

        # Partial RoPE
        queries = apply_partial_rope(queries, cos, sin)
        keys = apply_partial_rope(keys, cos, sin)

        # Expand K and V to match number of heads
        keys = keys.repeat_interleave(self.group_size, dim=1)
        values = values.repeat_interleave(self.group_size, dim=1)

        attn_scores = queries @ keys.transpose(2, 3)
        mask = torch.triu(torch.ones(num_tokens, num_tokens, dtype=torch.bool), diagonal=1)
        if attention_mask is not None:
            mask = mask | (attention_mask == 0)[:, None, None, :]
        attn_scores = attn_scores.masked_fill(mask, -torch.inf)
        attn_weights = torch.softmax(attn_scores / self.head_dim ** 0.5, dim=-1)
        attn_weights = torch.nan_to_num(attn_weights, nan=0.0)

        context = (attn_weights @ values).transpose(1, 2)  # (b, num_tokens, num_heads, head_dim)
        context = context * torch.sigmoid(gate)             # the output gate, per head and dim
        context = context.reshape(b, num_tokens, self.d_out)
        return self.o_proj(context)
'''),
    Pasted("torch F.scaled_dot_product_attention(enable_gqa=True) in the notebook's four steps", A06,
           "Qwen35Attention", '''
import torch
import torch.nn.functional as F
from torch import nn


class Qwen35Attention(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.num_heads = config.num_attention_heads
        self.num_kv_heads = config.num_key_value_heads
        self.head_dim = config.head_dim
        self.q_proj = nn.Linear(config.hidden_size, self.num_heads * self.head_dim * 2, bias=False)
        self.k_proj = nn.Linear(config.hidden_size, self.num_kv_heads * self.head_dim, bias=False)
        self.v_proj = nn.Linear(config.hidden_size, self.num_kv_heads * self.head_dim, bias=False)
        self.o_proj = nn.Linear(self.num_heads * self.head_dim, config.hidden_size, bias=False)
        self.q_norm = ZeroCenteredRMSNorm(self.head_dim, config.rms_norm_eps)
        self.k_norm = ZeroCenteredRMSNorm(self.head_dim, config.rms_norm_eps)

    def project(self, x):
        query, gate = split_query_gate(self.q_proj(x), self.num_heads, self.head_dim)
        hidden_shape = (*x.shape[:-1], self.num_kv_heads, self.head_dim)
        return query, gate, self.k_proj(x).view(hidden_shape), self.v_proj(x).view(hidden_shape)

    def position(self, query, key, cos, sin):
        query = apply_partial_rope(self.q_norm(query).transpose(1, 2), cos, sin)
        key = apply_partial_rope(self.k_norm(key).transpose(1, 2), cos, sin)
        return query, key

    def attend(self, query, key, value, attention_mask):
        seq_len = query.shape[2]
        allowed = torch.ones(seq_len, seq_len, dtype=torch.bool, device=query.device).tril()
        if attention_mask is not None:
            allowed = allowed & attention_mask.bool()[:, None, None, :]
        return F.scaled_dot_product_attention(query, key, value.transpose(1, 2), attn_mask=allowed,
                                              scale=self.head_dim ** -0.5, enable_gqa=True)

    def gate_and_project(self, out, gate):
        out = apply_output_gate(out.transpose(1, 2), gate)
        return self.o_proj(out.reshape(*out.shape[:2], -1))

    def forward(self, x, cos, sin, attention_mask=None):
        query, gate, key, value = self.project(x)
        query, key = self.position(query, key, cos, sin)
        return self.gate_and_project(self.attend(query, key, value, attention_mask), gate)
'''),
]


# --- 07_real_model ---------------------------------------------------------------------------------------------

_07 = [
    Pasted("Hugging Face LlamaAttention (rotate_half, apply_rotary_pos_emb, repeat_kv, eager_attention_forward)", A07,
           "LlamaAttention", '''
import torch
from torch import nn


def rotate_half(x):
    """Rotates half the hidden dims of the input."""
    x1 = x[..., : x.shape[-1] // 2]
    x2 = x[..., x.shape[-1] // 2 :]
    return torch.cat((-x2, x1), dim=-1)


def apply_rotary_pos_emb(q, k, cos, sin, unsqueeze_dim=1):
    cos = cos.unsqueeze(unsqueeze_dim)
    sin = sin.unsqueeze(unsqueeze_dim)
    q_embed = (q * cos) + (rotate_half(q) * sin)
    k_embed = (k * cos) + (rotate_half(k) * sin)
    return q_embed, k_embed


def repeat_kv(hidden_states: torch.Tensor, n_rep: int) -> torch.Tensor:
    batch, num_key_value_heads, slen, head_dim = hidden_states.shape
    if n_rep == 1:
        return hidden_states
    hidden_states = hidden_states[:, :, None, :, :].expand(batch, num_key_value_heads, n_rep, slen, head_dim)
    return hidden_states.reshape(batch, num_key_value_heads * n_rep, slen, head_dim)


def eager_attention_forward(module, query, key, value, attention_mask, scaling, dropout=0.0):
    key_states = repeat_kv(key, module.num_key_value_groups)
    value_states = repeat_kv(value, module.num_key_value_groups)
    attn_weights = torch.matmul(query, key_states.transpose(2, 3)) * scaling
    if attention_mask is not None:
        attn_weights = attn_weights + attention_mask
    attn_weights = nn.functional.softmax(attn_weights, dim=-1, dtype=torch.float32).to(query.dtype)
    attn_weights = nn.functional.dropout(attn_weights, p=dropout, training=module.training)
    attn_output = torch.matmul(attn_weights, value_states)
    attn_output = attn_output.transpose(1, 2).contiguous()
    return attn_output, attn_weights


def default_rope(position_ids: torch.Tensor, dim: int, base: float):
    """cos, sin [T, dim] as LlamaRotaryEmbedding computes them (rope_type "default")."""
    inv_freq = 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.int64).to(dtype=torch.float) / dim))
    freqs = torch.outer(position_ids.float(), inv_freq)
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos(), emb.sin()


class LlamaAttention(nn.Module):
    """Multi-headed attention from 'Attention Is All You Need' paper"""

    def __init__(self, config):
        super().__init__()
        self.config = config
        self.head_dim = getattr(config, "head_dim", config.hidden_size // config.num_attention_heads)
        self.num_key_value_groups = config.num_attention_heads // config.num_key_value_heads
        self.scaling = self.head_dim ** -0.5
        self.q_proj = nn.Linear(config.hidden_size, config.num_attention_heads * self.head_dim, bias=False)
        self.k_proj = nn.Linear(config.hidden_size, config.num_key_value_heads * self.head_dim, bias=False)
        self.v_proj = nn.Linear(config.hidden_size, config.num_key_value_heads * self.head_dim, bias=False)
        self.o_proj = nn.Linear(config.num_attention_heads * self.head_dim, config.hidden_size, bias=False)

    def forward(self, hidden_states, attention_mask=None, cache=None):
        input_shape = hidden_states.shape[:-1]
        hidden_shape = (*input_shape, -1, self.head_dim)

        query_states = self.q_proj(hidden_states).view(hidden_shape).transpose(1, 2)
        key_states = self.k_proj(hidden_states).view(hidden_shape).transpose(1, 2)
        value_states = self.v_proj(hidden_states).view(hidden_shape).transpose(1, 2)

        past_seen_tokens = len(cache) if cache is not None else 0
        cache_position = torch.arange(past_seen_tokens, past_seen_tokens + input_shape[1])
        cos, sin = default_rope(cache_position, self.head_dim, self.config.rope_theta)
        cos, sin = cos.to(hidden_states.dtype), sin.to(hidden_states.dtype)
        query_states, key_states = apply_rotary_pos_emb(query_states, key_states, cos, sin, unsqueeze_dim=0)

        if cache is not None:
            key_states, value_states = cache.update(key_states, value_states)

        allowed = causal_mask(input_shape[1], key_states.shape[-2])
        if attention_mask is not None:
            allowed = allowed & padding_mask(attention_mask)
        dtype = hidden_states.dtype
        causal_4d = torch.zeros(allowed.shape, dtype=dtype).masked_fill(~allowed, torch.finfo(dtype).min)

        attn_output, _ = eager_attention_forward(self, query_states, key_states, value_states, causal_4d,
                                                 scaling=self.scaling)
        attn_output = attn_output.reshape(*input_shape, -1).contiguous()
        return self.o_proj(attn_output), cache
'''),
    Pasted("torch F.scaled_dot_product_attention(enable_gqa=True) with the course's RoPE and KVCache", A07,
           "LlamaAttention", '''
import torch
import torch.nn.functional as F
from torch import nn


class LlamaAttention(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.n_head, self.n_kv_head = config.num_attention_heads, config.num_key_value_heads
        self.head_dim = config.head_dim
        self.rope_theta = config.rope_theta
        self.q_proj = nn.Linear(config.hidden_size, self.n_head * self.head_dim, bias=False)
        self.k_proj = nn.Linear(config.hidden_size, self.n_kv_head * self.head_dim, bias=False)
        self.v_proj = nn.Linear(config.hidden_size, self.n_kv_head * self.head_dim, bias=False)
        self.o_proj = nn.Linear(self.n_head * self.head_dim, config.hidden_size, bias=False)

    def forward(self, x: torch.Tensor, attention_mask: torch.Tensor | None = None, cache=None):
        B, T, _ = x.size()
        q = self.q_proj(x).view(B, T, self.n_head, self.head_dim).transpose(1, 2)
        k = self.k_proj(x).view(B, T, self.n_kv_head, self.head_dim).transpose(1, 2)
        v = self.v_proj(x).view(B, T, self.n_kv_head, self.head_dim).transpose(1, 2)
        start = 0 if cache is None else len(cache)
        cos, sin = rope_cos_sin(torch.arange(start, start + T), self.head_dim, self.rope_theta)
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        if cache is not None:
            k, v = cache.update(k, v)
        S = k.shape[-2]
        allowed = torch.ones(T, S, dtype=torch.bool, device=x.device).tril(diagonal=S - T)
        if attention_mask is not None:
            allowed = allowed & attention_mask.bool()[:, None, None, :]
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=allowed, enable_gqa=True)
        y = y.transpose(1, 2).contiguous().view(B, T, self.n_head * self.head_dim)
        return self.o_proj(y), cache
'''),
    Pasted("Meta llama Attention (xq.view(bsz, seqlen, n_heads, head_dim), -inf triu mask hstacked after the cache, "
           "softmax(scores.float()).type_as(xq))", A07, "LlamaAttention", '''
import math

import torch
import torch.nn.functional as F
from torch import nn


class LlamaAttention(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.n_heads = config.num_attention_heads
        self.n_kv_heads = config.num_key_value_heads
        self.n_rep = self.n_heads // self.n_kv_heads
        self.head_dim = config.head_dim
        self.theta = config.rope_theta
        # Meta's wq, wk, wv, wo under Hugging Face's names (the checkpoint's q/k rows are in rotate-half order)
        self.q_proj = nn.Linear(config.hidden_size, self.n_heads * self.head_dim, bias=False)
        self.k_proj = nn.Linear(config.hidden_size, self.n_kv_heads * self.head_dim, bias=False)
        self.v_proj = nn.Linear(config.hidden_size, self.n_kv_heads * self.head_dim, bias=False)
        self.o_proj = nn.Linear(self.n_heads * self.head_dim, config.hidden_size, bias=False)

    def forward(self, x, attention_mask=None, cache=None):
        bsz, seqlen, _ = x.shape
        start_pos = 0 if cache is None else len(cache)
        xq = self.q_proj(x).view(bsz, seqlen, self.n_heads, self.head_dim)
        xk = self.k_proj(x).view(bsz, seqlen, self.n_kv_heads, self.head_dim)
        xv = self.v_proj(x).view(bsz, seqlen, self.n_kv_heads, self.head_dim)

        cos, sin = rope_cos_sin(torch.arange(start_pos, start_pos + seqlen), self.head_dim, self.theta)
        # Meta's layout is [bsz, seqlen, heads, head_dim]; rotate-half RoPE wants positions next to head_dim
        xq = apply_rope(xq.transpose(1, 2), cos, sin)
        xk = apply_rope(xk.transpose(1, 2), cos, sin)

        keys, values = xk, xv.transpose(1, 2)
        if cache is not None:
            keys, values = cache.update(keys, values)
        keys = repeat_kv(keys, self.n_rep)
        values = repeat_kv(values, self.n_rep)

        mask = torch.full((seqlen, seqlen), float("-inf"))
        mask = torch.triu(mask, diagonal=1)
        # When performing key-value caching, we compute the attention scores only for the new sequence: the
        # masked block sits after the cached positions
        mask = torch.hstack([torch.zeros((seqlen, start_pos)), mask]).to(x.dtype)
        if attention_mask is not None:
            padding = torch.zeros(attention_mask.shape, dtype=x.dtype)
            padding = padding.masked_fill(attention_mask == 0, torch.finfo(x.dtype).min)
            mask = mask + padding[:, None, None, :]

        scores = torch.matmul(xq, keys.transpose(2, 3)) / math.sqrt(self.head_dim)
        scores = scores + mask
        scores = F.softmax(scores.float(), dim=-1).type_as(xq)
        output = torch.matmul(scores, values)  # (bs, n_local_heads, seqlen, head_dim)
        output = output.transpose(1, 2).contiguous().view(bsz, seqlen, -1)
        return self.o_proj(output), cache
'''),

    Pasted("Meta llama Llama.generate (@torch.inference_mode(), tokens buffer, prev_pos / cur_pos)", A07,
           "greedy_generate", '''
import torch


@torch.inference_mode()
def greedy_generate(model, input_ids: torch.Tensor, max_new_tokens: int,
                    attention_mask: torch.Tensor | None = None) -> torch.Tensor:
    bsz, prompt_len = input_ids.shape
    total_len = prompt_len + max_new_tokens
    pad_id = 0
    tokens = torch.full((bsz, total_len), pad_id, dtype=torch.long, device=input_ids.device)
    tokens[:, :prompt_len] = input_ids
    mask = None
    if attention_mask is not None:
        mask = torch.ones((bsz, total_len), dtype=attention_mask.dtype, device=input_ids.device)
        mask[:, :prompt_len] = attention_mask
    caches = [KVCache() for _ in model.layers]

    prev_pos = 0
    for cur_pos in range(prompt_len, total_len):
        logits = model(tokens[:, prev_pos:cur_pos], attention_mask=None if mask is None else mask[:, :cur_pos],
                       caches=caches)
        next_token = torch.argmax(logits[:, -1], dim=-1)
        tokens[:, cur_pos] = next_token
        prev_pos = cur_pos
    return tokens[:, prompt_len:]
'''),
    Pasted("Hugging Face GenerationMixin._sample, greedy (@torch.no_grad(), argmax, attention_mask extended)", A07,
           "greedy_generate", '''
import torch


@torch.no_grad()
def greedy_generate(model, input_ids, max_new_tokens, attention_mask=None):
    past_key_values = [KVCache() for _ in range(len(model.layers))]
    model_inputs = input_ids
    new_tokens = []
    for _ in range(max_new_tokens):
        outputs = model(model_inputs, attention_mask=attention_mask, caches=past_key_values)
        next_token_logits = outputs[:, -1, :].to(copy=True, dtype=torch.float32)
        next_tokens = torch.argmax(next_token_logits, dim=-1)
        new_tokens.append(next_tokens)
        model_inputs = next_tokens[:, None]  # the cache holds the rest
        if attention_mask is not None:
            attention_mask = torch.cat([attention_mask, attention_mask.new_ones((attention_mask.shape[0], 1))], dim=-1)
    return torch.stack(new_tokens, dim=1)
'''),

    Pasted("vLLM sampler (temperature, then apply_top_k_top_p on ascending-sorted logits)", A07, "sampling_probs", '''
import torch


def apply_top_k_top_p(logits: torch.Tensor, k: int | None, p: float | None) -> torch.Tensor:
    """Top-k, then top-p on what top-k kept; removed logits become -inf."""
    if k is None and p is None:
        return logits
    logits_sort, logits_idx = logits.sort(dim=-1, descending=False)

    if k is not None and k < logits.shape[-1]:
        top_k_index = logits_sort.size(1) - k  # position of the k-th largest in ascending order
        top_k_mask = logits_sort[:, top_k_index:top_k_index + 1]
        logits_sort = logits_sort.masked_fill(logits_sort < top_k_mask, -float("inf"))

    if p is not None:
        probs_sort = logits_sort.softmax(dim=-1)
        probs_sum = torch.cumsum(probs_sort, dim=-1)
        top_p_mask = probs_sum <= 1 - p
        top_p_mask[:, -1] = False  # at least one
        logits_sort = logits_sort.masked_fill(top_p_mask, -float("inf"))

    # Re-sort the probabilities.
    return logits_sort.scatter(dim=-1, index=logits_idx, src=logits_sort)


def sampling_probs(logits, temperature=1.0, top_k=None, top_p=None):
    logits = logits / temperature
    logits = apply_top_k_top_p(logits, top_k, top_p)
    return logits.softmax(dim=-1)
'''),
    Pasted("Hugging Face logits warpers (TemperatureLogitsWarper, TopKLogitsWarper, TopPLogitsWarper)", A07,
           "sampling_probs", '''
import torch


class TemperatureLogitsWarper:
    def __init__(self, temperature: float):
        self.temperature = temperature

    def __call__(self, scores: torch.Tensor) -> torch.Tensor:
        return scores / self.temperature


class TopKLogitsWarper:
    def __init__(self, top_k: int, filter_value: float = -float("Inf"), min_tokens_to_keep: int = 1):
        self.top_k = max(top_k, min_tokens_to_keep)
        self.filter_value = filter_value

    def __call__(self, scores: torch.Tensor) -> torch.Tensor:
        top_k = min(self.top_k, scores.size(-1))  # Safety check
        # Remove all tokens with a probability less than the last token of the top-k
        indices_to_remove = scores < torch.topk(scores, top_k)[0][..., -1, None]
        return scores.masked_fill(indices_to_remove, self.filter_value)


class TopPLogitsWarper:
    def __init__(self, top_p: float, filter_value: float = -float("Inf"), min_tokens_to_keep: int = 1):
        self.top_p = float(top_p)
        self.filter_value = filter_value
        self.min_tokens_to_keep = min_tokens_to_keep

    def __call__(self, scores: torch.Tensor) -> torch.Tensor:
        sorted_logits, sorted_indices = torch.sort(scores, descending=False)
        cumulative_probs = sorted_logits.softmax(dim=-1).cumsum(dim=-1)
        # Remove tokens with cumulative top_p above the threshold (token with 0 are kept)
        sorted_indices_to_remove = cumulative_probs <= (1 - self.top_p)
        # Keep at least min_tokens_to_keep
        sorted_indices_to_remove[..., -self.min_tokens_to_keep:] = 0
        # scatter sorted tensors to original indexing
        indices_to_remove = sorted_indices_to_remove.scatter(1, sorted_indices, sorted_indices_to_remove)
        return scores.masked_fill(indices_to_remove, self.filter_value)


def sampling_probs(logits, temperature=1.0, top_k=None, top_p=None):
    warpers = [TemperatureLogitsWarper(temperature)]
    if top_k is not None:
        warpers.append(TopKLogitsWarper(top_k))
    if top_p is not None:
        warpers.append(TopPLogitsWarper(top_p))
    for warper in warpers:
        logits = warper(logits)
    return torch.softmax(logits, dim=-1)
'''),
    Pasted("Meta llama sample_top_p (sort, cumsum, probs_sum - probs_sort > p) after a top-k on the probabilities",
           A07, "sampling_probs", '''
import torch


def sample_top_p(probs: torch.Tensor, p: float) -> torch.Tensor:
    """Meta's nucleus filter, returning the filtered distribution instead of drawing from it."""
    probs_sort, probs_idx = torch.sort(probs, dim=-1, descending=True)
    probs_sum = torch.cumsum(probs_sort, dim=-1)
    mask = probs_sum - probs_sort > p
    probs_sort[mask] = 0.0
    probs_sort.div_(probs_sort.sum(dim=-1, keepdim=True))
    return torch.zeros_like(probs).scatter(-1, probs_idx, probs_sort)


def sampling_probs(logits, temperature=1.0, top_k=None, top_p=None):
    probs = torch.softmax(logits / temperature, dim=-1)
    if top_k is not None and top_k < probs.shape[-1]:
        v, _ = torch.topk(probs, top_k)
        probs = torch.where(probs < v[:, [-1]], torch.zeros_like(probs), probs)
        probs = probs / probs.sum(dim=-1, keepdim=True)
    if top_p is not None:
        probs = sample_top_p(probs, top_p)
    return probs
'''),

    Pasted("nanoGPT GPT.generate's temperature and top-k (logits[logits < v[:, [-1]]] = -inf), a nucleus cut added",
           A07, "sampling_probs", '''
import torch
from torch.nn import functional as F


def sampling_probs(logits, temperature=1.0, top_k=None, top_p=None):
    # scale by desired temperature
    logits = logits / temperature
    # optionally crop the logits to only the top k options
    if top_k is not None:
        v, _ = torch.topk(logits, min(top_k, logits.size(-1)))
        logits[logits < v[:, [-1]]] = -float("Inf")
    # nanoGPT stops here; top-p on what is left: drop a token once the more likely ones already hold top_p
    if top_p is not None:
        sorted_logits, sorted_idx = torch.sort(logits, dim=-1, descending=True)
        sorted_probs = F.softmax(sorted_logits, dim=-1)
        mass_before = torch.cumsum(sorted_probs, dim=-1) - sorted_probs
        sorted_logits[mass_before >= top_p] = -float("Inf")
        logits = torch.empty_like(logits).scatter_(-1, sorted_idx, sorted_logits)
    # apply softmax to convert logits to (normalized) probabilities
    return F.softmax(logits, dim=-1)
'''),

    Pasted("Meta llama Llama.generate with sampling (@torch.inference_mode(), multinomial with the generator)", A07,
           "sample_generate", '''
import torch


@torch.inference_mode()
def sample_generate(model, input_ids, max_new_tokens, generator, attention_mask=None, **sampling):
    bsz, prompt_len = input_ids.shape
    total_len = prompt_len + max_new_tokens
    tokens = torch.zeros((bsz, total_len), dtype=torch.long, device=input_ids.device)
    tokens[:, :prompt_len] = input_ids
    mask = None
    if attention_mask is not None:
        mask = torch.ones((bsz, total_len), dtype=attention_mask.dtype, device=input_ids.device)
        mask[:, :prompt_len] = attention_mask
    caches = [KVCache() for _ in model.layers]

    prev_pos = 0
    for cur_pos in range(prompt_len, total_len):
        logits = model(tokens[:, prev_pos:cur_pos], attention_mask=None if mask is None else mask[:, :cur_pos],
                       caches=caches)
        probs = sampling_probs(logits[:, -1], **sampling)
        next_token = torch.multinomial(probs, num_samples=1, generator=generator)
        tokens[:, cur_pos] = next_token.reshape(-1)
        prev_pos = cur_pos
    return tokens[:, prompt_len:]
'''),
    Pasted("nanoGPT GPT.generate (@torch.no_grad(), logits[:, -1, :], torch.multinomial), fed through the caches",
           A07, "sample_generate", '''
import torch


@torch.no_grad()
def sample_generate(model, idx, max_new_tokens, generator, attention_mask=None, temperature=1.0, top_k=None,
                    top_p=None):
    """
    Take a conditioning sequence of indices idx (LongTensor of shape (b,t)) and complete the sequence
    max_new_tokens times, feeding the predictions back into the model each time.
    """
    caches = [KVCache() for _ in model.layers]
    idx_cond = idx
    out = []
    for _ in range(max_new_tokens):
        # forward the model to get the logits for the index in the sequence
        logits = model(idx_cond, attention_mask=attention_mask, caches=caches)
        # pluck the logits at the final step; temperature, top-k and top-p in one place
        probs = sampling_probs(logits[:, -1, :], temperature=temperature, top_k=top_k, top_p=top_p)
        # sample from the distribution
        idx_next = torch.multinomial(probs, num_samples=1, generator=generator)
        out.append(idx_next)
        idx_cond = idx_next  # everything before it is in the caches
        if attention_mask is not None:
            attention_mask = torch.cat((attention_mask, torch.ones_like(idx_next)), dim=1)
    return torch.cat(out, dim=1)
'''),

    # Real bug.
    Pasted("Biohub/esm top_p_logits before esm#360: keep mask cumsum <= top_p drops the token that crosses p", A07,
           "sampling_probs", '''
import torch


def sampling_probs(logits, temperature=1.0, top_k=None, top_p=None):
    logits = logits / temperature
    if top_k is not None and top_k < logits.shape[-1]:
        kth = torch.topk(logits, top_k).values[..., -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if top_p is not None:
        sorted_logits, sorted_idx = logits.sort(dim=-1, descending=True)
        cumsum_probs = sorted_logits.softmax(dim=-1).cumsum(dim=-1)
        keep = cumsum_probs <= top_p
        keep[..., 0] = True  # at least one token
        keep = keep.scatter(-1, sorted_idx, keep)
        logits = logits.masked_fill(~keep, float("-inf"))
    return logits.softmax(dim=-1)
''', fails=("sampling_probs",)),
    Pasted("transformers RepetitionPenaltyLogitsProcessor (gather, torch.where(score < 0, ...), scatter) with vLLM's "
           "frequency and presence penalties (bin counts by scatter_add_)", A07, "apply_penalties", '''
import torch


def _get_token_bin_counts_and_mask(tokens, vocab_size):
    bin_counts = torch.zeros((tokens.shape[0], vocab_size), dtype=torch.long, device=tokens.device)
    bin_counts.scatter_add_(1, tokens, torch.ones_like(tokens))
    return bin_counts, bin_counts > 0


def apply_penalties(logits, generated, repetition_penalty=1.0, frequency_penalty=0.0, presence_penalty=0.0):
    scores = logits.clone()
    if generated.shape[1] > 0:
        score = torch.gather(scores, 1, generated)
        # if score < 0 then repetition penalty has to be multiplied to reduce the token probabilities
        score = torch.where(score < 0, score * repetition_penalty, score / repetition_penalty)
        scores = scores.scatter(1, generated, score)
    output_bin_counts, output_mask = _get_token_bin_counts_and_mask(generated, scores.shape[-1])
    scores -= frequency_penalty * output_bin_counts.to(scores.dtype)
    scores -= presence_penalty * output_mask.to(scores.dtype)
    return scores
'''),
    # Real bug.
    Pasted("Salesforce CTRL's sampling (repetition penalty as a temperature: every seen logit divided by the "
           "penalty, negative ones included), fixed in transformers' RepetitionPenaltyLogitsProcessor", A07,
           "apply_penalties", '''
import torch


def apply_penalties(logits, generated, repetition_penalty=1.0, frequency_penalty=0.0, presence_penalty=0.0):
    counts = torch.zeros_like(logits, dtype=torch.long).scatter_add_(1, generated, torch.ones_like(generated))
    seen = counts > 0
    penalized = torch.where(seen, logits / repetition_penalty, logits)
    return penalized - frequency_penalty * counts.to(logits.dtype) - presence_penalty * seen.to(logits.dtype)
''', fails=("apply_penalties",)),
    Pasted("transformers MinPLogitsWarper (softmax, top_probs from max(dim=-1, keepdim=True), scaled_min_p, "
           "tokens_to_remove = probs < scaled_min_p), on probabilities instead of scores", A07, "min_p_filter", '''
import torch


def min_p_filter(probs, min_p):
    # Get the probability of the top token for each sequence in the batch
    top_probs, _ = probs.max(dim=-1, keepdim=True)
    # Calculate the actual min_p threshold by scaling min_p with the top token's probability
    scaled_min_p = min_p * top_probs
    # Create a mask for tokens that have a probability less than the scaled min_p
    tokens_to_remove = probs < scaled_min_p
    probs = probs.masked_fill(tokens_to_remove, 0.0)
    return probs / probs.sum(dim=-1, keepdim=True)
'''),
    Pasted("transformers' beam search (beam_scores initialised to 0 and -1e9 for the copies, next_token_scores + "
           "beam_scores, view(num_beams * vocab), topk of 2 * num_beams, beam_indices by floor division)", A07,
           "beam_search", '''
import torch


def beam_search(next_log_probs, input_ids, num_beams, max_new_tokens):
    # every beam starts as the prompt; all but the first are pushed down so that the first step expands one beam
    input_ids = input_ids.unsqueeze(0).repeat(num_beams, 1)
    beam_scores = torch.zeros(num_beams, dtype=torch.float64)
    beam_scores[1:] = -1e9
    generated = input_ids.new_zeros(num_beams, 0)
    for _ in range(max_new_tokens):
        next_token_scores = next_log_probs(input_ids)
        vocab_size = next_token_scores.shape[-1]
        next_token_scores = next_token_scores + beam_scores[:, None].to(next_token_scores.dtype)
        next_token_scores, next_tokens = torch.topk(next_token_scores.view(num_beams * vocab_size),
                                                    min(2 * num_beams, num_beams * vocab_size), largest=True, sorted=True)
        next_indices = torch.div(next_tokens, vocab_size, rounding_mode="floor")
        next_tokens = next_tokens % vocab_size
        # no end-of-sequence token: the first num_beams candidates carry on
        beam_scores = next_token_scores[:num_beams]
        beam_idx, beam_next = next_indices[:num_beams], next_tokens[:num_beams]
        input_ids = torch.cat([input_ids[beam_idx, :], beam_next.unsqueeze(-1)], dim=-1)
        generated = torch.cat([generated[beam_idx, :], beam_next.unsqueeze(-1)], dim=-1)
    return generated, beam_scores
'''),
    Pasted("transformers' beam search started from num_beams copies of the prompt with equal scores (all zeros, "
           "without the -1e9 of the copies): the first step fills every beam with the same best token", A07,
           "beam_search", '''
import torch


def beam_search(next_log_probs, input_ids, num_beams, max_new_tokens):
    input_ids = input_ids.unsqueeze(0).repeat(num_beams, 1)
    beam_scores = torch.zeros(num_beams, dtype=torch.float64)
    generated = input_ids.new_zeros(num_beams, 0)
    for _ in range(max_new_tokens):
        next_token_scores = next_log_probs(input_ids)
        vocab_size = next_token_scores.shape[-1]
        next_token_scores = next_token_scores + beam_scores[:, None].to(next_token_scores.dtype)
        next_token_scores, next_tokens = torch.topk(next_token_scores.view(num_beams * vocab_size), num_beams)
        next_indices = torch.div(next_tokens, vocab_size, rounding_mode="floor")
        next_tokens = next_tokens % vocab_size
        beam_scores = next_token_scores
        input_ids = torch.cat([input_ids[next_indices, :], next_tokens.unsqueeze(-1)], dim=-1)
        generated = torch.cat([generated[next_indices, :], next_tokens.unsqueeze(-1)], dim=-1)
    return generated, beam_scores
''', fails=("beam_search",)),
]


# --- 08_gated_deltanet -----------------------------------------------------------------------------------------

_08 = [
    Pasted("fla naive linear attention (q @ k^T, masked_fill_ with the causal tril, @ v)", A08, "linear_attention", '''
import torch


def linear_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    seq_len = q.shape[-2]
    causal = torch.tril(torch.ones(seq_len, seq_len, dtype=torch.bool, device=q.device))
    attn = (q @ k.transpose(-1, -2)).masked_fill_(~causal, 0)
    return attn @ v
'''),
    Pasted("Katharopoulos et al. causal linear attention as prefix sums of k^T v (einsum + cumsum)", A08,
           "linear_attention", '''
import torch


def linear_attention(q, k, v):
    work = torch.promote_types(q.dtype, torch.float32)
    kv = torch.einsum("...td,...te->...tde", k.to(work), v.to(work)).cumsum(dim=-3)  # S_t for every t
    return torch.einsum("...td,...tde->...te", q.to(work), kv).to(q.dtype)
'''),

    Pasted("fla naive recurrent linear attention (h += k_t^T v_t, o_t = (q_t * h).sum(-2), fp32 state)", A08,
           "linear_attention_recurrent", '''
import torch


def linear_attention_recurrent(q, k, v, state=None):
    orig_dtype = q.dtype
    work = torch.promote_types(q.dtype, torch.float32)
    q, k, v = (x.to(work) for x in (q, k, v))
    B, H, T, K = q.shape
    V = v.shape[-1]
    h = q.new_zeros(B, H, K, V) if state is None else state.to(work)
    o = torch.zeros_like(v)
    for i in range(T):
        h = h + k[:, :, i, :, None] * v[:, :, i, None, :]
        o[:, :, i] = (q[:, :, i, :, None] * h).sum(-2)
    return o.to(orig_dtype), h  # the final state stays in fp32, as fla returns it
'''),
    Pasted("einsum per step ('bhk,bhv->bhkv' write, 'bhk,bhkv->bhv' read), outputs stacked", A08,
           "linear_attention_recurrent", '''
import torch


def linear_attention_recurrent(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                               state: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    work = torch.promote_types(q.dtype, torch.float32)
    S = (torch.zeros(*q.shape[:-2], q.shape[-1], v.shape[-1], dtype=work) if state is None else state.to(work))
    outs = []
    for t in range(q.shape[-2]):
        S = S + torch.einsum("bhk,bhv->bhkv", k[:, :, t].to(work), v[:, :, t].to(work))
        outs.append(torch.einsum("bhk,bhkv->bhv", q[:, :, t].to(work), S))
    return torch.stack(outs, dim=2).to(q.dtype), S.to(q.dtype)
'''),

    Pasted("fla delta_rule_recurrence (v -= (S * k).sum(-2), v *= beta, S += k^T v; q used as given)", A08,
           "delta_rule", '''
import torch


def delta_rule(q, k, v, beta, state=None):
    orig_dtype = q.dtype
    work = torch.promote_types(q.dtype, torch.float32)
    q, k, v, beta = (x.to(work) for x in (q, k, v, beta))
    b, h, l, d_k = q.shape
    d_v = v.shape[-1]
    o = torch.zeros_like(v)
    S = torch.zeros(b, h, d_k, d_v, dtype=work) if state is None else state.to(work)
    # (fla's reference also scales q by d_k ** -0.5 here; the course's rule leaves that to the layer)
    for i in range(l):
        _k = k[:, :, i]
        _q = q[:, :, i]
        _v = v[:, :, i].clone()
        beta_i = beta[:, :, i]
        _v = _v - (S.clone() * _k[..., None]).sum(-2)
        _v = _v * beta_i[..., None]
        S = S.clone() + _k.unsqueeze(-1) * _v.unsqueeze(-2)
        o[:, :, i] = torch.einsum("bhd,bhdm->bhm", _q, S)
    return o.to(orig_dtype), S.to(orig_dtype)
'''),
    Pasted("Hugging Face torch_recurrent_gated_delta_rule, without the decay (kv_mem, delta, outer product)", A08,
           "delta_rule", '''
import torch


def delta_rule(q, k, v, beta, state=None):
    initial_dtype = q.dtype
    work = torch.promote_types(q.dtype, torch.float32)
    query, key, value, beta = (x.to(work) for x in (q, k, v, beta))
    batch_size, num_heads, sequence_length, k_head_dim = key.shape
    v_head_dim = value.shape[-1]
    if state is None:
        last_recurrent_state = torch.zeros(batch_size, num_heads, k_head_dim, v_head_dim, dtype=work)
    else:
        last_recurrent_state = state.to(work)
    core_attn_out = torch.zeros_like(value)
    for i in range(sequence_length):
        q_t, k_t, v_t = query[:, :, i], key[:, :, i], value[:, :, i]
        beta_t = beta[:, :, i].unsqueeze(-1)
        kv_mem = (last_recurrent_state * k_t.unsqueeze(-1)).sum(dim=-2)
        delta = (v_t - kv_mem) * beta_t
        last_recurrent_state = last_recurrent_state + k_t.unsqueeze(-1) * delta.unsqueeze(-2)
        core_attn_out[:, :, i] = (last_recurrent_state * q_t.unsqueeze(-1)).sum(dim=-2)
    return core_attn_out.to(initial_dtype), last_recurrent_state.to(initial_dtype)
'''),

    Pasted("transformers' own torch_recurrent_gated_delta_rule, imported in the function ([B, T, H, D] in, its "
           "1/sqrt(Dk) undone)", A08,
           "gated_delta_rule", '''
import torch


def gated_delta_rule(q, k, v, g, beta, state=None):
    from transformers.models.qwen3_5.modeling_qwen3_5 import torch_recurrent_gated_delta_rule

    # transformers' kernel takes [B, T, H, D] (and g, beta [B, T, H]) and divides q by sqrt(Dk) itself:
    # the course's rule uses q as given, so multiply that back in first (in fp32, where the kernel works)
    work = torch.promote_types(q.dtype, torch.float32)
    query = q.to(work) * q.shape[-1] ** 0.5
    o, last_state = torch_recurrent_gated_delta_rule(
        query.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), g=g.transpose(1, 2), beta=beta.transpose(1, 2),
        initial_state=state, output_final_state=True, use_qk_l2norm_in_kernel=False)
    return o.transpose(1, 2).to(q.dtype), last_state
'''),
    Pasted("fla naive_recurrent_gated_delta_rule (h *= exp(g_t), then the delta rule)", A08, "gated_delta_rule", '''
import torch


def gated_delta_rule(q, k, v, g, beta, state=None):
    orig_dtype = q.dtype
    work = torch.promote_types(q.dtype, torch.float32)
    q, k, v, beta, g = (x.to(work) for x in (q, k, v, beta, g))
    B, H, T, K = k.shape
    V = v.shape[-1]
    o = torch.zeros(B, H, T, V, dtype=work)
    h = torch.zeros(B, H, K, V, dtype=work) if state is None else state.to(work)
    for i in range(T):
        b_q = q[:, :, i]
        b_k = k[:, :, i]
        b_v = v[:, :, i].clone()
        h = h.clone() * g[:, :, i].exp()[..., None, None]
        b_beta = beta[:, :, i]
        b_v = b_v - (h.clone() * b_k[..., None]).sum(-2)
        b_v = b_v * b_beta[..., None]
        h = h.clone() + b_k.unsqueeze(-1) * b_v.unsqueeze(-2)
        o[:, :, i] = torch.einsum("bhd,bhdm->bhm", b_q, h)
    return o.to(orig_dtype), h
'''),

    Pasted("transformers' own torch_chunk_gated_delta_rule, imported in the function (UT transform, padded to "
           "whole chunks)", A08,
           "chunked_gated_delta_rule", '''
import torch


def chunked_gated_delta_rule(q, k, v, g, beta, chunk_size=64, state=None):
    from transformers.models.qwen3_5.modeling_qwen3_5 import torch_chunk_gated_delta_rule

    work = torch.promote_types(q.dtype, torch.float32)
    query = q.to(work) * q.shape[-1] ** 0.5  # the kernel scales q by Dk ** -0.5; the course's rule does not
    o, last_state = torch_chunk_gated_delta_rule(
        query.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), g=g.transpose(1, 2), beta=beta.transpose(1, 2),
        chunk_size=chunk_size, initial_state=state, output_final_state=True, use_qk_l2norm_in_kernel=False)
    return o.transpose(1, 2).to(q.dtype), last_state
'''),
    Pasted("fla naive_chunk_gated_delta_rule (WY representation by forward substitution, state carried per chunk)",
           A08, "chunked_gated_delta_rule", '''
import torch
import torch.nn.functional as F


def chunked_gated_delta_rule(q, k, v, g, beta, chunk_size=64, state=None):
    BT = chunk_size
    orig_dtype = q.dtype
    work = torch.promote_types(q.dtype, torch.float32)
    q, k, v, beta, g = (x.to(work) for x in (q, k, v, beta, g))
    B, H, T, K = q.shape
    V = v.shape[-1]
    pad_len = (BT - T % BT) % BT
    if pad_len > 0:  # padded positions have beta = 0 and g = 0: they write nothing and decay nothing
        q, k, v = (F.pad(x, (0, 0, 0, pad_len)) for x in (q, k, v))
        beta, g = (F.pad(x, (0, pad_len)) for x in (beta, g))
    v = v * beta[..., None]
    k_beta = k * beta[..., None]
    q, k, v, k_beta = (x.reshape(B, H, -1, BT, x.shape[-1]) for x in (q, k, v, k_beta))
    decay = g.reshape(B, H, -1, BT).cumsum(-1)
    L_mask = (decay.unsqueeze(-1) - decay.unsqueeze(-2)).tril().exp().tril()  # exp(gamma_i - gamma_j), j <= i

    mask = torch.triu(torch.ones(BT, BT, dtype=torch.bool, device=q.device), diagonal=0)
    attn = -((k_beta @ k.transpose(-1, -2)) * L_mask).masked_fill(mask, 0)
    for i in range(1, BT):
        attn[..., i, :i] = attn[..., i, :i].clone() + (attn[..., i, :, None].clone() * attn[..., :, :i].clone()).sum(-2)
    attn = attn + torch.eye(BT, dtype=work, device=q.device)  # (I + A)^-1
    k_cumdecay = attn @ (k_beta * decay.exp()[..., None])
    v = attn @ v

    S = k.new_zeros(B, H, K, V) if state is None else state.to(work)
    o = torch.zeros_like(v)
    mask = torch.triu(torch.ones(BT, BT, dtype=torch.bool, device=q.device), diagonal=1)
    for i in range(q.shape[2]):
        q_i, k_i, v_i = q[:, :, i], k[:, :, i], v[:, :, i]
        attn_i = (q_i @ k_i.transpose(-1, -2) * L_mask[:, :, i]).masked_fill_(mask, 0)
        v_prime = k_cumdecay[:, :, i] @ S
        v_new = v_i - v_prime
        o_inter = (q_i * decay[:, :, i, :, None].exp()) @ S
        o[:, :, i] = o_inter + attn_i @ v_new
        S = (S * decay[:, :, i, -1, None, None].exp()
             + (k_i * (decay[:, :, i, -1, None] - decay[:, :, i]).exp()[..., None]).transpose(-1, -2) @ v_new)
    o = o.reshape(B, H, -1, V)[:, :, :T]
    return o.to(orig_dtype), S
'''),

    Pasted("Dao-AILab causal-conv1d causal_conv1d_ref (padding=width - 1 then out[..., :seqlen]; final states by "
           "F.pad)", A08, "causal_conv1d", '''
import torch
import torch.nn.functional as F


def causal_conv1d_ref(x, weight, bias=None, initial_states=None, return_final_states=False, activation=None):
    """
    x: (batch, dim, seqlen)
    weight: (dim, width)
    bias: (dim,)
    initial_states: (batch, dim, width - 1)

    out: (batch, dim, seqlen)
    """
    if activation not in [None, "silu", "swish"]:
        raise NotImplementedError("activation must be None, silu, or swish")
    dtype_in = x.dtype
    x = x.to(weight.dtype)
    seqlen = x.shape[-1]
    dim, width = weight.shape
    if initial_states is None:
        out = F.conv1d(x, weight.unsqueeze(1), bias, padding=width - 1, groups=dim)
    else:
        x = torch.cat([initial_states.to(weight.dtype), x], dim=-1)
        out = F.conv1d(x, weight.unsqueeze(1), bias, padding=0, groups=dim)
    out = out[..., :seqlen]
    if return_final_states:
        final_states = F.pad(x, (width - 1 - x.shape[-1], 0)).to(dtype_in)  # (batch, dim, width - 1)
    out = (out if activation is None else F.silu(out)).to(dtype=dtype_in)
    return out if not return_final_states else (out, final_states)


def causal_conv1d(x, weight, conv_state=None):
    return causal_conv1d_ref(x, weight.squeeze(1), initial_states=conv_state, return_final_states=True)
'''),
    Pasted("Hugging Face torch_causal_conv1d_update (state prepended, padding=0, last seq_len outputs), without "
           "its in-place conv_state.copy_", A08, "causal_conv1d", '''
import torch
import torch.nn.functional as F


def causal_conv1d(x, weight, conv_state=None):
    _, hidden_size, seq_len = x.shape
    state_len = weight.shape[-1] - 1
    if conv_state is None:
        conv_state = x.new_zeros(x.shape[0], hidden_size, state_len)
    hidden_states_new = torch.cat([conv_state.to(x.dtype), x], dim=-1)
    new_conv_state = hidden_states_new[:, :, hidden_states_new.shape[-1] - state_len:]
    out = F.conv1d(hidden_states_new, weight.to(x.dtype), None, padding=0, groups=hidden_size)
    return out[:, :, -seq_len:], new_conv_state
'''),
    Pasted("unfold into sliding windows + einsum with the per-channel taps", A08, "causal_conv1d", '''
import torch


def causal_conv1d(x: torch.Tensor, weight: torch.Tensor, conv_state: torch.Tensor | None = None):
    batch, channels, seq_len = x.shape
    width = weight.shape[-1]
    past = x.new_zeros(batch, channels, width - 1) if conv_state is None else conv_state.to(x.dtype)
    padded = torch.cat([past, x], dim=-1)          # [B, C, K - 1 + T]
    windows = padded.unfold(-1, width, 1)          # [B, C, T, K]: position t sees t - K + 1 ... t
    y = torch.einsum("bctk,ck->bct", windows, weight[:, 0].to(x.dtype))
    return y, padded[..., seq_len:]
'''),

    Pasted("transformers' Qwen3_5GatedDeltaNet forward, rebuilt on its own pieces (Qwen3_5RMSNormGated, "
           "apply_mask_to_padding_states, torch_chunk_gated_delta_rule with use_qk_l2norm_in_kernel)", A08,
           "Qwen35GatedDeltaNet", '''
import torch
import torch.nn.functional as F
from torch import nn
from transformers.models.qwen3_5.modeling_qwen3_5 import (
    Qwen3_5RMSNormGated,
    apply_mask_to_padding_states,
    torch_chunk_gated_delta_rule,
)


class Qwen35GatedDeltaNet(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.hidden_size = config.hidden_size
        self.num_v_heads = config.linear_num_value_heads
        self.num_k_heads = config.linear_num_key_heads
        self.head_k_dim = config.linear_key_head_dim
        self.head_v_dim = config.linear_value_head_dim
        self.key_dim = self.head_k_dim * self.num_k_heads
        self.value_dim = self.head_v_dim * self.num_v_heads
        self.conv_kernel_size = config.linear_conv_kernel_dim

        # QKV
        self.conv_dim = self.key_dim * 2 + self.value_dim
        self.conv1d = nn.Conv1d(
            in_channels=self.conv_dim,
            out_channels=self.conv_dim,
            bias=False,
            kernel_size=self.conv_kernel_size,
            groups=self.conv_dim,
            padding=self.conv_kernel_size - 1,
        )
        # time step projection (discretization)
        self.dt_bias = nn.Parameter(torch.ones(self.num_v_heads))
        self.A_log = nn.Parameter(torch.zeros(self.num_v_heads))
        self.norm = Qwen3_5RMSNormGated(self.head_v_dim, eps=config.rms_norm_eps)
        self.out_proj = nn.Linear(self.value_dim, self.hidden_size, bias=False)
        self.in_proj_qkv = nn.Linear(self.hidden_size, self.key_dim * 2 + self.value_dim, bias=False)
        self.in_proj_z = nn.Linear(self.hidden_size, self.value_dim, bias=False)
        self.in_proj_b = nn.Linear(self.hidden_size, self.num_v_heads, bias=False)
        self.in_proj_a = nn.Linear(self.hidden_size, self.num_v_heads, bias=False)

    def forward(self, hidden_states, attention_mask=None, cache=None):
        batch_size, seq_len, _ = hidden_states.shape
        if attention_mask is not None:  # [B, cached + new]: the new positions' columns
            hidden_states = apply_mask_to_padding_states(hidden_states, attention_mask[:, -seq_len:])
        conv_state = None if cache is None else cache.conv_state
        recurrent_state = None if cache is None else cache.recurrent_state

        mixed_qkv = self.in_proj_qkv(hidden_states).transpose(1, 2)
        z = self.in_proj_z(hidden_states).reshape(batch_size, seq_len, -1, self.head_v_dim)
        b = self.in_proj_b(hidden_states)
        a = self.in_proj_a(hidden_states)

        mixed_qkv, conv_state = causal_conv1d(mixed_qkv, self.conv1d.weight, conv_state)
        mixed_qkv = F.silu(mixed_qkv).transpose(1, 2)
        query, key, value = torch.split(mixed_qkv, [self.key_dim, self.key_dim, self.value_dim], dim=-1)
        query = query.reshape(batch_size, seq_len, -1, self.head_k_dim)
        key = key.reshape(batch_size, seq_len, -1, self.head_k_dim)
        value = value.reshape(batch_size, seq_len, -1, self.head_v_dim)

        beta = b.sigmoid()
        # If the model is loaded in fp16, without the .float() here, A might be -inf
        g = -self.A_log.float().exp() * F.softplus(a.float() + self.dt_bias)
        core_attn_out, last_recurrent_state = torch_chunk_gated_delta_rule(
            query, key, value, g=g, beta=beta, initial_state=recurrent_state, output_final_state=True,
            use_qk_l2norm_in_kernel=True)
        if cache is not None:
            cache.update(conv_state, last_recurrent_state)

        core_attn_out = self.norm(core_attn_out.reshape(-1, self.head_v_dim), z.reshape(-1, self.head_v_dim))
        core_attn_out = core_attn_out.reshape(batch_size, seq_len, -1)
        return self.out_proj(core_attn_out), cache
'''),
    Pasted("fla GatedDeltaNet layer style (short conv + SiLU, l2-normed q/k, q * Dk^-1/2, gk = -A softplus(a + dt), "
           "gated output norm) in the notebook's five steps", A08, "Qwen35GatedDeltaNet", '''
import torch
import torch.nn.functional as F
from torch import nn


class GatedRMSNorm(nn.Module):
    """fla's FusedRMSNormGated in plain torch: rmsnorm(o) * weight * silu(z), in fp32."""

    def __init__(self, dim: int, eps: float = 1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, o: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
        x = o.float()
        x = x * torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + self.eps)
        return (x * self.weight.float() * F.silu(z.float())).to(o.dtype)


class Qwen35GatedDeltaNet(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.num_heads = config.linear_num_key_heads
        self.num_v_heads = config.linear_num_value_heads
        self.head_k_dim = config.linear_key_head_dim
        self.head_v_dim = config.linear_value_head_dim
        self.key_dim = self.num_heads * self.head_k_dim
        self.value_dim = self.num_v_heads * self.head_v_dim
        conv_size = config.linear_conv_kernel_dim
        conv_dim = 2 * self.key_dim + self.value_dim
        self.in_proj_qkv = nn.Linear(config.hidden_size, conv_dim, bias=False)
        self.in_proj_z = nn.Linear(config.hidden_size, self.value_dim, bias=False)
        self.in_proj_b = nn.Linear(config.hidden_size, self.num_v_heads, bias=False)
        self.in_proj_a = nn.Linear(config.hidden_size, self.num_v_heads, bias=False)
        self.conv1d = nn.Conv1d(conv_dim, conv_dim, conv_size, groups=conv_dim, padding=conv_size - 1, bias=False)
        self.A_log = nn.Parameter(torch.zeros(self.num_v_heads))
        self.dt_bias = nn.Parameter(torch.ones(self.num_v_heads))
        self.norm = GatedRMSNorm(self.head_v_dim, eps=config.rms_norm_eps)
        self.out_proj = nn.Linear(self.value_dim, config.hidden_size, bias=False)

    def convolve(self, mixed, cache):
        conv_state = None if cache is None else cache.conv_state
        y, conv_state = causal_conv1d(mixed.transpose(1, 2), self.conv1d.weight, conv_state)
        return F.silu(y).transpose(1, 2), conv_state

    def heads(self, qkv):
        q, k, v = torch.split(qkv, [self.key_dim, self.key_dim, self.value_dim], dim=-1)
        # rearrange(q, "b t (h d) -> b h t d"), then l2norm in fp32 as fla's use_qk_l2norm_in_kernel does
        q = l2_normalize(q.unflatten(-1, (self.num_heads, self.head_k_dim)).transpose(1, 2).float())
        k = l2_normalize(k.unflatten(-1, (self.num_heads, self.head_k_dim)).transpose(1, 2).float())
        q = q * self.head_k_dim ** -0.5
        if self.num_v_heads > self.num_heads:  # GVA: each q/k head serves consecutive value heads
            groups = self.num_v_heads // self.num_heads
            q, k = q.repeat_interleave(groups, dim=1), k.repeat_interleave(groups, dim=1)
        v = v.unflatten(-1, (self.num_v_heads, self.head_v_dim)).transpose(1, 2)
        return q.to(qkv.dtype), k.to(qkv.dtype), v

    def gates(self, x):
        beta = self.in_proj_b(x).sigmoid().transpose(1, 2)
        work = torch.promote_types(x.dtype, torch.float32)  # exp(A_log) in bf16 is too coarse
        gk = -self.A_log.to(work).exp() * F.softplus(self.in_proj_a(x).to(work) + self.dt_bias.to(work))
        return beta, gk.transpose(1, 2)

    def core(self, q, k, v, g, beta, cache):
        work = torch.promote_types(q.dtype, torch.float32)
        initial_state = None if cache is None else cache.recurrent_state
        o, recurrent_state = chunked_gated_delta_rule(q.to(work), k.to(work), v.to(work), g.to(work),
                                                      beta.to(work), state=initial_state)
        return o.to(v.dtype), recurrent_state

    def output(self, o, x):
        z = self.in_proj_z(x).unflatten(-1, (self.num_v_heads, self.head_v_dim))
        o = self.norm(o.transpose(1, 2), z)
        return self.out_proj(o.flatten(-2))

    def forward(self, x, attention_mask=None, cache=None):
        seq = x.shape[1]
        if attention_mask is not None:
            x = x * attention_mask[:, -seq:, None].to(x.dtype)  # padding positions write nothing
        qkv, conv_state = self.convolve(self.in_proj_qkv(x), cache)
        q, k, v = self.heads(qkv)
        beta, g = self.gates(x)
        o, state = self.core(q, k, v, g, beta, cache)
        if cache is not None:
            cache.update(conv_state, state)
        return self.output(o, x), cache
'''),
]


# --- 09_flash_attention ---------------------------------------------------------------------------------------

# Triton's fused-attention tutorial, its loop written out in PyTorch: exp2 with log2(e) folded into the scale.
_TRITON_FORWARD = '''
import math

import torch

LOG2E = 1.44269504


def flash_attention_forward(q, k, v, causal=False, block_q=16, block_k=16):
    n_q, n_ctx = q.shape[-2], k.shape[-2]
    qk_scale = LOG2E / math.sqrt(q.shape[-1])
    past = n_ctx - n_q
    o = torch.zeros(*q.shape[:-1], v.shape[-1], dtype=q.dtype)
    M = torch.full(q.shape[:-1], float("-inf"), dtype=q.dtype)
    for start_m in range(0, n_q, block_q):
        end_m = min(start_m + block_q, n_q)
        q_blk = q[..., start_m:end_m, :]
        m_i = torch.full(q_blk.shape[:-1], float("-inf"), dtype=q.dtype)
        l_i = torch.zeros(q_blk.shape[:-1], dtype=q.dtype)
        acc = torch.zeros(*q_blk.shape[:-1], v.shape[-1], dtype=q.dtype)
        hi = min(n_ctx, past + end_m) if causal else n_ctx
        for start_n in range(0, hi, block_k):
            end_n = min(start_n + block_k, n_ctx)
            qk = (q_blk @ k[..., start_n:end_n, :].transpose(-1, -2)) * qk_scale
            if causal:
                offs_m = torch.arange(start_m, end_m)[:, None] + past
                offs_n = torch.arange(start_n, end_n)[None, :]
                qk = torch.where(offs_m >= offs_n, qk, float("-inf"))
            m_ij = torch.maximum(m_i, qk.amax(-1))
            m_safe = torch.where(torch.isinf(m_ij), torch.zeros_like(m_ij), m_ij)
            p = torch.exp2(qk - m_safe[..., None])
            alpha = torch.exp2(m_i - m_safe)
            l_i = l_i * alpha + p.sum(-1)
            acc = acc * alpha[..., None] + p @ v[..., start_n:end_n, :]
            m_i = m_ij
        seen = l_i > 0
        o[..., start_m:end_m, :] = torch.where(seen[..., None], acc / torch.where(seen, l_i, 1.0)[..., None], 0.0)
        M[..., start_m:end_m] = torch.where(seen, (m_i + torch.log2(l_i)) / LOG2E, float("-inf"))
    return o, M
'''

_09 = [
    Pasted("Triton fused-attention tutorial's forward loop (exp2, log2(e) folded into the scale, hi bound)", A09,
           "flash_attention_forward", _TRITON_FORWARD),
    Pasted("Triton fused-attention tutorial, M kept in base 2 (m_i + log2(l_i)) as its kernel stores it", A09,
           "flash_attention_forward",
           patch(_TRITON_FORWARD, ("(m_i + torch.log2(l_i)) / LOG2E", "m_i + torch.log2(l_i)")),
           fails=("flash_attention_forward", "FlashAttention")),
    Pasted("FlashAttention-2 paper, Algorithm 2 (backward): key tiles outside, Di = rowsum(dO o O), P = exp(S - L)", A09,
           "flash_attention_backward", '''
import torch


def flash_attention_backward(q, k, v, o, lse, do, causal=False, block_q=16, block_k=16):
    N_q, N_k = q.shape[-2], k.shape[-2]
    softmax_scale = q.shape[-1] ** -0.5
    D = (do * o).sum(-1)  # D_i = rowsum(dO_i o O_i)
    L = torch.nan_to_num(lse, neginf=0.0)  # rows that see no key: every S is -inf, so P = 0
    dq = torch.zeros_like(q)
    dk = torch.zeros_like(k)
    dv = torch.zeros_like(v)
    for j in range(0, N_k, block_k):
        K_j, V_j = k[..., j:j + block_k, :], v[..., j:j + block_k, :]
        dK_j, dV_j = torch.zeros_like(K_j), torch.zeros_like(V_j)
        for i in range(0, N_q, block_q):
            Q_i, dO_i = q[..., i:i + block_q, :], do[..., i:i + block_q, :]
            rows = Q_i.shape[-2]
            if causal and j > N_k - N_q + i + rows - 1:
                continue
            S_ij = Q_i @ K_j.transpose(-2, -1) * softmax_scale
            if causal:
                q_pos = torch.arange(i, i + rows).unsqueeze(-1) + (N_k - N_q)
                S_ij = S_ij.masked_fill(torch.arange(j, j + K_j.shape[-2]) > q_pos, float("-inf"))
            P_ij = torch.exp(S_ij - L[..., i:i + rows].unsqueeze(-1))
            dV_j = dV_j + P_ij.transpose(-2, -1) @ dO_i
            dP_ij = dO_i @ V_j.transpose(-2, -1)
            dS_ij = P_ij * (dP_ij - D[..., i:i + rows].unsqueeze(-1))
            dq[..., i:i + rows, :] += softmax_scale * dS_ij @ K_j
            dK_j = dK_j + softmax_scale * dS_ij.transpose(-2, -1) @ Q_i
        dk[..., j:j + block_k, :] = dK_j
        dv[..., j:j + block_k, :] = dV_j
    return dq, dk, dv
'''),
    Pasted("Triton fused-attention tutorial's _attention autograd.Function (save_for_backward, ctx attributes)", A09,
           "FlashAttention", '''
import torch


class FlashAttention(torch.autograd.Function):

    @staticmethod
    def forward(ctx, q, k, v, causal=False):
        o, M = flash_attention_forward(q, k, v, causal=causal)
        ctx.save_for_backward(q, k, v, o, M)
        ctx.causal = causal
        return o

    @staticmethod
    def backward(ctx, do):
        q, k, v, o, M = ctx.saved_tensors
        dq, dk, dv = flash_attention_backward(q, k, v, o, M, do.contiguous(), causal=ctx.causal)
        return dq, dk, dv, None
'''),
    Pasted("Triton fused-attention tutorial's backward return, kept with its sm_scale's None (autograd takes extra Nones)",
           A09, "FlashAttention", '''
import torch


class FlashAttention(torch.autograd.Function):

    @staticmethod
    def forward(ctx, q, k, v, causal=False):
        o, M = flash_attention_forward(q, k, v, causal=causal)
        ctx.save_for_backward(q, k, v, o, M)
        ctx.causal = causal
        return o

    @staticmethod
    def backward(ctx, do):
        q, k, v, o, M = ctx.saved_tensors
        dq, dk, dv = flash_attention_backward(q, k, v, o, M, do, causal=ctx.causal)
        return dq, dk, dv, None, None
'''),
]


PASTED: list[Pasted] = [*_01, *_02, *_03, *_04, *_05, *_06, *_07, *_08, *_09]
