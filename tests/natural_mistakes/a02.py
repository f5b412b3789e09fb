"""02_multi_head: split_heads, merge_heads, MultiHeadAttention."""
from . import a01
from .entry import Entry, patch

ASSIGNMENT = "02_multi_head"

HEADER = a01.HEADER

SPLIT_HEADS = '''
def split_heads(x: torch.Tensor, num_heads: int) -> torch.Tensor:
    """[B, T, H*D] -> [B, H, T, D]; head h gets features h*D ... (h+1)*D - 1 of every token."""
    batch, seq, width = x.shape
    head_dim = width // num_heads
    x = x.reshape(batch, seq, num_heads, head_dim)
    return x.transpose(1, 2)
'''

MERGE_HEADS = '''
def merge_heads(x: torch.Tensor) -> torch.Tensor:
    """[B, H, T, D] -> [B, T, H*D]: the inverse of split_heads."""
    batch, heads, seq, head_dim = x.shape
    x = x.transpose(1, 2)
    return x.reshape(batch, seq, heads * head_dim)
'''

MHA = '''
class MultiHeadAttention(nn.Module):
    """Multi-head self-attention: H heads of width D = hidden_size / H, concatenated, then o_proj."""

    def __init__(self, hidden_size: int, num_heads: int):
        super().__init__()
        self.hidden_size = hidden_size
        self.num_heads = num_heads
        self.q_proj = nn.Linear(hidden_size, hidden_size, bias=False)
        self.k_proj = nn.Linear(hidden_size, hidden_size, bias=False)
        self.v_proj = nn.Linear(hidden_size, hidden_size, bias=False)
        self.o_proj = nn.Linear(hidden_size, hidden_size, bias=False)

    def forward(self, x: torch.Tensor, attention_mask: torch.Tensor | None = None,
                causal: bool = True) -> torch.Tensor:
        seq = x.shape[1]
        q = split_heads(self.q_proj(x), self.num_heads)
        k = split_heads(self.k_proj(x), self.num_heads)
        v = split_heads(self.v_proj(x), self.num_heads)
        mask = None
        if causal:
            mask = causal_mask(seq)
        if attention_mask is not None:
            pad = padding_mask(attention_mask)
            mask = pad if mask is None else mask & pad
        out, _ = attention(q, k, v, mask)
        return self.o_proj(merge_heads(out))
'''

CORRECT = {**a01.CORRECT, "split_heads": SPLIT_HEADS, "merge_heads": MERGE_HEADS, "MultiHeadAttention": MHA}

SH, MH, MHA_ = "split_heads", "merge_heads", "MultiHeadAttention"

OWN_SCORES_MHA = patch(MHA, ("        out, _ = attention(q, k, v, mask)\n",
                             "        scores = q @ k.transpose(-2, -1) / math.sqrt(self.hidden_size)\n"
                             "        weights = masked_softmax(scores, mask)\n"
                             "        out = weights @ v\n"))

MASKED_FILL_NOT_ASSIGNED = patch(MHA, ("        out, _ = attention(q, k, v, mask)\n",
                                       "        scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])\n"
                                       "        if mask is not None:\n"
                                       "            scores.masked_fill(~mask, float(\"-inf\"))\n"
                                       "        out = torch.softmax(scores, dim=-1) @ v\n"))

