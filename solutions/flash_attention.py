"""Reference for 09_flash_attention: FlashAttention-2's forward and backward passes, written tile by tile in
PyTorch, and the autograd Function that joins them.

Conventions: ``q [..., Tq, D]``, ``k [..., Tk, D]``, ``v [..., Tk, Dv]`` with the same leading dims, float32 or
float64; scores are scaled by ``1/sqrt(D)``. With ``causal=True`` query i sits at absolute position
``Tk − Tq + i`` and sees the keys ``j ≤`` that position (as ``causal_mask``); a query that sees no key (Tq > Tk)
gets ``o = 0`` and ``lse = −inf``. Neither pass ever holds more than one ``[block_q, block_k]`` score tile.
"""
import torch


def _tiles(length: int, block: int):
    """``(start, stop)`` of each tile of ``block`` positions along ``length``; the last one may be shorter."""
    return [(start, min(start + block, length)) for start in range(0, length, block)]


def _visible(q_start: int, q_stop: int, k_start: int, offset: int) -> bool:
    """Whether the tile of queries ``[q_start, q_stop)`` sees any key from ``k_start`` on under the causal rule:
    its last query, at position ``offset + q_stop − 1``, sees the tile's first key."""
    return k_start <= offset + q_stop - 1


def _tile_scores(q_tile, k_tile, q_start, k_start, causal, offset):
    """Scaled scores ``[..., rows, cols]`` of one tile, with the keys after each query's position at −inf."""
    scores = (q_tile @ k_tile.mT) * q_tile.shape[-1] ** -0.5
    if causal:
        rows = torch.arange(q_start, q_start + q_tile.shape[-2]).unsqueeze(-1) + offset
        cols = torch.arange(k_start, k_start + k_tile.shape[-2])
        scores = scores.masked_fill(cols > rows, float("-inf"))
    return scores


def flash_attention_forward(q, k, v, causal: bool = False, block_q: int = 16, block_k: int = 16):
    """Softmax attention, one ``[block_q, block_k]`` tile of scores at a time. For each tile of queries: a running
    max ``m`` and sum ``l`` per query, the output accumulated unnormalised and rescaled by ``exp(m_old − m_new)``
    whenever the max grows, divided by ``l`` once at the end. Under ``causal`` the key tiles that lie wholly
    after the query tile's last position are skipped. Returns ``o [..., Tq, Dv]`` and the log-sum-exp of each
    row's scores ``lse = m + log l`` ``[..., Tq]``, which the backward pass uses to recompute the probabilities."""
    q_len, k_len = q.shape[-2], k.shape[-2]
    offset = k_len - q_len
    o = q.new_zeros(*q.shape[:-1], v.shape[-1])
    lse = q.new_full(q.shape[:-1], float("-inf"))
    for q_start, q_stop in _tiles(q_len, block_q):
        q_tile = q[..., q_start:q_stop, :]
        running_max = q.new_full(q_tile.shape[:-1], float("-inf"))
        running_sum = q.new_zeros(q_tile.shape[:-1])
        acc = q.new_zeros(*q_tile.shape[:-1], v.shape[-1])
        for k_start, k_stop in _tiles(k_len, block_k):
            if causal and not _visible(q_start, q_stop, k_start, offset):
                break  # so is every later tile
            scores = _tile_scores(q_tile, k[..., k_start:k_stop, :], q_start, k_start, causal, offset)
            new_max = torch.maximum(running_max, scores.amax(dim=-1))
            # A row that has seen no key yet keeps the max at −inf: shift it by 0, so exp gives 0, not NaN.
            shift = new_max.masked_fill(new_max == float("-inf"), 0.0)
            p = torch.exp(scores - shift.unsqueeze(-1))
            rescale = torch.exp(running_max - shift)
            running_sum = running_sum * rescale + p.sum(dim=-1)
            acc = acc * rescale.unsqueeze(-1) + p @ v[..., k_start:k_stop, :]
            running_max = new_max
        seen = running_sum > 0
        o[..., q_start:q_stop, :] = torch.where(seen.unsqueeze(-1), acc / running_sum.masked_fill(~seen, 1.0).unsqueeze(-1), 0.0)
        lse[..., q_start:q_stop] = torch.where(seen, running_max + torch.log(running_sum), float("-inf"))
    return o, lse


def flash_attention_backward(q, k, v, o, lse, do, causal: bool = False, block_q: int = 16, block_k: int = 16):
    """The gradients ``(dq, dk, dv)`` of ``o = softmax(q kᵀ/√D) v`` for the upstream gradient ``do [..., Tq, Dv]``,
    without the ``[Tq, Tk]`` probabilities: each tile's ``P = exp(S − lse)`` is recomputed from ``q``, ``k`` and
    the forward's ``lse``. With ``D = rowsum(do ∘ o)`` (``[..., Tq]``): ``dV += Pᵀ dO``, ``dP = dO Vᵀ``,
    ``dS = P ∘ (dP − D)``, ``dQ += dS K/√D``, ``dK += dSᵀ Q/√D``. Key tiles outside, query tiles inside, as
    FlashAttention-2 does; the same causal tiles are skipped as in the forward pass."""
    q_len, k_len = q.shape[-2], k.shape[-2]
    offset = k_len - q_len
    scale = q.shape[-1] ** -0.5
    delta = (do * o).sum(dim=-1)
    # A row that sees no key has lse = −inf and every score −inf: subtracting 0 there makes P = 0, not NaN.
    shift = lse.masked_fill(lse == float("-inf"), 0.0)
    dq, dk, dv = torch.zeros_like(q), torch.zeros_like(k), torch.zeros_like(v)
    for k_start, k_stop in _tiles(k_len, block_k):
        k_tile, v_tile = k[..., k_start:k_stop, :], v[..., k_start:k_stop, :]
        for q_start, q_stop in _tiles(q_len, block_q):
            if causal and not _visible(q_start, q_stop, k_start, offset):
                continue
            rows = slice(q_start, q_stop)
            q_tile, do_tile = q[..., rows, :], do[..., rows, :]
            p = torch.exp(_tile_scores(q_tile, k_tile, q_start, k_start, causal, offset) - shift[..., rows].unsqueeze(-1))
            dv[..., k_start:k_stop, :] += p.mT @ do_tile
            dp = do_tile @ v_tile.mT
            ds = p * (dp - delta[..., rows].unsqueeze(-1))
            dq[..., rows, :] += ds @ k_tile * scale
            dk[..., k_start:k_stop, :] += ds.mT @ q_tile * scale
    return dq, dk, dv


class FlashAttention(torch.autograd.Function):
    """``FlashAttention.apply(q, k, v, causal=False) -> o``: the forward pass keeps ``q, k, v, o, lse`` (not the
    probabilities), the backward pass recomputes them tile by tile."""

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
        return dq, dk, dv, None  # causal is not a tensor: no gradient
