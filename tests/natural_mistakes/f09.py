"""09_flash_attention: flash_attention_forward, flash_attention_backward, FlashAttention, a second writer's set, written from the notebook alone.

Conventions assumed (from the notebook): q [..., Tq, D], k [..., Tk, D], v [..., Tk, Dv] with equal leading dims,
scores q kᵀ/√D with D = q.shape[-1]; causal query i sits at position Tk - Tq + i and sees keys j <= that; rows that
see no key (causal, Tq > Tk) give o = 0 and lse = -inf; o and lse are in q's dtype. The forward loops query tiles
outside and key tiles inside (break past the diagonal); the backward loops key tiles outside and query tiles inside
(continue over tiles wholly masked). CORRECT keeps m and ℓ as [..., rows, 1]. ``FlashAttention`` uses the default
16 × 16 tiles and saves q, k, v, o and lse, so every mistake in the forward or the backward also fails it; a
mistake that changes only an input in place lists what its own calls really change.
"""
from .entry import Entry, patch

ASSIGNMENT = "09_flash_attention"
HEADER = "import math\nimport torch\n"

CORRECT = {
    "attention_scores": '''def attention_scores(q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    """q [..., Tq, D] · k [..., Tk, D] -> scores [..., Tq, Tk], divided by sqrt(D)."""
    return torch.matmul(q, k.transpose(-1, -2)) * (1.0 / math.sqrt(q.size(-1)))
''',
    "causal_mask": '''def causal_mask(q_len: int, k_len: int | None = None, window: int | None = None) -> torch.Tensor:
    """bool [q_len, k_len], True = may attend; query i is at position k_len - q_len + i."""
    k_len = q_len if k_len is None else k_len
    pos = torch.arange(k_len - q_len, k_len).view(-1, 1)
    keys = torch.arange(k_len).view(1, -1)
    allowed = keys <= pos
    if window is not None:
        allowed &= keys > pos - window
    return allowed
''',
    "masked_softmax": '''def masked_softmax(scores: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
    """Softmax over the last dim; masked entries get 0; a fully masked row is all zeros."""
    if mask is None:
        return scores.softmax(dim=-1)
    filled = scores.masked_fill(~mask, float("-inf"))
    row_max = filled.amax(dim=-1, keepdim=True)
    row_max = row_max.masked_fill(row_max == float("-inf"), 0.0)
    e = torch.exp(filled - row_max)
    total = e.sum(dim=-1, keepdim=True)
    return torch.where(total > 0, e / total.clamp_min(torch.finfo(scores.dtype).tiny), torch.zeros_like(e))
''',
    "attention": '''def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
              mask: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """(weights @ v, weights) for softmax attention with an optional bool mask (True = may attend)."""
    weights = masked_softmax(attention_scores(q, k), mask)
    return weights @ v, weights
''',
    "flash_attention_forward": '''def flash_attention_forward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False,
                            block_q: int = 16, block_k: int = 16) -> tuple[torch.Tensor, torch.Tensor]:
    """Softmax attention one [block_q, block_k] tile of scores at a time; returns (o, lse)."""
    q_len, d = q.shape[-2], q.shape[-1]
    k_len = k.shape[-2]
    scale = 1.0 / math.sqrt(d)
    offset = k_len - q_len
    neg_inf = float("-inf")
    o = q.new_zeros(*q.shape[:-1], v.shape[-1])
    lse = q.new_full(q.shape[:-1], neg_inf)
    for q_start in range(0, q_len, block_q):
        q_end = min(q_start + block_q, q_len)
        q_tile = q[..., q_start:q_end, :]
        m = q_tile.new_full((*q_tile.shape[:-1], 1), neg_inf)
        l = q_tile.new_zeros((*q_tile.shape[:-1], 1))
        acc = q_tile.new_zeros((*q_tile.shape[:-1], v.shape[-1]))
        for k_start in range(0, k_len, block_k):
            if causal and k_start > offset + q_end - 1:
                break
            k_end = min(k_start + block_k, k_len)
            s = (q_tile @ k[..., k_start:k_end, :].mT) * scale
            if causal:
                rows = torch.arange(q_start, q_end, device=q.device).unsqueeze(1) + offset
                cols = torch.arange(k_start, k_end, device=q.device).unsqueeze(0)
                s = s.masked_fill(cols > rows, neg_inf)
            m_new = torch.maximum(m, s.amax(dim=-1, keepdim=True))
            shift = m_new.masked_fill(m_new == neg_inf, 0.0)
            p = torch.exp(s - shift)
            alpha = torch.exp(m - shift)
            l = l * alpha + p.sum(dim=-1, keepdim=True)
            acc = acc * alpha + p @ v[..., k_start:k_end, :]
            m = m_new
        seen = l > 0
        o[..., q_start:q_end, :] = torch.where(seen, acc / torch.where(seen, l, torch.ones_like(l)), 0.0)
        lse[..., q_start:q_end] = (m + torch.log(l)).squeeze(-1)
    return o, lse
''',
    "flash_attention_backward": '''def flash_attention_backward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, o: torch.Tensor, lse: torch.Tensor,
                             do: torch.Tensor, causal: bool = False, block_q: int = 16,
                             block_k: int = 16) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(dq, dk, dv) of o = softmax(q kᵀ/√D) v for the upstream gradient do, recomputing P tile by tile from lse."""
    q_len, d = q.shape[-2], q.shape[-1]
    k_len = k.shape[-2]
    scale = 1.0 / math.sqrt(d)
    offset = k_len - q_len
    neg_inf = float("-inf")
    dq, dk, dv = torch.zeros_like(q), torch.zeros_like(k), torch.zeros_like(v)
    delta = (do * o).sum(dim=-1, keepdim=True)
    shift = lse.masked_fill(lse == neg_inf, 0.0).unsqueeze(-1)
    for k_start in range(0, k_len, block_k):
        k_end = min(k_start + block_k, k_len)
        k_tile, v_tile = k[..., k_start:k_end, :], v[..., k_start:k_end, :]
        dk_tile, dv_tile = torch.zeros_like(k_tile), torch.zeros_like(v_tile)
        for q_start in range(0, q_len, block_q):
            q_end = min(q_start + block_q, q_len)
            if causal and k_start > offset + q_end - 1:
                continue
            q_tile, do_tile = q[..., q_start:q_end, :], do[..., q_start:q_end, :]
            s = (q_tile @ k_tile.mT) * scale
            if causal:
                rows = torch.arange(q_start, q_end, device=q.device).unsqueeze(1) + offset
                cols = torch.arange(k_start, k_end, device=q.device).unsqueeze(0)
                s = s.masked_fill(cols > rows, neg_inf)
            p = torch.exp(s - shift[..., q_start:q_end, :])
            dv_tile = dv_tile + p.mT @ do_tile
            dp = do_tile @ v_tile.mT
            ds = p * (dp - delta[..., q_start:q_end, :])
            dq[..., q_start:q_end, :] += (ds @ k_tile) * scale
            dk_tile = dk_tile + (ds.mT @ q_tile) * scale
        dk[..., k_start:k_end, :] = dk_tile
        dv[..., k_start:k_end, :] = dv_tile
    return dq, dk, dv
''',
    "FlashAttention": '''class FlashAttention(torch.autograd.Function):
    """FlashAttention.apply(q, k, v, causal=False) -> o; saves q, k, v, o and lse, recomputes P in backward."""

    @staticmethod
    def forward(ctx, q, k, v, causal=False):
        o, lse = flash_attention_forward(q, k, v, causal)
        ctx.save_for_backward(q, k, v, o, lse)
        ctx.causal = causal
        return o

    @staticmethod
    def backward(ctx, do):
        q, k, v, o, lse = ctx.saved_tensors
        dq, dk, dv = flash_attention_backward(q, k, v, o, lse, do, ctx.causal)
        return dq, dk, dv, None
''',
}
C = CORRECT
FWD, BWD, FA = "flash_attention_forward", "flash_attention_backward", "FlashAttention"

