"""09_flash_attention: flash_attention_forward, flash_attention_backward, FlashAttention, written from the notebook alone.

Conventions assumed from the notebook: q [..., Tq, D], k [..., Tk, D], v [..., Tk, Dv], scores q kᵀ/√D (D = q's
last dim, not Dv); query i sits at absolute position Tk - Tq + i and sees keys j <= that position. The forward
returns (o, lse) in q's dtype, with o = 0 and lse = -inf on rows that see no key (causal, Tq > Tk). A causal key
tile is skipped when k_start > (Tk - Tq) + q_end - 1 (the forward breaks out of its key loop; the backward, whose
outer loop is over key tiles, continues its query loop), and no matmul ever produces more than one
[block_q, block_k] table of scores: the grader is said to count the tiles computed and to stop a too-big table, so
mistakes that only compute too much (correct numbers) are of kind "raises" (stopped), as are in-place changes of an
input (the notebook's ``inplace.guard``). FlashAttention.apply(q, k, v, causal) returns o only; its backward returns
(dq, dk, dv, None) and calls the submission's own forward and backward with the default 16 × 16 tiles, so a wrong
forward or backward also lists FlashAttention (except where the mistake cannot reach FlashAttention's output or
gradients).
"""
from .entry import Entry, patch

ASSIGNMENT = "09_flash_attention"
HEADER = "import math\n\nimport torch\n"

