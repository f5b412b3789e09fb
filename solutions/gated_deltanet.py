"""Reference for 08_gated_deltanet: linear attention as an RNN, the delta rule, its gated form (recurrent and
chunked), the depthwise causal conv and Qwen3.5's Gated DeltaNet layer (layers 0-2, 4-6, ... of Qwen3.5-0.8B).

Shapes: ``q, k [B, H, T, Dk]``, ``v [B, H, T, Dv]``, ``g, beta [B, H, T]``; the state is ``S [B, H, Dk, Dv]``
and each position reads ``o_t = q_t S_t`` (the layout of Hugging Face's ``torch_recurrent_gated_delta_rule``).
The rule functions use ``q`` as given: the layer scales it by ``Dk^-1/2`` before calling them. They work in
float32 at least and return ``o`` and the state in the dtype of ``q``.
"""
import torch
import torch.nn.functional as F
from torch import nn


def _work_dtype(x: torch.Tensor) -> torch.dtype:
    """float32 for half precision (a state summed over many steps needs the bits), else the input's own."""
    return torch.promote_types(x.dtype, torch.float32)


def _initial_state(q: torch.Tensor, v: torch.Tensor, state, dtype: torch.dtype) -> torch.Tensor:
    """``state`` in ``dtype``, or a zero state ``[B, H, Dk, Dv]``."""
    if state is None:
        return q.new_zeros(*q.shape[:-2], q.shape[-1], v.shape[-1], dtype=dtype)
    return state.to(dtype)


def linear_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """Causal linear attention, parallel form: ``o_t = Σ_{j≤t} (q_t·k_j) v_j``, ``o [B, H, T, Dv]``."""
    seq = q.shape[-2]
    causal = torch.ones(seq, seq, dtype=torch.bool, device=q.device).tril()
    return (q @ k.transpose(-2, -1)).masked_fill(~causal, 0.0) @ v


def linear_attention_recurrent(q, k, v, state=None):
    """Causal linear attention as an RNN: ``S_t = S_{t-1} + k_t v_tᵀ``, ``o_t = q_t S_t``.

    Returns ``(o [B, H, T, Dv], S [B, H, Dk, Dv])``; starting from a returned ``S`` continues the sequence.
    """
    out_dtype = q.dtype
    work = _work_dtype(q)
    q, k, v = q.to(work), k.to(work), v.to(work)
    state = _initial_state(q, v, state, work)
    out = []
    for t in range(q.shape[-2]):
        state = state + k[..., t, :, None] * v[..., t, None, :]
        out.append((q[..., t, :, None] * state).sum(-2))
    return torch.stack(out, dim=-2).to(out_dtype), state.to(out_dtype)


def delta_rule(q, k, v, beta, state=None):
    """The delta rule: ``S_t = S_{t-1} + k_t (β_t (v_t − S_{t-1}ᵀ k_t))ᵀ``, ``o_t = q_t S_t``.

    It writes the correction between the value and what the state already gives for the key (an online
    least-squares step), so it can overwrite. Returns ``(o [B, H, T, Dv], S [B, H, Dk, Dv])``.
    """
    return gated_delta_rule(q, k, v, torch.zeros_like(beta), beta, state)


def gated_delta_rule(q, k, v, g, beta, state=None):
    """The gated delta rule, one position at a time, as Hugging Face's ``torch_recurrent_gated_delta_rule``:

    ``S ← exp(g_t) S``; ``kv_mem = k_tᵀ S``; ``δ = β_t (v_t − kv_mem)``; ``S ← S + k_t δᵀ``; ``o_t = q_t S``.

    The decay comes first, before the read and the write. ``g [B, H, T]`` is the log of the decay (≤ 0),
    ``beta [B, H, T]`` the write strength. Returns ``(o [B, H, T, Dv], S [B, H, Dk, Dv])``.
    """
    out_dtype = q.dtype
    work = _work_dtype(q)
    q, k, v, g, beta = (t.to(work) for t in (q, k, v, g, beta))
    state = _initial_state(q, v, state, work)
    out = []
    for t in range(q.shape[-2]):
        state = state * g[..., t, None, None].exp()
        k_t = k[..., t, :]
        kv_mem = (k_t[..., :, None] * state).sum(-2)
        delta = (v[..., t, :] - kv_mem) * beta[..., t, None]
        state = state + k_t[..., :, None] * delta[..., None, :]
        out.append((q[..., t, :, None] * state).sum(-2))
    return torch.stack(out, dim=-2).to(out_dtype), state.to(out_dtype)


