"""08_gated_deltanet: linear_attention, linear_attention_recurrent, delta_rule, gated_delta_rule,
chunked_gated_delta_rule, causal_conv1d, Qwen35GatedDeltaNet.

Qwen35GatedDeltaNet is taken to call the submission's own chunked_gated_delta_rule (in ``core``) and
causal_conv1d (in ``convolve``), so a wrong one of those also lists Qwen35GatedDeltaNet. The notebook's solution
cell for the layer holds GatedRMSNorm too: its mistakes list Qwen35GatedDeltaNet. GatedDeltaNetCache and
l2_normalize are given by the notebook and copied here unchanged.
"""
from . import a01
from .entry import Entry, patch

ASSIGNMENT = "08_gated_deltanet"

HEADER = a01.HEADER

LINEAR = '''
def linear_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """Causal linear attention, parallel form: o_t = sum_{j<=t} (q_t . k_j) v_j."""
    seq = q.shape[-2]
    scores = q @ k.transpose(-2, -1)
    lower = torch.ones(seq, seq, dtype=torch.bool, device=q.device).tril()
    scores = scores.masked_fill(~lower, 0.0)
    return scores @ v
'''

RECURRENT = '''
def linear_attention_recurrent(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                               state: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Causal linear attention as an RNN: S_t = S_{t-1} + k_t^T v_t, o_t = q_t S_t."""
    work = torch.promote_types(q.dtype, torch.float32)
    q32, k32, v32 = q.to(work), k.to(work), v.to(work)
    if state is None:
        S = torch.zeros(*k.shape[:-2], k.shape[-1], v.shape[-1], dtype=work, device=q.device)
    else:
        S = state.to(work)
    outs = []
    for t in range(q.shape[-2]):
        S = S + k32[..., t, :, None] * v32[..., t, None, :]
        outs.append((q32[..., t, :, None] * S).sum(-2))
    o = torch.stack(outs, dim=-2)
    return o.to(q.dtype), S.to(q.dtype)
'''

DELTA = '''
def delta_rule(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, beta: torch.Tensor,
               state: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """The delta rule: S_t = S_{t-1} + k_t^T (beta_t (v_t - k_t S_{t-1})), o_t = q_t S_t."""
    work = torch.promote_types(q.dtype, torch.float32)
    q32, k32, v32, b32 = q.to(work), k.to(work), v.to(work), beta.to(work)
    if state is None:
        S = torch.zeros(*k.shape[:-2], k.shape[-1], v.shape[-1], dtype=work, device=q.device)
    else:
        S = state.to(work)
    outs = []
    for t in range(q.shape[-2]):
        k_t = k32[..., t, :]
        m = (k_t[..., :, None] * S).sum(-2)
        delta = b32[..., t, None] * (v32[..., t, :] - m)
        S = S + k_t[..., :, None] * delta[..., None, :]
        outs.append((q32[..., t, :, None] * S).sum(-2))
    o = torch.stack(outs, dim=-2)
    return o.to(q.dtype), S.to(q.dtype)
'''

GATED = '''
def gated_delta_rule(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, g: torch.Tensor, beta: torch.Tensor,
                     state: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """The gated delta rule: S <- exp(g_t) S; delta = beta_t (v_t - k_t S); S <- S + k_t^T delta; o_t = q_t S."""
    work = torch.promote_types(q.dtype, torch.float32)
    q32, k32, v32 = q.to(work), k.to(work), v.to(work)
    g32, b32 = g.to(work), beta.to(work)
    if state is None:
        S = torch.zeros(*k.shape[:-2], k.shape[-1], v.shape[-1], dtype=work, device=q.device)
    else:
        S = state.to(work)
    outs = []
    for t in range(q.shape[-2]):
        S = S * g32[..., t, None, None].exp()
        k_t = k32[..., t, :]
        m = (k_t[..., :, None] * S).sum(-2)
        delta = b32[..., t, None] * (v32[..., t, :] - m)
        S = S + k_t[..., :, None] * delta[..., None, :]
        outs.append((q32[..., t, :, None] * S).sum(-2))
    o = torch.stack(outs, dim=-2)
    return o.to(q.dtype), S.to(q.dtype)
'''

CHUNKED = '''
def chunked_gated_delta_rule(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, g: torch.Tensor, beta: torch.Tensor,
                             chunk_size: int = 64, state: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """gated_delta_rule, chunk_size positions at a time (the UT transform inside a chunk, the state carried)."""
    out_dtype = q.dtype
    work = torch.promote_types(q.dtype, torch.float32)
    q, k, v, g, beta = q.to(work), k.to(work), v.to(work), g.to(work), beta.to(work)
    seq = q.shape[-2]
    if state is None:
        S = torch.zeros(*k.shape[:-2], k.shape[-1], v.shape[-1], dtype=work, device=q.device)
    else:
        S = state.to(work)
    outs = []
    for start in range(0, seq, chunk_size):
        part = slice(start, start + chunk_size)
        q_c, k_c, v_c = q[..., part, :], k[..., part, :], v[..., part, :]
        g_c, b_c = g[..., part], beta[..., part]
        c = q_c.shape[-2]
        gamma = g_c.cumsum(-1)
        lower = torch.ones(c, c, dtype=torch.bool, device=q.device).tril()
        decay = (gamma[..., :, None] - gamma[..., None, :]).masked_fill(~lower, float("-inf")).exp()
        A = (b_c[..., :, None] * (k_c @ k_c.transpose(-2, -1)) * decay).tril(-1)
        eye = torch.eye(c, dtype=work, device=q.device)
        rhs = b_c[..., None] * (v_c - gamma.exp()[..., None] * (k_c @ S))
        delta = torch.linalg.solve_triangular(eye + A, rhs, upper=False, unitriangular=True)
        o_c = gamma.exp()[..., None] * (q_c @ S) + ((q_c @ k_c.transpose(-2, -1)) * decay) @ delta
        last = gamma[..., -1]
        S = last.exp()[..., None, None] * S + ((last[..., None] - gamma).exp()[..., None] * k_c).transpose(-2, -1) @ delta
        outs.append(o_c)
    return torch.cat(outs, dim=-2).to(out_dtype), S.to(out_dtype)
'''

CONV = '''
def causal_conv1d(x: torch.Tensor, weight: torch.Tensor,
                  conv_state: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Depthwise causal conv, no activation: y[b, c, t] = sum_j weight[c, 0, j] * x[b, c, t - (K-1) + j]."""
    channels, kernel = x.shape[1], weight.shape[-1]
    if conv_state is None:
        conv_state = x.new_zeros(x.shape[0], channels, kernel - 1)
    full = torch.cat([conv_state.to(x.dtype), x], dim=-1)
    y = F.conv1d(full, weight.to(x.dtype), groups=channels)
    return y, full[..., full.shape[-1] - (kernel - 1):]
'''

CACHE = '''
class GatedDeltaNetCache:
    """What one Gated DeltaNet layer carries from one call to the next, in place of a growing K/V.

    conv_state [B, conv_dim, K-1]: the last K-1 inputs of the conv; recurrent_state [B, Hv, Dk, Dv]: the delta
    rule's state. Both None in a new cache; update() replaces them.
    """

    def __init__(self):
        self.conv_state = None
        self.recurrent_state = None

    def update(self, conv_state: torch.Tensor, recurrent_state: torch.Tensor) -> None:
        self.conv_state, self.recurrent_state = conv_state, recurrent_state
'''

L2 = '''
def l2_normalize(x: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """x / sqrt(sum(x^2) + eps) over the last dim, as Hugging Face's (and FLA's) l2norm."""
    return x * torch.rsqrt(x.pow(2).sum(-1, keepdim=True) + eps)
'''

NORM = '''
class GatedRMSNorm(nn.Module):
    """RMSNorm(o) * weight * SiLU(z) over the last dim; weight [dim] starts at ones; computed in float32."""

    def __init__(self, dim: int, eps: float = 1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, o: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
        o32 = o.float()
        normed = o32 * torch.rsqrt(o32.pow(2).mean(dim=-1, keepdim=True) + self.eps)
        normed = normed * self.weight.float() * F.silu(z.float())
        return normed.to(o.dtype)
'''