CORRECT = {
    "attention_scores": '''def attention_scores(q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    """[..., Tq, D] x [..., Tk, D] -> [..., Tq, Tk] scores q_i . k_j / sqrt(D)."""
    return torch.matmul(q, k.transpose(-1, -2)) * (1.0 / math.sqrt(q.size(-1)))
''',
    "causal_mask": '''def causal_mask(q_len: int, k_len: int | None = None, window: int | None = None) -> torch.Tensor:
    """bool [q_len, k_len], True = may attend; query i is at position k_len - q_len + i."""
    k_len = q_len if k_len is None else k_len
    pos = torch.arange(k_len - q_len, k_len).view(-1, 1)
    key = torch.arange(k_len).view(1, -1)
    allowed = key <= pos
    if window is not None:
        allowed = allowed & (key > pos - window)
    return allowed
''',
    "masked_softmax": '''def masked_softmax(scores: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
    """Softmax over the last dim; masked entries get 0, and a fully masked row is all zeros."""
    if mask is None:
        return scores.softmax(dim=-1)
    filled = scores.masked_fill(~mask, torch.finfo(scores.dtype).min)
    weights = filled.softmax(dim=-1)
    return weights.masked_fill(~mask, 0.0)
''',
    "attention": '''def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
              mask: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """(weights @ v, weights) with weights = masked_softmax(attention_scores(q, k), mask)."""
    weights = masked_softmax(attention_scores(q, k), mask)
    return torch.matmul(weights, v), weights
''',
    "flash_attention_forward": '''def flash_attention_forward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False,
                            block_q: int = 16, block_k: int = 16) -> tuple[torch.Tensor, torch.Tensor]:
    """Tiled softmax attention: returns o [..., Tq, Dv] and lse [..., Tq]."""
    n_q, n_k = q.shape[-2], k.shape[-2]
    offset = n_k - n_q
    scale = 1.0 / math.sqrt(q.shape[-1])
    neg_inf = float("-inf")
    o = q.new_zeros(*q.shape[:-1], v.shape[-1])
    lse = q.new_full(q.shape[:-1], neg_inf)
    for q_start in range(0, n_q, block_q):
        q_end = min(q_start + block_q, n_q)
        q_i = q[..., q_start:q_end, :]
        m = q.new_full(q_i.shape[:-1], neg_inf)
        l = q.new_zeros(q_i.shape[:-1])
        acc = q.new_zeros(*q_i.shape[:-1], v.shape[-1])
        for k_start in range(0, n_k, block_k):
            if causal and k_start > offset + q_end - 1:
                break
            k_end = min(k_start + block_k, n_k)
            k_j = k[..., k_start:k_end, :]
            v_j = v[..., k_start:k_end, :]
            s = (q_i @ k_j.transpose(-1, -2)) * scale
            if causal:
                rows = torch.arange(q_start, q_end, device=q.device).unsqueeze(1) + offset
                cols = torch.arange(k_start, k_end, device=q.device).unsqueeze(0)
                s = s.masked_fill(cols > rows, neg_inf)
            m_new = torch.maximum(m, s.amax(dim=-1))
            base = torch.where(torch.isinf(m_new), torch.zeros_like(m_new), m_new)
            p = torch.exp(s - base.unsqueeze(-1))
            alpha = torch.exp(m - base)
            l = l * alpha + p.sum(dim=-1)
            acc = acc * alpha.unsqueeze(-1) + p @ v_j
            m = m_new
        seen = l > 0
        safe_l = torch.where(seen, l, torch.ones_like(l))
        o[..., q_start:q_end, :] = torch.where(seen.unsqueeze(-1), acc / safe_l.unsqueeze(-1), torch.zeros_like(acc))
        lse[..., q_start:q_end] = m + torch.log(l)  # -inf + log 0 = -inf on rows that see no key
    return o, lse
''',
    "flash_attention_backward": '''def flash_attention_backward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, o: torch.Tensor, lse: torch.Tensor,
                             do: torch.Tensor, causal: bool = False, block_q: int = 16,
                             block_k: int = 16) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """dq, dk, dv of o = softmax(q kᵀ/√D) v, key tiles outside, query tiles inside, P recomputed from lse."""
    n_q, n_k = q.shape[-2], k.shape[-2]
    offset = n_k - n_q
    scale = 1.0 / math.sqrt(q.shape[-1])
    dq = torch.zeros_like(q)
    dk = torch.zeros_like(k)
    dv = torch.zeros_like(v)
    delta = (do * o).sum(dim=-1)
    shift = torch.where(torch.isneginf(lse), torch.zeros_like(lse), lse)
    for k_start in range(0, n_k, block_k):
        k_end = min(k_start + block_k, n_k)
        k_j = k[..., k_start:k_end, :]
        v_j = v[..., k_start:k_end, :]
        dk_j = torch.zeros_like(k_j)
        dv_j = torch.zeros_like(v_j)
        for q_start in range(0, n_q, block_q):
            q_end = min(q_start + block_q, n_q)
            if causal and k_start > offset + q_end - 1:
                continue
            q_i = q[..., q_start:q_end, :]
            do_i = do[..., q_start:q_end, :]
            s = (q_i @ k_j.transpose(-1, -2)) * scale
            if causal:
                rows = torch.arange(q_start, q_end, device=q.device).unsqueeze(1) + offset
                cols = torch.arange(k_start, k_end, device=q.device).unsqueeze(0)
                s = s.masked_fill(cols > rows, float("-inf"))
            p = torch.exp(s - shift[..., q_start:q_end].unsqueeze(-1))
            dv_j = dv_j + p.transpose(-1, -2) @ do_i
            dp = do_i @ v_j.transpose(-1, -2)
            ds = p * (dp - delta[..., q_start:q_end].unsqueeze(-1))
            dq[..., q_start:q_end, :] += (ds @ k_j) * scale
            dk_j = dk_j + (ds.transpose(-1, -2) @ q_i) * scale
        dk[..., k_start:k_end, :] = dk_j
        dv[..., k_start:k_end, :] = dv_j
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
_F, _B, _A = C[FWD], C[BWD], C[FA]

# ---------------------------------------------------------------- flash_attention_forward
_F_SKIP_FIRST = patch(_F, ("if causal and k_start > offset + q_end - 1:\n                break",
                           "if causal and k_start > offset + q_start:\n                break"))
_F_SKIP_NO_OFFSET = patch(_F, ("if causal and k_start > offset + q_end - 1:\n                break",
                               "if causal and k_start > q_end - 1:\n                break"))
_F_MASK_NO_OFFSET = patch(_F, ("rows = torch.arange(q_start, q_end, device=q.device).unsqueeze(1) + offset",
                               "rows = torch.arange(q_start, q_end, device=q.device).unsqueeze(1)"))
_F_ACC_NOT_RESCALED = patch(_F, ("acc = acc * alpha.unsqueeze(-1) + p @ v_j", "acc = acc + p @ v_j"))
_F_LSE_NO_MAX = patch(_F, ("= m + torch.log(l)", "= torch.log(l)"))
_F_NO_INF_GUARD = patch(_F, (
    "            base = torch.where(torch.isinf(m_new), torch.zeros_like(m_new), m_new)\n"
    "            p = torch.exp(s - base.unsqueeze(-1))\n"
    "            alpha = torch.exp(m - base)\n",
    "            p = torch.exp(s - m_new.unsqueeze(-1))\n"
    "            alpha = torch.exp(m - m_new)\n"))
_F_WHOLE_ROW = '''def flash_attention_forward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False,
                            block_q: int = 16, block_k: int = 16) -> tuple[torch.Tensor, torch.Tensor]:
    """Query tiles only: each query tile against all keys at once."""
    n_q, n_k = q.shape[-2], k.shape[-2]
    o = q.new_zeros(*q.shape[:-1], v.shape[-1])
    lse = q.new_full(q.shape[:-1], float("-inf"))
    for q_start in range(0, n_q, block_q):
        q_end = min(q_start + block_q, n_q)
        s = q[..., q_start:q_end, :] @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
        if causal:
            rows = torch.arange(q_start, q_end).unsqueeze(1) + (n_k - n_q)
            cols = torch.arange(n_k).unsqueeze(0)
            s = s.masked_fill(cols > rows, float("-inf"))
        m = s.amax(dim=-1)
        m = torch.where(torch.isinf(m), torch.zeros_like(m), m)
        p = torch.exp(s - m.unsqueeze(-1))
        l = p.sum(dim=-1)
        safe_l = torch.where(l > 0, l, torch.ones_like(l))
        o[..., q_start:q_end, :] = (p @ v) / safe_l.unsqueeze(-1)
        lse[..., q_start:q_end] = m + torch.log(l)
    return o, lse