def _chunk(q, k, v, g, beta, state):
    """One chunk of ``c`` positions from the state ``S`` at its start: ``(o [B, H, c, Dv], S at its end)``.

    With ``γ_i = Σ_{j≤i} g_j`` inside the chunk and ``Γ_ij = exp(γ_i − γ_j)`` for ``j ≤ i``, the ``c`` writes
    ``δ_i = β_i (v_i − exp(γ_i) S_0ᵀ k_i − Σ_{j<i} Γ_ij (k_i·k_j) δ_j)`` are one lower-triangular system
    ``(I + A) δ = β v − β exp(γ) K S_0`` with ``A_ij = β_i (k_i·k_j) Γ_ij`` for ``j < i`` (the UT form).
    """
    c = q.shape[-2]
    gamma = g.cumsum(-1)
    lower = torch.ones(c, c, dtype=torch.bool, device=q.device).tril()
    decay = (gamma[..., :, None] - gamma[..., None, :]).masked_fill(~lower, float("-inf")).exp()
    strictly = (beta[..., :, None] * (k @ k.transpose(-2, -1)) * decay).tril(-1)
    system = strictly + torch.eye(c, dtype=q.dtype, device=q.device)
    rhs = beta[..., None] * (v - (gamma.exp()[..., None] * k) @ state)
    delta = torch.linalg.solve_triangular(system, rhs, upper=False, unitriangular=True)
    o = (gamma.exp()[..., None] * q) @ state + ((q @ k.transpose(-2, -1)) * decay) @ delta
    to_end = (gamma[..., -1:] - gamma).exp()
    state = gamma[..., -1, None, None].exp() * state + (to_end[..., None] * k).transpose(-2, -1) @ delta
    return o, state


def chunked_gated_delta_rule(q, k, v, g, beta, chunk_size=64, state=None):
    """``gated_delta_rule`` computed ``chunk_size`` positions at a time: inside a chunk with matrix products
    (``_chunk``), from chunk to chunk through the state. The last chunk may be shorter. Returns
    ``(o [B, H, T, Dv], S [B, H, Dk, Dv])``, equal to ``gated_delta_rule``'s for any ``T``."""
    out_dtype = q.dtype
    work = _work_dtype(q)
    q, k, v, g, beta = (t.to(work) for t in (q, k, v, g, beta))
    state = _initial_state(q, v, state, work)
    out = []
    for start in range(0, q.shape[-2], chunk_size):
        part = slice(start, start + chunk_size)
        o, state = _chunk(q[..., part, :], k[..., part, :], v[..., part, :], g[..., part], beta[..., part], state)
        out.append(o)
    return torch.cat(out, dim=-2).to(out_dtype), state.to(out_dtype)


def causal_conv1d(x, weight, conv_state=None):
    """Depthwise causal conv, no activation: ``y[b, c, t] = Σ_j weight[c, 0, j] · x[b, c, t − (K−1) + j]``.

    ``x [B, C, T]``, ``weight [C, 1, K]``; ``conv_state [B, C, K−1]`` holds the ``K−1`` inputs before ``x``
    (zeros when None). Returns ``(y [B, C, T], conv_state [B, C, K−1])``: the last ``K−1`` inputs, so that
    continuing from it equals one run over the concatenation.
    """
    channels, _, width = weight.shape
    past = x.new_zeros(x.shape[0], channels, width - 1) if conv_state is None else conv_state.to(x.dtype)
    full = torch.cat([past, x], dim=-1)
    y = F.conv1d(full, weight.to(x.dtype), groups=channels)
    return y, full[..., full.shape[-1] - (width - 1):]