LAYER = '''
class Qwen35GatedDeltaNet(nn.Module):
    """Qwen3.5's Gated DeltaNet layer, with Hugging Face's parameter names."""

    def __init__(self, config):
        super().__init__()
        self.hidden_size = config.hidden_size
        self.num_k_heads = config.linear_num_key_heads
        self.num_v_heads = config.linear_num_value_heads
        self.head_k_dim = config.linear_key_head_dim
        self.head_v_dim = config.linear_value_head_dim
        self.kernel_size = config.linear_conv_kernel_dim
        self.key_dim = self.num_k_heads * self.head_k_dim
        self.value_dim = self.num_v_heads * self.head_v_dim
        self.conv_dim = 2 * self.key_dim + self.value_dim
        self.in_proj_qkv = nn.Linear(self.hidden_size, self.conv_dim, bias=False)
        self.in_proj_z = nn.Linear(self.hidden_size, self.value_dim, bias=False)
        self.in_proj_b = nn.Linear(self.hidden_size, self.num_v_heads, bias=False)
        self.in_proj_a = nn.Linear(self.hidden_size, self.num_v_heads, bias=False)
        self.conv1d = nn.Conv1d(self.conv_dim, self.conv_dim, self.kernel_size, groups=self.conv_dim,
                                padding=self.kernel_size - 1, bias=False)
        self.dt_bias = nn.Parameter(torch.ones(self.num_v_heads))
        self.A_log = nn.Parameter(torch.zeros(self.num_v_heads))
        self.norm = GatedRMSNorm(self.head_v_dim, config.rms_norm_eps)
        self.out_proj = nn.Linear(self.value_dim, self.hidden_size, bias=False)

    def convolve(self, mixed: torch.Tensor, cache):
        """Step 1: mixed [B, T, conv_dim] -> causal conv (from the cache's conv state) + SiLU -> (qkv, conv_state)."""
        old_state = None if cache is None else cache.conv_state
        y, conv_state = causal_conv1d(mixed.transpose(1, 2), self.conv1d.weight, old_state)
        return F.silu(y).transpose(1, 2), conv_state

    def heads(self, qkv: torch.Tensor):
        """Step 2: qkv [B, T, conv_dim] -> q, k [B, Hv, T, Dk] (L2-normalised, q * Dk^-1/2), v [B, Hv, T, Dv]."""
        q, k, v = qkv.split([self.key_dim, self.key_dim, self.value_dim], dim=-1)
        q = q.unflatten(-1, (self.num_k_heads, self.head_k_dim)).transpose(1, 2)
        k = k.unflatten(-1, (self.num_k_heads, self.head_k_dim)).transpose(1, 2)
        v = v.unflatten(-1, (self.num_v_heads, self.head_v_dim)).transpose(1, 2)
        q = l2_normalize(q.float()) * self.head_k_dim ** -0.5
        k = l2_normalize(k.float())
        n_rep = self.num_v_heads // self.num_k_heads
        q = q.repeat_interleave(n_rep, dim=1).to(qkv.dtype)
        k = k.repeat_interleave(n_rep, dim=1).to(qkv.dtype)
        return q, k, v

    def gates(self, x: torch.Tensor):
        """Step 3: x [B, T, d] -> beta = sigmoid(b), g = -exp(A_log) * softplus(a + dt_bias), [B, Hv, T] each."""
        beta = torch.sigmoid(self.in_proj_b(x)).transpose(1, 2)
        a = self.in_proj_a(x).float()
        g = -self.A_log.float().exp() * F.softplus(a + self.dt_bias.float())
        return beta, g.transpose(1, 2)

    def core(self, q, k, v, g, beta, cache):
        """Step 4: the chunked gated delta rule from the cache's state, in float32 -> (o [B, Hv, T, Dv], state)."""
        initial = None if cache is None else cache.recurrent_state
        o, state = chunked_gated_delta_rule(q.float(), k.float(), v.float(), g.float(), beta.float(), state=initial)
        return o.to(v.dtype), state

    def output(self, o: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        """Step 5: norm(o, z) per value head with z = in_proj_z(x), heads merged, out_proj -> [B, T, d]."""
        z = self.in_proj_z(x).unflatten(-1, (self.num_v_heads, self.head_v_dim))
        o = self.norm(o.transpose(1, 2), z)
        return self.out_proj(o.flatten(2))

    def forward(self, x: torch.Tensor, attention_mask: torch.Tensor | None = None, cache=None):
        seq = x.shape[1]
        if attention_mask is not None:
            x = x * attention_mask[:, -seq:, None].to(x.dtype)  # padding positions write nothing
        qkv, conv_state = self.convolve(self.in_proj_qkv(x), cache)
        q, k, v = self.heads(qkv)
        beta, g = self.gates(x)
        o, state = self.core(q, k, v, g, beta, cache)
        if cache is not None:
            cache.update(conv_state, state)
        return self.output(o, x), cache
'''

CORRECT = {"linear_attention": LINEAR, "linear_attention_recurrent": RECURRENT, "delta_rule": DELTA,
           "gated_delta_rule": GATED, "chunked_gated_delta_rule": CHUNKED, "causal_conv1d": CONV,
           "GatedDeltaNetCache": CACHE, "l2_normalize": L2, "GatedRMSNorm": NORM, "Qwen35GatedDeltaNet": LAYER}

LA, LR, DR, GD = "linear_attention", "linear_attention_recurrent", "delta_rule", "gated_delta_rule"
CH, CV, NM, L = "chunked_gated_delta_rule", "causal_conv1d", "GatedRMSNorm", "Qwen35GatedDeltaNet"

# ---- reusable mistaken definitions (also used by the double entries) ----
LA_STRICT = patch(LINEAR, ("dtype=torch.bool, device=q.device).tril()", "dtype=torch.bool, device=q.device).tril(-1)"))
LR_READ_FIRST = patch(RECURRENT, (
    "        S = S + k32[..., t, :, None] * v32[..., t, None, :]\n"
    "        outs.append((q32[..., t, :, None] * S).sum(-2))\n",
    "        outs.append((q32[..., t, :, None] * S).sum(-2))\n"
    "        S = S + k32[..., t, :, None] * v32[..., t, None, :]\n"))
GD_TIMES_G = patch(GATED, ("S = S * g32[..., t, None, None].exp()", "S = S * g32[..., t, None, None]"))
CH_NO_CARRY = patch(CHUNKED, (
    "        rhs = b_c[..., None] * (v_c - gamma.exp()[..., None] * (k_c @ S))\n"
    "        delta = torch.linalg.solve_triangular(eye + A, rhs, upper=False, unitriangular=True)\n"
    "        o_c = gamma.exp()[..., None] * (q_c @ S) + ((q_c @ k_c.transpose(-2, -1)) * decay) @ delta\n"
    "        last = gamma[..., -1]\n"
    "        S = last.exp()[..., None, None] * S + ",
    "        rhs = b_c[..., None] * (v_c - gamma.exp()[..., None] * (k_c @ S0))\n"
    "        delta = torch.linalg.solve_triangular(eye + A, rhs, upper=False, unitriangular=True)\n"
    "        o_c = gamma.exp()[..., None] * (q_c @ S0) + ((q_c @ k_c.transpose(-2, -1)) * decay) @ delta\n"
    "        last = gamma[..., -1]\n"
    "        S = last.exp()[..., None, None] * S0 + "),
    ("    outs = []\n", "    S0 = S\n    outs = []\n"))
CV_SAME_PADDING = '''
def causal_conv1d(x: torch.Tensor, weight: torch.Tensor,
                  conv_state: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Depthwise causal conv, no activation: y[b, c, t] = sum_j weight[c, 0, j] * x[b, c, t - (K-1) + j]."""
    channels, kernel = x.shape[1], weight.shape[-1]
    if conv_state is None:
        conv_state = x.new_zeros(x.shape[0], channels, kernel - 1)
    y = F.conv1d(x, weight.to(x.dtype), groups=channels, padding="same")
    full = torch.cat([conv_state.to(x.dtype), x], dim=-1)
    return y, full[..., full.shape[-1] - (kernel - 1):]
'''
L_REPEAT_TILED = patch(LAYER, (
    "        q = q.repeat_interleave(n_rep, dim=1).to(qkv.dtype)\n"
    "        k = k.repeat_interleave(n_rep, dim=1).to(qkv.dtype)\n",
    "        q = q.repeat(1, n_rep, 1, 1).to(qkv.dtype)\n"
    "        k = k.repeat(1, n_rep, 1, 1).to(qkv.dtype)\n"))
NM_SIGMOID = patch(NORM, ("F.silu(z.float())", "torch.sigmoid(z.float())"))

