"""07_real_model: min_p_filter, written from the notebook alone.

Conventions assumed (from the notebook's "min-p：门槛跟着把握走" section and 练习 6): ``probs`` is [B, V] and every row
is a distribution; each row is treated on its own: its threshold is ``min_p`` times that row's largest probability;
a token is kept when its probability is >= the threshold (a token exactly equal to the threshold is kept, so with
min_p = 1 the most likely token survives), every other token is set to exactly 0; each row is then renormalised to
sum to 1 by dividing by its own kept sum; the result is a new [B, V] tensor of probs' dtype and the input ``probs``
is never modified; min_p is in [0, 1] and min_p = 0 removes nothing. The correct min_p_filter is kept in a07
(``MIN_P_FILTER``), so that every 07 writer's CORRECT has it; every other graded definition of 07 is g07's CORRECT,
unchanged; each entry here lists only ``min_p_filter``, which no other graded definition calls.
"""
from . import a07, g07
from .entry import Entry, patch

ASSIGNMENT = "07_real_model"
HEADER = g07.HEADER

MIN_P = a07.MIN_P_FILTER

CORRECT = {**g07.CORRECT, "min_p_filter": MIN_P}

EX = ("min_p_filter",)

# Reusable edits of MIN_P.
_LARGEST = "    largest = probs.max(dim=-1, keepdim=True).values\n"
_GLOBAL_MAX = (_LARGEST, "    largest = probs.max()\n")
_STRICT = ("    keep = probs >= threshold\n", "    keep = probs > threshold\n")
_NORMALISE = ("    return kept / kept.sum(dim=-1, keepdim=True)\n",)
_NO_RENORMALISE = (_NORMALISE[0], "    return kept\n")
_WHERE = "    kept = torch.where(keep, probs, torch.zeros_like(probs))\n"
_IN_PLACE = (_WHERE + _NORMALISE[0],
             "    probs[~keep] = 0\n"
             "    return probs / probs.sum(dim=-1, keepdim=True)\n")

