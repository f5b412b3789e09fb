"""01_attention_basics: scores, causal and padding masks, masked softmax, attention."""
from .entry import Entry, patch

ASSIGNMENT = "01_attention_basics"

HEADER = """\
import math

import torch
from torch import nn
import torch.nn.functional as F
"""

ATTENTION_SCORES = '''
def attention_scores(q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    """q [..., Tq, D] x k [..., Tk, D] -> [..., Tq, Tk], divided by sqrt(D)."""
    d = q.shape[-1]
    scores = torch.matmul(q, k.transpose(-2, -1))
    return scores / math.sqrt(d)
'''

CAUSAL_MASK = '''
def causal_mask(q_len: int, k_len: int | None = None, window: int | None = None) -> torch.Tensor:
    """Bool [q_len, k_len]; query i sits at position p = k_len - q_len + i and sees keys j <= p;
    with window=w only the last w of them, p - w < j <= p."""
    if k_len is None:
        k_len = q_len
    ones = torch.ones(q_len, k_len, dtype=torch.bool)
    if window is not None:
        pos = torch.arange(q_len)[:, None] + (k_len - q_len)
        keys = torch.arange(k_len)[None, :]
        ones = ones.masked_fill(keys <= pos - window, False)
    return torch.tril(ones, diagonal=k_len - q_len)
'''

PADDING_MASK = '''
def padding_mask(attention_mask: torch.Tensor) -> torch.Tensor:
    """[B, Tk] of 0/1 -> bool [B, 1, 1, Tk], True = real token."""
    keep = attention_mask != 0
    return keep.unsqueeze(1).unsqueeze(2)
'''

MASKED_SOFTMAX = '''
def masked_softmax(scores: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
    """Softmax over the last dim; masked entries exactly 0; a fully masked row is all zeros."""
    if mask is None:
        return torch.softmax(scores, dim=-1)
    very_negative = torch.finfo(scores.dtype).min
    filled = torch.where(mask, scores, torch.tensor(very_negative, dtype=scores.dtype))
    weights = torch.softmax(filled, dim=-1)
    zero = torch.zeros((), dtype=weights.dtype)
    return torch.where(mask, weights, zero)
'''

ATTENTION = '''
def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
              mask: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Returns (output [..., Tq, Dv], weights [..., Tq, Tk])."""
    scores = attention_scores(q, k)
    weights = masked_softmax(scores, mask)
    output = weights @ v
    return output, weights
'''

ONLINE_SOFTMAX_ATTENTION = '''
def online_softmax_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None = None,
                             block_size: int = 16) -> torch.Tensor:
    """attention(q, k, v, mask)[0] over blocks of block_size keys, with a running max m, sum z, accumulator a."""
    k_len = k.shape[-2]
    if mask is not None:
        mask = mask.expand(*mask.shape[:-1], k_len)
    work = torch.promote_types(q.dtype, torch.float32)
    neg_inf = torch.tensor(float("-inf"), dtype=work)
    m = neg_inf
    z = torch.zeros((), dtype=work)
    a = torch.zeros((), dtype=work)
    for start in range(0, k_len, block_size):
        stop = start + block_size
        s = attention_scores(q.to(work), k[..., start:stop, :].to(work))
        if mask is not None:
            s = torch.where(mask[..., start:stop], s, neg_inf)
        m_new = torch.maximum(m, s.amax(dim=-1, keepdim=True))
        shift = torch.where(m_new == neg_inf, torch.zeros((), dtype=work), m_new)
        p = torch.exp(s - shift)
        rescale = torch.exp(m - shift)
        z = z * rescale + p.sum(dim=-1, keepdim=True)
        a = a * rescale + p @ v[..., start:stop, :].to(work)
        m = m_new
    out = torch.where(z > 0, a / z, torch.zeros((), dtype=work))
    return out.to(q.dtype)
'''

CORRECT = {
    "attention_scores": ATTENTION_SCORES,
    "causal_mask": CAUSAL_MASK,
    "padding_mask": PADDING_MASK,
    "masked_softmax": MASKED_SOFTMAX,
    "attention": ATTENTION,
    "online_softmax_attention": ONLINE_SOFTMAX_ATTENTION,
}

S, C, P, M, A = "attention_scores", "causal_mask", "padding_mask", "masked_softmax", "attention"
OS = "online_softmax_attention"