'''
_F_NO_SKIP = patch(_F, ("            if causal and k_start > offset + q_end - 1:\n                break\n", ""))
_F_M_NOT_CARRIED = patch(_F, ("            m = m_new\n", ""))
_F_DROPS_LAST_KEYS = patch(_F, (
    "        for k_start in range(0, n_k, block_k):\n",
    "        for j in range(n_k // block_k):\n            k_start = j * block_k\n"))
_F_PRESCALE_INPLACE = patch(_F, (
    "    o = q.new_zeros(*q.shape[:-1], v.shape[-1])\n",
    "    q *= scale  # scale the queries once instead of every tile\n    o = q.new_zeros(*q.shape[:-1], v.shape[-1])\n"),
    ("s = (q_i @ k_j.transpose(-1, -2)) * scale", "s = q_i @ k_j.transpose(-1, -2)"))
_F_DOUBLE = patch(_F_SKIP_FIRST, ("acc = acc * alpha.unsqueeze(-1) + p @ v_j", "acc = acc + p @ v_j"))

# ---------------------------------------------------------------- flash_attention_backward
_B_SKIP = "            if causal and k_start > offset + q_end - 1:\n                continue\n"
_B_BREAK = patch(_B, (_B_SKIP, _B_SKIP.replace("continue", "break")))
_B_NO_INF_GUARD = patch(_B, ("p = torch.exp(s - shift[..., q_start:q_end].unsqueeze(-1))",
                             "p = torch.exp(s - lse[..., q_start:q_end].unsqueeze(-1))"))
_B_DELTA_TILE = patch(_B, ("ds = p * (dp - delta[..., q_start:q_end].unsqueeze(-1))",
                           "ds = p * (dp - (p * dp).sum(dim=-1, keepdim=True))"))
_B_NO_DELTA = patch(_B, ("ds = p * (dp - delta[..., q_start:q_end].unsqueeze(-1))", "ds = p * dp"))
_B_GRADS_UNSCALED = patch(_B, ("dq[..., q_start:q_end, :] += (ds @ k_j) * scale",
                               "dq[..., q_start:q_end, :] += ds @ k_j"),
                          ("dk_j = dk_j + (ds.transpose(-1, -2) @ q_i) * scale",
                           "dk_j = dk_j + ds.transpose(-1, -2) @ q_i"))
_B_S_UNSCALED = patch(_B, ("s = (q_i @ k_j.transpose(-1, -2)) * scale", "s = q_i @ k_j.transpose(-1, -2)"))
_B_DQ_OVERWRITE = patch(_B, ("dq[..., q_start:q_end, :] += (ds @ k_j) * scale",
                             "dq[..., q_start:q_end, :] = (ds @ k_j) * scale"))
_B_TILE_SOFTMAX = patch(_B, ("p = torch.exp(s - shift[..., q_start:q_end].unsqueeze(-1))",
                             "p = torch.softmax(s, dim=-1)"))
_B_NO_MASK = patch(_B, (
    "            if causal:\n"
    "                rows = torch.arange(q_start, q_end, device=q.device).unsqueeze(1) + offset\n"
    "                cols = torch.arange(k_start, k_end, device=q.device).unsqueeze(0)\n"
    "                s = s.masked_fill(cols > rows, float(\"-inf\"))\n", ""))
_B_LSE_INPLACE = patch(_B, ("    shift = torch.where(torch.isneginf(lse), torch.zeros_like(lse), lse)\n",
                            "    shift = lse\n    shift[shift == float(\"-inf\")] = 0.0\n"))
_B_DK_NO_T = patch(_B, ("dk_j = dk_j + (ds.transpose(-1, -2) @ q_i) * scale", "dk_j = dk_j + (ds @ q_i) * scale"))
_B_DELTA_NO_KEEPDIM = patch(_B, ("ds = p * (dp - delta[..., q_start:q_end].unsqueeze(-1))",
                                 "ds = p * (dp - delta[..., q_start:q_end])"))
_B_DOUBLE = patch(_B, (_B_SKIP, _B_SKIP.replace("offset + q_end - 1", "offset + q_start")),
                  ("dq[..., q_start:q_end, :] += (ds @ k_j) * scale", "dq[..., q_start:q_end, :] += ds @ k_j"))
_B_NO_INF_GUARD_BOTH = _B_NO_INF_GUARD

# ---------------------------------------------------------------- FlashAttention
_A_RETURNS_PAIR = patch(_A, ("        ctx.causal = causal\n        return o\n",
                             "        ctx.causal = causal\n        return o, lse\n"))
_A_THREE_GRADS = patch(_A, ("return dq, dk, dv, None", "return dq, dk, dv"))
_A_CAUSAL_DROPPED = patch(_A, ("flash_attention_backward(q, k, v, o, lse, do, ctx.causal)",
                               "flash_attention_backward(q, k, v, o, lse, do)"))
_A_BOOL_SAVED = patch(_A, ("        ctx.save_for_backward(q, k, v, o, lse)\n        ctx.causal = causal\n",
                           "        ctx.save_for_backward(q, k, v, o, lse, causal)\n"),
                      ("q, k, v, o, lse = ctx.saved_tensors", "q, k, v, o, lse, causal = ctx.saved_tensors"),
                      ("flash_attention_backward(q, k, v, o, lse, do, ctx.causal)",
                       "flash_attention_backward(q, k, v, o, lse, do, causal)"))
_A_CTX_CAUSAL_UNSET = patch(_A, ("        ctx.causal = causal\n", ""))
_A_DOUBLE = patch(_A, ("        ctx.causal = causal\n", ""),
                  ("flash_attention_backward(q, k, v, o, lse, do, ctx.causal)",
                   "flash_attention_backward(q, k, v, o, lse, do)"),
                  ("return dq, dk, dv, None", "return dq, dk, dv"))

_FB = (FWD, FA)
_BB = (BWD, FA)

ENTRIES = [
    # ---------------------------------------------------------------- forward
    Entry("a09-fwd-skip-by-first-query", "single",
          "flash_attention_forward's causal tile skip tests the query tile's first position, "
          "k_start > (Tk - Tq) + q_start, instead of its last, k_start > (Tk - Tq) + q_end - 1: it breaks out before "
          "key tiles that straddle the diagonal, so the later queries of a tile never see their last visible keys.",
          {FWD: _F_SKIP_FIRST}, _FB),
    Entry("a09-fwd-skip-forgets-offset", "single",
          "flash_attention_forward's causal tile skip leaves out the offset Tk - Tq (k_start > q_end - 1): with a cache "
          "(Tk > Tq) it breaks out before key tiles the queries can see, and with Tq > Tk it computes tiles that are "
          "wholly masked.",
          {FWD: _F_SKIP_NO_OFFSET}, _FB),
    Entry("a09-fwd-mask-forgets-offset", "single",
          "flash_attention_forward's causal mask inside a tile puts query i at position i instead of Tk - Tq + i "
          "(rows = arange(q_start, q_end) without + (Tk - Tq)), so when Tq != Tk it hides keys the query may see "
          "(Tk > Tq) or shows keys after it (Tq > Tk).",
          {FWD: _F_MASK_NO_OFFSET}, _FB),
    Entry("a09-fwd-acc-not-rescaled", "single",
          "flash_attention_forward rescales the running sum l by exp(m - m') when the running max grows but not the "
          "unnormalized output acc (acc = acc + P̃ V_j), so the earlier key tiles keep weights relative to an old max "
          "and o is wrong whenever a later tile raises a row's max.",
          {FWD: _F_ACC_NOT_RESCALED}, _FB),
    Entry("a09-fwd-lse-without-max", "single",
          "flash_attention_forward returns lse = log(l) instead of m + log(l): l was summed relative to the running max "
          "m, so lse is short by m on every row (and the backward, recomputing P = exp(S - lse), gets P scaled by e^m).",
          {FWD: _F_LSE_NO_MAX}, _FB),
    Entry("a09-fwd-no-shift-when-max-is-inf", "single",
          "flash_attention_forward shifts by the new running max m' even when it is still -inf, so a row that sees no "
          "key (causal, Tq > Tk) computes exp(-inf - (-inf)) = NaN: its l and acc become NaN and its lse is NaN instead "
          "of -inf.",
          {FWD: _F_NO_INF_GUARD}, _FB),
    Entry("a09-fwd-whole-row-of-scores", "raises",
          "flash_attention_forward tiles only the queries: each query tile's scores are computed against all Tk keys at "
          "once, a [block_q, Tk] table (and a plain softmax over it), breaking the rule of at most one [block_q, block_k] "
          "table of scores; it never skips causal tiles either. The numbers are right, but the grader stops it.",
          {FWD: _F_WHOLE_ROW}, _FB),
    Entry("a09-fwd-no-causal-skip", "raises",
          "flash_attention_forward never skips the key tiles wholly after a query tile's last position when "
          "causal=True: it computes them and masks every score to -inf. The output is right but it computes every tile, "
          "not the (n+1)/2n share the notebook asks for, so the tile count stops it.",
          {FWD: _F_NO_SKIP}, _FB),
    Entry("a09-fwd-max-not-carried", "single",
          "flash_attention_forward never assigns m = m' at the end of the key loop, so the running max stays -inf: each "
          "tile's correction factor exp(m - m') is 0 and l and acc are reset, leaving o and lse from the last key tile "
          "only.",
          {FWD: _F_M_NOT_CARRIED}, _FB),
    Entry("a09-fwd-drops-last-key-tile", "single",
          "flash_attention_forward loops over the key tiles with range(Tk // block_k), so when Tk is not a multiple of "
          "block_k the last, shorter key tile is never read: those keys get no weight in o or lse.",
          {FWD: _F_DROPS_LAST_KEYS}, _FB),
    Entry("a09-fwd-prescale-q-in-place", "raises",
          "flash_attention_forward scales the queries once with q *= 1/sqrt(D), an in-place change of the caller's q "
          "(its own output is right); changing an input in place is stopped.",
          {FWD: _F_PRESCALE_INPLACE}, _FB),
    Entry("a09-fwd-double-first-query-skip-and-acc-not-rescaled", "double",
          "(1) flash_attention_forward's causal tile skip uses the tile's first query, k_start > (Tk - Tq) + q_start, "
          "instead of the last, k_start > (Tk - Tq) + q_end - 1, dropping straddling tiles; (2) it never rescales acc "
          "by exp(m - m') when the running max grows (only l is rescaled).",
          {FWD: _F_DOUBLE}, _FB),
    # ---------------------------------------------------------------- backward
    Entry("a09-bwd-break-instead-of-continue", "single",
          "flash_attention_backward leaves the inner query loop with break, not continue, at the first wholly masked "
          "query tile: with key tiles outside, the early query tiles are the masked ones, so every later query tile "
          "that does see this key tile is skipped too (dk, dv of those keys and their share of dq are lost).",
          {BWD: _B_BREAK}, _BB),
    Entry("a09-bwd-lse-inf-not-replaced", "single",
          "flash_attention_backward recomputes P = exp(S - lse) with the raw lse: on rows that see no key (causal, "
          "Tq > Tk) lse = -inf and S = -inf, so P = exp(-inf + inf) = NaN and the NaN spreads into dq, dk and dv; lse "
          "must first be replaced by 0 there.",
          {BWD: _B_NO_INF_GUARD}, _BB),
    Entry("a09-bwd-delta-from-tile", "single",
          "flash_attention_backward takes D_i as rowsum(P ∘ dP) over the current key tile only instead of over the whole "
          "row, D = rowsum(dO ∘ O), so dS = P ∘ (dP - D) is wrong whenever a row spans more than one key tile.",
          {BWD: _B_DELTA_TILE}, _BB),
    Entry("a09-bwd-delta-forgotten", "single",
          "flash_attention_backward computes dS = P ∘ dP, leaving out the - D_i term of the softmax Jacobian "
          "(D = rowsum(dO ∘ O)), so dq and dk are wrong (dv is right).",
          {BWD: _B_NO_DELTA}, _BB),
    Entry("a09-bwd-grads-not-scaled", "single",
          "flash_attention_backward forgets the 1/sqrt(D) of S = Q Kᵀ/sqrt(D) in the chain rule: dq = dS K and "
          "dk = dSᵀ Q are not divided by sqrt(D), so both are sqrt(D) times too large.",
          {BWD: _B_GRADS_UNSCALED}, _BB),
    Entry("a09-bwd-scores-not-scaled", "single",
          "flash_attention_backward recomputes the scores as S = Q_i K_jᵀ without dividing by sqrt(D), so P = exp(S - lse) "
          "is not the forward's softmax and every gradient is wrong.",
          {BWD: _B_S_UNSCALED}, _BB),
    Entry("a09-bwd-dq-overwritten", "single",
          "flash_attention_backward writes dq[..., q_start:q_end, :] = dS K_j / sqrt(D) instead of +=: each key tile "
          "overwrites the previous tiles' contributions, so dq keeps only the last key tile's share.",
          {BWD: _B_DQ_OVERWRITE}, _BB),
    Entry("a09-bwd-softmax-of-tile", "single",
          "flash_attention_backward recomputes P as softmax(S) over the current [block_q, block_k] tile instead of "
          "exp(S - lse): each tile is normalized on its own instead of by the whole row's sum, so P (and every gradient) "
          "is wrong when a row spans more than one key tile.",
          {BWD: _B_TILE_SOFTMAX}, _BB),
    Entry("a09-bwd-causal-mask-missing", "single",
          "flash_attention_backward skips the wholly masked tiles but does not mask the scores of the tiles that straddle "
          "the diagonal when causal=True, so keys after a query get P = exp(S - lse) > 0 and wrong gradients.",
          {BWD: _B_NO_MASK}, _BB),
    Entry("a09-bwd-lse-fixed-in-place", "raises",
          "flash_attention_backward replaces the -inf entries of lse by 0 in place (shift = lse; shift[shift == -inf] = 0), "
          "which changes the caller's lse whenever some row sees no key (causal, Tq > Tk); changing an input in place is "
          "stopped.",
          # FlashAttention computes right with it (the lse it changes is its own saved one): only the backward is listed.
          {BWD: _B_LSE_INPLACE}, (BWD,)),
    Entry("a09-bwd-dk-not-transposed", "raises",
          "flash_attention_backward computes dK_j += dS Q_i / sqrt(D) without transposing dS (should be dSᵀ Q_i): "
          "[block_q, block_k] @ [block_q, D] fails as soon as a tile is not square (a short last tile, or "
          "block_q != block_k), and gives a wrong dk when every tile is square.",
          {BWD: _B_DK_NO_T}, _BB),
    Entry("a09-bwd-delta-not-unsqueezed", "raises",
          "flash_attention_backward subtracts D[..., q_start:q_end] of shape [..., block_q] from dP [..., block_q, block_k] "
          "without a trailing None/unsqueeze(-1): the shapes are right-aligned, so D's query axis meets dP's key axis "
          "and its batch/head axes meet dP's query axis, and the subtraction fails to broadcast (without leading dims "
          "and with a square tile it would silently subtract D of the wrong queries along each row).",
          {BWD: _B_DELTA_NO_KEEPDIM}, _BB),
    Entry("a09-bwd-double-first-query-skip-and-dq-unscaled", "double",
          "(1) flash_attention_backward's causal skip uses the query tile's first position, k_start > (Tk - Tq) + q_start, "
          "so it skips tiles that straddle the diagonal; (2) it accumulates dq += dS K_j without dividing by sqrt(D).",
          {BWD: _B_DOUBLE}, _BB),
    # ---------------------------------------------------------------- forward + backward
    Entry("a09-double-lse-without-max-and-no-guard", "double",
          "(1) flash_attention_forward returns lse = log(l) instead of m + log(l); (2) flash_attention_backward "
          "recomputes P = exp(S - lse) without replacing lse = -inf by 0, so rows that see no key give NaN gradients.",
          {FWD: _F_LSE_NO_MAX, BWD: _B_NO_INF_GUARD_BOTH}, (FWD, BWD, FA)),
    # ---------------------------------------------------------------- FlashAttention
    Entry("a09-fn-returns-o-and-lse", "single",
          "FlashAttention.forward returns (o, lse) instead of o alone, so FlashAttention.apply gives a tuple, and "
          "backward (which takes one incoming gradient) cannot be called with the two it would then receive.",
          {FA: _A_RETURNS_PAIR}, (FA,)),
    Entry("a09-fn-three-gradients", "raises",
          "FlashAttention.backward returns (dq, dk, dv) without a None for the causal argument: forward has four inputs "
          "after ctx, so autograd raises that it returned an incorrect number of gradients (expected 4, got 3).",
          {FA: _A_THREE_GRADS}, (FA,)),
    Entry("a09-fn-causal-dropped-in-backward", "single",
          "FlashAttention.backward calls flash_attention_backward without ctx.causal, so the backward always runs "
          "unmasked: with causal=True the gradients are those of full attention, not the causal ones.",
          {FA: _A_CAUSAL_DROPPED}, (FA,)),
    Entry("a09-fn-bool-in-save-for-backward", "raises",
          "FlashAttention.forward passes the bool causal to ctx.save_for_backward(q, k, v, o, lse, causal), which saves "
          "tensors only and raises a TypeError; causal should be put on ctx as an attribute.",
          {FA: _A_BOOL_SAVED}, (FA,)),
    Entry("a09-fn-ctx-causal-never-set", "raises",
          "FlashAttention.forward never sets ctx.causal, yet backward reads ctx.causal: the backward pass raises an "
          "AttributeError.",
          {FA: _A_CTX_CAUSAL_UNSET}, (FA,)),
    Entry("a09-fn-double-causal-lost-and-three-gradients", "double",
          "(1) FlashAttention keeps no causal flag and its backward calls flash_attention_backward without causal, so "
          "causal gradients would be the unmasked ones; (2) backward returns only (dq, dk, dv), no None for causal, "
          "which autograd rejects (expected 4 gradients, got 3).",
          {FA: _A_DOUBLE}, (FA,)),
]