# Forward pieces reused by the doubles.
_FWD_MASK_NO_OFFSET = patch(C[FWD], (
    "rows = torch.arange(q_start, q_end, device=q.device).unsqueeze(1) + offset\n                cols = torch.arange(k_start, k_end",
    "rows = torch.arange(q_start, q_end, device=q.device).unsqueeze(1)\n                cols = torch.arange(k_start, k_end"))
_BWD_MASK_NO_OFFSET = patch(C[BWD], (
    "rows = torch.arange(q_start, q_end, device=q.device).unsqueeze(1) + offset",
    "rows = torch.arange(q_start, q_end, device=q.device).unsqueeze(1)"))
_FWD_NO_SHIFT_GUARD = patch(C[FWD],
    ("            shift = m_new.masked_fill(m_new == neg_inf, 0.0)\n", ""),
    ("p = torch.exp(s - shift)", "p = torch.exp(s - m_new)"),
    ("alpha = torch.exp(m - shift)", "alpha = torch.exp(m - m_new)"))
_BWD_LSE_UNSHIFTED = patch(C[BWD], (
    "shift = lse.masked_fill(lse == neg_inf, 0.0).unsqueeze(-1)", "shift = lse.unsqueeze(-1)"))
_BWD_DK_NO_SCALE = patch(C[BWD], (
    "dk_tile = dk_tile + (ds.mT @ q_tile) * scale", "dk_tile = dk_tile + ds.mT @ q_tile"))