ENTRIES = [
    # ---- linear_attention ----
    Entry("08-la-strict-lower", "single",
          "linear_attention masks with tril(-1), dropping the diagonal, so position t does not see its own key "
          "and value (o_0 is 0)",
          {LA: LA_STRICT},
          (LA,)),
    Entry("08-la-scaled-by-sqrt-dk", "single",
          "linear_attention divides the scores q k^T by sqrt(Dk), as in softmax attention, although linear "
          "attention uses the plain dot products",
          {LA: patch(LINEAR, ("scores = q @ k.transpose(-2, -1)", "scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])"))},
          (LA,)),
    Entry("08-la-softmax-habit", "single",
          "linear_attention fills the future with -inf and takes a softmax over the scores, i.e. computes "
          "ordinary (unscaled) softmax attention instead of weighting v by the raw dot products",
          {LA: patch(LINEAR, ("    scores = scores.masked_fill(~lower, 0.0)\n    return scores @ v\n",
                              "    scores = scores.masked_fill(~lower, float(\"-inf\"))\n"
                              "    return torch.softmax(scores, dim=-1) @ v\n"))},
          (LA,)),
    # ---- linear_attention_recurrent ----
    Entry("08-lar-read-before-write", "single",
          "linear_attention_recurrent reads o_t = q_t S before adding k_t^T v_t, so position t does not see "
          "itself (o_t = q_t S_{t-1})",
          {LR: LR_READ_FIRST},
          (LR,)),
    Entry("08-lar-state-transposed", "single",
          "linear_attention_recurrent keeps the state as v^T k, [B, H, Dv, Dk] (and reads it as S q_t), instead "
          "of [B, H, Dk, Dv] = sum k_t^T v_t; the outputs agree but the returned state is transposed and a "
          "correct [Dk, Dv] state passed in is misread",
          {LR: patch(RECURRENT,
                     ("torch.zeros(*k.shape[:-2], k.shape[-1], v.shape[-1],", "torch.zeros(*k.shape[:-2], v.shape[-1], k.shape[-1],"),
                     ("S = S + k32[..., t, :, None] * v32[..., t, None, :]", "S = S + v32[..., t, :, None] * k32[..., t, None, :]"),
                     ("outs.append((q32[..., t, :, None] * S).sum(-2))", "outs.append((S * q32[..., t, None, :]).sum(-1))"))},
          (LR,)),
    Entry("08-lar-ignores-state", "single",
          "linear_attention_recurrent always starts from a zero state and ignores the state argument, so "
          "continuing from a returned state restarts the memory",
          {LR: patch(RECURRENT, ("    if state is None:\n        S = torch.zeros", "    if True:\n        S = torch.zeros"))},
          (LR,)),
    Entry("08-lar-state-in-place", "single",
          "linear_attention_recurrent adds k_t^T v_t to the state in place (S += ...), and S is the caller's "
          "float32 state tensor itself, so the state passed in is overwritten with the final state",
          {LR: patch(RECURRENT, ("S = S + k32[..., t, :, None] * v32[..., t, None, :]", "S += k32[..., t, :, None] * v32[..., t, None, :]"))},
          (LR,)),
    # ---- delta_rule ----
    Entry("08-delta-beta-on-v-only", "single",
          "delta_rule multiplies only v_t by beta: delta = beta_t v_t - k_t S instead of beta_t (v_t - k_t S)",
          {DR: patch(DELTA, ("delta = b32[..., t, None] * (v32[..., t, :] - m)", "delta = b32[..., t, None] * v32[..., t, :] - m"))},
          (DR,)),
    Entry("08-delta-read-before-write", "single",
          "delta_rule reads o_t = q_t S before writing the correction, so o_t uses S_{t-1}",
          {DR: patch(DELTA, (
              "        S = S + k_t[..., :, None] * delta[..., None, :]\n"
              "        outs.append((q32[..., t, :, None] * S).sum(-2))\n",
              "        outs.append((q32[..., t, :, None] * S).sum(-2))\n"
              "        S = S + k_t[..., :, None] * delta[..., None, :]\n"))},
          (DR,)),
    Entry("08-delta-reads-with-q", "single",
          "delta_rule reads what is already stored with the query, m = q_t S, instead of with the key, m = k_t S",
          {DR: patch(DELTA, ("m = (k_t[..., :, None] * S).sum(-2)", "m = (q32[..., t, :, None] * S).sum(-2)"))},
          (DR,)),
    # ---- gated_delta_rule ----
    Entry("08-gated-times-g", "single",
          "gated_delta_rule multiplies the state by g_t instead of exp(g_t) (g is the log of the decay)",
          {GD: GD_TIMES_G},
          (GD,)),
    Entry("08-gated-exp-minus-g", "single",
          "gated_delta_rule multiplies the state by exp(-g_t), growing it, instead of exp(g_t)",
          {GD: patch(GATED, ("S = S * g32[..., t, None, None].exp()", "S = S * (-g32[..., t, None, None]).exp()"))},
          (GD,)),
    Entry("08-gated-decay-after-read", "single",
          "gated_delta_rule reads m = k_t S from the undecayed state and only then decays S before writing, so "
          "the correction beta_t (v_t - k_t S_{t-1}) ignores the decay",
          {GD: patch(GATED, (
              "        S = S * g32[..., t, None, None].exp()\n"
              "        k_t = k32[..., t, :]\n"
              "        m = (k_t[..., :, None] * S).sum(-2)\n",
              "        k_t = k32[..., t, :]\n"
              "        m = (k_t[..., :, None] * S).sum(-2)\n"
              "        S = S * g32[..., t, None, None].exp()\n"))},
          (GD,)),
    Entry("08-gated-decay-at-end", "single",
          "gated_delta_rule decays the state at the end of each step (after the write and the read of o_t) "
          "instead of first, so step t reads and writes with exp(g_{t-1}) and the returned state is decayed once "
          "more",
          {GD: patch(GATED, (
              "        S = S * g32[..., t, None, None].exp()\n"
              "        k_t = k32[..., t, :]\n",
              "        k_t = k32[..., t, :]\n"),
              ("        outs.append((q32[..., t, :, None] * S).sum(-2))\n",
               "        outs.append((q32[..., t, :, None] * S).sum(-2))\n"
               "        S = S * g32[..., t, None, None].exp()\n"))},
          (GD,)),
    # ---- chunked_gated_delta_rule ----
    Entry("08-chunk-no-state-carry", "cascade",
          "chunked_gated_delta_rule starts every chunk from the initial state instead of the state left by the "
          "previous chunk (it computes S but never uses the updated S in the next chunk)",
          {CH: CH_NO_CARRY},
          (CH, L)),
    Entry("08-chunk-drops-last-partial", "raises",
          "chunked_gated_delta_rule loops over T // chunk_size chunks, so the last partial chunk is dropped (and "
          "T < chunk_size gives no chunk at all: torch.cat of an empty list)",
          {CH: patch(CHUNKED, ("    for start in range(0, seq, chunk_size):\n",
                               "    for i in range(seq // chunk_size):\n        start = i * chunk_size\n"))},
          (CH, L)),
    Entry("08-chunk-global-cumsum", "cascade",
          "chunked_gated_delta_rule takes gamma = g.cumsum(-1) over the whole sequence once and slices it per "
          "chunk, so in every chunk after the first exp(gamma) also contains the earlier chunks' decay, which the "
          "carried state already has",
          {CH: patch(CHUNKED, ("        gamma = g_c.cumsum(-1)\n", "        gamma = g_all[..., part]\n"),
                     ("    outs = []\n", "    g_all = g.cumsum(-1)\n    outs = []\n"))},
          (CH, L)),
    Entry("08-chunk-exp-before-subtract", "cascade",
          "chunked_gated_delta_rule computes the decay as exp(gamma_t) * exp(-gamma_j) instead of "
          "exp(gamma_t - gamma_j); for strongly negative g, exp(-gamma_j) overflows to inf and the output is NaN",
          {CH: patch(CHUNKED, (
              "decay = (gamma[..., :, None] - gamma[..., None, :]).masked_fill(~lower, float(\"-inf\")).exp()",
              "decay = (gamma.exp()[..., :, None] * (-gamma).exp()[..., None, :]).masked_fill(~lower, 0.0)"))},
          (CH, L)),
    Entry("08-chunk-mask-after-exp", "cascade",
          "chunked_gated_delta_rule takes exp(gamma_t - gamma_j) first and then multiplies by the 0/1 lower "
          "mask; above the diagonal the difference is positive, exp overflows to inf for strongly negative g "
          "and inf * 0 = NaN",
          {CH: patch(CHUNKED, (
              "decay = (gamma[..., :, None] - gamma[..., None, :]).masked_fill(~lower, float(\"-inf\")).exp()",
              "decay = (gamma[..., :, None] - gamma[..., None, :]).exp() * lower"))},
          (CH, L)),
    Entry("08-chunk-solve-with-diagonal", "cascade",
          "chunked_gated_delta_rule keeps the diagonal in A (tril() instead of tril(-1)) and solves (I + A) "
          "Delta = rhs with torch.linalg.solve, so the diagonal is 1 + beta_t |k_t|^2 instead of 1",
          {CH: patch(CHUNKED, (
              "A = (b_c[..., :, None] * (k_c @ k_c.transpose(-2, -1)) * decay).tril(-1)",
              "A = (b_c[..., :, None] * (k_c @ k_c.transpose(-2, -1)) * decay).tril()"),
              ("delta = torch.linalg.solve_triangular(eye + A, rhs, upper=False, unitriangular=True)",
               "delta = torch.linalg.solve(eye + A, rhs)"))},
          (CH, L)),
    Entry("08-chunk-rhs-no-decay", "cascade",
          "chunked_gated_delta_rule's right-hand side is beta (V - K S0) without the decay exp(gamma_t) on K S0, "
          "so the correction reads the undecayed chunk-start state",
          {CH: patch(CHUNKED, ("rhs = b_c[..., None] * (v_c - gamma.exp()[..., None] * (k_c @ S))",
                               "rhs = b_c[..., None] * (v_c - k_c @ S)"))},
          (CH, L)),
    Entry("08-chunk-state-update-no-row-decay", "cascade",
          "chunked_gated_delta_rule updates the state with K^T Delta instead of (exp(gamma_c - gamma) K)^T Delta, "
          "forgetting that earlier positions of the chunk decay until its end",
          {CH: patch(CHUNKED, ("((last[..., None] - gamma).exp()[..., None] * k_c).transpose(-2, -1) @ delta",
                               "k_c.transpose(-2, -1) @ delta"))},
          (CH, L)),
    Entry("08-chunk-output-strict-mask", "cascade",
          "chunked_gated_delta_rule uses the strictly lower part of the decay (tril(-1)) in the intra-chunk "
          "output (Q K^T * decay) Delta, so position t misses its own correction delta_t",
          {CH: patch(CHUNKED, ("((q_c @ k_c.transpose(-2, -1)) * decay) @ delta",
                               "((q_c @ k_c.transpose(-2, -1)) * decay).tril(-1) @ delta"))},
          (CH, L)),
    Entry("08-chunk-no-float32", "raises",
          "chunked_gated_delta_rule computes in the input dtype instead of float32, and "
          "torch.linalg.solve_triangular has no bfloat16 kernel, so bfloat16 input raises (the layer passes "
          "float32 and is unaffected)",
          {CH: patch(CHUNKED, ("work = torch.promote_types(q.dtype, torch.float32)", "work = q.dtype"))},
          (CH,)),
    # ---- causal_conv1d ----
    Entry("08-conv-same-padding", "cascade",
          "causal_conv1d convolves x alone with padding='same' (symmetric zero padding), so position t sees "
          "inputs after t, and the conv state passed in is never used",
          {CV: CV_SAME_PADDING},
          (CV, L)),
    Entry("08-conv-pad-wrong-end", "cascade",
          "causal_conv1d uses F.conv1d(x, weight, padding=K-1) (both sides) and keeps the last T outputs "
          "instead of the first T, so y_t uses x_{t+K-1} and the conv state is never used",
          {CV: '''
def causal_conv1d(x: torch.Tensor, weight: torch.Tensor,
                  conv_state: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Depthwise causal conv, no activation: y[b, c, t] = sum_j weight[c, 0, j] * x[b, c, t - (K-1) + j]."""
    channels, kernel = x.shape[1], weight.shape[-1]
    if conv_state is None:
        conv_state = x.new_zeros(x.shape[0], channels, kernel - 1)
    seq = x.shape[-1]
    y = F.conv1d(x, weight.to(x.dtype), groups=channels, padding=kernel - 1)[..., -seq:]
    full = torch.cat([conv_state.to(x.dtype), x], dim=-1)
    return y, full[..., -(kernel - 1):]
'''},
          (CV, L)),
    Entry("08-conv-flipped-kernel", "cascade",
          "causal_conv1d flips the kernel (weight.flip(-1), believing F.conv1d needs a true convolution), so "
          "weight[c, 0, 0] multiplies the current input instead of weight[c, 0, K-1]",
          {CV: patch(CONV, ("y = F.conv1d(full, weight.to(x.dtype), groups=channels)",
                            "y = F.conv1d(full, weight.flip(-1).to(x.dtype), groups=channels)"))},
          (CV, L)),
    Entry("08-conv-state-from-x-only", "raises",
          "causal_conv1d's new conv_state is the last K-1 columns of x alone instead of old state + x, so for "
          "T < K-1 it is too short (and keeps nothing of the old state) and the next call fails",
          {CV: patch(CONV, ("return y, full[..., full.shape[-1] - (kernel - 1):]", "return y, x[..., -(kernel - 1):]"))},
          (CV, L)),
    Entry("08-conv-state-not-advanced", "cascade",
          "causal_conv1d returns the conv_state it was given (zeros when None) instead of the last K-1 inputs, "
          "so the cache never advances",
          {CV: patch(CONV, ("return y, full[..., full.shape[-1] - (kernel - 1):]", "return y, conv_state"))},
          (CV, L)),
    Entry("08-conv-float32-output", "cascade",
          "causal_conv1d convolves in float32 (x.float(), weight.float()) and forgets to cast back, so "
          "bfloat16 input gives float32 output and state (and a bfloat16 layer then feeds float32 into its "
          "bfloat16 out_proj)",
          {CV: patch(CONV, ("    full = torch.cat([conv_state.to(x.dtype), x], dim=-1)\n"
                            "    y = F.conv1d(full, weight.to(x.dtype), groups=channels)\n",
                            "    full = torch.cat([conv_state.float(), x.float()], dim=-1)\n"
                            "    y = F.conv1d(full, weight.float(), groups=channels)\n"))},
          (CV, L)),
    # ---- Qwen35GatedDeltaNet (and its GatedRMSNorm) ----
    Entry("08-layer-repeat-tiled", "single",
          "Qwen35GatedDeltaNet shares key heads with repeat(1, n_rep, 1, 1) (value head h reads key head "
          "h % Hk) instead of repeat_interleave (h // (Hv / Hk))",
          {L: L_REPEAT_TILED},
          (L,)),
    Entry("08-layer-q-not-scaled", "single",
          "Qwen35GatedDeltaNet L2-normalises q but never multiplies it by Dk^-1/2",
          {L: patch(LAYER, ("q = l2_normalize(q.float()) * self.head_k_dim ** -0.5", "q = l2_normalize(q.float())"))},
          (L,)),
    Entry("08-layer-l2-over-all-heads", "single",
          "Qwen35GatedDeltaNet L2-normalises q and k over all Hk*Dk features before splitting them into heads, "
          "instead of per head over Dk",
          {L: patch(LAYER, (
              "        q, k, v = qkv.split([self.key_dim, self.key_dim, self.value_dim], dim=-1)\n",
              "        q, k, v = qkv.split([self.key_dim, self.key_dim, self.value_dim], dim=-1)\n"
              "        q = l2_normalize(q.float()).to(qkv.dtype)\n        k = l2_normalize(k.float()).to(qkv.dtype)\n"),
              ("        q = l2_normalize(q.float()) * self.head_k_dim ** -0.5\n        k = l2_normalize(k.float())\n",
               "        q = q.float() * self.head_k_dim ** -0.5\n        k = k.float()\n"))},
          (L,)),
    Entry("08-layer-l2-without-eps", "single",
          "Qwen35GatedDeltaNet normalises q and k as x / x.norm(dim=-1) without the eps of l2_normalize, so the "
          "all-zero q and k of padded positions become NaN (0/0) and poison the state",
          {L: patch(LAYER, ("        q = l2_normalize(q.float()) * self.head_k_dim ** -0.5\n        k = l2_normalize(k.float())\n",
                            "        q = q.float() / q.float().norm(dim=-1, keepdim=True) * self.head_k_dim ** -0.5\n"
                            "        k = k.float() / k.float().norm(dim=-1, keepdim=True)\n"))},
          (L,)),
    Entry("08-layer-heads-reshape-no-transpose", "single",
          "Qwen35GatedDeltaNet splits heads with reshape(B, H, T, D) directly on [B, T, H*D] instead of "
          "unflatten to [B, T, H, D] and transpose, mixing positions and heads",
          {L: patch(LAYER, (
              "        q = q.unflatten(-1, (self.num_k_heads, self.head_k_dim)).transpose(1, 2)\n"
              "        k = k.unflatten(-1, (self.num_k_heads, self.head_k_dim)).transpose(1, 2)\n"
              "        v = v.unflatten(-1, (self.num_v_heads, self.head_v_dim)).transpose(1, 2)\n",
              "        batch, seq = qkv.shape[:2]\n"
              "        q = q.reshape(batch, self.num_k_heads, seq, self.head_k_dim)\n"
              "        k = k.reshape(batch, self.num_k_heads, seq, self.head_k_dim)\n"
              "        v = v.reshape(batch, self.num_v_heads, seq, self.head_v_dim)\n"))},
          (L,)),
    Entry("08-layer-no-silu-after-conv", "single",
          "Qwen35GatedDeltaNet's convolve returns the causal conv output without the SiLU",
          {L: patch(LAYER, ("return F.silu(y).transpose(1, 2), conv_state", "return y.transpose(1, 2), conv_state"))},
          (L,)),
    Entry("08-layer-silu-before-conv", "single",
          "Qwen35GatedDeltaNet applies SiLU to in_proj_qkv's output before the conv instead of after it",
          {L: patch(LAYER, (
              "y, conv_state = causal_conv1d(mixed.transpose(1, 2), self.conv1d.weight, old_state)\n"
              "        return F.silu(y).transpose(1, 2), conv_state",
              "y, conv_state = causal_conv1d(F.silu(mixed).transpose(1, 2), self.conv1d.weight, old_state)\n"
              "        return y.transpose(1, 2), conv_state"))},
          (L,)),
    Entry("08-layer-own-conv-module", "single",
          "Qwen35GatedDeltaNet's convolve calls self.conv1d (padding K-1 on both sides, first T outputs) instead "
          "of causal_conv1d with the cached conv state, so cached decoding starts every call from zeros",
          {L: patch(LAYER, (
              "        old_state = None if cache is None else cache.conv_state\n"
              "        y, conv_state = causal_conv1d(mixed.transpose(1, 2), self.conv1d.weight, old_state)\n",
              "        seq = mixed.shape[1]\n"
              "        y = self.conv1d(mixed.transpose(1, 2))[..., :seq]\n"
              "        conv_state = F.pad(mixed.transpose(1, 2), (self.kernel_size - 1, 0))[..., -(self.kernel_size - 1):]\n"))},
          (L,)),
    Entry("08-layer-dt-bias-outside-softplus", "single",
          "Qwen35GatedDeltaNet adds dt_bias after the softplus: g = -exp(A_log) * (softplus(a) + dt_bias) "
          "instead of softplus(a + dt_bias)",
          {L: patch(LAYER, ("F.softplus(a + self.dt_bias.float())", "(F.softplus(a) + self.dt_bias.float())"))},
          (L,)),
    Entry("08-layer-a-log-not-exp", "single",
          "Qwen35GatedDeltaNet uses A = -A_log instead of -exp(A_log), so g = -A_log * softplus(a + dt_bias) "
          "(zero at A_log = 0, and positive, growing, for negative A_log)",
          {L: patch(LAYER, ("g = -self.A_log.float().exp() * F.softplus", "g = -self.A_log.float() * F.softplus"))},
          (L,)),
    Entry("08-layer-g-sign", "single",
          "Qwen35GatedDeltaNet drops the minus sign: g = exp(A_log) * softplus(a + dt_bias) > 0, so the state "
          "grows at every step instead of decaying",
          {L: patch(LAYER, ("g = -self.A_log.float().exp() * F.softplus", "g = self.A_log.float().exp() * F.softplus"))},
          (L,)),
    Entry("08-layer-a-b-swapped", "single",
          "Qwen35GatedDeltaNet swaps the two projections: beta = sigmoid(in_proj_a(x)) and g from in_proj_b(x)",
          {L: patch(LAYER, ("beta = torch.sigmoid(self.in_proj_b(x)).transpose(1, 2)", "beta = torch.sigmoid(self.in_proj_a(x)).transpose(1, 2)"),
                    ("a = self.in_proj_a(x).float()", "a = self.in_proj_b(x).float()"))},
          (L,)),
    Entry("08-layer-core-ignores-cache", "single",
          "Qwen35GatedDeltaNet's core always starts the delta rule from a zero state instead of the cache's "
          "recurrent_state, so cached decoding forgets everything before the current call",
          {L: patch(LAYER, ("state=initial)", "state=None)"))},
          (L,)),
    Entry("08-layer-o-not-cast-back", "raises",
          "Qwen35GatedDeltaNet's core returns the float32 output of the delta rule without casting it back to "
          "v's dtype, so in a bfloat16 layer the float32 norm output meets the bfloat16 out_proj",
          {L: patch(LAYER, ("return o.to(v.dtype), state", "return o, state"))},
          (L,)),
    Entry("08-layer-merge-without-transpose", "single",
          "Qwen35GatedDeltaNet's output reshapes o [B, Hv, T, Dv] straight to [B, T, Hv, Dv] without moving "
          "the heads after time, mixing positions and heads",
          {L: patch(LAYER, ("o = self.norm(o.transpose(1, 2), z)", "o = self.norm(o.reshape(z.shape), z)"))},
          (L,)),
    Entry("08-norm-sigmoid-gate", "single",
          "GatedRMSNorm gates with sigmoid(z) (as the output gate of 05) instead of SiLU(z) = z sigmoid(z)",
          {NM: NM_SIGMOID},
          (L,)),
    Entry("08-norm-zero-centered", "single",
          "GatedRMSNorm is written like 06's ZeroCenteredRMSNorm: weight starts at zeros and the norm "
          "multiplies by (1 + weight), so checkpoint weights scale by 1 + w instead of w",
          {NM: patch(NORM, ("self.weight = nn.Parameter(torch.ones(dim))", "self.weight = nn.Parameter(torch.zeros(dim))"),
                     ("normed * self.weight.float() *", "normed * (1.0 + self.weight.float()) *"))},
          (L,)),
    Entry("08-norm-over-all-heads", "raises",
          "Qwen35GatedDeltaNet merges the heads before the norm and calls norm on [B, T, Hv*Dv], normalising over "
          "all heads; the [Dv] weight does not broadcast against Hv*Dv features",
          {L: patch(LAYER, (
              "        z = self.in_proj_z(x).unflatten(-1, (self.num_v_heads, self.head_v_dim))\n"
              "        o = self.norm(o.transpose(1, 2), z)\n"
              "        return self.out_proj(o.flatten(2))\n",
              "        z = self.in_proj_z(x)\n"
              "        o = self.norm(o.transpose(1, 2).flatten(2), z)\n"
              "        return self.out_proj(o)\n"))},
          (L,)),
    # ---- two mistakes ----
    Entry("08-double-strict-mask-and-read-first", "double",
          "two mistakes: linear_attention masks with tril(-1) (no diagonal), and linear_attention_recurrent reads "
          "o_t before adding k_t^T v_t; both leave out position t itself",
          {LA: LA_STRICT, LR: LR_READ_FIRST},
          (LA, LR)),
    Entry("08-double-times-g-and-no-carry", "double",
          "two mistakes: gated_delta_rule multiplies the state by g_t instead of exp(g_t), and "
          "chunked_gated_delta_rule starts every chunk from the initial state instead of the carried one",
          {GD: GD_TIMES_G, CH: CH_NO_CARRY},
          (GD, CH, L)),
    Entry("08-double-same-padding-and-tiled-heads", "double",
          "two mistakes: causal_conv1d uses symmetric 'same' padding (sees the future), and Qwen35GatedDeltaNet "
          "shares key heads with repeat instead of repeat_interleave",
          {CV: CV_SAME_PADDING, L: L_REPEAT_TILED},
          (CV, L)),
    Entry("08-double-sigmoid-gate-and-no-scale", "double",
          "two mistakes in the layer: GatedRMSNorm gates with sigmoid(z) instead of SiLU(z), and q is never "
          "multiplied by Dk^-1/2",
          {NM: NM_SIGMOID,
           L: patch(LAYER, ("q = l2_normalize(q.float()) * self.head_k_dim ** -0.5", "q = l2_normalize(q.float())"))},
          (L,)),
    # A later set, written from the notebooks alone.
    # ---- linear_attention ----
    Entry("08-la-katharopoulos-normaliser", "single",
          "linear_attention divides each output by q_t · sum_{j<=t} k_j (the row sum of the masked scores), the "
          "normaliser of Katharopoulos et al.'s linear attention, which this exercise's o_t = sum_{j<=t} "
          "(q_t · k_j) v_j does not have",
          {LA: patch(LINEAR, ("    return scores @ v\n", "    return (scores @ v) / scores.sum(dim=-1, keepdim=True)\n"))},
          (LA,)),
    Entry("08-la-elu-feature-map", "single",
          "linear_attention first maps q and k through Katharopoulos et al.'s feature map elu(x) + 1, so it uses "
          "the dot products of the mapped vectors instead of the plain q_t · k_j",
          {LA: patch(LINEAR, ("    seq = q.shape[-2]\n",
                              "    q, k = F.elu(q) + 1, F.elu(k) + 1  # positive feature map\n    seq = q.shape[-2]\n"))},
          (LA,)),
    Entry("08-la-scores-k-times-q", "single",
          "linear_attention builds the score matrix as k @ q^T instead of q @ k^T, so entry (t, j) is k_t · q_j "
          "and o_t = sum_{j<=t} (k_t · q_j) v_j",
          {LA: patch(LINEAR, ("scores = q @ k.transpose(-2, -1)", "scores = k @ q.transpose(-2, -1)"))},
          (LA,)),
    # ---- linear_attention_recurrent ----
    Entry("08-lar-reads-state-transposed", "raises",
          "linear_attention_recurrent keeps S as [Dk, Dv] but reads it with the DeltaNet paper's column "
          "convention o_t = S q_t ((S * q_t).sum(-1)), i.e. q_t S^T: it raises a shape error when Dk != Dv and "
          "reads the transposed state when they are equal",
          {LR: patch(RECURRENT, ("outs.append((q32[..., t, :, None] * S).sum(-2))",
                                 "outs.append((S * q32[..., t, None, :]).sum(-1))"))},
          (LR,)),
    Entry("08-lar-state-added-at-end", "single",
          "linear_attention_recurrent starts its loop from zeros and adds the given state only to the final "
          "state after the loop, so the outputs miss the q_t S_0 contribution of the state passed in (the "
          "returned state is right)",
          {LR: patch(RECURRENT, ("    if state is None:\n        S = torch.zeros(*k.shape[:-2], k.shape[-1], v.shape[-1], dtype=work, device=q.device)\n"
                                 "    else:\n        S = state.to(work)\n",
                                 "    S = torch.zeros(*k.shape[:-2], k.shape[-1], v.shape[-1], dtype=work, device=q.device)\n"),
                     ("    o = torch.stack(outs, dim=-2)\n",
                      "    if state is not None:\n        S = S + state.to(work)\n    o = torch.stack(outs, dim=-2)\n"))},
          (LR,)),
    Entry("08-lar-stack-last-dim", "single",
          "linear_attention_recurrent stacks the per-step outputs along dim=-1 instead of dim=-2, returning o as "
          "[B, H, Dv, T] instead of [B, H, T, Dv]",
          {LR: patch(RECURRENT, ("o = torch.stack(outs, dim=-2)", "o = torch.stack(outs, dim=-1)"))},
          (LR,)),
    Entry("08-lar-loops-over-dk", "raises",
          "linear_attention_recurrent loops over range(q.shape[-1]) (Dk) instead of range(q.shape[-2]) (T), so "
          "it returns Dk outputs, and indexing past the last position raises when Dk > T",
          {LR: patch(RECURRENT, ("for t in range(q.shape[-2]):", "for t in range(q.shape[-1]):"))},
          (LR,)),
    # ---- delta_rule ----
    Entry("08-delta-write-transposed", "raises",
          "delta_rule writes the outer product the other way round, delta_t^T k_t ([Dv, Dk]) instead of "
          "k_t^T delta_t ([Dk, Dv]): a shape error when Dk != Dv, and a transposed update when they are equal",
          {DR: patch(DELTA, ("S = S + k_t[..., :, None] * delta[..., None, :]", "S = S + delta[..., :, None] * k_t[..., None, :]"))},
          (DR,)),
    Entry("08-delta-update-sign", "single",
          "delta_rule subtracts the correction, S <- S - k_t^T delta_t, instead of adding it (the sign of the "
          "gradient step flipped), so it moves k_t S away from v_t",
          {DR: patch(DELTA, ("S = S + k_t[..., :, None] * delta[..., None, :]", "S = S - k_t[..., :, None] * delta[..., None, :]"))},
          (DR,)),
    Entry("08-delta-ignores-beta", "single",
          "delta_rule never uses beta: it writes delta = v_t - k_t S instead of beta_t (v_t - k_t S), as if "
          "beta were always 1",
          {DR: patch(DELTA, ("delta = b32[..., t, None] * (v32[..., t, :] - m)", "delta = v32[..., t, :] - m"))},
          (DR,)),
    Entry("08-delta-beta-not-unsqueezed", "raises",
          "delta_rule multiplies by beta[..., t] ([B, H]) without the trailing None, so it broadcasts against "
          "[B, H, Dv] aligned on the wrong dims: a shape error when H != Dv (and wrong heads' betas when the "
          "shapes happen to match)",
          {DR: patch(DELTA, ("delta = b32[..., t, None] * (v32[..., t, :] - m)", "delta = b32[..., t] * (v32[..., t, :] - m)"))},
          (DR,)),
    # ---- gated_delta_rule ----
    Entry("08-gated-decays-twice", "single",
          "gated_delta_rule reads 'decay before the read and the write' as two decays: it multiplies the state "
          "by exp(g_t) before reading k_t S and again before writing, so the state decays by exp(2 g_t) per step "
          "while the correction beta_t (v_t - k_t S) is computed from the once-decayed state",
          {GD: patch(GATED, ("        S = S + k_t[..., :, None] * delta[..., None, :]\n",
                             "        S = S * g32[..., t, None, None].exp()\n"
                             "        S = S + k_t[..., :, None] * delta[..., None, :]\n"))},
          (GD,)),
    Entry("08-gated-cumulative-decay", "single",
          "gated_delta_rule multiplies the state at step t by exp(g_1 + ... + g_t) (the chunked form's cumulative "
          "gamma_t) instead of exp(g_t), so the decay is applied again and again on top of the earlier steps'",
          {GD: patch(GATED, ("S = S * g32[..., t, None, None].exp()", "S = S * gamma32[..., t, None, None].exp()"),
                     ("    outs = []\n", "    gamma32 = g32.cumsum(-1)\n    outs = []\n"))},
          (GD,)),
    Entry("08-gated-math-exp", "raises",
          "gated_delta_rule computes the decay with math.exp(g[..., t]) instead of a tensor exp, which only works "
          "for a one-element tensor: with B·H > 1 it raises",
          {GD: patch(GATED, ("S = S * g32[..., t, None, None].exp()", "S = S * math.exp(g32[..., t])"))},
          (GD,)),
    Entry("08-gated-decay-not-kept", "single",
          "gated_delta_rule computes the decayed state exp(g_t) S into a new variable used only for the read "
          "k_t S, and keeps writing onto (and reading o_t from) the undecayed S, so the state itself never decays",
          {GD: patch(GATED, ("        S = S * g32[..., t, None, None].exp()\n"
                             "        k_t = k32[..., t, :]\n"
                             "        m = (k_t[..., :, None] * S).sum(-2)\n",
                             "        decayed = S * g32[..., t, None, None].exp()\n"
                             "        k_t = k32[..., t, :]\n"
                             "        m = (k_t[..., :, None] * decayed).sum(-2)\n"))},
          (GD,)),
    # ---- chunked_gated_delta_rule ----
    Entry("08-chunk-a-without-beta", "cascade",
          "chunked_gated_delta_rule builds A = (K K^T ⊙ decay), strictly lower, without the factor beta_t on "
          "each row, so the triangular system is (I + A) Delta = rhs with A_tj = e^(gamma_t - gamma_j) k_t·k_j "
          "instead of beta_t e^(gamma_t - gamma_j) k_t·k_j",
          {CH: patch(CHUNKED, ("A = (b_c[..., :, None] * (k_c @ k_c.transpose(-2, -1)) * decay).tril(-1)",
                               "A = ((k_c @ k_c.transpose(-2, -1)) * decay).tril(-1)"))},
          (CH, L)),
    Entry("08-chunk-beta-on-columns", "cascade",
          "chunked_gated_delta_rule multiplies A by beta along the columns (b[..., None, :], beta_j) instead of "
          "the rows (b[..., :, None], beta_t), so A_tj = beta_j e^(gamma_t - gamma_j) k_t·k_j",
          {CH: patch(CHUNKED, ("A = (b_c[..., :, None] * (k_c", "A = (b_c[..., None, :] * (k_c"))},
          (CH, L)),
    Entry("08-chunk-i-minus-a", "cascade",
          "chunked_gated_delta_rule solves (I - A) Delta = rhs instead of (I + A) Delta = rhs (the sign of the "
          "WY/UT system flipped), so the corrections add the earlier positions' writes instead of subtracting them",
          {CH: patch(CHUNKED, ("solve_triangular(eye + A,", "solve_triangular(eye - A,"))},
          (CH, L)),
    Entry("08-chunk-solve-upper", "cascade",
          "chunked_gated_delta_rule calls torch.linalg.solve_triangular with upper=True on the lower-triangular "
          "I + A, so only its upper triangle (the unit diagonal) is read and Delta = rhs: the intra-chunk "
          "corrections are ignored",
          {CH: patch(CHUNKED, ("upper=False, unitriangular=True", "upper=True, unitriangular=True"))},
          (CH, L)),
    Entry("08-chunk-decay-transposed", "cascade",
          "chunked_gated_delta_rule builds the decay matrix as exp(gamma_j - gamma_t) (gamma[..., None, :] - "
          "gamma[..., :, None]) instead of exp(gamma_t - gamma_j), so below the diagonal it grows instead of "
          "decaying (and overflows to inf for strongly negative g)",
          {CH: patch(CHUNKED, ("(gamma[..., :, None] - gamma[..., None, :])", "(gamma[..., None, :] - gamma[..., :, None])"))},
          (CH, L)),
    Entry("08-chunk-state-key-decay-from-start", "cascade",
          "chunked_gated_delta_rule weights the keys in the state update by exp(gamma_t) (decay from the chunk "
          "start) instead of exp(gamma_c - gamma_t) (decay from position t to the chunk end)",
          {CH: patch(CHUNKED, ("((last[..., None] - gamma).exp()[..., None] * k_c)", "(gamma.exp()[..., None] * k_c)"))},
          (CH, L)),
    Entry("08-chunk-state-s0-not-decayed", "cascade",
          "chunked_gated_delta_rule's new state is S_0 + (e^(gamma_c - gamma) K)^T Delta, without the factor "
          "e^(gamma_c) on the chunk-start state S_0, so the carried state never decays across chunks",
          {CH: patch(CHUNKED, ("S = last.exp()[..., None, None] * S + ", "S = S + "))},
          (CH, L)),
    Entry("08-chunk-output-s0-no-decay", "cascade",
          "chunked_gated_delta_rule reads the chunk-start state as Q S_0 without the row decay diag(e^gamma), "
          "so positions inside a chunk read S_0 undecayed",
          {CH: patch(CHUNKED, ("o_c = gamma.exp()[..., None] * (q_c @ S) +", "o_c = q_c @ S +"))},
          (CH, L)),
    Entry("08-chunk-size-not-actual-length", "raises",
          "chunked_gated_delta_rule sizes the chunk's masks and identity with c = chunk_size instead of the "
          "chunk's actual length, so the last, shorter chunk (and any T < chunk_size) raises a shape error",
          {CH: patch(CHUNKED, ("c = q_c.shape[-2]", "c = chunk_size"))},
          (CH, L)),
    Entry("08-chunk-ignores-initial-state", "cascade",
          "chunked_gated_delta_rule always starts from a zero state and never uses the state argument, so "
          "continuing from a returned state (and the layer's cached decoding) restarts the memory",
          {CH: patch(CHUNKED, ("    if state is None:\n        S = torch.zeros(*k.shape[:-2], k.shape[-1], v.shape[-1], dtype=work, device=q.device)\n"
                               "    else:\n        S = state.to(work)\n",
                               "    S = torch.zeros(*k.shape[:-2], k.shape[-1], v.shape[-1], dtype=work, device=q.device)\n"))},
          (CH, L)),
    Entry("08-chunk-exclusive-cumsum", "cascade",
          "chunked_gated_delta_rule takes gamma as the exclusive cumulative sum (g.cumsum(-1) - g, the decay "
          "before step t) instead of the inclusive one, so every position misses its own decay exp(g_t)",
          {CH: patch(CHUNKED, ("gamma = g_c.cumsum(-1)", "gamma = g_c.cumsum(-1) - g_c"))},
          (CH, L)),
    Entry("08-chunk-rhs-no-beta", "cascade",
          "chunked_gated_delta_rule's right-hand side is V - diag(e^gamma) K S_0 without the factor diag(beta), "
          "so every correction is written as if beta_t were 1",
          {CH: patch(CHUNKED, ("rhs = b_c[..., None] * (v_c - gamma.exp()[..., None] * (k_c @ S))",
                               "rhs = v_c - gamma.exp()[..., None] * (k_c @ S)"))},
          (CH, L)),
    Entry("08-chunk-output-float32", "single",
          "chunked_gated_delta_rule never casts the output o back to q's dtype, so bfloat16 input gives a "
          "float32 o (the layer passes float32 and is unaffected)",
          {CH: patch(CHUNKED, ("return torch.cat(outs, dim=-2).to(out_dtype), S.to(out_dtype)",
                               "return torch.cat(outs, dim=-2), S.to(out_dtype)"))},
          (CH,)),
    # ---- causal_conv1d ----
    Entry("08-conv-ignores-given-state", "cascade",
          "causal_conv1d always left-pads x with K-1 zeros for the convolution and uses conv_state only to build "
          "the returned state, so a call that continues from a state ignores the previous inputs",
          {CV: patch(CONV, ("    full = torch.cat([conv_state.to(x.dtype), x], dim=-1)\n"
                            "    y = F.conv1d(full, weight.to(x.dtype), groups=channels)\n",
                            "    y = F.conv1d(F.pad(x, (kernel - 1, 0)), weight.to(x.dtype), groups=channels)\n"
                            "    full = torch.cat([conv_state.to(x.dtype), x], dim=-1)\n"))},
          (CV, L)),
    Entry("08-conv-no-groups", "raises",
          "causal_conv1d calls F.conv1d without groups=C, so the [C, 1, K] weight is read as a full convolution "
          "with one input channel and raises for C > 1",
          {CV: patch(CONV, ("F.conv1d(full, weight.to(x.dtype), groups=channels)", "F.conv1d(full, weight.to(x.dtype))"))},
          (CV, L)),
    Entry("08-conv-state-first-columns", "cascade",
          "causal_conv1d returns the first K-1 columns of cat(conv_state, x) as the new state instead of the "
          "last K-1, so the state does not hold the most recent inputs",
          {CV: patch(CONV, ("return y, full[..., full.shape[-1] - (kernel - 1):]", "return y, full[..., :kernel - 1]"))},
          (CV, L)),
    Entry("08-conv-state-appended-after-x", "cascade",
          "causal_conv1d concatenates the conv state after x (cat(x, state)) instead of before it, so y_t "
          "uses x_t ... x_{t+K-1} (the future) and the old state's values land at the end",
          {CV: patch(CONV, ("full = torch.cat([conv_state.to(x.dtype), x], dim=-1)",
                            "full = torch.cat([x, conv_state.to(x.dtype)], dim=-1)"))},
          (CV, L)),
    Entry("08-conv-weight-not-cast", "raises",
          "causal_conv1d passes the weight to F.conv1d without casting it to x's dtype, so bfloat16 x with a "
          "float32 weight raises a dtype mismatch (a bfloat16 layer, whose weight is bfloat16 too, is unaffected)",
          {CV: patch(CONV, ("F.conv1d(full, weight.to(x.dtype), groups=channels)", "F.conv1d(full, weight, groups=channels)"))},
          (CV,)),
    # ---- Qwen35GatedDeltaNet (and its GatedRMSNorm) ----
    Entry("08-layer-qkv-chunk-thirds", "raises",
          "Qwen35GatedDeltaNet splits in_proj_qkv's output with chunk(3) into three equal parts instead of "
          "split([Hk·Dk, Hk·Dk, Hv·Dv]), which is wrong (and fails to split into heads) whenever Hv·Dv != Hk·Dk",
          {L: patch(LAYER, ("q, k, v = qkv.split([self.key_dim, self.key_dim, self.value_dim], dim=-1)",
                            "q, k, v = qkv.chunk(3, dim=-1)"))},
          (L,)),
    Entry("08-layer-scale-before-l2", "single",
          "Qwen35GatedDeltaNet multiplies q by Dk^-1/2 before the L2 normalisation instead of after it, so the "
          "normalisation undoes the scaling and q stays unit length",
          {L: patch(LAYER, ("q = l2_normalize(q.float()) * self.head_k_dim ** -0.5",
                            "q = l2_normalize(q.float() * self.head_k_dim ** -0.5)"))},
          (L,)),
    Entry("08-layer-k-scaled-too", "single",
          "Qwen35GatedDeltaNet multiplies k as well as q by Dk^-1/2, so the keys written into the delta rule are "
          "no longer unit length",
          {L: patch(LAYER, ("        k = l2_normalize(k.float())\n",
                            "        k = l2_normalize(k.float()) * self.head_k_dim ** -0.5\n"))},
          (L,)),
    Entry("08-layer-v-normalised-too", "single",
          "Qwen35GatedDeltaNet L2-normalises v as well as q and k, so every value written into the state has "
          "unit length",
          {L: patch(LAYER, ("        k = l2_normalize(k.float())\n",
                            "        k = l2_normalize(k.float())\n        v = l2_normalize(v.float()).to(qkv.dtype)\n"))},
          (L,)),
    Entry("08-layer-conv-without-transpose", "raises",
          "Qwen35GatedDeltaNet's convolve passes in_proj_qkv's output [B, T, conv_dim] to causal_conv1d without "
          "transposing it to [B, conv_dim, T], so time is taken for channels and the depthwise weight does not "
          "match",
          {L: patch(LAYER, ("y, conv_state = causal_conv1d(mixed.transpose(1, 2), self.conv1d.weight, old_state)\n"
                            "        return F.silu(y).transpose(1, 2), conv_state",
                            "y, conv_state = causal_conv1d(mixed, self.conv1d.weight, old_state)\n"
                            "        return F.silu(y), conv_state"))},
          (L,)),
    Entry("08-layer-gates-not-transposed", "raises",
          "Qwen35GatedDeltaNet's gates return beta and g as [B, T, Hv] (in_proj_b / in_proj_a's layout) without "
          "transposing them to [B, Hv, T], so the delta rule pairs them with the wrong positions and heads and "
          "raises when T != Hv",
          {L: patch(LAYER, ("beta = torch.sigmoid(self.in_proj_b(x)).transpose(1, 2)", "beta = torch.sigmoid(self.in_proj_b(x))"),
                    ("return beta, g.transpose(1, 2)", "return beta, g"))},
          (L,)),
    Entry("08-layer-core-beta-g-swapped", "single",
          "Qwen35GatedDeltaNet's core calls chunked_gated_delta_rule(q, k, v, beta, g, ...), passing beta where "
          "the signature expects g and g where it expects beta",
          {L: patch(LAYER, ("chunked_gated_delta_rule(q.float(), k.float(), v.float(), g.float(), beta.float(), state=initial)",
                            "chunked_gated_delta_rule(q.float(), k.float(), v.float(), beta.float(), g.float(), state=initial)"))},
          (L,)),
    Entry("08-norm-gate-before-norm", "single",
          "GatedRMSNorm multiplies o by SiLU(z) before normalising, RMSNorm(o · SiLU(z)) · w (the "
          "norm_before_gate=False order of Mamba-2 / FLA), instead of RMSNorm(o) · w · SiLU(z)",
          {NM: patch(NORM, ("        o32 = o.float()\n"
                            "        normed = o32 * torch.rsqrt(o32.pow(2).mean(dim=-1, keepdim=True) + self.eps)\n"
                            "        normed = normed * self.weight.float() * F.silu(z.float())\n",
                            "        gated = o.float() * F.silu(z.float())\n"
                            "        normed = gated * torch.rsqrt(gated.pow(2).mean(dim=-1, keepdim=True) + self.eps)\n"
                            "        normed = normed * self.weight.float()\n"))},
          (L,)),
    Entry("08-norm-init-zeros", "single",
          "GatedRMSNorm initialises its weight to zeros (06's zero-centred habit) while still multiplying by "
          "weight, so a freshly built layer outputs all zeros",
          {NM: patch(NORM, ("self.weight = nn.Parameter(torch.ones(dim))", "self.weight = nn.Parameter(torch.zeros(dim))"))},
          (L,)),
    # ---- two mistakes ----
    Entry("08-double-delta-sign-and-conv-state-first-columns", "double",
          "two mistakes: delta_rule subtracts the correction (S <- S - k_t^T delta_t) instead of adding it, and "
          "causal_conv1d returns the first K-1 columns of cat(state, x) as the new state instead of the last K-1",
          {DR: patch(DELTA, ("S = S + k_t[..., :, None] * delta[..., None, :]", "S = S - k_t[..., :, None] * delta[..., None, :]")),
           CV: patch(CONV, ("return y, full[..., full.shape[-1] - (kernel - 1):]", "return y, full[..., :kernel - 1]"))},
          (DR, CV, L)),
    Entry("08-double-i-minus-a-and-k-scaled", "double",
          "two mistakes: chunked_gated_delta_rule solves (I - A) Delta = rhs instead of (I + A) Delta = rhs, and "
          "Qwen35GatedDeltaNet multiplies k as well as q by Dk^-1/2",
          {CH: patch(CHUNKED, ("solve_triangular(eye + A,", "solve_triangular(eye - A,")),
           L: patch(LAYER, ("        k = l2_normalize(k.float())\n",
                            "        k = l2_normalize(k.float()) * self.head_k_dim ** -0.5\n"))},
          (CH, L)),
    # A held-out set, written from the notebooks alone.
    Entry("08-ho-la-upper-triangle", "single",
          "linear_attention keeps the upper triangle of the scores (triu() instead of tril()), so position t "
          "sums over the keys j >= t, itself and the future, instead of j <= t",
          {LA: patch(LINEAR, ("dtype=torch.bool, device=q.device).tril()", "dtype=torch.bool, device=q.device).triu()"))},
          (LA,)),
    Entry("08-ho-la-reassociated-not-causal", "single",
          "linear_attention uses the reassociated form q (K^T V), summing k_j^T v_j over every position of the "
          "sequence before reading, so there is no causal mask: o_t = q_t S_T includes the future instead of "
          "q_t S_t",
          {LA: '''
def linear_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """Causal linear attention, parallel form: o_t = sum_{j<=t} (q_t . k_j) v_j."""
    memory = k.transpose(-2, -1) @ v   # [B, H, Dk, Dv]
    return q @ memory
'''},
          (LA,)),
    Entry("08-ho-lar-output-not-cast-back", "single",
          "linear_attention_recurrent casts the state back to q's dtype but returns o in the float32 working "
          "precision, so bfloat16 inputs give a float32 o instead of bfloat16",
          {LR: patch(RECURRENT, ("    return o.to(q.dtype), S.to(q.dtype)\n", "    return o, S.to(q.dtype)\n"))},
          (LR,)),
    Entry("08-ho-lar-zero-state-dk-by-dk", "raises",
          "linear_attention_recurrent creates the zero state with k.shape[-1] for both of its last dims, "
          "[B, H, Dk, Dk] instead of [B, H, Dk, Dv], so adding the [Dk, Dv] outer product k_t^T v_t raises a "
          "shape error whenever Dk != Dv (a state passed in is unaffected)",
          {LR: patch(RECURRENT, ("S = torch.zeros(*k.shape[:-2], k.shape[-1], v.shape[-1], dtype=work, device=q.device)",
                                 "S = torch.zeros(*k.shape[:-2], k.shape[-1], k.shape[-1], dtype=work, device=q.device)"))},
          (LR,)),
    Entry("08-ho-delta-read-sums-wrong-dim", "raises",
          "delta_rule reads what is stored with (k_t[..., :, None] * S).sum(-1), summing over Dv instead of Dk, so "
          "m is [B, H, Dk] (row sums of S weighted by k_t) instead of k_t S [B, H, Dv]: v_t - m raises a shape "
          "error when Dk != Dv and is silently wrong when they are equal",
          {DR: patch(DELTA, ("m = (k_t[..., :, None] * S).sum(-2)", "m = (k_t[..., :, None] * S).sum(-1)"))},
          (DR,)),
    Entry("08-ho-gated-decay-one-none", "raises",
          "gated_delta_rule takes the decay as g[..., t, None].exp(), shape [B, H, 1], instead of "
          "g[..., t, None, None] ([B, H, 1, 1]), so multiplying the [B, H, Dk, Dv] state aligns batch and heads "
          "with heads and Dk: a shape error unless those sizes happen to match (B = H = 1 works)",
          {GD: patch(GATED, ("S = S * g32[..., t, None, None].exp()", "S = S * g32[..., t, None].exp()"))},
          (GD,)),
    Entry("08-ho-chunk-decay-fill-zero", "cascade",
          "chunked_gated_delta_rule fills the positions above the diagonal of gamma_t - gamma_j with 0 instead of "
          "-inf before the exp, so the decay matrix is 1 there instead of 0: A is still cut to its strict lower "
          "part, but the intra-chunk output (Q K^T * decay) Delta lets each position read the later positions' "
          "corrections of its chunk",
          {CH: patch(CHUNKED, ('.masked_fill(~lower, float("-inf")).exp()', ".masked_fill(~lower, 0.0).exp()"))},
          (CH, L)),
    Entry("08-ho-chunk-slice-stops-at-chunk-size", "raises",
          "chunked_gated_delta_rule slices each chunk as slice(start, chunk_size) instead of "
          "slice(start, start + chunk_size), so every chunk after the first is empty and taking gamma[..., -1] of "
          "an empty chunk raises an IndexError whenever T > chunk_size",
          {CH: patch(CHUNKED, ("part = slice(start, start + chunk_size)", "part = slice(start, chunk_size)"))},
          (CH, L)),
    Entry("08-ho-conv-silu-inside", "cascade",
          "causal_conv1d applies SiLU to its output although the exercise says no activation (the layer does it), "
          "so y is SiLU of the convolution and the layer's convolve applies SiLU a second time",
          {CV: patch(CONV, ("y = F.conv1d(full, weight.to(x.dtype), groups=channels)",
                            "y = F.silu(F.conv1d(full, weight.to(x.dtype), groups=channels))"))},
          (CV, L)),
    Entry("08-ho-conv-state-keeps-k-columns", "raises",
          "causal_conv1d returns the last K columns of cat(conv_state, x) as the new state instead of the last "
          "K - 1, so the state is [B, C, K] and a call that continues from it gets one output too many (T + 1); "
          "in the layer the extra position no longer matches the gates and cached decoding raises",
          {CV: patch(CONV, ("return y, full[..., full.shape[-1] - (kernel - 1):]", "return y, full[..., -kernel:]"))},
          (CV, L)),
    Entry("08-ho-layer-no-softplus", "single",
          "Qwen35GatedDeltaNet's gates leave out the softplus: g = -exp(A_log) * (a + dt_bias) instead of "
          "-exp(A_log) * softplus(a + dt_bias), so g is positive (a growing state) wherever a + dt_bias < 0",
          {L: patch(LAYER, ("g = -self.A_log.float().exp() * F.softplus(a + self.dt_bias.float())",
                            "g = -self.A_log.float().exp() * (a + self.dt_bias.float())"))},
          (L,)),
    Entry("08-ho-layer-q-scaled-by-dv", "single",
          "Qwen35GatedDeltaNet multiplies the normalised q by Dv^-1/2 (linear_value_head_dim) instead of "
          "Dk^-1/2 (linear_key_head_dim); the two agree only when Dk == Dv",
          {L: patch(LAYER, ("q = l2_normalize(q.float()) * self.head_k_dim ** -0.5",
                            "q = l2_normalize(q.float()) * self.head_v_dim ** -0.5"))},
          (L,)),
    Entry("08-ho-layer-norm-default-eps", "single",
          "Qwen35GatedDeltaNet builds its GatedRMSNorm without passing config.rms_norm_eps, so the norm uses the "
          "default eps 1e-6 instead of the config's value",
          {L: patch(LAYER, ("self.norm = GatedRMSNorm(self.head_v_dim, config.rms_norm_eps)",
                            "self.norm = GatedRMSNorm(self.head_v_dim)"))},
          (L,)),
]