def l2_normalize(x: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """``x / sqrt(Σ x² + eps)`` over the last dim (Hugging Face's and FLA's ``l2norm``)."""
    return x * torch.rsqrt(x.pow(2).sum(-1, keepdim=True) + eps)


class GatedRMSNorm(nn.Module):
    """``RMSNorm(o) · SiLU(z)`` per value head: ``o · rsqrt(mean(o²) + eps) · weight · SiLU(z)``, in float32,
    cast back. A plain RMSNorm (the weight starts at ones), unlike the zero-centred norms of layer 3."""

    def __init__(self, dim: int, eps: float = 1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, o: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
        o32 = o.float()
        normed = o32 * torch.rsqrt(o32.pow(2).mean(-1, keepdim=True) + self.eps)
        return (normed * self.weight.float() * F.silu(z.float())).to(o.dtype)


class GatedDeltaNetCache:
    """What one Gated DeltaNet layer carries from one call to the next, in place of a growing K/V.

    ``conv_state [B, conv_dim, K−1]``: the last ``K−1`` inputs of the conv (``in_proj_qkv``'s outputs, after
    padding is zeroed); ``recurrent_state [B, H_v, Dk, Dv]``: the delta rule's state. Both are None in a new
    cache; ``update(conv_state, recurrent_state)`` replaces them. Neither grows with the number of positions.
    """

    def __init__(self):
        self.conv_state = None
        self.recurrent_state = None

    def update(self, conv_state: torch.Tensor, recurrent_state: torch.Tensor) -> None:
        self.conv_state, self.recurrent_state = conv_state, recurrent_state


class Qwen35GatedDeltaNet(nn.Module):
    """Qwen3.5's Gated DeltaNet layer, with Hugging Face's parameter names (a checkpoint's ``linear_attn``
    weights load unchanged). ``config`` has Hugging Face's attribute names: ``hidden_size``,
    ``linear_num_key_heads`` (``H_k``), ``linear_num_value_heads`` (``H_v``, a multiple of ``H_k``),
    ``linear_key_head_dim`` (``Dk``), ``linear_value_head_dim`` (``Dv``), ``linear_conv_kernel_dim`` (``K``),
    ``rms_norm_eps``.

    ``in_proj_qkv [2·H_k·Dk + H_v·Dv, hidden]`` (q, then k, then v), ``in_proj_z [H_v·Dv, hidden]``,
    ``in_proj_b``, ``in_proj_a [H_v, hidden]``, ``conv1d.weight [conv_dim, 1, K]``, ``dt_bias``, ``A_log [H_v]``,
    ``norm.weight [Dv]``, ``out_proj [hidden, H_v·Dv]``.
    """

    def __init__(self, config):
        super().__init__()
        self.num_k_heads, self.num_v_heads = config.linear_num_key_heads, config.linear_num_value_heads
        self.head_k_dim, self.head_v_dim = config.linear_key_head_dim, config.linear_value_head_dim
        self.key_dim, self.value_dim = self.num_k_heads * self.head_k_dim, self.num_v_heads * self.head_v_dim
        hidden, kernel = config.hidden_size, config.linear_conv_kernel_dim
        conv_dim = 2 * self.key_dim + self.value_dim
        self.in_proj_qkv = nn.Linear(hidden, conv_dim, bias=False)
        self.in_proj_z = nn.Linear(hidden, self.value_dim, bias=False)
        self.in_proj_b = nn.Linear(hidden, self.num_v_heads, bias=False)
        self.in_proj_a = nn.Linear(hidden, self.num_v_heads, bias=False)
        self.conv1d = nn.Conv1d(conv_dim, conv_dim, kernel, groups=conv_dim, padding=kernel - 1, bias=False)
        self.dt_bias = nn.Parameter(torch.ones(self.num_v_heads))
        self.A_log = nn.Parameter(torch.zeros(self.num_v_heads))
        self.norm = GatedRMSNorm(self.head_v_dim, config.rms_norm_eps)
        self.out_proj = nn.Linear(self.value_dim, hidden, bias=False)

    def forward(self, x, attention_mask=None, cache=None):
        """``x [B, T, hidden]`` → ``(out [B, T, hidden], cache)``.

        ``attention_mask [B, L + T]`` (1 = real token; its last ``T`` columns are this call's) zeroes the
        padding positions of ``x`` before anything reads them, as Hugging Face does. ``cache`` (a
        ``GatedDeltaNetCache``, or None) is read and updated in place and returned; decoding through it
        equals one pass over the whole sequence.
        """
        seq = x.shape[1]
        if attention_mask is not None:
            x = x * attention_mask[:, -seq:, None].to(x.dtype)
        qkv, conv_state = self.convolve(self.in_proj_qkv(x), cache)
        q, k, v = self.heads(qkv)
        beta, g = self.gates(x)
        o, state = self.core(q, k, v, g, beta, cache)
        if cache is not None:
            cache.update(conv_state, state)
        return self.output(o, x), cache

    def convolve(self, mixed, cache):
        """``in_proj_qkv``'s output ``[B, T, conv_dim]`` through the causal conv and SiLU, continuing from the
        cache's conv state: ``(qkv [B, T, conv_dim], conv_state)``."""
        y, conv_state = causal_conv1d(mixed.transpose(1, 2), self.conv1d.weight,
                                      None if cache is None else cache.conv_state)
        return F.silu(y).transpose(1, 2), conv_state

    def heads(self, qkv):
        """q, k ``[B, H_v, T, Dk]`` (L2-normalised, q scaled by ``Dk^-1/2``, key heads repeated for the value
        heads: value head ``h`` reads key head ``h // (H_v / H_k)``) and v ``[B, H_v, T, Dv]``."""
        q, k, v = qkv.split([self.key_dim, self.key_dim, self.value_dim], dim=-1)
        q, k = (l2_normalize(t.unflatten(-1, (self.num_k_heads, self.head_k_dim)).transpose(1, 2).float())
                for t in (q, k))
        q = q * self.head_k_dim ** -0.5
        n_rep = self.num_v_heads // self.num_k_heads
        q, k = q.repeat_interleave(n_rep, dim=1), k.repeat_interleave(n_rep, dim=1)
        v = v.unflatten(-1, (self.num_v_heads, self.head_v_dim)).transpose(1, 2)
        return q.to(qkv.dtype), k.to(qkv.dtype), v

    def gates(self, x):
        """``β = sigmoid(b)`` and ``g = −exp(A_log) · softplus(a + dt_bias)``, ``[B, H_v, T]`` each (g in
        float32 at least, so that ``exp(A_log)`` does not overflow in half precision)."""
        work = _work_dtype(x)
        beta = torch.sigmoid(self.in_proj_b(x)).transpose(1, 2)
        g = -self.A_log.to(work).exp() * F.softplus(self.in_proj_a(x).to(work) + self.dt_bias.to(work))
        return beta, g.transpose(1, 2)

    def core(self, q, k, v, g, beta, cache):
        """The gated delta rule (chunked) from the cache's state, in float32 at least: ``(o [B, H_v, T, Dv],
        state)``; the state stays in that precision, as Hugging Face keeps it."""
        work = _work_dtype(q)
        state = None if cache is None else cache.recurrent_state
        o, state = chunked_gated_delta_rule(q.to(work), k.to(work), v.to(work), g.to(work), beta.to(work),
                                            state=state)
        return o.to(v.dtype), state

    def output(self, o, x):
        """The gated norm ``norm(o, z)`` per value head with ``z = in_proj_z(x)``, heads merged, ``out_proj``."""
        z = self.in_proj_z(x).unflatten(-1, (self.num_v_heads, self.head_v_dim))
        return self.out_proj(self.norm(o.transpose(1, 2), z).flatten(-2))
