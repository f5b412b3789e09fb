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
def causal_mask(q_len: int, k_len: int | None = None) -> torch.Tensor:
    """Bool [q_len, k_len]; query i sits at position k_len - q_len + i and sees keys j <= that position."""
    if k_len is None:
        k_len = q_len
    ones = torch.ones(q_len, k_len, dtype=torch.bool)
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

CORRECT = {
    "attention_scores": ATTENTION_SCORES,
    "causal_mask": CAUSAL_MASK,
    "padding_mask": PADDING_MASK,
    "masked_softmax": MASKED_SOFTMAX,
    "attention": ATTENTION,
}

S, C, P, M, A = "attention_scores", "causal_mask", "padding_mask", "masked_softmax", "attention"

ENTRIES = [
    # ---- attention_scores (attention calls it, so every wrong score also breaks attention) ----
    Entry("01-scores-no-scaling", "cascade",
          "attention_scores returns q @ k^T without dividing by sqrt(D); attention, which calls it, is correct",
          {S: patch(ATTENTION_SCORES, ("return scores / math.sqrt(d)", "return scores"))},
          (S, A)),
    Entry("01-scores-sqrt-of-seq-len", "cascade",
          "attention_scores divides by the square root of the key length Tk (k.shape[-2]) instead of sqrt(D)",
          {S: patch(ATTENTION_SCORES, ("d = q.shape[-1]", "d = k.shape[-2]"))},
          (S, A)),
    Entry("01-scores-precedence-d-half", "single",
          "attention_scores divides by d ** 1 / 2, which Python reads as (d ** 1) / 2 = D / 2, not sqrt(D)",
          {S: patch(ATTENTION_SCORES, ("return scores / math.sqrt(d)", "return scores / (d ** 1 / 2)"))},
          (S, A)),
    Entry("01-scores-k-dot-T", "raises",
          "attention_scores uses k.T, which reverses every dim of a batched k (not just the last two), so "
          "batched [B, H, T, D] inputs raise a shape error in the matmul",
          {S: patch(ATTENTION_SCORES, ("torch.matmul(q, k.transpose(-2, -1))", "q @ k.T"))},
          (S, A)),
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
    # ---- two mistakes at once ----
    Entry("01-double-no-scale-and-inverted-causal", "double",
          "two mistakes: attention_scores does not divide by sqrt(D), and causal_mask is inverted (True marks "
          "the future keys)",
          {S: patch(ATTENTION_SCORES, ("return scores / math.sqrt(d)", "return scores")),
           C: patch(CAUSAL_MASK, ("return torch.tril(ones, diagonal=k_len - q_len)",
                                  "return torch.triu(ones, diagonal=k_len - q_len + 1)"))},
          (S, C, A)),
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
          (S, M, A)),
    Entry("01-double-excludes-diagonal-and-padding-inverted", "double",
          "two mistakes: causal_mask excludes the diagonal (a query may not see itself), and padding_mask is "
          "inverted (padding becomes True)",
          {C: patch(CAUSAL_MASK, ("diagonal=k_len - q_len", "diagonal=k_len - q_len - 1")),
           P: patch(PADDING_MASK, ("keep = attention_mask != 0", "keep = attention_mask == 0"))},
          (C, P)),
]