ENTRIES = [
    # ---- split_heads (MultiHeadAttention calls it) ----
    Entry("02-split-direct-view", "cascade",
          "split_heads reshapes [B, T, H*D] straight to [B, H, T, D] without the transpose, so heads get the "
          "features of the wrong tokens (memory is cut in the wrong place); MultiHeadAttention is correct",
          {SH: '''
def split_heads(x: torch.Tensor, num_heads: int) -> torch.Tensor:
    """[B, T, H*D] -> [B, H, T, D]; head h gets features h*D ... (h+1)*D - 1 of every token."""
    batch, seq, width = x.shape
    return x.reshape(batch, num_heads, seq, width // num_heads)
'''},
          (SH, MHA_)),
    Entry("02-split-no-transpose", "single",
          "split_heads cuts the features into heads but forgets transpose(1, 2), returning [B, T, H, D] "
          "instead of [B, H, T, D]",
          {SH: patch(SPLIT_HEADS, ("    return x.transpose(1, 2)\n", "    return x\n"))},
          (SH, MHA_)),
    Entry("02-split-head-dim-first", "single",
          "split_heads reshapes to [B, T, D, H] (head_dim before num_heads) before the transpose, so each "
          "'head' takes every H-th feature instead of a contiguous block of D features",
          {SH: patch(SPLIT_HEADS, ("x = x.reshape(batch, seq, num_heads, head_dim)\n    return x.transpose(1, 2)",
                                   "x = x.reshape(batch, seq, head_dim, num_heads)\n    return x.permute(0, 3, 1, 2)"))},
          (SH, MHA_)),
    Entry("02-split-hardcoded-64", "raises",
          "split_heads hard-codes head_dim = 64 (from the demo) in the view, which fails for any other width "
          "and cannot split e.g. a width of 4 into 2 heads",
          {SH: '''
def split_heads(x: torch.Tensor, num_heads: int) -> torch.Tensor:
    """[B, T, H*D] -> [B, H, T, D]; head h gets features h*D ... (h+1)*D - 1 of every token."""
    return x.view(x.shape[0], -1, num_heads, 64).transpose(1, 2)
'''},
          (SH, MHA_)),
    # ---- merge_heads ----
    Entry("02-merge-no-transpose", "cascade",
          "merge_heads reshapes [B, H, T, D] to [B, T, H*D] without transposing first, so each row mixes "
          "several tokens of one head; MultiHeadAttention itself is correct",
          {MH: patch(MERGE_HEADS, ("    x = x.transpose(1, 2)\n", ""))},
          (MH, MHA_)),
    Entry("02-merge-view-noncontiguous", "raises",
          "merge_heads calls .view on the transposed (non-contiguous) tensor, which raises a RuntimeError; it "
          "needs reshape or contiguous().view",
          {MH: patch(MERGE_HEADS, ("return x.reshape(batch, seq, heads * head_dim)", "return x.view(batch, seq, heads * head_dim)"))},
          (MH, MHA_)),
    Entry("02-merge-dim-major", "cascade",
          "merge_heads permutes to [B, T, D, H] before flattening, so each token's features are interleaved "
          "dim by dim across heads instead of head 0's D features, then head 1's, ...",
          {MH: patch(MERGE_HEADS, ("    x = x.transpose(1, 2)\n", "    x = x.permute(0, 2, 3, 1)\n"))},
          (MH, MHA_)),
    # ---- MultiHeadAttention ----
    Entry("02-mha-always-causal", "single",
          "MultiHeadAttention ignores causal=False and always applies the causal mask",
          {MHA_: patch(MHA, ("        if causal:\n            mask = causal_mask(seq)\n",
                             "        mask = causal_mask(seq)\n"))},
          (MHA_,)),
    Entry("02-mha-never-causal", "single",
          "MultiHeadAttention never builds the causal mask (causal=True is ignored), so every token sees the "
          "future",
          {MHA_: patch(MHA, ("        if causal:\n            mask = causal_mask(seq)\n", ""))},
          (MHA_,)),
    Entry("02-mha-ignores-padding", "single",
          "MultiHeadAttention never uses attention_mask, so padding tokens are attended to",
          {MHA_: patch(MHA, ("        if attention_mask is not None:\n            pad = padding_mask(attention_mask)\n"
                             "            mask = pad if mask is None else mask & pad\n", ""))},
          (MHA_,)),
    Entry("02-mha-or-masks", "single",
          "MultiHeadAttention combines the causal and padding masks with | instead of &, so a key is visible "
          "if either condition allows it (padding and the future leak in)",
          {MHA_: patch(MHA, ("mask = pad if mask is None else mask & pad", "mask = pad if mask is None else mask | pad"))},
          (MHA_,)),
    Entry("02-mha-no-o-proj", "single",
          "MultiHeadAttention returns the merged heads without applying o_proj",
          {MHA_: patch(MHA, ("return self.o_proj(merge_heads(out))", "return merge_heads(out)"))},
          (MHA_,)),
    Entry("02-mha-scale-by-hidden", "single",
          "MultiHeadAttention computes its own scores and divides by sqrt(hidden_size) instead of sqrt(D) of "
          "each head",
          {MHA_: OWN_SCORES_MHA},
          (MHA_,)),
    Entry("02-mha-kproj-for-values", "single",
          "MultiHeadAttention computes the values with k_proj instead of v_proj (copy-paste), so v_proj is unused",
          {MHA_: patch(MHA, ("v = split_heads(self.v_proj(x), self.num_heads)", "v = split_heads(self.k_proj(x), self.num_heads)"))},
          (MHA_,)),
    Entry("02-mha-bias-true", "single",
          "MultiHeadAttention builds its projections with nn.Linear's default bias=True, adding q/k/v/o_proj.bias "
          "parameters that a Hugging Face state dict does not have",
          {MHA_: MHA.replace(", bias=False)", ")")},
          (MHA_,)),
    Entry("02-mha-raw-attention-mask", "raises",
          "MultiHeadAttention combines the raw [B, T] 0/1 attention_mask with the causal mask instead of converting "
          "it with padding_mask, which fails to broadcast (or misaligns batch with queries)",
          {MHA_: patch(MHA, ("            pad = padding_mask(attention_mask)\n", "            pad = attention_mask.bool()\n"))},
          (MHA_,)),
    Entry("02-mha-masked-fill-not-assigned", "single",
          "MultiHeadAttention writes its own masking with scores.masked_fill(...) but never assigns the result, so "
          "neither the causal nor the padding mask has any effect",
          {MHA_: MASKED_FILL_NOT_ASSIGNED},
          (MHA_,)),
    Entry("02-mha-returns-tuple", "raises",
          "MultiHeadAttention.forward returns the tuple (output, weights) instead of the output tensor",
          {MHA_: patch(MHA, ("        out, _ = attention(q, k, v, mask)\n        return self.o_proj(merge_heads(out))",
                             "        out, weights = attention(q, k, v, mask)\n        return self.o_proj(merge_heads(out)), weights"))},
          (MHA_,)),
    Entry("02-mha-causal-mask-from-batch", "raises",
          "MultiHeadAttention builds the causal mask from x.shape[0] (the batch size) instead of the sequence "
          "length, so the mask has the wrong size",
          {MHA_: patch(MHA, ("seq = x.shape[1]", "seq = x.shape[0]"))},
          (MHA_,)),
    # ---- two mistakes ----
    Entry("02-double-merge-no-transpose-and-no-o-proj", "double",
          "two mistakes: merge_heads skips the transpose before reshaping, and MultiHeadAttention forgets o_proj",
          {MH: patch(MERGE_HEADS, ("    x = x.transpose(1, 2)\n", "")),
           MHA_: patch(MHA, ("return self.o_proj(merge_heads(out))", "return merge_heads(out)"))},
          (MH, MHA_)),
    Entry("02-double-split-direct-view-and-always-causal", "double",
          "two mistakes: split_heads views straight to [B, H, T, D] without the transpose, and "
          "MultiHeadAttention ignores causal=False",
          {SH: '''
def split_heads(x: torch.Tensor, num_heads: int) -> torch.Tensor:
    """[B, T, H*D] -> [B, H, T, D]; head h gets features h*D ... (h+1)*D - 1 of every token."""
    batch, seq, width = x.shape
    return x.view(batch, num_heads, seq, width // num_heads)
''',
           MHA_: patch(MHA, ("        if causal:\n            mask = causal_mask(seq)\n",
                             "        mask = causal_mask(seq)\n"))},
          (SH, MHA_)),
    Entry("02-double-mha-ignores-padding-and-scale-hidden", "double",
          "two mistakes in MultiHeadAttention: it scales its own scores by 1/sqrt(hidden_size) instead of "
          "1/sqrt(D), and it never uses attention_mask",
          {MHA_: patch(OWN_SCORES_MHA, ("        if attention_mask is not None:\n            pad = padding_mask(attention_mask)\n"
                                        "            mask = pad if mask is None else mask & pad\n", ""))},
          (MHA_,)),
    # A later set, written from the notebooks alone.
    Entry("02-double-merge-flatten-1-and-k-from-q-proj", "double",
          "two mistakes: merge_heads flattens from dim 1 (flatten(1)) instead of dim 2, returning [B, T·H·D] "
          "instead of [B, T, H·D], and MultiHeadAttention computes the keys with q_proj instead of k_proj",
          {MH: patch(MERGE_HEADS, ("return x.reshape(batch, seq, heads * head_dim)", "return x.flatten(1)")),
           MHA_: patch(MHA, ("k = split_heads(self.k_proj(x), self.num_heads)", "k = split_heads(self.q_proj(x), self.num_heads)"))},
          (MH, MHA_)),
    Entry("02-double-split-transpose-last-and-padding-replaces-causal", "double",
          "two mistakes: split_heads swaps the last two dims (transpose(-2, -1)) instead of dims 1 and 2, "
          "returning [B, T, D, H] instead of [B, H, T, D], and MultiHeadAttention replaces the causal mask with "
          "the padding mask when attention_mask is given instead of combining them with &",
          {SH: patch(SPLIT_HEADS, ("return x.transpose(1, 2)", "return x.transpose(-2, -1)")),
           MHA_: patch(MHA, ("mask = pad if mask is None else mask & pad", "mask = pad"))},
          (SH, MHA_)),
    Entry("02-double-merge-transpose-last-and-q-prescaled", "double",
          "two mistakes: merge_heads swaps the last two dims (transpose(-2, -1), [B, H, D, T]) before reshaping "
          "to [B, T, H·D] instead of moving the heads after time, and MultiHeadAttention divides q by sqrt(D) "
          "before calling attention, which divides the scores by sqrt(D) again",
          {MH: patch(MERGE_HEADS, ("x = x.transpose(1, 2)", "x = x.transpose(-2, -1)")),
           MHA_: patch(MHA, ("        q = split_heads(self.q_proj(x), self.num_heads)\n",
                             "        q = split_heads(self.q_proj(x), self.num_heads)\n"
                             "        q = q / math.sqrt(q.shape[-1])\n"))},
          (MH, MHA_)),
    # A held-out set, written from the notebooks alone.
    Entry("02-ho-double-split-transpose-first-and-causal-inverted", "double",
          "two mistakes: split_heads transposes [B, T, H*D] to [B, H*D, T] first and then reshapes to "
          "[B, H, T, D], which cuts the feature-major memory in the wrong places so each head's rows mix "
          "tokens and features; and MultiHeadAttention tests `if not causal`, applying the causal mask only "
          "when causal=False and none when causal=True",
          {SH: '''
def split_heads(x: torch.Tensor, num_heads: int) -> torch.Tensor:
    """[B, T, H*D] -> [B, H, T, D]; head h gets features h*D ... (h+1)*D - 1 of every token."""
    batch, seq, width = x.shape
    head_dim = width // num_heads
    return x.transpose(1, 2).reshape(batch, num_heads, seq, head_dim)
''',
           MHA_: patch(MHA, ("        if causal:\n", "        if not causal:\n"))},
          (SH, MHA_)),
    Entry("02-ho-double-merge-reshape-first-and-padding-negated", "double",
          "two mistakes: merge_heads reshapes [B, H, T, D] to [B, H*D, T] first and transposes afterwards, so each "
          "token's merged row holds values from other positions instead of its own heads' D features; and "
          "MultiHeadAttention negates the padding mask (~padding_mask(...)), so it attends only to the padding "
          "positions",
          {MH: '''
def merge_heads(x: torch.Tensor) -> torch.Tensor:
    """[B, H, T, D] -> [B, T, H*D]: the inverse of split_heads."""
    batch, heads, seq, head_dim = x.shape
    return x.reshape(batch, heads * head_dim, seq).transpose(1, 2)
''',
           MHA_: patch(MHA, ("pad = padding_mask(attention_mask)", "pad = ~padding_mask(attention_mask)"))},
          (MH, MHA_)),
    Entry("02-ho-double-split-size-not-count-and-padding-elif", "double",
          "two mistakes: split_heads cuts the features with x.split(num_heads, dim=-1), whose argument is the size "
          "of each piece, not the number of pieces, so it stacks D pieces of width H into [B, D, T, H] instead of "
          "H heads of width D; and MultiHeadAttention uses the padding mask only in an elif after `if causal`, so "
          "with causal=True the attention_mask is ignored",
          {SH: '''
def split_heads(x: torch.Tensor, num_heads: int) -> torch.Tensor:
    """[B, T, H*D] -> [B, H, T, D]; head h gets features h*D ... (h+1)*D - 1 of every token."""
    return torch.stack(x.split(num_heads, dim=-1), dim=1)
''',
           MHA_: patch(MHA, ("        if attention_mask is not None:\n"
                             "            pad = padding_mask(attention_mask)\n"
                             "            mask = pad if mask is None else mask & pad\n",
                             "        elif attention_mask is not None:\n"
                             "            mask = padding_mask(attention_mask)\n"))},
          (SH, MHA_)),
]
