"""01_attention_basics: the sliding-window part of causal_mask, online_softmax_attention, and doubles over
attention_scores / causal_mask / padding_mask / masked_softmax / attention.

Conventions assumed: online_softmax_attention calls the student's own attention_scores (as the notebook's hint
says), so a mistake in attention_scores also changes it; m, z, a are kept in float32 (at least) and the result is
cast back to q's dtype.
"""
from . import a01
from .entry import Entry, patch

ASSIGNMENT = "01_attention_basics"
HEADER = '''import math\nimport torch\n'''

CORRECT = {
    "attention_scores": '''def attention_scores(q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    """q: [..., Tq, D], k: [..., Tk, D] -> [..., Tq, Tk], q_i . k_j / sqrt(D), in q's dtype."""
    head_dim = q.shape[-1]
    return q @ k.transpose(-2, -1) / math.sqrt(head_dim)
''',
    "causal_mask": '''def causal_mask(q_len: int, k_len: int | None = None, window: int | None = None) -> torch.Tensor:
    """bool [q_len, k_len]; query i sits at p = k_len - q_len + i and sees keys j <= p (and j > p - window)."""
    if k_len is None:
        k_len = q_len
    query_positions = torch.arange(q_len).unsqueeze(1) + (k_len - q_len)  # [Tq, 1]
    key_positions = torch.arange(k_len).unsqueeze(0)                      # [1, Tk]
    visible = key_positions <= query_positions
    if window is not None:
        visible = visible & (key_positions > query_positions - window)
    return visible
''',
    "padding_mask": '''def padding_mask(attention_mask: torch.Tensor) -> torch.Tensor:
    """[B, Tk] of 0/1 -> bool [B, 1, 1, Tk], True = real token."""
    return attention_mask.bool()[:, None, None, :]
''',
    "masked_softmax": '''def masked_softmax(scores: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
    """Softmax over the last dim; masked entries exactly 0; a fully masked row is all zeros."""
    if mask is None:
        return torch.softmax(scores, dim=-1)
    lowest = torch.finfo(scores.dtype).min
    weights = torch.softmax(torch.where(mask, scores, lowest), dim=-1)
    return torch.where(mask, weights, 0.0)
''',
    "attention": '''def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
              mask: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """(output [..., Tq, Dv], weights [..., Tq, Tk])."""
    weights = masked_softmax(attention_scores(q, k), mask)
    return weights @ v, weights
''',
    "online_softmax_attention": '''def online_softmax_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None = None,
                             block_size: int = 16) -> torch.Tensor:
    """attention(q, k, v, mask)[0], computed over blocks of block_size keys with a running max and sum."""
    work = torch.promote_types(q.dtype, torch.float32)
    k_len = k.shape[-2]
    if mask is not None:
        mask = mask.expand(*mask.shape[:-1], k_len)
    m = z = a = None
    for start in range(0, k_len, block_size):
        k_block = k[..., start:start + block_size, :].to(work)
        v_block = v[..., start:start + block_size, :].to(work)
        scores = attention_scores(q.to(work), k_block)                        # [..., Tq, b]
        if mask is not None:
            scores = torch.where(mask[..., start:start + block_size], scores, float("-inf"))
        if m is None:
            m = torch.full((*scores.shape[:-1], 1), float("-inf"), dtype=work)
            z = torch.zeros((*scores.shape[:-1], 1), dtype=work)
            a = torch.zeros((*scores.shape[:-1], v.shape[-1]), dtype=work)
        m_new = torch.maximum(m, scores.amax(dim=-1, keepdim=True))
        shift = m_new.masked_fill(m_new == float("-inf"), 0.0)                 # safe shift for masked rows
        rescale = torch.exp(m - shift)
        p = torch.exp(scores - shift)
        z = z * rescale + p.sum(dim=-1, keepdim=True)
        a = a * rescale + p @ v_block
        m = m_new
    out = torch.where(z > 0, a / z, 0.0)
    return out.to(q.dtype)
''',
}

C = CORRECT
CM, OS = C["causal_mask"], C["online_softmax_attention"]

