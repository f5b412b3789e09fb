"""07_real_model: apply_penalties, written from the notebook alone.

Conventions assumed (from the notebook's "重复：三种惩罚" section and 练习 5): c_j is the number of times token j occurs
in that row of ``generated`` (counted per row, every occurrence counts); a seen token's logit is divided by r when
it is > 0 and multiplied by r when it is <= 0, once per seen token (not once per occurrence); then
frequency_penalty * c_j and presence_penalty * 1[c_j > 0] are subtracted; unseen tokens are returned unchanged; the
result is a new [B, V] tensor of logits' dtype and the input ``logits`` is never modified; ``generated`` may be [B, 0].
The correct apply_penalties is kept in a07 (``APPLY_PENALTIES``), so that every 07 writer's CORRECT has it; every
other graded definition of 07 is f07's CORRECT, unchanged; each entry here lists only ``apply_penalties``, which
no other graded definition calls.
"""
from . import a07, f07
from .entry import Entry, patch

ASSIGNMENT = "07_real_model"
HEADER = f07.HEADER

AP = a07.APPLY_PENALTIES

CORRECT = {**f07.CORRECT, "apply_penalties": AP}

EX = ("apply_penalties",)

# Reusable edits of AP.
_SCATTER_NOT_ADD = ("    counts.scatter_add_(-1, generated, torch.ones_like(generated))\n",
                    "    counts.scatter_(-1, generated, 1)\n")
_CTRL_DIVIDE_ALL = ("    shrunk = torch.where(logits > 0, logits / repetition_penalty, logits * repetition_penalty)\n",
                    "    shrunk = logits / repetition_penalty\n")
_PRESENCE_TIMES_COUNT = ("    out = out - presence_penalty * seen.to(logits.dtype)\n",
                         "    out = out - presence_penalty * counts.to(logits.dtype)\n")
_REP_BLOCK = ("    shrunk = torch.where(logits > 0, logits / repetition_penalty, logits * repetition_penalty)\n"
              "    out = torch.where(seen, shrunk, logits)\n"
              "    out = out - frequency_penalty * counts.to(logits.dtype)\n"
              "    out = out - presence_penalty * seen.to(logits.dtype)\n")
_SUBTRACT_FIRST = (_REP_BLOCK,
                   "    out = logits - frequency_penalty * counts.to(logits.dtype)\n"
                   "    out = out - presence_penalty * seen.to(logits.dtype)\n"
                   "    shrunk = torch.where(out > 0, out / repetition_penalty, out * repetition_penalty)\n"
                   "    out = torch.where(seen, shrunk, out)\n")
_IN_PLACE = ("    shrunk = torch.where(logits > 0, logits / repetition_penalty, logits * repetition_penalty)\n"
             "    out = torch.where(seen, shrunk, logits)\n",
             "    out = logits\n"
             "    positive = logits > 0\n"
             "    out[seen & positive] /= repetition_penalty\n"
             "    out[seen & ~positive] *= repetition_penalty\n")