ENTRIES = [
    # ---- attention_scores (attention and online_softmax_attention call it, so a wrong score breaks both) ----
    Entry("01-scores-no-scaling", "cascade",
          "attention_scores returns q @ k^T without dividing by sqrt(D); attention, which calls it, is correct",
          {S: patch(ATTENTION_SCORES, ("return scores / math.sqrt(d)", "return scores"))},
          (S, A, OS)),
    Entry("01-scores-sqrt-of-seq-len", "cascade",
          "attention_scores divides by the square root of the key length Tk (k.shape[-2]) instead of sqrt(D)",
          {S: patch(ATTENTION_SCORES, ("d = q.shape[-1]", "d = k.shape[-2]"))},
          (S, A, OS)),
    Entry("01-scores-precedence-d-half", "single",
          "attention_scores divides by d ** 1 / 2, which Python reads as (d ** 1) / 2 = D / 2, not sqrt(D)",
          {S: patch(ATTENTION_SCORES, ("return scores / math.sqrt(d)", "return scores / (d ** 1 / 2)"))},
          (S, A, OS)),
    Entry("01-scores-k-dot-T", "raises",
          "attention_scores uses k.T, which reverses every dim of a batched k (not just the last two), so "
          "batched [B, H, T, D] inputs raise a shape error in the matmul",
          {S: patch(ATTENTION_SCORES, ("torch.matmul(q, k.transpose(-2, -1))", "q @ k.T"))},
          (S, A, OS)),
    # ---- causal_mask ----
    Entry("01-causal-no-offset", "single",
          "causal_mask ignores the k_len - q_len offset: it is a lower triangle from the top-left corner, so with "
          "q_len < k_len (a cache) query i only sees keys 0..i instead of keys up to k_len - q_len + i",
          {C: patch(CAUSAL_MASK, ("diagonal=k_len - q_len", "diagonal=0"))},
          (C,)),
    Entry("01-causal-inverted", "single",
          "causal_mask is inverted: True marks the future keys (upper triangle above the diagonal) instead of "
          "the keys a query may attend to",
          {C: patch(CAUSAL_MASK, ("return torch.tril(ones, diagonal=k_len - q_len)",
                                  "return torch.triu(ones, diagonal=k_len - q_len + 1)"))},
          (C,)),
    Entry("01-causal-excludes-diagonal", "single",
          "causal_mask uses a strict comparison (diagonal one below), so a query may not attend to its own "
          "position; the first query sees nothing",
          {C: patch(CAUSAL_MASK, ("diagonal=k_len - q_len", "diagonal=k_len - q_len - 1"))},
          (C,)),
    Entry("01-causal-float-dtype", "single",
          "causal_mask returns a float tensor of 0.0/1.0 (torch.tril of torch.ones) instead of torch.bool",
          {C: patch(CAUSAL_MASK, ("ones = torch.ones(q_len, k_len, dtype=torch.bool)",
                                  "ones = torch.ones(q_len, k_len)"))},
          (C,)),
    # ---- causal_mask: the sliding window (nothing else graded calls causal_mask) ----
    Entry("01-window-one-too-wide", "single",
          "causal_mask's window is off by one: it removes only keys j < p - w, so each query sees w + 1 keys "
          "(p - w <= j <= p) instead of w",
          {C: patch(CAUSAL_MASK, ("keys <= pos - window", "keys < pos - window"))},
          (C,)),
    Entry("01-window-one-too-narrow", "single",
          "causal_mask's window is off by one the other way: it removes keys j <= p - w + 1, so each query sees "
          "only w - 1 keys (p - w + 1 < j <= p); window=1 leaves nothing visible",
          {C: patch(CAUSAL_MASK, ("keys <= pos - window", "keys <= pos - window + 1"))},
          (C,)),
    Entry("01-window-ignores-cache-offset", "single",
          "causal_mask's window edge uses the row index i as the query position instead of the absolute "
          "position p = k_len - q_len + i, so with q_len < k_len (a cache) the lower edge is k_len - q_len keys "
          "too far left: each query sees keys i - w < j <= p, w + k_len - q_len of them instead of w "
          "(causal_mask(1, 6, window=3) sees all 6 keys)",
          {C: patch(CAUSAL_MASK, ("pos = torch.arange(q_len)[:, None] + (k_len - q_len)",
                                  "pos = torch.arange(q_len)[:, None]"))},
          (C,)),
    Entry("01-window-first-w-keys", "single",
          "causal_mask's window is taken from the wrong end: it keeps the first w keys of the sequence "
          "(j < w) instead of the last w up to the query (p - w < j <= p)",
          {C: patch(CAUSAL_MASK, ("keys <= pos - window", "keys >= window"))},
          (C,)),
    Entry("01-window-condition-inverted", "single",
          "causal_mask's window condition is inverted: it removes the w most recent keys (p - w < j) and keeps "
          "the older ones (j <= p - w), so a query no longer sees itself",
          {C: patch(CAUSAL_MASK, ("keys <= pos - window", "keys > pos - window"))},
          (C,)),
    Entry("01-window-forgets-causality", "single",
          "with a window, causal_mask returns only the window condition j > p - w and drops the causal "
          "condition j <= p, so every query also sees all future keys",
          {C: patch(CAUSAL_MASK, ("ones = ones.masked_fill(keys <= pos - window, False)",
                                  "return keys > pos - window"))},
          (C,)),
    Entry("01-window-none-means-q-len", "single",
          "causal_mask replaces window=None by window=q_len instead of applying no window, so with a cache "
          "(q_len < k_len) each query sees only its last q_len keys; causal_mask(1, 5) sees only key 4",
          {C: '''
def causal_mask(q_len: int, k_len: int | None = None, window: int | None = None) -> torch.Tensor:
    """Bool [q_len, k_len]; True = may attend; sliding window of w keys."""
    if k_len is None:
        k_len = q_len
    if window is None:
        window = q_len
    query_pos = torch.arange(k_len - q_len, k_len).unsqueeze(1)
    key_pos = torch.arange(k_len).unsqueeze(0)
    return (key_pos <= query_pos) & (key_pos > query_pos - window)
'''},
          (C,)),
    Entry("01-window-none-type-error", "raises",
          "causal_mask always applies the window, with no check for window=None, so pos - window raises a "
          "TypeError whenever no window is given (causal_mask(3) fails)",
          {C: '''
def causal_mask(q_len: int, k_len: int | None = None, window: int | None = None) -> torch.Tensor:
    """Bool [q_len, k_len]; True = may attend; sliding window of w keys."""
    if k_len is None:
        k_len = q_len
    pos = torch.arange(q_len)[:, None] + (k_len - q_len)
    keys = torch.arange(k_len)[None, :]
    return (keys <= pos) & (keys > pos - window)
'''},
          (C,)),
    Entry("01-window-positions-transposed", "raises",
          "causal_mask builds the window condition with query positions as a row and key positions as a column "
          "([k_len, q_len] instead of [q_len, k_len]): with q_len != k_len the masked_fill raises a shape error, "
          "and for a square mask the transposed condition falls above the diagonal, so the window has no effect",
          {C: patch(CAUSAL_MASK, ("pos = torch.arange(q_len)[:, None] + (k_len - q_len)",
                                  "pos = torch.arange(q_len)[None, :] + (k_len - q_len)"),
                    ("keys = torch.arange(k_len)[None, :]", "keys = torch.arange(k_len)[:, None]"))},
          (C,)),
    Entry("01-window-float-result", "single",
          "causal_mask combines the window by multiplying with a float 0/1 tensor, so with a window it returns "
          "float32 instead of torch.bool (without a window the dtype is right)",
          {C: patch(CAUSAL_MASK, ("ones = ones.masked_fill(keys <= pos - window, False)",
                                  "ones = ones * (keys > pos - window).float()"))},
          (C,)),
    # ---- padding_mask ----
    Entry("01-padding-three-dims", "single",
          "padding_mask returns shape [B, 1, Tk] (one unsqueeze), which broadcasts the batch dim against the "
          "heads dim of [B, H, Tq, Tk]",
          {P: patch(PADDING_MASK, ("return keep.unsqueeze(1).unsqueeze(2)", "return keep.unsqueeze(1)"))},
          (P,)),
    Entry("01-padding-inverted", "single",
          "padding_mask is inverted: padding (0) becomes True and real tokens (1) become False",
          {P: patch(PADDING_MASK, ("keep = attention_mask != 0", "keep = attention_mask == 0"))},
          (P,)),
    # ---- masked_softmax (attention calls it) ----
    Entry("01-softmax-neg-inf-nan", "cascade",
          "masked_softmax fills masked scores with -inf, so a fully masked row comes out NaN instead of zeros",
          {M: '''
def masked_softmax(scores: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
    """Softmax over the last dim; masked entries exactly 0; a fully masked row is all zeros."""
    if mask is None:
        return torch.softmax(scores, dim=-1)
    filled = scores.masked_fill(~mask, float("-inf"))
    return torch.softmax(filled, dim=-1)
'''},
          (M, A)),
    Entry("01-softmax-big-negative-uniform", "single",
          "masked_softmax fills masked scores with -1e9 and does not zero them after the softmax, so a fully "
          "masked row comes out uniform (1/Tk each) instead of all zeros",
          {M: '''
def masked_softmax(scores: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
    """Softmax over the last dim; masked entries exactly 0; a fully masked row is all zeros."""
    if mask is None:
        return torch.softmax(scores, dim=-1)
    filled = torch.where(mask, scores, torch.tensor(-1e9, dtype=scores.dtype))
    return torch.softmax(filled, dim=-1)
'''},
          (M, A)),
    Entry("01-softmax-zero-after-softmax", "cascade",
          "masked_softmax takes the softmax over all keys first and only then zeros the masked entries, so the "
          "visible weights of a row sum to less than 1",
          {M: '''
def masked_softmax(scores: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
    """Softmax over the last dim; masked entries exactly 0; a fully masked row is all zeros."""
    weights = torch.softmax(scores, dim=-1)
    if mask is None:
        return weights
    return weights * mask
'''},
          (M, A)),
    Entry("01-softmax-wrong-dim", "single",
          "masked_softmax normalises over dim=-2 (the query rows) instead of the last dim (the keys)",
          {M: patch(MASKED_SOFTMAX, ("return torch.softmax(scores, dim=-1)", "return torch.softmax(scores, dim=-2)"),
                    ("weights = torch.softmax(filled, dim=-1)", "weights = torch.softmax(filled, dim=-2)"))},
          (M, A)),
    Entry("01-softmax-manual-exp-overflow", "cascade",
          "masked_softmax writes its own exp without subtracting the row maximum: scores of 1e4 overflow to inf "
          "(NaN weights), and a fully masked row divides 0 by 0",
          {M: '''
def masked_softmax(scores: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
    """Softmax over the last dim; masked entries exactly 0; a fully masked row is all zeros."""
    e = torch.exp(scores)
    if mask is not None:
        e = e * mask
    return e / e.sum(dim=-1, keepdim=True)
'''},
          (M, A)),
    Entry("01-softmax-float32-result", "single",
          "masked_softmax computes the softmax in float32 and returns float32 weights for bfloat16 scores "
          "(never casts back to the dtype of scores)",
          {M: patch(MASKED_SOFTMAX, ("return torch.softmax(scores, dim=-1)", "return torch.softmax(scores.float(), dim=-1)"),
                    ("filled = torch.where(mask, scores, torch.tensor(very_negative, dtype=scores.dtype))",
                     "filled = torch.where(mask, scores.float(), torch.tensor(very_negative, dtype=scores.dtype).float())"))},
          (M, A)),
    Entry("01-softmax-mask-none-crash", "raises",
          "masked_softmax has no branch for mask=None: it evaluates ~mask on None and raises a TypeError",
          {M: '''
def masked_softmax(scores: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
    """Softmax over the last dim; masked entries exactly 0; a fully masked row is all zeros."""
    very_negative = torch.finfo(scores.dtype).min
    filled = scores.masked_fill(~mask, very_negative)
    weights = torch.softmax(filled, dim=-1)
    return weights.masked_fill(~mask, 0.0)
'''},
          (M, A)),
    Entry("01-softmax-inplace-on-scores", "single",
          "masked_softmax fills the masked scores with masked_fill_ (in place), overwriting the caller's scores "
          "tensor",
          {M: '''
def masked_softmax(scores: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
    """Softmax over the last dim; masked entries exactly 0; a fully masked row is all zeros."""
    if mask is None:
        return torch.softmax(scores, dim=-1)
    scores.masked_fill_(~mask, torch.finfo(scores.dtype).min)
    weights = torch.softmax(scores, dim=-1)
    return weights.masked_fill(~mask, 0.0)
'''},
          (M,)),
    # ---- attention ----
    Entry("01-attention-swapped-return", "single",
          "attention returns (weights, output) instead of (output, weights)",
          {A: patch(ATTENTION, ("return output, weights", "return weights, output"))},
          (A,)),
    Entry("01-attention-ignores-mask", "single",
          "attention never passes mask on: it calls masked_softmax(scores) without the mask, so the mask "
          "has no effect",
          {A: patch(ATTENTION, ("weights = masked_softmax(scores, mask)", "weights = masked_softmax(scores)"))},
          (A,)),
    Entry("01-attention-scaled-twice", "single",
          "attention divides the scores from attention_scores by sqrt(D) a second time, so they are scaled by 1/D",
          {A: patch(ATTENTION, ("scores = attention_scores(q, k)", "scores = attention_scores(q, k) / math.sqrt(q.shape[-1])"))},
          (A,)),
    Entry("01-attention-returns-output-only", "raises",
          "attention returns only the output tensor, not the pair (output, weights), so unpacking the result fails",
          {A: patch(ATTENTION, ("return output, weights", "return output"))},
          (A,)),
    # ---- online_softmax_attention ----
    Entry("01-online-no-rescale", "single",
          "online_softmax_attention never multiplies z and a by exp(m - m_new) when the running max grows, so "
          "the blocks seen before a larger score keep weights shifted by the old, smaller max (too large by "
          "exp(m_new - m))",
          {OS: patch(ONLINE_SOFTMAX_ATTENTION, ("z = z * rescale + p.sum(dim=-1, keepdim=True)",
                                               "z = z + p.sum(dim=-1, keepdim=True)"),
                    ("a = a * rescale + p @ v[..., start:stop, :].to(work)",
                     "a = a + p @ v[..., start:stop, :].to(work)"))},
          (OS,)),
    Entry("01-online-rescale-z-only", "single",
          "online_softmax_attention rescales the running sum z by exp(m - m_new) but forgets to rescale the "
          "accumulator a, so when the max grows the earlier blocks' values are over-weighted in a while z is right",
          {OS: patch(ONLINE_SOFTMAX_ATTENTION, ("a = a * rescale + p @ v[..., start:stop, :].to(work)",
                                               "a = a + p @ v[..., start:stop, :].to(work)"))},
          (OS,)),
    Entry("01-online-max-starts-at-zero", "single",
          "online_softmax_attention starts the running max m at 0 instead of -inf, so m never drops below 0: "
          "for a query whose scores are all far below 0 (below about -104) every exp underflows to 0, z = 0 "
          "and the row comes out 0 instead of its weighted average of v",
          {OS: patch(ONLINE_SOFTMAX_ATTENTION, ("    m = neg_inf\n", "    m = torch.zeros((), dtype=work)\n"))},
          (OS,)),
    Entry("01-online-nan-shift-minus-inf", "single",
          "online_softmax_attention shifts by m_new even where it is still -inf, so for a query whose keys so "
          "far are all masked exp(-inf - (-inf)) is NaN: fully masked rows, and rows whose first blocks are "
          "fully masked (left padding), come out NaN",
          {OS: patch(ONLINE_SOFTMAX_ATTENTION, ("shift = torch.where(m_new == neg_inf, torch.zeros((), dtype=work), m_new)",
                                               "shift = m_new"))},
          (OS,)),
    Entry("01-online-zero-over-zero", "single",
          "online_softmax_attention returns a / z without handling z = 0, so a fully masked row is 0 / 0 = NaN "
          "instead of 0",
          {OS: patch(ONLINE_SOFTMAX_ATTENTION, ("out = torch.where(z > 0, a / z, torch.zeros((), dtype=work))",
                                               "out = a / z"))},
          (OS,)),
    Entry("01-online-drops-partial-block", "single",
          "online_softmax_attention loops over k_len // block_size full blocks only, so the keys of a shorter "
          "last block are never seen when Tk is not a multiple of block_size (and with Tk < block_size no "
          "block is processed at all)",
          {OS: patch(ONLINE_SOFTMAX_ATTENTION, ("for start in range(0, k_len, block_size):\n        stop = start + block_size",
                                               "for b in range(k_len // block_size):\n        start = b * block_size\n"
                                               "        stop = start + block_size"))},
          (OS,)),
    Entry("01-online-mask-not-expanded", "raises",
          "online_softmax_attention slices the mask along the keys without first expanding a last dim of size 1 "
          "to Tk, so a mask of shape [..., Tq, 1] slices to an empty tensor from the second block on and the "
          "torch.where raises a shape error",
          {OS: patch(ONLINE_SOFTMAX_ATTENTION, ("    if mask is not None:\n        mask = mask.expand(*mask.shape[:-1], k_len)\n",
                                               ""))},
          (OS,)),
    Entry("01-online-all-scores-at-once", "single",
          "online_softmax_attention computes the whole [..., Tq, Tk] score table with one attention_scores call "
          "before the loop and only slices it per block, so it holds the scores of all Tk keys at once (the "
          "output itself is right)",
          {OS: patch(ONLINE_SOFTMAX_ATTENTION, ("    for start in range(0, k_len, block_size):\n",
                                               "    all_scores = attention_scores(q.to(work), k.to(work))\n"
                                               "    for start in range(0, k_len, block_size):\n"),
                    ("s = attention_scores(q.to(work), k[..., start:stop, :].to(work))",
                     "s = all_scores[..., start:stop]"))},
          (OS,)),
    Entry("01-online-sum-without-keepdim", "raises",
          "online_softmax_attention accumulates z with p.sum(dim=-1) without keepdim, so z has shape [..., Tq] "
          "and broadcasts against the [..., Tq, 1] rescale into a [..., Tq, Tq] table; dividing a [..., Tq, Dv] "
          "by it raises a shape error (or silently mixes rows when Dv == Tq)",
          {OS: patch(ONLINE_SOFTMAX_ATTENTION, ("p.sum(dim=-1, keepdim=True)", "p.sum(dim=-1)"))},
          (OS,)),
    Entry("01-online-one-max-per-block", "single",
          "online_softmax_attention takes the running max as s.max() over the whole block (all queries and "
          "batch entries) instead of per query row, so every row is shifted by the largest score anywhere: a "
          "row whose scores are far below it underflows to z = 0 and comes out 0",
          {OS: patch(ONLINE_SOFTMAX_ATTENTION, ("s.amax(dim=-1, keepdim=True)", "s.max()"))},
          (OS,)),
    Entry("01-online-no-final-divide", "single",
          "online_softmax_attention returns the accumulator a without dividing it by the running sum z, so the "
          "output is the unnormalised sum of exp(s - m) v",
          {OS: patch(ONLINE_SOFTMAX_ATTENTION, ("out = torch.where(z > 0, a / z, torch.zeros((), dtype=work))",
                                               "out = a"))},
          (OS,)),
    Entry("01-online-exp-without-max", "single",
          "online_softmax_attention keeps no running max and sums exp(s) directly, so scores above about 88 "
          "overflow float32 to inf (NaN output) and rows whose scores are all below about -104 underflow to "
          "z = 0 (output 0); ordinary scores come out right",
          {OS: '''
def online_softmax_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None = None,
                             block_size: int = 16) -> torch.Tensor:
    """attention(q, k, v, mask)[0] over blocks of block_size keys."""
    k_len = k.shape[-2]
    if mask is not None:
        mask = mask.expand(*mask.shape[:-1], k_len)
    z = 0.0
    a = 0.0
    for start in range(0, k_len, block_size):
        s = attention_scores(q.float(), k[..., start:start + block_size, :].float())
        if mask is not None:
            s = s.masked_fill(~mask[..., start:start + block_size], float("-inf"))
        e = torch.exp(s)
        z = z + e.sum(dim=-1, keepdim=True)
        a = a + e @ v[..., start:start + block_size, :].float()
    out = torch.where(z > 0, a / z, 0.0)
    return out.to(q.dtype)
'''},
          (OS,)),
    Entry("01-online-returns-float32", "single",
          "online_softmax_attention accumulates in float32 but never casts the result back, so bfloat16 inputs "
          "give a float32 output instead of bfloat16",
          {OS: patch(ONLINE_SOFTMAX_ATTENTION, ("return out.to(q.dtype)", "return out"))},
          (OS,)),
    Entry("01-online-scales-q-in-place", "single",
          "online_softmax_attention scales q once with q *= 1 / sqrt(D) after q = q.to(work); .to returns the "
          "same tensor when q is already float32 (or float64), so it overwrites the caller's q (the output is right)",
          {OS: '''
def online_softmax_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None = None,
                             block_size: int = 16) -> torch.Tensor:
    """attention(q, k, v, mask)[0] over blocks of block_size keys."""
    k_len = k.shape[-2]
    if mask is not None:
        mask = mask.expand(*mask.shape[:-1], k_len)
    work = torch.promote_types(q.dtype, torch.float32)
    q = q.to(work)
    q *= 1 / math.sqrt(q.shape[-1])  # scale the queries once, as FlashAttention does
    m = torch.full((), float("-inf"), dtype=work)
    z = torch.zeros((), dtype=work)
    a = torch.zeros((), dtype=work)
    for start in range(0, k_len, block_size):
        k_blk = k[..., start:start + block_size, :].to(work)
        v_blk = v[..., start:start + block_size, :].to(work)
        s = q @ k_blk.transpose(-2, -1)
        if mask is not None:
            s = s.masked_fill(~mask[..., start:start + block_size], float("-inf"))
        m_new = torch.maximum(m, s.amax(dim=-1, keepdim=True))
        safe = m_new.masked_fill(m_new == float("-inf"), 0.0)
        p = torch.exp(s - safe)
        scale = torch.exp(m - safe)
        z = z * scale + p.sum(dim=-1, keepdim=True)
        a = a * scale + p @ v_blk
        m = m_new
    out = torch.where(z == 0, torch.zeros((), dtype=work), a / z)
    return out.to(q.dtype)
'''},
          (OS,)),
    Entry("01-online-finfo-min-uniform", "single",
          "online_softmax_attention fills masked scores with torch.finfo(dtype).min instead of -inf and shifts "
          "by m_new directly: a fully masked row has all scores equal, so it gets uniform weights and returns the "
          "mean of v instead of 0",
          {OS: patch(ONLINE_SOFTMAX_ATTENTION, ("s = torch.where(mask[..., start:stop], s, neg_inf)",
                                               "s = torch.where(mask[..., start:stop], s, torch.finfo(work).min)"),
                    ("shift = torch.where(m_new == neg_inf, torch.zeros((), dtype=work), m_new)", "shift = m_new"))},
          (OS,)),
    Entry("01-online-mask-fill-inverted", "single",
          "online_softmax_attention fills the visible keys with -inf (masked_fill(mask, -inf), forgetting the ~), "
          "so each query attends only to the keys it must not see and rows with every key visible come out 0",
          {OS: patch(ONLINE_SOFTMAX_ATTENTION, ("s = torch.where(mask[..., start:stop], s, neg_inf)",
                                               "s = s.masked_fill(mask[..., start:stop], float(\"-inf\"))"))},
          (OS,)),
    Entry("01-online-mask-none-crash", "raises",
          "online_softmax_attention has no branch for mask=None: it calls mask.expand on None and raises an "
          "AttributeError whenever no mask is given",
          {OS: patch(ONLINE_SOFTMAX_ATTENTION, ("    if mask is not None:\n        mask = mask.expand(",
                                               "    mask = mask.expand("),
                    ("        if mask is not None:\n            s = torch.where(mask[..., start:stop], s, neg_inf)",
                     "        s = torch.where(mask[..., start:stop], s, neg_inf)"))},
          (OS,)),
    # ---- two mistakes at once ----
    Entry("01-double-no-scale-and-inverted-causal", "double",
          "two mistakes: attention_scores does not divide by sqrt(D), and causal_mask is inverted (True marks "
          "the future keys)",
          {S: patch(ATTENTION_SCORES, ("return scores / math.sqrt(d)", "return scores")),
           C: patch(CAUSAL_MASK, ("return torch.tril(ones, diagonal=k_len - q_len)",
                                  "return torch.triu(ones, diagonal=k_len - q_len + 1)"))},
          (S, C, A, OS)),
    Entry("01-double-padding-3d-and-neg-inf", "double",
          "two mistakes: padding_mask returns [B, 1, Tk] instead of [B, 1, 1, Tk], and masked_softmax fills "
          "with -inf so fully masked rows are NaN",
          {P: patch(PADDING_MASK, ("return keep.unsqueeze(1).unsqueeze(2)", "return keep.unsqueeze(1)")),
           M: '''
def masked_softmax(scores: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
    """Softmax over the last dim; masked entries exactly 0; a fully masked row is all zeros."""
    if mask is None:
        return torch.softmax(scores, dim=-1)
    return torch.softmax(scores.masked_fill(~mask, float("-inf")), dim=-1)
'''},
          (P, M, A)),
    Entry("01-double-sqrt-seq-and-softmax-dim", "double",
          "two mistakes in one chain: attention_scores divides by sqrt(Tk) instead of sqrt(D), and "
          "masked_softmax normalises over dim=-2",
          {S: patch(ATTENTION_SCORES, ("d = q.shape[-1]", "d = k.shape[-2]")),
           M: patch(MASKED_SOFTMAX, ("return torch.softmax(scores, dim=-1)", "return torch.softmax(scores, dim=-2)"),
                    ("weights = torch.softmax(filled, dim=-1)", "weights = torch.softmax(filled, dim=-2)"))},
          (S, M, A, OS)),
    Entry("01-double-excludes-diagonal-and-padding-inverted", "double",
          "two mistakes: causal_mask excludes the diagonal (a query may not see itself), and padding_mask is "
          "inverted (padding becomes True)",
          {C: patch(CAUSAL_MASK, ("diagonal=k_len - q_len", "diagonal=k_len - q_len - 1")),
           P: patch(PADDING_MASK, ("keep = attention_mask != 0", "keep = attention_mask == 0"))},
          (C, P)),
    Entry("01-double-window-too-wide-and-no-rescale", "double",
          "two mistakes: causal_mask's window removes only keys j < p - w (each query sees w + 1 keys), and "
          "online_softmax_attention never rescales z and a by exp(m - m_new) when the running max grows",
          {C: patch(CAUSAL_MASK, ("keys <= pos - window", "keys < pos - window")),
           OS: patch(ONLINE_SOFTMAX_ATTENTION, ("z = z * rescale + p.sum(dim=-1, keepdim=True)",
                                               "z = z + p.sum(dim=-1, keepdim=True)"),
                    ("a = a * rescale + p @ v[..., start:stop, :].to(work)",
                     "a = a + p @ v[..., start:stop, :].to(work)"))},
          (C, OS)),
    Entry("01-double-softmax-neg-inf-and-online-zero-over-zero", "double",
          "two mistakes with the same root: masked_softmax fills masked scores with -inf (fully masked rows are "
          "NaN), and online_softmax_attention returns a / z without handling z = 0 (fully masked rows are NaN)",
          {M: '''
def masked_softmax(scores: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
    """Softmax over the last dim; masked entries exactly 0; a fully masked row is all zeros."""
    if mask is None:
        return torch.softmax(scores, dim=-1)
    return torch.softmax(scores.masked_fill(~mask, float("-inf")), dim=-1)
''',
           OS: patch(ONLINE_SOFTMAX_ATTENTION, ("out = torch.where(z > 0, a / z, torch.zeros((), dtype=work))",
                                               "out = a / z"))},
          (M, A, OS)),
    # A later set, written from the notebooks alone.
    Entry("01-window-last-w-of-sequence", "single",
          "causal_mask's window keeps only the keys j >= k_len - w, the last w keys of the whole sequence, for "
          "every query, instead of the w keys up to each query's own position (p - w < j <= p); it is right only "
          "for the last query (one decoding step), and earlier queries see nothing",
          {C: patch(CAUSAL_MASK, ("keys <= pos - window", "keys < k_len - window"))},
          (C,)),
    Entry("01-window-symmetric-band", "single",
          "with a window, causal_mask returns the symmetric band |j - p| < w (Longformer's sliding window) and "
          "drops the causal condition, so each query also sees the w - 1 keys after it",
          {C: patch(CAUSAL_MASK, ("ones = ones.masked_fill(keys <= pos - window, False)",
                                  "return (keys - pos).abs() < window"))},
          (C,)),
    Entry("01-window-before-k-len-default", "raises",
          "causal_mask handles the window in an early branch placed before k_len defaults to q_len, so "
          "causal_mask(q_len, window=w) without k_len computes k_len - q_len with k_len = None and raises a "
          "TypeError",
          {C: '''
def causal_mask(q_len: int, k_len: int | None = None, window: int | None = None) -> torch.Tensor:
    """Bool [q_len, k_len]; True = may attend; with window=w only p - w < j <= p."""
    if window is not None:
        pos = torch.arange(k_len - q_len, k_len)[:, None]
        keys = torch.arange(k_len)[None, :]
        return (keys <= pos) & (keys > pos - window)
    if k_len is None:
        k_len = q_len
    return torch.tril(torch.ones(q_len, k_len, dtype=torch.bool), diagonal=k_len - q_len)
'''},
          (C,)),
    Entry("01-window-clamped-to-q-len", "single",
          "causal_mask clamps the window to q_len (window = min(window, q_len)) instead of leaving it alone, so "
          "with a cache (q_len < k_len) the window shrinks: causal_mask(1, 6, window=3) sees only key 5 instead "
          "of keys 3, 4 and 5",
          {C: patch(CAUSAL_MASK, ("    if window is not None:\n        pos =",
                                  "    if window is not None:\n        window = min(window, q_len)\n        pos ="))},
          (C,)),
    Entry("01-online-rescale-inverted", "single",
          "online_softmax_attention rescales z and a by exp(m_new - m) instead of exp(m - m_new); on the first "
          "block m = -inf, so the factor is inf and 0 * inf makes every output NaN (and later the old blocks "
          "would be scaled up instead of down)",
          {OS: patch(ONLINE_SOFTMAX_ATTENTION, ("rescale = torch.exp(m - shift)", "rescale = torch.exp(shift - m)"))},
          (OS,)),
    Entry("01-online-p-shifted-by-block-max", "single",
          "online_softmax_attention shifts each block's exponentials by that block's own maximum, "
          "p = exp(s - max(s_block)), instead of by the new running max m_new, while z and a are rescaled to "
          "m_new: a block whose maximum is below the running max gets weights too large by exp(m_new - max(s_block))",
          {OS: patch(ONLINE_SOFTMAX_ATTENTION, (
              "        p = torch.exp(s - shift)\n",
              "        block_max = s.amax(dim=-1, keepdim=True)\n"
              "        p = torch.exp(s - torch.where(block_max == neg_inf, torch.zeros((), dtype=work), block_max))\n"))},
          (OS,)),
    Entry("01-online-mask-sliced-on-queries", "raises",
          "online_softmax_attention slices the mask along the query dim (mask[..., start:stop, :]) instead of "
          "the key dim (mask[..., start:stop]), so the block's mask does not match the [..., Tq, block] scores "
          "and a shape error follows",
          {OS: patch(ONLINE_SOFTMAX_ATTENTION, ("s = torch.where(mask[..., start:stop], s, neg_inf)",
                                               "s = torch.where(mask[..., start:stop, :], s, neg_inf)"))},
          (OS,)),
    Entry("01-online-v-sliced-on-last-dim", "raises",
          "online_softmax_attention slices v as v[..., start:stop] (its last dim Dv) instead of "
          "v[..., start:stop, :] (the keys), so p @ v_block multiplies [..., Tq, block] by [..., Tk, few] and "
          "raises a shape error",
          {OS: patch(ONLINE_SOFTMAX_ATTENTION, ("p @ v[..., start:stop, :].to(work)", "p @ v[..., start:stop].to(work)"))},
          (OS,)),
    Entry("01-online-max-from-first-block", "single",
          "online_softmax_attention takes the shift m once, from the first block's maximum, and never updates "
          "it; later blocks with larger scores are not rescaled, so their exp(s - m) overflows to inf (NaN "
          "output) when they exceed the first block's maximum by more than about 88",
          {OS: '''
def online_softmax_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None = None,
                             block_size: int = 16) -> torch.Tensor:
    """attention(q, k, v, mask)[0] over blocks of block_size keys."""
    k_len = k.shape[-2]
    if mask is not None:
        mask = mask.expand(*mask.shape[:-1], k_len)
    work = torch.promote_types(q.dtype, torch.float32)
    m = None
    z = torch.zeros((), dtype=work)
    a = torch.zeros((), dtype=work)
    for start in range(0, k_len, block_size):
        s = attention_scores(q.to(work), k[..., start:start + block_size, :].to(work))
        if mask is not None:
            s = s.masked_fill(~mask[..., start:start + block_size], float("-inf"))
        if m is None:  # shift every block by the first block's maximum
            m = s.amax(dim=-1, keepdim=True)
            m = m.masked_fill(m == float("-inf"), 0.0)
        p = torch.exp(s - m)
        z = z + p.sum(dim=-1, keepdim=True)
        a = a + p @ v[..., start:start + block_size, :].to(work)
    out = torch.where(z > 0, a / z, torch.zeros((), dtype=work))
    return out.to(q.dtype)
'''},
          (OS,)),
    Entry("01-online-amax-without-keepdim", "raises",
          "online_softmax_attention takes the block maximum with s.amax(dim=-1) without keepdim, so m has shape "
          "[..., Tq] and s - m broadcasts it along the keys instead of the queries: a shape error when "
          "Tq != block size (and silently wrong shifts when they are equal)",
          {OS: patch(ONLINE_SOFTMAX_ATTENTION, ("s.amax(dim=-1, keepdim=True)", "s.amax(dim=-1)"))},
          (OS,)),
    Entry("01-online-blocks-queries-not-keys", "single",
          "online_softmax_attention splits the queries into blocks of block_size and runs the ordinary "
          "attention of each query block against all Tk keys, so it holds scores for all Tk keys at once "
          "([block, Tk]) and never splits the keys; the output itself is right",
          {OS: '''
def online_softmax_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None = None,
                             block_size: int = 16) -> torch.Tensor:
    """attention(q, k, v, mask)[0], a block of queries at a time."""
    q_len, k_len = q.shape[-2], k.shape[-2]
    if mask is not None:
        mask = mask.expand(*mask.shape[:-2], q_len, k_len)
    pieces = []
    for start in range(0, q_len, block_size):
        q_block = q[..., start:start + block_size, :]
        mask_block = None if mask is None else mask[..., start:start + block_size, :]
        pieces.append(attention(q_block, k, v, mask_block)[0])
    return torch.cat(pieces, dim=-2)
'''},
          (OS,)),
    Entry("01-online-averages-block-outputs", "single",
          "online_softmax_attention runs attention separately on each key block and returns the mean of the "
          "per-block outputs, instead of combining blocks with a running max and sum: each block's softmax is "
          "normalised on its own, so blocks get equal weight whatever their share of exp(s)",
          {OS: '''
def online_softmax_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None = None,
                             block_size: int = 16) -> torch.Tensor:
    """attention(q, k, v, mask)[0] over blocks of block_size keys."""
    k_len = k.shape[-2]
    if mask is not None:
        mask = mask.expand(*mask.shape[:-1], k_len)
    outs = []
    for start in range(0, k_len, block_size):
        stop = start + block_size
        block_mask = None if mask is None else mask[..., start:stop]
        out, _ = attention(q, k[..., start:stop, :], v[..., start:stop, :], block_mask)
        outs.append(out)
    return torch.stack(outs).mean(dim=0)
'''},
          (OS,)),
    Entry("01-online-own-scores-unscaled", "single",
          "online_softmax_attention computes each block's scores itself as q @ k_block^T without dividing by "
          "sqrt(D), instead of calling attention_scores, so it is softmax attention with unscaled scores",
          {OS: patch(ONLINE_SOFTMAX_ATTENTION, ("s = attention_scores(q.to(work), k[..., start:stop, :].to(work))",
                                               "s = q.to(work) @ k[..., start:stop, :].to(work).transpose(-2, -1)"))},
          (OS,)),
    Entry("01-online-mask-after-exp", "single",
          "online_softmax_attention applies the mask by multiplying p by it after the exp, so the running max is "
          "taken over all scores, masked ones included: a query whose visible scores lie far below a masked score "
          "underflows to z = 0 and comes out 0 instead of its weighted average",
          {OS: patch(ONLINE_SOFTMAX_ATTENTION, (
              "        if mask is not None:\n            s = torch.where(mask[..., start:stop], s, neg_inf)\n", ""),
              ("        p = torch.exp(s - shift)\n",
               "        p = torch.exp(s - shift)\n"
               "        if mask is not None:\n            p = p * mask[..., start:stop]\n"))},
          (OS,)),
    # A held-out set, written from the notebooks alone.
    Entry("01-ho-window-or-instead-of-and", "single",
          "causal_mask combines the window condition with the causal one using | instead of &, so with a window "
          "a key is visible if either j <= p or j > p - w holds, which every key satisfies: every windowed mask "
          "is all True (future keys included) instead of p - w < j <= p",
          {C: '''
def causal_mask(q_len: int, k_len: int | None = None, window: int | None = None) -> torch.Tensor:
    """Bool [q_len, k_len]; True = may attend; with window=w only p - w < j <= p."""
    if k_len is None:
        k_len = q_len
    pos = torch.arange(k_len - q_len, k_len)[:, None]
    keys = torch.arange(k_len)[None, :]
    mask = keys <= pos
    if window is not None:
        mask = mask | (keys > pos - window)
    return mask
'''},
          (C,)),
    Entry("01-ho-window-keys-over-q-len", "raises",
          "causal_mask builds the key positions of the window condition with torch.arange(q_len) instead of "
          "torch.arange(k_len), so with a cache (k_len > q_len) the [q_len, q_len] condition does not match the "
          "[q_len, k_len] mask: masked_fill raises a shape error (and for q_len = 1 the single column broadcasts "
          "and wipes the whole row); square masks are right",
          {C: patch(CAUSAL_MASK, ("keys = torch.arange(k_len)[None, :]", "keys = torch.arange(q_len)[None, :]"))},
          (C,)),
    Entry("01-ho-online-max-never-stored", "single",
          "online_softmax_attention computes m_new but never assigns m = m_new, so m stays -inf: every block's "
          "rescale factor exp(m - m_new) is 0, z and a are reset at each block, and the output is the attention "
          "over the last key block alone (0 for a query that sees nothing in the last block)",
          {OS: patch(ONLINE_SOFTMAX_ATTENTION, ("        m = m_new\n", ""))},
          (OS,)),
    Entry("01-ho-online-masked-scores-zero", "single",
          "online_softmax_attention fills the masked scores with 0 instead of -inf (masked_fill(~mask, 0.0)), so "
          "masked keys still get weight exp(0 - m) and contribute their values; a fully masked row comes out as "
          "the mean of v instead of 0",
          {OS: patch(ONLINE_SOFTMAX_ATTENTION, ("s = torch.where(mask[..., start:stop], s, neg_inf)",
                                               "s = s.masked_fill(~mask[..., start:stop], 0.0)"))},
          (OS,)),
    Entry("01-ho-online-accumulator-like-q", "raises",
          "online_softmax_attention starts the accumulator as a = torch.zeros_like(q), shape [..., Tq, D], "
          "instead of [..., Tq, Dv] (or a broadcastable zero), so adding p @ v_block [..., Tq, Dv] raises a shape "
          "error whenever Dv != D",
          {OS: patch(ONLINE_SOFTMAX_ATTENTION, ("    a = torch.zeros((), dtype=work)\n",
                                               "    a = torch.zeros_like(q, dtype=work)\n"))},
          (OS,)),
]