def _double(id_, cause, parts, exercises):
    """A double entry from two single edits: parts = ((name, code), (name, code))."""
    code = {}
    for name, src in parts:
        if name in code:  # both edits in one function: apply the second on top of the first
            raise ValueError("use a combined source for two edits in one function")
        code[name] = src
    return Entry(id_, "double", cause, code, exercises)


def _double_same(id_, cause, name, base, edit1, edit2, exercises):
    """A double entry with both edits in one function."""
    return Entry(id_, "double", cause, {name: patch(base, edit1, edit2)}, exercises)


ENTRIES = [
    # ---------------- causal_mask: the sliding window ----------------
    Entry("f01-window-one-too-many", "single",
          "The window's lower bound is off by one: it keeps keys j >= p - w (j > p - w - 1), so every query sees "
          "w + 1 keys instead of the last w (the condition should be j > p - w).",
          {"causal_mask": patch(CM, ("key_positions > query_positions - window",
                                     "key_positions >= query_positions - window"))},
          ("causal_mask",)),
    Entry("f01-window-one-too-few", "single",
          "The window's lower bound is off by one the other way: it keeps only keys j > p - w + 1, so a query sees "
          "w - 1 keys (itself included) instead of w.",
          {"causal_mask": patch(CM, ("key_positions > query_positions - window",
                                     "key_positions > query_positions - window + 1"))},
          ("causal_mask",)),
    Entry("f01-window-ignores-cache-offset", "single",
          "The window's lower edge is measured from the query's row index i instead of its absolute position "
          "p = k_len - q_len + i: it keeps keys j > i - w, so with k_len > q_len (a KV cache) the window lets in "
          "keys far older than the last w positions.",
          {"causal_mask": patch(CM, ("visible = visible & (key_positions > query_positions - window)",
                                     "visible = visible & (key_positions > torch.arange(q_len).unsqueeze(1) - window)"))},
          ("causal_mask",)),
    Entry("f01-window-replaces-causal", "single",
          "With a window the mask is only the window condition j > p - w: it is not combined (&) with the causal "
          "condition j <= p, so every query also sees all future keys.",
          {"causal_mask": patch(CM, ("visible = visible & (key_positions > query_positions - window)",
                                     "visible = key_positions > query_positions - window"))},
          ("causal_mask",)),
    Entry("f01-window-symmetric-distance", "single",
          "The sliding window is written as a symmetric band |p - j| < w and replaces the causal mask instead of "
          "being combined with it, so a query also sees the next w - 1 future keys.",
          {"causal_mask": patch(CM, ("visible = visible & (key_positions > query_positions - window)",
                                     "visible = (query_positions - key_positions).abs() < window"))},
          ("causal_mask",)),
    Entry("f01-window-last-w-keys-for-all", "single",
          "The window keeps the last w keys of the whole sequence (j >= k_len - w) for every query, as in the "
          "one-token decode example, instead of the w keys ending at each query's own position p; with several "
          "queries the earlier ones lose their own window.",
          {"causal_mask": patch(CM, ("visible = visible & (key_positions > query_positions - window)",
                                     "visible = visible & (key_positions >= k_len - window)"))},
          ("causal_mask",)),
    Entry("f01-window-triu-sign", "single",
          "The window is cut with triu and the diagonal has the wrong sign: triu(diagonal=w - 1 - offset) keeps "
          "keys at or after p + w - 1 instead of after p - w (diagonal should be offset - w + 1, offset = "
          "k_len - q_len), so for w > 1 rows lose almost all their keys.",
          {"causal_mask": patch(CM, ("visible = visible & (key_positions > query_positions - window)",
                                     "visible = visible & torch.ones(q_len, k_len, dtype=torch.bool).triu("
                                     "diagonal=window - 1 - (k_len - q_len))"))},
          ("causal_mask",)),
    Entry("f01-window-float-band", "single",
          "The windowed mask is built as torch.ones(q_len, k_len).tril(offset).triu(offset - w + 1) and returned "
          "without .bool(): with a window the mask is float32 0/1, not torch.bool.",
          {"causal_mask": patch(CM, ("visible = visible & (key_positions > query_positions - window)",
                                     "offset = k_len - q_len\n"
                                     "        visible = torch.ones(q_len, k_len).tril(diagonal=offset).triu(diagonal=offset - window + 1)"))},
          ("causal_mask",)),

    # ---------------- online_softmax_attention ----------------
    Entry("f01-online-a-not-rescaled", "single",
          "When the running max grows, only z is multiplied by exp(m - m'); the running numerator a keeps its old "
          "scale (a' = a + sum p v), so blocks seen before a larger max are over-weighted.",
          {"online_softmax_attention": patch(OS, ("a = a * rescale + p @ v_block", "a = a + p @ v_block"))},
          ("online_softmax_attention",)),
    Entry("f01-online-z-not-rescaled", "single",
          "When the running max grows, only a is multiplied by exp(m - m'); the running sum z is not "
          "(z' = z + sum p), so the denominator mixes sums taken against different maxima.",
          {"online_softmax_attention": patch(OS, ("z = z * rescale + p.sum(dim=-1, keepdim=True)",
                                                  "z = z + p.sum(dim=-1, keepdim=True)"))},
          ("online_softmax_attention",)),
    Entry("f01-online-rescale-sign", "single",
          "The rescale factor has its exponent reversed: z and a are multiplied by exp(m' - m) (>= 1) instead of "
          "exp(m - m') when the running max grows.",
          {"online_softmax_attention": patch(OS, ("rescale = torch.exp(m - shift)", "rescale = torch.exp(shift - m)"))},
          ("online_softmax_attention",)),
    Entry("f01-online-no-safe-shift", "single",
          "No guard for a running max of -inf: the shift is m' itself, so a query whose keys in the blocks so far "
          "are all masked computes exp(-inf - (-inf)) = NaN, and the NaN stays in z and a (fully masked rows, and "
          "rows whose first blocks are masked, come out NaN).",
          {"online_softmax_attention": patch(OS, ("shift = m_new.masked_fill(m_new == float(\"-inf\"), 0.0)",
                                                  "shift = m_new"))},
          ("online_softmax_attention",)),
    Entry("f01-online-divide-by-zero-z", "single",
          "The final output is a / z with no case for z = 0: a fully masked query gives 0 / 0 = NaN instead of a "
          "row of zeros.",
          {"online_softmax_attention": patch(OS, ("out = torch.where(z > 0, a / z, 0.0)", "out = a / z"))},
          ("online_softmax_attention",)),
    Entry("f01-online-mask-not-sliced", "raises",
          "The mask is not cut into blocks with the keys: the whole [.., Tq, Tk] mask is applied to each "
          "[.., Tq, block_size] score block, which fails to broadcast whenever Tk > block_size.",
          {"online_softmax_attention": patch(OS, ("scores = torch.where(mask[..., start:start + block_size], scores, float(\"-inf\"))",
                                                  "scores = torch.where(mask, scores, float(\"-inf\"))"))},
          ("online_softmax_attention",)),
    Entry("f01-online-mask-not-expanded", "raises",
          "A mask whose last (key) dim is 1 is sliced per block without first being expanded to Tk, so for the "
          "second block mask[..., start:start + b] is empty and no longer broadcasts against the score block.",
          {"online_softmax_attention": patch(OS, ("        mask = mask.expand(*mask.shape[:-1], k_len)\n", "        pass\n"))},
          ("online_softmax_attention",)),
    Entry("f01-online-unscaled-scores", "single",
          "Each block's scores are computed as q @ k^T without dividing by sqrt(D) (written out by hand instead of "
          "calling attention_scores).",
          {"online_softmax_attention": patch(OS, ("scores = attention_scores(q.to(work), k_block)",
                                                  "scores = q.to(work) @ k_block.transpose(-2, -1)"))},
          ("online_softmax_attention",)),
    Entry("f01-online-block-max-not-running", "single",
          "The shift m' is the current block's max only (m' = max_j s_j), not the running max max(m, max_j s_j): "
          "when a later block has smaller scores, exp(m - m') overflows to inf for large scores, giving inf/NaN "
          "(and masked blocks give a -inf max).",
          {"online_softmax_attention": patch(OS, ("m_new = torch.maximum(m, scores.amax(dim=-1, keepdim=True))",
                                                  "m_new = scores.amax(dim=-1, keepdim=True)"))},
          ("online_softmax_attention",)),
    Entry("f01-online-no-max-subtraction", "single",
          "No max is subtracted before exp (p = exp(s), z and a never rescaled): correct for small scores but "
          "exp overflows to inf (NaN output) once scores are in the hundreds or thousands.",
          {"online_softmax_attention": patch(OS, ("p = torch.exp(scores - shift)", "p = torch.exp(scores)"),
                                             ("rescale = torch.exp(m - shift)", "rescale = torch.ones_like(m)"))},
          ("online_softmax_attention",)),
    Entry("f01-online-drops-last-block", "single",
          "The block loop is range(0, Tk - block_size + 1, block_size), so when Tk is not a multiple of block_size "
          "the last, shorter block of keys is never read (and Tk < block_size reads no key at all).",
          {"online_softmax_attention": patch(OS, ("for start in range(0, k_len, block_size):",
                                                  "for start in range(0, k_len - block_size + 1, block_size):"),
                                             ("    out = torch.where(z > 0, a / z, 0.0)",
                                              "    if z is None:\n        return torch.zeros(*q.shape[:-1], v.shape[-1], dtype=q.dtype)\n"
                                              "    out = torch.where(z > 0, a / z, 0.0)"))},
          ("online_softmax_attention",)),
    Entry("f01-online-float32-out", "single",
          "The result is left in the float32 accumulation dtype: for bfloat16/float16 inputs the output is float32 "
          "instead of q's dtype.",
          {"online_softmax_attention": patch(OS, ("return out.to(q.dtype)", "return out"))},
          ("online_softmax_attention",)),
    Entry("f01-online-p-with-old-max", "single",
          "The block's exponentials are taken against the old running max (p = exp(s - m) with the previous, "
          "safe-shifted m) while z and a are rescaled to the new max m', so each block's terms are on a "
          "different base than the accumulated ones.",
          {"online_softmax_attention": patch(OS, ("p = torch.exp(scores - shift)",
                                                  "p = torch.exp(scores - m.masked_fill(m == float(\"-inf\"), 0.0))"))},
          ("online_softmax_attention",)),
    Entry("f01-online-masked-zero-fill", "single",
          "Masked scores are set to 0 instead of -inf, so masked keys still get weight exp(0 - m) (and a fully "
          "masked row averages all its values).",
          {"online_softmax_attention": patch(OS, ("scores = torch.where(mask[..., start:start + block_size], scores, float(\"-inf\"))",
                                                  "scores = torch.where(mask[..., start:start + block_size], scores, 0.0)"))},
          ("online_softmax_attention",)),
    Entry("f01-online-finfo-min-fill", "single",
          "Masked scores are filled with torch.finfo(dtype).min (carried over from masked_softmax) instead of -inf: "
          "a fully masked query then has a finite running max, every masked key gets exp(0) = 1 and the row comes "
          "out as the mean of the values instead of zeros.",
          {"online_softmax_attention": patch(OS, ("scores = torch.where(mask[..., start:start + block_size], scores, float(\"-inf\"))",
                                                  "scores = torch.where(mask[..., start:start + block_size], scores, torch.finfo(work).min)"))},
          ("online_softmax_attention",)),
    Entry("f01-online-max-over-queries", "raises",
          "The block max is taken over the query dim (amax(dim=-2)) instead of the key dim, so the running max "
          "becomes [.., Tq, b] and z, a no longer line up (a * rescale fails to broadcast).",
          {"online_softmax_attention": patch(OS, ("m_new = torch.maximum(m, scores.amax(dim=-1, keepdim=True))",
                                                  "m_new = torch.maximum(m, scores.amax(dim=-2, keepdim=True))"))},
          ("online_softmax_attention",)),
    Entry("f01-online-block-size-as-count", "raises",
          "block_size is read as the number of blocks: the loop steps by Tk // block_size keys, which is 0 (range() "
          "raises ValueError) whenever Tk < block_size.",
          {"online_softmax_attention": patch(OS, ("for start in range(0, k_len, block_size):",
                                                  "step = k_len // block_size\n"
                                                  "    for start in range(0, k_len, step):"),
                                             ("k[..., start:start + block_size, :]", "k[..., start:start + step, :]"),
                                             ("v[..., start:start + block_size, :]", "v[..., start:start + step, :]"),
                                             ("mask[..., start:start + block_size]", "mask[..., start:start + step]"))},
          ("online_softmax_attention",)),
    Entry("f01-online-no-final-divide", "single",
          "The final normalisation is missing: it returns the running numerator a (sum of exp(s - m) v) without "
          "dividing by the running sum z.",
          {"online_softmax_attention": patch(OS, ("out = torch.where(z > 0, a / z, 0.0)", "out = a"))},
          ("online_softmax_attention",)),

    # ---------------- doubles over the other exercises ----------------
    _double_same("f01-double-scores-kT-and-sqrt-tk",
                 "(1) attention_scores transposes k with k.T, which reverses every dim of a batched [.., Tk, D] "
                 "tensor instead of swapping the last two (k.transpose(-2, -1)); (2) it divides by sqrt(Tk), the "
                 "number of keys, instead of sqrt(D) = q.shape[-1].",
                 "attention_scores", C["attention_scores"],
                 ("return q @ k.transpose(-2, -1) / math.sqrt(head_dim)",
                  "return q @ k.T / math.sqrt(head_dim)"),
                 ("head_dim = q.shape[-1]", "head_dim = k.shape[-2]"),
                 ("attention_scores", "attention", "online_softmax_attention")),
    _double("f01-double-softmax-order-and-padding-shape",
            "(1) masked_softmax applies the softmax to the raw scores first and zeroes the masked weights "
            "afterwards, so masked keys still take a share of the denominator and rows no longer sum to 1 (and a "
            "fully masked row is zeros only by accident); (2) padding_mask returns [B, 1, Tk] instead of "
            "[B, 1, 1, Tk], so B lines up with the heads dim when broadcast against [B, H, Tq, Tk].",
            (("masked_softmax", patch(C["masked_softmax"],
                                      ("    lowest = torch.finfo(scores.dtype).min\n", ""),
                                      ("weights = torch.softmax(torch.where(mask, scores, lowest), dim=-1)",
                                       "weights = torch.softmax(scores, dim=-1)"))),
             ("padding_mask", patch(C["padding_mask"], ("[:, None, None, :]", "[:, None, :]")))),
            ("padding_mask", "masked_softmax", "attention")),
    _double("f01-double-causal-topleft-and-no-final-zero",
            "(1) causal_mask ignores k_len - q_len and builds the lower triangle from the top-left corner "
            "(key j visible to query i iff j <= i), so with a KV cache (k_len > q_len) the new queries see only the "
            "first keys; (2) masked_softmax fills masked scores with the lowest finite value but returns the softmax "
            "without zeroing the masked entries afterwards, so a fully masked row comes out uniform (1/Tk each) "
            "instead of all zeros.",
            (("causal_mask", patch(CM, ("torch.arange(q_len).unsqueeze(1) + (k_len - q_len)",
                                        "torch.arange(q_len).unsqueeze(1)"))),
             ("masked_softmax", patch(C["masked_softmax"], ("return torch.where(mask, weights, 0.0)",
                                                            "return weights")))),
            ("causal_mask", "masked_softmax", "attention")),
]

# The definitions this writer did not write are the first writer's (a01), so that the notebook is whole.
HEADER = a01.HEADER + "".join(line + "\n" for line in HEADER.splitlines() if line not in a01.HEADER.splitlines())
CORRECT = {**a01.CORRECT, **CORRECT}