ENTRIES = [
    # ---------------- single mistakes ----------------
    Entry("h07-minp-global-max", "single",
          "The largest probability is taken over the whole tensor (probs.max(), one scalar for the batch) instead of "
          "per row, so every row's threshold is min_p times the batch-wide maximum: a row whose own maximum is smaller "
          "loses tokens it should keep (and can even lose all of them, giving NaN).",
          {"min_p_filter": patch(MIN_P, _GLOBAL_MAX)}, EX),
    Entry("h07-minp-max-over-batch-dim", "single",
          "The maximum is taken over dim=0 (down the batch, per token column) instead of over the last dim (per row): "
          "each token j is compared with min_p times the largest probability of column j across rows, not with "
          "min_p times its own row's largest probability.",
          {"min_p_filter": patch(MIN_P, (_LARGEST, "    largest = probs.max(dim=0, keepdim=True).values\n"))}, EX),
    Entry("h07-minp-strict-greater", "single",
          "The keep test is strict (probs > threshold) instead of >=, so tokens whose probability equals the "
          "threshold are removed; with min_p = 1 even the most likely token is removed and the row becomes 0/0 = NaN.",
          {"min_p_filter": patch(MIN_P, _STRICT)}, EX),
    Entry("h07-minp-no-renormalise", "single",
          "After zeroing the tokens below the threshold the row is returned as is, not renormalised: the rows sum to "
          "less than 1 whenever some token was removed.",
          {"min_p_filter": patch(MIN_P, _NO_RENORMALISE)}, EX),
    Entry("h07-minp-normalise-whole-batch", "single",
          "The renormalisation divides by kept.sum() over the whole [B, V] tensor instead of each row's own sum "
          "(dim=-1, keepdim=True): with more than one row, every row sums to its share of the batch total instead of 1.",
          {"min_p_filter": patch(MIN_P, (_NORMALISE[0], "    return kept / kept.sum()\n"))}, EX),
    Entry("h07-minp-absolute-threshold", "single",
          "The threshold is min_p itself (keep p_j >= min_p, an absolute cut-off) instead of min_p times the row's "
          "largest probability, so the cut-off does not scale with the row's maximum; a row whose maximum is below "
          "min_p loses every token (NaN).",
          {"min_p_filter": patch(MIN_P, (_LARGEST + "    threshold = min_p * largest\n",
                                         "    threshold = min_p\n"))}, EX),
    Entry("h07-minp-softmax-renormalise", "single",
          "The removed tokens are set to -inf and the row is passed through softmax, as if probs were logits: the "
          "removed tokens do become exactly 0, but the kept ones come out as softmax(p) = exp(p_j) / sum exp(p_k) "
          "instead of p_j divided by the kept sum (wrong even with min_p = 0, where softmax flattens the row).",
          {"min_p_filter": patch(MIN_P, (_WHERE + _NORMALISE[0],
                                         "    kept = probs.masked_fill(~keep, float(\"-inf\"))\n"
                                         "    return torch.softmax(kept, dim=-1)\n"))}, EX),
    Entry("h07-minp-masked-fill-keep-mask", "single",
          "masked_fill is given the keep mask (probs >= threshold) instead of the drop mask, so the tokens that should "
          "be kept are set to 0 and the ones below the threshold survive; with min_p = 0 every token is zeroed "
          "(0/0 = NaN).",
          {"min_p_filter": patch(MIN_P, (_WHERE, "    kept = probs.masked_fill(keep, 0.0)\n"))}, EX),
    Entry("h07-minp-modifies-input", "single",
          "The tokens below the threshold are zeroed in place on the caller's tensor (probs[~keep] = 0) before "
          "renormalising, so the probs passed in is changed; the returned values are right but the function must not "
          "modify its argument.",
          {"min_p_filter": patch(MIN_P, _IN_PLACE)}, EX),
    Entry("h07-minp-float-mask-dtype", "single",
          "The filter multiplies probs by keep.float() (a float32 0/1 mask), so for bfloat16/float16 probs the product "
          "is promoted to float32: the returned tensor's dtype is not probs' dtype (the values are right).",
          {"min_p_filter": patch(MIN_P, (_WHERE, "    kept = probs * keep.float()\n"))}, EX),
    Entry("h07-minp-sorted-order", "single",
          "Written like top-p: the row is sorted in descending order, the threshold is min_p times the first sorted "
          "value and the sorted values are filtered and renormalised, but the result is never scattered back to the "
          "original token positions, so the output is in sorted order instead of token order whenever a row is not "
          "already sorted.",
          {"min_p_filter": patch(MIN_P, (_LARGEST + "    threshold = min_p * largest\n"
                                         "    keep = probs >= threshold\n" + _WHERE,
                                         "    sorted_probs, _ = torch.sort(probs, dim=-1, descending=True)\n"
                                         "    threshold = min_p * sorted_probs[:, :1]\n"
                                         "    keep = sorted_probs >= threshold\n"
                                         "    kept = torch.where(keep, sorted_probs, torch.zeros_like(sorted_probs))\n"))},
          EX),
    # ---------------- raises ----------------
    Entry("h07-minp-max-no-keepdim", "raises",
          "The row maximum is taken without keepdim (probs.max(dim=-1).values has shape [B]), so comparing [B, V] "
          "probs with the [B] threshold broadcasts it along the token axis: it raises a size-mismatch RuntimeError "
          "whenever B != V and B > 1 (B == 1 happens to work; B == V silently compares token j with row j's threshold).",
          {"min_p_filter": patch(MIN_P, (_LARGEST, "    largest = probs.max(dim=-1).values\n"))}, EX),
    Entry("h07-minp-max-tuple-no-values", "raises",
          "probs.max(dim=-1, keepdim=True) returns a (values, indices) named tuple and .values is left out, so "
          "min_p * largest multiplies a tuple by a float and raises a TypeError on every input.",
          {"min_p_filter": patch(MIN_P, (_LARGEST, "    largest = probs.max(dim=-1, keepdim=True)\n"))}, EX),
    # ---------------- doubles ----------------
    Entry("h07-minp-global-max-and-strict-greater", "double",
          "Two mistakes: the largest probability is taken over the whole batch (probs.max()) instead of per row, so "
          "each row's threshold uses the batch-wide maximum; and the keep test is strict (>) instead of >=, so tokens "
          "exactly at the threshold are removed.",
          {"min_p_filter": patch(MIN_P, _GLOBAL_MAX, _STRICT)}, EX),
    Entry("h07-minp-modifies-input-and-no-renormalise", "double",
          "Two mistakes: the tokens below the threshold are zeroed in place on the caller's probs (probs[~keep] = 0), "
          "so the input tensor is modified (and returned itself); and the row is not renormalised afterwards, so it "
          "sums to less than 1 whenever some token was removed.",
          {"min_p_filter": patch(MIN_P, (_WHERE + _NORMALISE[0], "    probs[~keep] = 0\n    return probs\n"))}, EX),
]