ENTRIES = [
    # ---------------- single mistakes ----------------
    Entry("g07-penalties-scatter-not-add", "single",
          "The counts are built with scatter_ (writing 1) instead of scatter_add_, so a token that occurs several "
          "times gets count 1: the frequency penalty is subtracted once per seen token instead of once per "
          "occurrence (c_j is capped at 1).",
          {"apply_penalties": patch(AP, _SCATTER_NOT_ADD)}, EX),
    Entry("g07-penalties-ctrl-divide-all", "single",
          "The repetition penalty divides every seen logit by r, the original CTRL formula, instead of dividing "
          "positive logits and multiplying non-positive ones by r: a seen negative logit moves toward 0 (becomes more "
          "likely) instead of more negative.",
          {"apply_penalties": patch(AP, _CTRL_DIVIDE_ALL)}, EX),
    Entry("g07-penalties-subtract-before-repetition", "single",
          "The order is reversed: frequency and presence penalties are subtracted first and the repetition penalty "
          "is applied afterwards, its sign test made on the already lowered logit, so a small positive logit pushed "
          "below 0 is multiplied by r instead of divided (and the subtracted amounts get scaled by r).",
          {"apply_penalties": patch(AP, _SUBTRACT_FIRST)}, EX),
    Entry("g07-penalties-repetition-per-occurrence-loop", "single",
          "The repetition penalty is applied in a Python loop over every token of each row, so a token that occurs "
          "k times is divided (or multiplied) by r k times (r**k) instead of once per seen token.",
          {"apply_penalties": patch(AP, ("    shrunk = torch.where(logits > 0, logits / repetition_penalty, logits * repetition_penalty)\n"
                                         "    out = torch.where(seen, shrunk, logits)\n",
                                         "    out = logits.clone()\n"
                                         "    for b in range(generated.shape[0]):\n"
                                         "        for tok in generated[b].tolist():\n"
                                         "            if out[b, tok] > 0:\n"
                                         "                out[b, tok] = out[b, tok] / repetition_penalty\n"
                                         "            else:\n"
                                         "                out[b, tok] = out[b, tok] * repetition_penalty\n"))}, EX),
    Entry("g07-penalties-bincount-whole-batch", "single",
          "The counts come from one torch.bincount over generated.flatten(), i.e. over all rows of the batch "
          "together, and this [V] count is broadcast to every row: each row is penalised for the tokens of the other "
          "rows too (and with summed counts) instead of counting only its own row.",
          {"apply_penalties": patch(AP, ("    counts = torch.zeros(logits.shape, dtype=torch.long, device=logits.device)\n"
                                         "    counts.scatter_add_(-1, generated, torch.ones_like(generated))\n",
                                         "    counts = torch.bincount(generated.flatten(), minlength=logits.shape[-1])\n"))}, EX),
    Entry("g07-penalties-modifies-input-logits", "single",
          "The repetition penalty is applied in place on the caller's logits (out = logits; out[mask] /= r; "
          "out[mask] *= r), so the input tensor passed in is changed; the returned values are right but the "
          "function must not modify its argument.",
          {"apply_penalties": patch(AP, _IN_PLACE)}, EX),
    Entry("g07-penalties-divide-multiply-swapped", "single",
          "The two repetition cases are swapped: a seen positive logit is multiplied by r and a seen negative one "
          "divided by r, so seen tokens become more likely instead of less.",
          {"apply_penalties": patch(AP, ("logits / repetition_penalty, logits * repetition_penalty)",
                                         "logits * repetition_penalty, logits / repetition_penalty)"))}, EX),
    Entry("g07-penalties-presence-times-count", "single",
          "The presence penalty is multiplied by the count c_j (like the frequency penalty) instead of being "
          "subtracted once per seen token regardless of how many times it occurs.",
          {"apply_penalties": patch(AP, _PRESENCE_TIMES_COUNT)}, EX),
    Entry("g07-penalties-float32-result", "single",
          "The frequency term uses counts.float() instead of counts in logits' dtype, so for bfloat16/float16 logits "
          "the subtraction promotes the result to float32: the returned tensor's dtype is not logits' dtype.",
          {"apply_penalties": patch(AP, ("    out = out - frequency_penalty * counts.to(logits.dtype)\n",
                                         "    out = out - frequency_penalty * counts.float()\n"))}, EX),
    Entry("g07-penalties-repetition-on-all-tokens", "single",
          "The repetition penalty is applied to every token of the row, not only to the tokens that occur in "
          "generated (the seen mask is left out of that step): unseen tokens' logits are divided/multiplied by r too.",
          {"apply_penalties": patch(AP, ("    out = torch.where(seen, shrunk, logits)\n",
                                         "    out = shrunk\n"))}, EX),
    Entry("g07-penalties-seen-means-repeated", "single",
          "A token counts as seen only when it occurs more than once (counts > 1, read as 'repeated') instead of at "
          "least once: tokens that occur exactly once get neither the repetition penalty nor the presence penalty.",
          {"apply_penalties": patch(AP, ("    seen = counts > 0\n", "    seen = counts > 1\n"))}, EX),
    Entry("g07-penalties-presence-on-every-token", "single",
          "The presence penalty is subtracted from every logit of the row (out - presence_penalty) instead of only "
          "from tokens with c_j > 0, so unseen tokens are lowered too.",
          {"apply_penalties": patch(AP, ("    out = out - presence_penalty * seen.to(logits.dtype)\n",
                                         "    out = out - presence_penalty\n"))}, EX),
    # ---------------- raises ----------------
    Entry("g07-penalties-float-counts-scatter-dtype", "raises",
          "The count tensor is made with torch.zeros_like(logits) (floating point) while the scatter_add_ source is "
          "torch.ones_like(generated) (int64): scatter_add_ raises a RuntimeError because self and src dtypes differ.",
          {"apply_penalties": patch(AP, ("    counts = torch.zeros(logits.shape, dtype=torch.long, device=logits.device)\n",
                                         "    counts = torch.zeros_like(logits)\n"))}, EX),
    Entry("g07-penalties-bincount-2d", "raises",
          "torch.bincount is called directly on the 2-D generated [B, n]; bincount only accepts a 1-D tensor, so it "
          "raises a RuntimeError on every input (no per-row handling).",
          {"apply_penalties": patch(AP, ("    counts = torch.zeros(logits.shape, dtype=torch.long, device=logits.device)\n"
                                         "    counts.scatter_add_(-1, generated, torch.ones_like(generated))\n",
                                         "    counts = torch.bincount(generated, minlength=logits.shape[-1])\n"))}, EX),
    Entry("g07-penalties-one-hot-no-num-classes", "raises",
          "The counts are F.one_hot(generated).sum(dim=1) without num_classes=V, so they have max(generated) + 1 "
          "columns instead of V: combining them with the [B, V] logits raises a shape error whenever the largest "
          "token id is below V - 1 (a single column, when every id is 0, broadcasts to all V tokens instead; and one_hot "
          "raises outright on an empty generated).",
          {"apply_penalties": patch(AP, ("    counts = torch.zeros(logits.shape, dtype=torch.long, device=logits.device)\n"
                                         "    counts.scatter_add_(-1, generated, torch.ones_like(generated))\n",
                                         "    counts = F.one_hot(generated).sum(dim=1)\n"))}, EX),
    # ---------------- doubles ----------------
    Entry("g07-penalties-scatter-not-add-and-subtract-first", "double",
          "Two mistakes: counts are built with scatter_ instead of scatter_add_ (every seen token gets count 1, so "
          "the frequency penalty ignores how many times it occurs), and the frequency/presence penalties are "
          "subtracted before the repetition penalty, whose sign test then uses the lowered logit.",
          {"apply_penalties": patch(AP, _SCATTER_NOT_ADD, _SUBTRACT_FIRST)}, EX),
    Entry("g07-penalties-ctrl-divide-all-and-presence-times-count", "double",
          "Two mistakes: the repetition penalty divides every seen logit by r (CTRL), so seen negative logits "
          "rise toward 0 instead of being multiplied by r; and the presence penalty is multiplied by the count c_j "
          "instead of being subtracted once per seen token.",
          {"apply_penalties": patch(AP, _CTRL_DIVIDE_ALL, _PRESENCE_TIMES_COUNT)}, EX),
    Entry("g07-penalties-in-place-and-presence-on-every-token", "double",
          "Two mistakes: the repetition penalty is applied in place on the caller's logits (the input tensor is "
          "modified), and the presence penalty is subtracted from every logit of the row instead of only from seen "
          "tokens.",
          {"apply_penalties": patch(AP, _IN_PLACE, ("    out = out - presence_penalty * seen.to(logits.dtype)\n",
                                                    "    out = out - presence_penalty\n"))}, EX),
]