_FA_NO_NONE = patch(C[FA], ("return dq, dk, dv, None", "return dq, dk, dv"))

ENTRIES = [
    # ---- flash_attention_forward ------------------------------------------------------------------------------
    Entry("f09-fwd-skip-by-first-query", "single",
          "The causal skip test compares the key tile's start with the position of the query tile's FIRST query "
          "(k_start > (Tk - Tq) + q_start) instead of its last one ((Tk - Tq) + q_end - 1), so key tiles that straddle "
          "the diagonal are skipped and the later queries of the tile miss keys they may see; o and lse are wrong "
          "whenever a tile's start is past its first query but not its last (unequal tiles, or Tk - Tq not a multiple "
          "of the tile).",
          {FWD: patch(C[FWD], ("if causal and k_start > offset + q_end - 1:", "if causal and k_start > offset + q_start:"))},
          (FWD, FA)),
    Entry("f09-fwd-mask-without-offset", "single",
          "Inside a computed tile the causal mask puts query i at position i (rows = arange(q_start, q_end)) instead of "
          "Tk - Tq + i: with Tq < Tk queries are cut off from keys they may see, with Tq > Tk they see future keys "
          "(and rows that should see none do), so o and lse are wrong whenever Tq != Tk; the tile skip still uses "
          "the offset.",
          {FWD: _FWD_MASK_NO_OFFSET},
          (FWD, FA)),
    Entry("f09-fwd-mask-hides-diagonal", "single",
          "The causal mask fills the scores with -inf where cols >= rows instead of cols > rows, so each query is "
          "denied the key at its own position: o and lse are wrong on every causal row, and the first query (Tq = Tk) "
          "sees no key at all.",
          {FWD: patch(C[FWD], ("s = s.masked_fill(cols > rows, neg_inf)", "s = s.masked_fill(cols >= rows, neg_inf)"))},
          (FWD, FA)),
    Entry("f09-fwd-m-updated-before-correction", "single",
          "The running max is overwritten (m = m_new) before the correction factor exp(m - m_new) is computed, so the "
          "factor is always 1 (0 only while the row has seen nothing) and neither ℓ nor acc is rescaled when a later "
          "key tile raises the row max: o and lse are wrong whenever a row spans more than one key tile.",
          {FWD: patch(C[FWD],
                      ("            shift = m_new.masked_fill(m_new == neg_inf, 0.0)\n",
                       "            m = m_new\n            shift = m_new.masked_fill(m_new == neg_inf, 0.0)\n"),
                      ("            acc = acc * alpha + p @ v[..., k_start:k_end, :]\n            m = m_new\n",
                       "            acc = acc * alpha + p @ v[..., k_start:k_end, :]\n"))},
          (FWD, FA)),
    Entry("f09-fwd-lse-without-max", "single",
          "lse is written as log ℓ instead of m + log ℓ (the running max that ℓ was shifted by is not added back), so "
          "lse is wrong on every row that sees a key while o is right; FlashAttention's backward then recomputes "
          "P = exp(S - lse) from the wrong lse and its gradients are wrong.",
          {FWD: patch(C[FWD], ("lse[..., q_start:q_end] = (m + torch.log(l)).squeeze(-1)",
                               "lse[..., q_start:q_end] = torch.log(l).squeeze(-1)"))},
          (FWD, FA)),
    Entry("f09-fwd-no-shift-for-unseen-rows", "single",
          "The tile is shifted by the new running max m' even when m' is still -inf (a row that has seen no visible key "
          "yet), so exp(-inf - (-inf)) gives NaN in p and in the correction factor; for rows that see no key at all "
          "(causal, Tq > Tk) ℓ and lse become NaN instead of 0 and -inf (o stays 0 through the l > 0 test), and "
          "FlashAttention's gradients get NaN from that lse.",
          {FWD: _FWD_NO_SHIFT_GUARD},
          (FWD, FA)),
    Entry("f09-fwd-scale-by-value-dim", "single",
          "The scores are divided by sqrt(v.shape[-1]) (the value dim Dv) instead of sqrt(q.shape[-1]) (the head dim "
          "D of q and k): o and lse are wrong whenever Dv != D.",
          {FWD: patch(C[FWD], ("scale = 1.0 / math.sqrt(d)", "scale = 1.0 / math.sqrt(v.shape[-1])"))},
          (FWD, FA)),
    Entry("f09-fwd-drops-partial-tiles", "single",
          "The number of query and key tiles is counted with floor division (Tq // block_q, Tk // block_k), so when a "
          "length is not a multiple of its tile the last, shorter tile is never processed: the trailing keys are "
          "left out of every row's softmax and the trailing query rows keep o = 0 and lse = -inf.",
          {FWD: patch(C[FWD],
                      ("    for q_start in range(0, q_len, block_q):\n        q_end = min(q_start + block_q, q_len)\n",
                       "    for i in range(q_len // block_q):\n        q_start = i * block_q\n        q_end = q_start + block_q\n"),
                      ("        for k_start in range(0, k_len, block_k):\n",
                       "        for j in range(k_len // block_k):\n            k_start = j * block_k\n"),
                      ("            k_end = min(k_start + block_k, k_len)\n",
                       "            k_end = k_start + block_k\n"))},
          (FWD, FA)),
    Entry("f09-fwd-mask-cols-full-tile", "raises",
          "The causal mask's key positions are torch.arange(k_start, k_start + block_k), a full tile's worth, instead "
          "of stopping at k_end = min(k_start + block_k, Tk): on a shorter last key tile the mask's block_k columns "
          "do not match the Tk - k_start columns of the scores and masked_fill raises a shape error.",
          {FWD: patch(C[FWD], ("cols = torch.arange(k_start, k_end, device=q.device)",
                               "cols = torch.arange(k_start, k_start + block_k, device=q.device)"))},
          (FWD, FA)),
    # ---- flash_attention_backward -----------------------------------------------------------------------------
    Entry("f09-bwd-delta-per-tile", "single",
          "D is computed inside the loop as rowsum(P ∘ dP) of the current [block_q, block_k] tile instead of once as "
          "rowsum(dO ∘ O) over the whole row, so each tile's dS = P ∘ (dP - D) subtracts only that tile's part of "
          "the row sum: dq and dk are wrong whenever a row spans more than one key tile (dv is right).",
          {BWD: patch(C[BWD],
                      ("            ds = p * (dp - delta[..., q_start:q_end, :])",
                       "            delta_tile = (p * dp).sum(dim=-1, keepdim=True)\n"
                       "            ds = p * (dp - delta_tile)"))},
          (BWD, FA)),
    Entry("f09-bwd-dq-missing-scale", "single",
          "dq is accumulated as dS K without the 1/sqrt(D) factor of S = QKᵀ/√D (dk keeps it), so dq is sqrt(D) "
          "times too large.",
          {BWD: patch(C[BWD], ("dq[..., q_start:q_end, :] += (ds @ k_tile) * scale",
                               "dq[..., q_start:q_end, :] += ds @ k_tile"))},
          (BWD, FA)),
    Entry("f09-bwd-dv-no-transpose", "raises",
          "dV is accumulated as P dO instead of Pᵀ dO (the probability tile is not transposed): P is [rows, keys] and "
          "dO is [rows, Dv], so the matmul raises a shape error unless the tile happens to be square (and then "
          "writes the wrong numbers).",
          {BWD: patch(C[BWD], ("dv_tile = dv_tile + p.mT @ do_tile", "dv_tile = dv_tile + p @ do_tile"))},
          (BWD, FA)),
    Entry("f09-bwd-lse-minus-inf-not-replaced", "single",
          "P is recomputed as exp(S - lse) with lse used as is, without first replacing the -inf of rows that see no "
          "key (causal, Tq > Tk) by 0, so those rows get exp(-inf - (-inf)) = NaN and NaN spreads into dq, dk and dv.",
          {BWD: _BWD_LSE_UNSHIFTED},
          (BWD, FA)),
    Entry("f09-bwd-softmax-per-tile", "single",
          "P is recomputed as a softmax over the current key tile alone (torch.softmax(S, -1)) instead of "
          "exp(S - lse) with the whole row's log-sum-exp, so each tile's probabilities are normalised as if the "
          "tile were the whole row: dq, dk and dv are wrong whenever a row spans more than one key tile (and fully "
          "masked rows of a tile give NaN).",
          {BWD: patch(C[BWD], ("p = torch.exp(s - shift[..., q_start:q_end, :])", "p = torch.softmax(s, dim=-1)"))},
          (BWD, FA)),
    Entry("f09-bwd-break-not-continue", "single",
          "The causal skip in the inner (query-tile) loop uses break instead of continue, as in the forward; but with "
          "key tiles outside, the wholly masked query tiles come FIRST, so the loop stops before reaching the later "
          "query tiles that do see this key tile: every key tile past the first diagonal one contributes nothing, "
          "and dq, dk and dv are wrong for causal inputs.",
          {BWD: patch(C[BWD], ("            if causal and k_start > offset + q_end - 1:\n                continue",
                               "            if causal and k_start > offset + q_end - 1:\n                break"))},
          (BWD, FA)),
    Entry("f09-bwd-dq-overwritten", "single",
          "dq's rows are assigned (dq[..., q_start:q_end, :] = dS K/√D) instead of accumulated with += over the key "
          "tiles, so each query tile keeps only the contribution of the last key tile that reached it: dq is wrong "
          "whenever a row spans more than one key tile (dk and dv are right).",
          {BWD: patch(C[BWD], ("dq[..., q_start:q_end, :] += (ds @ k_tile) * scale",
                               "dq[..., q_start:q_end, :] = (ds @ k_tile) * scale"))},
          (BWD, FA)),
    Entry("f09-bwd-ds-delta-outside-p", "single",
          "dS is computed as P ∘ dP - D instead of P ∘ (dP - D): D_i is subtracted from every entry of the row "
          "without being multiplied by P_ij, so dS is wrong everywhere (even where P is 0, masked or not) and dq and "
          "dk are wrong (dv is right).",
          {BWD: patch(C[BWD], ("ds = p * (dp - delta[..., q_start:q_end, :])",
                               "ds = p * dp - delta[..., q_start:q_end, :]"))},
          (BWD, FA)),
    Entry("f09-bwd-lse-changed-in-place", "single",
          "The -inf entries of the given lse are replaced by 0 in place (lse[lse == -inf] = 0.0) instead of in a new "
          "tensor, which changes the caller's lse (the input rule) whenever some row sees no key (causal, Tq > Tk); "
          "the gradients themselves are right. Inside FlashAttention lse is the tensor kept by save_for_backward, so "
          "one backward pass is right but the in-place write bumps its version and a second backward over the same "
          "graph (as gradcheck runs) raises 'modified by an inplace operation'.",
          {BWD: patch(C[BWD], ("    shift = lse.masked_fill(lse == neg_inf, 0.0).unsqueeze(-1)\n",
                               "    lse[lse == neg_inf] = 0.0\n    shift = lse.unsqueeze(-1)\n"))},
          # The grader runs one backward pass through FlashAttention, which comes out right: only the backward is listed.
          (BWD,)),
    # ---- FlashAttention ---------------------------------------------------------------------------------------
    Entry("f09-fn-backward-drops-causal", "single",
          "backward calls flash_attention_backward without ctx.causal, so the gradients are always those of the "
          "unmasked attention: with causal=True dq, dk and dv are wrong (the output is right).",
          {FA: patch(C[FA], ("flash_attention_backward(q, k, v, o, lse, do, ctx.causal)",
                             "flash_attention_backward(q, k, v, o, lse, do)"))},
          (FA,)),
    Entry("f09-fn-forward-drops-causal", "single",
          "forward calls flash_attention_forward(q, k, v) without passing causal, so with causal=True the output and "
          "the saved lse are those of unmasked attention (backward, given ctx.causal, then mixes a causal mask with "
          "the unmasked o and lse).",
          {FA: patch(C[FA], ("o, lse = flash_attention_forward(q, k, v, causal)",
                             "o, lse = flash_attention_forward(q, k, v)"))},
          (FA,)),
    Entry("f09-fn-no-grad-for-causal", "raises",
          "backward returns three gradients (dq, dk, dv) instead of four: forward takes four inputs (q, k, v, causal), "
          "so autograd raises 'returned an incorrect number of gradients (expected 4, got 3)' in the backward pass.",
          {FA: _FA_NO_NONE},
          (FA,)),
    Entry("f09-fn-saves-causal-as-tensor", "raises",
          "causal (a bool) is passed to ctx.save_for_backward together with the tensors instead of being kept as an "
          "attribute of ctx; save_for_backward accepts only tensors (or None) and raises a TypeError in forward.",
          {FA: patch(C[FA],
                     ("        ctx.save_for_backward(q, k, v, o, lse)\n        ctx.causal = causal\n",
                      "        ctx.save_for_backward(q, k, v, o, lse, causal)\n"),
                     ("        q, k, v, o, lse = ctx.saved_tensors\n        dq, dk, dv = flash_attention_backward(q, k, v, o, lse, do, ctx.causal)",
                      "        q, k, v, o, lse, causal = ctx.saved_tensors\n        dq, dk, dv = flash_attention_backward(q, k, v, o, lse, do, causal)"))},
          (FA,)),
    # ---- doubles ----------------------------------------------------------------------------------------------
    Entry("f09-double-mask-offset-both", "double",
          "(1) flash_attention_forward's causal mask puts query i at position i instead of Tk - Tq + i; (2) "
          "flash_attention_backward's causal mask makes the same slip (rows = arange(q_start, q_end) without the "
          "offset). Both are wrong whenever Tq != Tk with causal=True; the tile skips still use the offset.",
          {FWD: _FWD_MASK_NO_OFFSET, BWD: _BWD_MASK_NO_OFFSET},
          (FWD, BWD, FA)),
    Entry("f09-double-unseen-rows-nan", "double",
          "(1) flash_attention_forward shifts each tile by the running max m' even when it is still -inf, so rows "
          "that see no key get lse = NaN instead of -inf; (2) flash_attention_backward recomputes P = exp(S - lse) "
          "without first replacing lse = -inf by 0, so the same rows give NaN gradients. Both show only with "
          "causal=True and Tq > Tk.",
          {FWD: _FWD_NO_SHIFT_GUARD, BWD: _BWD_LSE_UNSHIFTED},
          (FWD, BWD, FA)),
    Entry("f09-double-dk-scale-and-missing-none", "double",
          "(1) flash_attention_backward accumulates dk as dSᵀ Q without the 1/sqrt(D) factor, so dk is sqrt(D) times "
          "too large; (2) FlashAttention.backward returns three gradients instead of four (no None for causal), so "
          "autograd raises in the backward pass.",
          {BWD: _BWD_DK_NO_SCALE, FA: _FA_NO_NONE},
          (BWD, FA)),
]
