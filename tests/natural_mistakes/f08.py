"""08_gated_deltanet: linear_attention, linear_attention_recurrent, delta_rule, gated_delta_rule,
chunked_gated_delta_rule, causal_conv1d and Qwen35GatedDeltaNet (with its GatedRMSNorm).

Conventions assumed: the recurrent functions keep the state in float32 (at least) and return o and state in q's
dtype; chunked_gated_delta_rule computes in float32 and returns o and state in q's dtype; causal_conv1d casts the
weight to x's dtype; Qwen35GatedDeltaNet.core runs chunked_gated_delta_rule (chunk_size 64) on float32 inputs and
keeps the state in float32. l2_normalize and GatedDeltaNetCache are the notebook's given definitions.
Kind "cascade" marks a single mistake in an earlier exercise (or in the GatedRMSNorm helper of the layer's cell)
that also fails the graded layer that calls it."""
from . import a08
from .entry import Entry, patch

ASSIGNMENT = "08_gated_deltanet"
HEADER = '''import math\nimport torch\nimport torch.nn.functional as F\nfrom torch import nn\n'''

CORRECT = {
    "linear_attention": '''def linear_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """Causal linear attention, parallel form: o_t = sum_{j<=t} (q_t . k_j) v_j."""
    seq = q.shape[-2]
    scores = q @ k.transpose(-2, -1)
    causal = torch.ones(seq, seq, dtype=torch.bool).tril()
    return scores.masked_fill(~causal, 0.0) @ v
''',
    "linear_attention_recurrent": '''def linear_attention_recurrent(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                               state: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """S_t = S_{t-1} + k_t^T v_t, o_t = q_t S_t; returns (o, state) in q's dtype, sums in float32 at least."""
    out_dtype = q.dtype
    work = torch.promote_types(q.dtype, torch.float32)
    batch, heads, seq, dk = k.shape
    dv = v.shape[-1]
    S = torch.zeros(batch, heads, dk, dv, dtype=work) if state is None else state.to(work)
    q, k, v = q.to(work), k.to(work), v.to(work)
    outs = []
    for t in range(seq):
        S = S + k[..., t, :, None] * v[..., t, None, :]
        outs.append((q[..., t, :, None] * S).sum(-2))
    o = torch.stack(outs, dim=-2)
    return o.to(out_dtype), S.to(out_dtype)
''',
    "delta_rule": '''def delta_rule(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, beta: torch.Tensor,
               state: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """S_t = S_{t-1} + k_t^T (beta_t (v_t - k_t S_{t-1})), o_t = q_t S_t."""
    out_dtype = q.dtype
    work = torch.promote_types(q.dtype, torch.float32)
    batch, heads, seq, dk = k.shape
    dv = v.shape[-1]
    S = torch.zeros(batch, heads, dk, dv, dtype=work) if state is None else state.to(work)
    q, k, v, beta = q.to(work), k.to(work), v.to(work), beta.to(work)
    outs = []
    for t in range(seq):
        m = (k[..., t, :, None] * S).sum(-2)                        # k_t S: [B, H, Dv]
        delta = beta[..., t, None] * (v[..., t, :] - m)
        S = S + k[..., t, :, None] * delta[..., None, :]
        outs.append((q[..., t, :, None] * S).sum(-2))
    o = torch.stack(outs, dim=-2)
    return o.to(out_dtype), S.to(out_dtype)
''',
    "gated_delta_rule": '''def gated_delta_rule(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, g: torch.Tensor, beta: torch.Tensor,
                     state: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """S <- exp(g_t) S; delta = beta_t (v_t - k_t S); S <- S + k_t^T delta; o_t = q_t S."""
    out_dtype = q.dtype
    work = torch.promote_types(q.dtype, torch.float32)
    batch, heads, seq, dk = k.shape
    dv = v.shape[-1]
    S = torch.zeros(batch, heads, dk, dv, dtype=work) if state is None else state.to(work)
    q, k, v, g, beta = q.to(work), k.to(work), v.to(work), g.to(work), beta.to(work)
    outs = []
    for t in range(seq):
        S = S * g[..., t, None, None].exp()
        m = (k[..., t, :, None] * S).sum(-2)
        delta = beta[..., t, None] * (v[..., t, :] - m)
        S = S + k[..., t, :, None] * delta[..., None, :]
        outs.append((q[..., t, :, None] * S).sum(-2))
    o = torch.stack(outs, dim=-2)
    return o.to(out_dtype), S.to(out_dtype)
''',
    "chunked_gated_delta_rule": '''def chunked_gated_delta_rule(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, g: torch.Tensor, beta: torch.Tensor,
                             chunk_size: int = 64, state: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """gated_delta_rule, chunk_size positions at a time (UT transform inside a chunk, state carried between)."""
    out_dtype = q.dtype
    work = torch.promote_types(q.dtype, torch.float32)
    q, k, v, g, beta = (t.to(work) for t in (q, k, v, g, beta))
    batch, heads, seq, dk = k.shape
    dv = v.shape[-1]
    S = torch.zeros(batch, heads, dk, dv, dtype=work) if state is None else state.to(work)
    outs = []
    for start in range(0, seq, chunk_size):
        part = slice(start, start + chunk_size)
        qc, kc, vc, gc, bc = q[..., part, :], k[..., part, :], v[..., part, :], g[..., part], beta[..., part]
        c = kc.shape[-2]
        gamma = gc.cumsum(dim=-1)                                                   # [B, H, c]
        lower = torch.ones(c, c, dtype=torch.bool).tril()
        decay = (gamma[..., :, None] - gamma[..., None, :]).masked_fill(~lower, float("-inf")).exp()
        A = (bc[..., :, None] * (kc @ kc.transpose(-2, -1)) * decay).tril(-1)
        eye = torch.eye(c, dtype=work)
        rhs = bc[..., None] * (vc - gamma.exp()[..., None] * (kc @ S))
        delta = torch.linalg.solve_triangular(eye + A, rhs, upper=False, unitriangular=True)
        outs.append(gamma.exp()[..., None] * (qc @ S) + ((qc @ kc.transpose(-2, -1)) * decay) @ delta)
        gamma_last = gamma[..., -1:]                                                # [B, H, 1]
        S = gamma_last.exp()[..., None] * S + ((gamma_last - gamma).exp()[..., None] * kc).transpose(-2, -1) @ delta
    o = torch.cat(outs, dim=-2)
    return o.to(out_dtype), S.to(out_dtype)
''',
    "causal_conv1d": '''def causal_conv1d(x: torch.Tensor, weight: torch.Tensor,
                  conv_state: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Depthwise causal conv, no activation -> (y [B, C, T], conv_state [B, C, K-1])."""
    batch, channels, seq = x.shape
    kernel = weight.shape[-1]
    if conv_state is None:
        conv_state = x.new_zeros(batch, channels, kernel - 1)
    full = torch.cat([conv_state.to(x.dtype), x], dim=-1)                         # [B, C, K-1+T]
    y = F.conv1d(full, weight.to(x.dtype), groups=channels)
    return y, full[..., full.shape[-1] - (kernel - 1):]
''',
    "GatedDeltaNetCache": '''class GatedDeltaNetCache:
    """conv_state [B, conv_dim, K-1] and recurrent_state [B, Hv, Dk, Dv]; update() replaces both."""

    def __init__(self):
        self.conv_state = None
        self.recurrent_state = None

    def update(self, conv_state: torch.Tensor, recurrent_state: torch.Tensor) -> None:
        self.conv_state, self.recurrent_state = conv_state, recurrent_state
''',
    "l2_normalize": '''def l2_normalize(x: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """x / sqrt(sum(x^2) + eps) over the last dim."""
    return x * torch.rsqrt(x.pow(2).sum(-1, keepdim=True) + eps)
''',
    "GatedRMSNorm": '''class GatedRMSNorm(nn.Module):
    """RMSNorm(o) * weight * SiLU(z) over the last dim; weight starts at ones; computed in float32."""

    def __init__(self, dim: int, eps: float = 1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, o: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
        o32 = o.float()
        normed = o32 * torch.rsqrt(o32.pow(2).mean(dim=-1, keepdim=True) + self.eps)
        return (normed * self.weight.float() * F.silu(z.float())).to(o.dtype)
''',
    "Qwen35GatedDeltaNet": '''class Qwen35GatedDeltaNet(nn.Module):
    """Qwen3.5's Gated DeltaNet layer, with Hugging Face's parameter names."""

    def __init__(self, config):
        super().__init__()
        d = config.hidden_size
        self.num_k_heads = config.linear_num_key_heads
        self.num_v_heads = config.linear_num_value_heads
        self.head_k_dim = config.linear_key_head_dim
        self.head_v_dim = config.linear_value_head_dim
        self.key_dim = self.num_k_heads * self.head_k_dim
        self.value_dim = self.num_v_heads * self.head_v_dim
        self.conv_dim = 2 * self.key_dim + self.value_dim
        kernel = config.linear_conv_kernel_dim
        self.in_proj_qkv = nn.Linear(d, self.conv_dim, bias=False)
        self.in_proj_z = nn.Linear(d, self.value_dim, bias=False)
        self.in_proj_b = nn.Linear(d, self.num_v_heads, bias=False)
        self.in_proj_a = nn.Linear(d, self.num_v_heads, bias=False)
        self.conv1d = nn.Conv1d(self.conv_dim, self.conv_dim, kernel, groups=self.conv_dim, padding=kernel - 1,
                                bias=False)
        self.dt_bias = nn.Parameter(torch.ones(self.num_v_heads))
        self.A_log = nn.Parameter(torch.zeros(self.num_v_heads))
        self.norm = GatedRMSNorm(self.head_v_dim, config.rms_norm_eps)
        self.out_proj = nn.Linear(self.value_dim, d, bias=False)

    def convolve(self, mixed: torch.Tensor, cache):
        conv_state = None if cache is None else cache.conv_state
        y, conv_state = causal_conv1d(mixed.transpose(1, 2), self.conv1d.weight, conv_state)
        return F.silu(y).transpose(1, 2), conv_state

    def heads(self, qkv: torch.Tensor):
        q, k, v = qkv.split([self.key_dim, self.key_dim, self.value_dim], dim=-1)
        q = q.unflatten(-1, (self.num_k_heads, self.head_k_dim)).transpose(1, 2)
        k = k.unflatten(-1, (self.num_k_heads, self.head_k_dim)).transpose(1, 2)
        v = v.unflatten(-1, (self.num_v_heads, self.head_v_dim)).transpose(1, 2)
        q = (l2_normalize(q.float()) * self.head_k_dim ** -0.5).to(qkv.dtype)
        k = l2_normalize(k.float()).to(qkv.dtype)
        n_rep = self.num_v_heads // self.num_k_heads
        if n_rep > 1:
            q = q.repeat_interleave(n_rep, dim=1)
            k = k.repeat_interleave(n_rep, dim=1)
        return q, k, v

    def gates(self, x: torch.Tensor):
        beta = torch.sigmoid(self.in_proj_b(x)).transpose(1, 2)
        a = self.in_proj_a(x).float()
        g = -self.A_log.float().exp() * F.softplus(a + self.dt_bias.float())
        return beta, g.transpose(1, 2)

    def core(self, q, k, v, g, beta, cache):
        state = None if cache is None else cache.recurrent_state
        o, state = chunked_gated_delta_rule(q.float(), k.float(), v.float(), g.float(), beta.float(), state=state)
        return o.to(v.dtype), state

    def output(self, o: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        z = self.in_proj_z(x).unflatten(-1, (self.num_v_heads, self.head_v_dim))
        normed = self.norm(o.transpose(1, 2), z)                                    # [B, T, Hv, Dv]
        return self.out_proj(normed.flatten(-2))

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
''',
}

C = CORRECT
LA, LR, DR, GD = C["linear_attention"], C["linear_attention_recurrent"], C["delta_rule"], C["gated_delta_rule"]
CH, CV, GN, QL = C["chunked_gated_delta_rule"], C["causal_conv1d"], C["GatedRMSNorm"], C["Qwen35GatedDeltaNet"]
LAYER = "Qwen35GatedDeltaNet"
CHL = ("chunked_gated_delta_rule", LAYER)
CVL = ("causal_conv1d", LAYER)

# edits reused by the doubles
_LA_DIAG = (".tril()\n", ".tril(-1)\n")
_LA_SCALE = ("scores = q @ k.transpose(-2, -1)", "scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])")
_READ_FIRST = ("""        S = S + k[..., t, :, None] * v[..., t, None, :]
        outs.append((q[..., t, :, None] * S).sum(-2))""",
               """        outs.append((q[..., t, :, None] * S).sum(-2))
        S = S + k[..., t, :, None] * v[..., t, None, :]""")
_DR_READ_FIRST = ("""        S = S + k[..., t, :, None] * delta[..., None, :]
        outs.append((q[..., t, :, None] * S).sum(-2))""",
                  """        outs.append((q[..., t, :, None] * S).sum(-2))
        S = S + k[..., t, :, None] * delta[..., None, :]""")
_DR_Q_READ = ("m = (k[..., t, :, None] * S).sum(-2)", "m = (q[..., t, :, None] * S).sum(-2)")
_GD_NO_EXP = ("S = S * g[..., t, None, None].exp()", "S = S * g[..., t, None, None]")
_GD_AFTER = ("""        S = S * g[..., t, None, None].exp()
        m = (k[..., t, :, None] * S).sum(-2)
        delta = beta[..., t, None] * (v[..., t, :] - m)
        S = S + k[..., t, :, None] * delta[..., None, :]
""", """        m = (k[..., t, :, None] * S).sum(-2)
        delta = beta[..., t, None] * (v[..., t, :] - m)
        S = S + k[..., t, :, None] * delta[..., None, :]
        S = S * g[..., t, None, None].exp()
""")
_CH_A_DIAG = (("A = (bc[..., :, None] * (kc @ kc.transpose(-2, -1)) * decay).tril(-1)",
               "A = (bc[..., :, None] * (kc @ kc.transpose(-2, -1)) * decay).tril()"),
              ("upper=False, unitriangular=True)", "upper=False)"))
_CH_RHS_NO_BETA = ("rhs = bc[..., None] * (vc - gamma.exp()[..., None] * (kc @ S))",
                   "rhs = vc - gamma.exp()[..., None] * (kc @ S)")
_CH_NO_CARRY = (("        S = gamma_last.exp()", "        S_end = gamma_last.exp()"),
                ("return o.to(out_dtype), S.to(out_dtype)", "return o.to(out_dtype), S_end.to(out_dtype)"))
_CV_NO_STATE = ("    if conv_state is None:\n        conv_state = x.new_zeros(batch, channels, kernel - 1)\n",
                "    conv_state = x.new_zeros(batch, channels, kernel - 1)\n")
_CV_FLIP = ("y = F.conv1d(full, weight.to(x.dtype), groups=channels)",
            "y = F.conv1d(full, weight.to(x.dtype).flip(-1), groups=channels)")
_CV_STATE_X = ("return y, full[..., full.shape[-1] - (kernel - 1):]", "return y, x[..., -(kernel - 1):]")
_QL_NO_SCALE = ("q = (l2_normalize(q.float()) * self.head_k_dim ** -0.5).to(qkv.dtype)",
                "q = l2_normalize(q.float()).to(qkv.dtype)")
_QL_BETA_RAW = ("beta = torch.sigmoid(self.in_proj_b(x)).transpose(1, 2)", "beta = self.in_proj_b(x).transpose(1, 2)")
_GN_SIGMOID = ("F.silu(z.float())", "torch.sigmoid(z.float())")
_QL_MERGE = ("normed = self.norm(o.transpose(1, 2), z)", "normed = self.norm(o.reshape(z.shape), z)")


def _double(id_, cause, parts, exercises):
    """parts: ((name, base, edits), (name, base, edits)); edits on one name are combined."""
    code = {}
    for name, base, edits in parts:
        code[name] = patch(code.get(name, base), *edits)
    return Entry(id_, "double", cause, code, exercises)


ENTRIES = [
    # ---------------- linear_attention ----------------
    Entry("f08-linattn-diagonal-dropped", "single",
          "The causal mask is strictly lower-triangular (tril(-1)), so position t does not use its own key/value: "
          "o_t = sum over j < t instead of j <= t.",
          {"linear_attention": patch(LA, _LA_DIAG)}, ("linear_attention",)),
    Entry("f08-linattn-scaled-by-sqrt-dk", "single",
          "The scores are divided by sqrt(Dk) as in softmax attention; linear attention uses the raw dot products "
          "q_t . k_j.",
          {"linear_attention": patch(LA, _LA_SCALE)}, ("linear_attention",)),
    Entry("f08-linattn-neg-inf-fill", "single",
          "The future positions are filled with -inf (the softmax-attention habit) instead of 0; without a softmax "
          "the -inf entries flow into scores @ v and give inf/NaN outputs.",
          {"linear_attention": patch(LA, ("scores.masked_fill(~causal, 0.0)", "scores.masked_fill(~causal, float(\"-inf\"))"))},
          ("linear_attention",)),
    Entry("f08-linattn-softmax-kept", "single",
          "A softmax is still applied to the masked scores (softmax attention without the 1/sqrt(D)), so the "
          "weights are normalised exponentials instead of the raw dot products q_t . k_j.",
          {"linear_attention": patch(LA, ("return scores.masked_fill(~causal, 0.0) @ v",
                                          "return torch.softmax(scores.masked_fill(~causal, float(\"-inf\")), dim=-1) @ v"))},
          ("linear_attention",)),
    Entry("f08-linattn-k-dot-T", "raises",
          "k is transposed with k.T, which reverses all four dims of [B, H, T, Dk] instead of swapping the last two, "
          "so the batched matmul q @ k.T fails to broadcast (or mixes batch and heads).",
          {"linear_attention": patch(LA, ("scores = q @ k.transpose(-2, -1)", "scores = q @ k.T"))}, ("linear_attention",)),

    # ---------------- linear_attention_recurrent ----------------
    Entry("f08-linrec-read-before-write", "single",
          "Each step reads o_t = q_t S before adding k_t^T v_t, so o_t uses S_{t-1} and position t never sees its "
          "own key/value.",
          {"linear_attention_recurrent": patch(LR, _READ_FIRST)}, ("linear_attention_recurrent",)),
    Entry("f08-linrec-state-ignored", "single",
          "The state argument is ignored: the recurrence always starts from zeros, so continuing from a returned "
          "state forgets everything before it.",
          {"linear_attention_recurrent": patch(LR, ("S = torch.zeros(batch, heads, dk, dv, dtype=work) if state is None else state.to(work)",
                                                    "S = torch.zeros(batch, heads, dk, dv, dtype=work)"))},
          ("linear_attention_recurrent",)),
    Entry("f08-linrec-outer-product-transposed", "raises",
          "The outer product is written v_t^T k_t ([Dv, Dk]) instead of k_t^T v_t ([Dk, Dv]), so the state does not "
          "match [B, H, Dk, Dv] and adding it fails whenever Dk != Dv.",
          {"linear_attention_recurrent": patch(LR, ("S = S + k[..., t, :, None] * v[..., t, None, :]",
                                                    "S = S + v[..., t, :, None] * k[..., t, None, :]"))},
          ("linear_attention_recurrent",)),
    Entry("f08-linrec-float32-out", "single",
          "The float32 accumulation is returned as is: for bfloat16 inputs o comes back float32 instead of q's dtype.",
          {"linear_attention_recurrent": patch(LR, ("return o.to(out_dtype), S.to(out_dtype)", "return o, S"))},
          ("linear_attention_recurrent",)),
    Entry("f08-linrec-stack-last-dim", "single",
          "The per-step outputs are stacked along the last dim (torch.stack(outs, dim=-1)), giving [B, H, Dv, T] "
          "instead of [B, H, T, Dv].",
          {"linear_attention_recurrent": patch(LR, ("o = torch.stack(outs, dim=-2)", "o = torch.stack(outs, dim=-1)"))},
          ("linear_attention_recurrent",)),

    # ---------------- delta_rule ----------------
    Entry("f08-delta-beta-only-on-v", "single",
          "beta multiplies only v_t: the correction is beta_t v_t - k_t S instead of beta_t (v_t - k_t S).",
          {"delta_rule": patch(DR, ("delta = beta[..., t, None] * (v[..., t, :] - m)", "delta = beta[..., t, None] * v[..., t, :] - m"))},
          ("delta_rule",)),
    Entry("f08-delta-read-with-q", "single",
          "The value already stored is read with the query (m = q_t S) instead of the key being written (k_t S).",
          {"delta_rule": patch(DR, _DR_Q_READ)}, ("delta_rule",)),
    Entry("f08-delta-output-before-write", "single",
          "o_t = q_t S is read before the correction is written, so the output uses S_{t-1} instead of S_t.",
          {"delta_rule": patch(DR, _DR_READ_FIRST)}, ("delta_rule",)),
    Entry("f08-delta-correction-sign", "single",
          "The correction has the wrong sign: delta = beta_t (k_t S - v_t) instead of beta_t (v_t - k_t S) (the "
          "gradient step is taken uphill).",
          {"delta_rule": patch(DR, ("(v[..., t, :] - m)", "(m - v[..., t, :])"))}, ("delta_rule",)),

    # ---------------- gated_delta_rule ----------------
    Entry("f08-gated-g-not-exponentiated", "single",
          "The state is multiplied by g_t itself (a log-decay, <= 0) instead of exp(g_t).",
          {"gated_delta_rule": patch(GD, _GD_NO_EXP)}, ("gated_delta_rule",)),
    Entry("f08-gated-decay-after-write", "single",
          "The decay exp(g_t) is applied at the end of the step, after the write, instead of first: the read "
          "k_t S and the correction use the undecayed state, and the freshly written k_t^T delta is decayed too "
          "before o_t = q_t S is read.",
          {"gated_delta_rule": patch(GD, _GD_AFTER)}, ("gated_delta_rule",)),
    Entry("f08-gated-decay-after-read", "single",
          "The stored value m = k_t S is read before the decay and the state is decayed only afterwards, so the "
          "correction beta (v - m) is computed from the undecayed state (Hugging Face decays before the read).",
          {"gated_delta_rule": patch(GD, ("""        S = S * g[..., t, None, None].exp()
        m = (k[..., t, :, None] * S).sum(-2)
""", """        m = (k[..., t, :, None] * S).sum(-2)
        S = S * g[..., t, None, None].exp()
"""))}, ("gated_delta_rule",)),
    Entry("f08-gated-decay-on-written-term", "single",
          "exp(g_t) scales the newly written term k_t^T delta instead of the old state: S <- S + exp(g_t) k_t^T "
          "delta, so old memories never fade.",
          {"gated_delta_rule": patch(GD, ("        S = S * g[..., t, None, None].exp()\n", ""),
                                     ("S = S + k[..., t, :, None] * delta[..., None, :]",
                                      "S = S + g[..., t, None, None].exp() * k[..., t, :, None] * delta[..., None, :]"))},
          ("gated_delta_rule",)),
    Entry("f08-gated-exp-minus-g", "single",
          "The decay is exp(-g_t) instead of exp(g_t): with g <= 0 the state grows at every step instead of fading.",
          {"gated_delta_rule": patch(GD, ("g[..., t, None, None].exp()", "(-g[..., t, None, None]).exp()"))},
          ("gated_delta_rule",)),
    Entry("f08-gated-decay-shape", "raises",
          "The decay is indexed g[..., t, None] ([B, H, 1]) instead of g[..., t, None, None] ([B, H, 1, 1]), so it "
          "right-aligns with [H, Dk, Dv] of the state and fails to broadcast (or scales the wrong axes).",
          {"gated_delta_rule": patch(GD, ("S = S * g[..., t, None, None].exp()", "S = S * g[..., t, None].exp()"))},
          ("gated_delta_rule",)),

    # ---------------- chunked_gated_delta_rule ----------------
    Entry("f08-chunk-decay-separate-exps", "cascade",
          "The intra-chunk decay is computed as exp(gamma_t) / exp(gamma_j) from separately exponentiated cumulative "
          "sums instead of exp(gamma_t - gamma_j) masked before the exp: for very negative g, exp(gamma) underflows "
          "to 0 and the decay becomes 0/0 = NaN.",
          {"chunked_gated_delta_rule": patch(CH, ("decay = (gamma[..., :, None] - gamma[..., None, :]).masked_fill(~lower, float(\"-inf\")).exp()",
                                                  "decay = (gamma.exp()[..., :, None] / gamma.exp()[..., None, :]).masked_fill(~lower, 0.0)"))},
          CHL),
    Entry("f08-chunk-A-includes-diagonal", "cascade",
          "A keeps its diagonal (tril() instead of the strict tril(-1)) and the solve is not told the matrix is "
          "unit-triangular, so the system solved is (I + A) with 1 + beta_t |k_t|^2 on the diagonal instead of a "
          "unit lower-triangular matrix.",
          {"chunked_gated_delta_rule": patch(CH, *_CH_A_DIAG)}, CHL),
    Entry("f08-chunk-output-decay-strict", "cascade",
          "The intra-chunk attention term of the output uses a strictly lower-triangular decay mask (tril(-1)), so "
          "o_t misses its own position's correction delta_t (the mask M must include the diagonal).",
          {"chunked_gated_delta_rule": patch(CH, ("((qc @ kc.transpose(-2, -1)) * decay) @ delta",
                                                  "((qc @ kc.transpose(-2, -1)) * decay).tril(-1) @ delta"))}, CHL),
    Entry("f08-chunk-rhs-state-not-decayed", "cascade",
          "The right-hand side uses V - K S0 instead of V - diag(exp(gamma)) K S0: the chunk-start state is read "
          "without the decay accumulated inside the chunk.",
          {"chunked_gated_delta_rule": patch(CH, ("(vc - gamma.exp()[..., None] * (kc @ S))", "(vc - kc @ S)"))}, CHL),
    Entry("f08-chunk-output-state-not-decayed", "cascade",
          "The output reads the chunk-start state as Q S0 instead of diag(exp(gamma)) Q S0 (missing decay on the "
          "inter-chunk term).",
          {"chunked_gated_delta_rule": patch(CH, ("gamma.exp()[..., None] * (qc @ S) +", "(qc @ S) +"))}, CHL),
    Entry("f08-chunk-end-state-S0-not-decayed", "cascade",
          "The state passed to the next chunk is S0 + (decayed K)^T Delta instead of exp(gamma_c) S0 + ...: the old "
          "state is not decayed over the chunk.",
          {"chunked_gated_delta_rule": patch(CH, ("S = gamma_last.exp()[..., None] * S + ", "S = S + "))}, CHL),
    Entry("f08-chunk-end-state-keys-not-decayed", "cascade",
          "The chunk's contribution to the next state uses K^T Delta without the per-position decay "
          "exp(gamma_c - gamma_t) on the keys.",
          {"chunked_gated_delta_rule": patch(CH, ("((gamma_last - gamma).exp()[..., None] * kc).transpose(-2, -1) @ delta",
                                                  "kc.transpose(-2, -1) @ delta"))}, CHL),
    Entry("f08-chunk-end-state-decay-sign", "cascade",
          "The key decay for the end-of-chunk state is exp(gamma_t - gamma_c) (sign flipped, >= 1) instead of "
          "exp(gamma_c - gamma_t).",
          {"chunked_gated_delta_rule": patch(CH, ("(gamma_last - gamma).exp()", "(gamma - gamma_last).exp()"))}, CHL),
    Entry("f08-chunk-rhs-missing-beta", "cascade",
          "The right-hand side is V - exp(gamma) K S0 without the diag(beta) factor (beta is only used inside A).",
          {"chunked_gated_delta_rule": patch(CH, _CH_RHS_NO_BETA)}, CHL),
    Entry("f08-chunk-A-missing-beta", "cascade",
          "A is built as (K K^T * decay) strictly lower without the beta_t row factor, so the triangular system is "
          "not the delta rule's.",
          {"chunked_gated_delta_rule": patch(CH, ("A = (bc[..., :, None] * (kc @ kc.transpose(-2, -1)) * decay).tril(-1)",
                                                  "A = ((kc @ kc.transpose(-2, -1)) * decay).tril(-1)"))}, CHL),
    Entry("f08-chunk-A-beta-on-columns", "cascade",
          "beta is broadcast along the wrong axis in A (bc[..., None, :], i.e. beta_j per column) instead of beta_t "
          "per row.",
          {"chunked_gated_delta_rule": patch(CH, ("A = (bc[..., :, None] *", "A = (bc[..., None, :] *"))}, CHL),
    Entry("f08-chunk-solve-upper", "cascade",
          "solve_triangular is called with upper=True on the lower-triangular I + A, so only its (identity) upper "
          "part is used and Delta = rhs: the within-chunk interactions are dropped.",
          {"chunked_gated_delta_rule": patch(CH, ("upper=False", "upper=True"))}, CHL),
    Entry("f08-chunk-I-minus-A", "cascade",
          "The triangular system is solved with I - A instead of I + A (sign of the already-written corrections).",
          {"chunked_gated_delta_rule": patch(CH, ("eye + A", "eye - A"))}, CHL),
    Entry("f08-chunk-drops-last-partial", "cascade",
          "The chunk loop is range(0, T - chunk_size + 1, chunk_size): the last, shorter chunk is never processed "
          "(outputs are missing, and T < chunk_size gives no chunk at all and torch.cat fails).",
          {"chunked_gated_delta_rule": patch(CH, ("range(0, seq, chunk_size)", "range(0, seq - chunk_size + 1, chunk_size)"))},
          CHL),
    Entry("f08-chunk-gamma-whole-sequence", "cascade",
          "gamma is the cumulative sum of g over the whole sequence instead of restarting in each chunk, so from the "
          "second chunk on the decay of everything before the chunk is applied again to the chunk-start state.",
          {"chunked_gated_delta_rule": patch(CH, ("gamma = gc.cumsum(dim=-1)", "gamma = g.cumsum(dim=-1)[..., part]"))},
          CHL),
    Entry("f08-chunk-state-not-carried", "cascade",
          "The end-of-chunk state is computed into a new variable but never carried: every chunk starts from the "
          "initial state (only the last chunk's end state is returned).",
          {"chunked_gated_delta_rule": patch(CH, *_CH_NO_CARRY)}, CHL),
    Entry("f08-chunk-bf16-not-converted", "raises",
          "bfloat16 inputs are not converted to float32 first: the float32 zero state does not multiply with "
          "bfloat16 keys and torch.linalg.solve_triangular has no bfloat16 kernel.",
          {"chunked_gated_delta_rule": patch(CH, ("    q, k, v, g, beta = (t.to(work) for t in (q, k, v, g, beta))\n", ""))},
          ("chunked_gated_delta_rule",)),
    Entry("f08-chunk-float32-out", "single",
          "The float32 result is returned without casting back: bfloat16 inputs give float32 o and state.",
          {"chunked_gated_delta_rule": patch(CH, ("return o.to(out_dtype), S.to(out_dtype)", "return o, S"))},
          ("chunked_gated_delta_rule",)),
    Entry("f08-chunk-eye-of-chunk-size", "raises",
          "The identity is torch.eye(chunk_size) instead of the chunk's actual length c, so a shorter last chunk "
          "(or T < chunk_size) fails with a shape mismatch in I + A.",
          {"chunked_gated_delta_rule": patch(CH, ("eye = torch.eye(c, dtype=work)", "eye = torch.eye(chunk_size, dtype=work)"))},
          CHL),

    # ---------------- causal_conv1d ----------------
    Entry("f08-conv-same-padding", "cascade",
          "The convolution uses symmetric padding='same' on x instead of K-1 past inputs on the left, so position t "
          "sees future inputs (t+1, t+2) and the cached conv_state is not used for the output.",
          {"causal_conv1d": patch(CV, ("y = F.conv1d(full, weight.to(x.dtype), groups=channels)",
                                       "y = F.conv1d(x, weight.to(x.dtype), padding=\"same\", groups=channels)"))}, CVL),
    Entry("f08-conv-padding-wrong-end", "cascade",
          "padding=K-1 is applied on both sides and the last T outputs are kept instead of the first T, so each "
          "output is shifted to include K-1 future inputs (and conv_state is ignored).",
          {"causal_conv1d": patch(CV, ("y = F.conv1d(full, weight.to(x.dtype), groups=channels)",
                                       "y = F.conv1d(x, weight.to(x.dtype), padding=kernel - 1, groups=channels)[..., -seq:]"))}, CVL),
    Entry("f08-conv-weight-flipped", "cascade",
          "The kernel is flipped (true convolution): weight[c, 0, 0] multiplies the current position instead of "
          "weight[c, 0, K-1] (F.conv1d is a cross-correlation).",
          {"causal_conv1d": patch(CV, _CV_FLIP)}, CVL),
    Entry("f08-conv-state-from-x-only", "cascade",
          "The new conv_state is the last K-1 columns of x instead of the last K-1 of cat(old state, x): when "
          "T < K-1 it has fewer than K-1 columns and loses the older inputs, breaking token-by-token decoding.",
          {"causal_conv1d": patch(CV, _CV_STATE_X)}, CVL),
    Entry("f08-conv-state-ignored", "cascade",
          "The conv_state argument is ignored (always K-1 zeros on the left), so continuing from a cache does not "
          "see the previous K-1 inputs.",
          {"causal_conv1d": patch(CV, _CV_NO_STATE)}, CVL),
    Entry("f08-conv-no-groups", "raises",
          "F.conv1d is called without groups=C, so the depthwise weight [C, 1, K] is taken as a full convolution "
          "with 1 input channel and fails for C > 1.",
          {"causal_conv1d": patch(CV, ("y = F.conv1d(full, weight.to(x.dtype), groups=channels)",
                                       "y = F.conv1d(full, weight.to(x.dtype))"))}, CVL),
    Entry("f08-conv-silu-inside", "cascade",
          "causal_conv1d applies SiLU to its output, though the contract says no activation (the layer applies it), "
          "so the layer ends up with SiLU twice.",
          {"causal_conv1d": patch(CV, ("return y, full", "return F.silu(y), full"))}, CVL),
    Entry("f08-conv-weight-not-cast", "raises",
          "The weight is not cast to x's dtype: a bfloat16 x with a float32 weight makes F.conv1d raise a dtype "
          "mismatch.",
          {"causal_conv1d": patch(CV, ("y = F.conv1d(full, weight.to(x.dtype), groups=channels)",
                                       "y = F.conv1d(full, weight, groups=channels)"))}, ("causal_conv1d",)),

    # ---------------- GatedRMSNorm (helper in the layer's cell) ----------------
    Entry("f08-norm-sigmoid-gate", "cascade",
          "GatedRMSNorm gates with sigmoid(z) (the output gate of assignment 05) instead of SiLU(z) = z sigmoid(z).",
          {"GatedRMSNorm": patch(GN, _GN_SIGMOID)}, (LAYER,)),
    Entry("f08-norm-zero-centred", "cascade",
          "GatedRMSNorm scales by (1 + weight) as assignment 06's ZeroCenteredRMSNorm instead of by weight "
          "(a plain RMSNorm whose weight starts at 1).",
          {"GatedRMSNorm": patch(GN, ("normed * self.weight.float()", "normed * (1.0 + self.weight.float())"))}, (LAYER,)),
    Entry("f08-norm-weight-zeros", "cascade",
          "GatedRMSNorm's weight is initialised to zeros (the zero-centred habit from 06) instead of ones, so a "
          "fresh layer outputs zeros.",
          {"GatedRMSNorm": patch(GN, ("torch.ones(dim)", "torch.zeros(dim)"))}, (LAYER,)),
    Entry("f08-norm-gate-before-norm", "cascade",
          "The SiLU gate is applied before the RMSNorm (normalising o * SiLU(z)) instead of RMSNorm(o) * w * SiLU(z).",
          {"GatedRMSNorm": patch(GN, ("        o32 = o.float()\n", "        o32 = o.float() * F.silu(z.float())\n"),
                                 ("normed * self.weight.float() * F.silu(z.float())", "normed * self.weight.float()"))},
          (LAYER,)),

    # ---------------- Qwen35GatedDeltaNet ----------------
    Entry("f08-layer-q-not-scaled", "single",
          "q is L2-normalised but not multiplied by Dk^-1/2 (the scaling Hugging Face's kernel does inside).",
          {LAYER: patch(QL, _QL_NO_SCALE)}, (LAYER,)),
    Entry("f08-layer-scale-before-normalise", "single",
          "q is multiplied by Dk^-1/2 before the L2 normalisation, which undoes the scaling: q ends up unit length "
          "instead of length Dk^-1/2.",
          {LAYER: patch(QL, ("q = (l2_normalize(q.float()) * self.head_k_dim ** -0.5).to(qkv.dtype)",
                             "q = l2_normalize(q.float() * self.head_k_dim ** -0.5).to(qkv.dtype)"))}, (LAYER,)),
    Entry("f08-layer-key-heads-tiled", "single",
          "Key heads are given to value heads with repeat (0, 1, 0, 1, ...) instead of repeat_interleave, so value "
          "head h uses key head h % Hk instead of h // (Hv / Hk).",
          {LAYER: patch(QL, ("q = q.repeat_interleave(n_rep, dim=1)", "q = q.repeat(1, n_rep, 1, 1)"),
                        ("k = k.repeat_interleave(n_rep, dim=1)", "k = k.repeat(1, n_rep, 1, 1)"))}, (LAYER,)),
    Entry("f08-layer-no-dt-bias", "single",
          "dt_bias is left out of the gate: g = -exp(A_log) softplus(a) instead of softplus(a + dt_bias).",
          {LAYER: patch(QL, ("F.softplus(a + self.dt_bias.float())", "F.softplus(a)"))}, (LAYER,)),
    Entry("f08-layer-g-positive", "single",
          "The minus sign of g is dropped: g = exp(A_log) softplus(a + dt_bias) > 0, so exp(g) > 1 and the memory "
          "grows instead of decaying.",
          {LAYER: patch(QL, ("g = -self.A_log.float().exp()", "g = self.A_log.float().exp()"))}, (LAYER,)),
    Entry("f08-layer-A-log-not-exponentiated", "single",
          "A_log is used as A directly (g = -A_log softplus(...)) instead of -exp(A_log) softplus(...).",
          {LAYER: patch(QL, ("g = -self.A_log.float().exp()", "g = -self.A_log.float()"))}, (LAYER,)),
    Entry("f08-layer-beta-no-sigmoid", "single",
          "beta is the raw in_proj_b(x) instead of sigmoid(in_proj_b(x)).",
          {LAYER: patch(QL, _QL_BETA_RAW)}, (LAYER,)),
    Entry("f08-layer-no-silu-after-conv", "single",
          "The SiLU after the causal convolution is missing: q, k, v come straight from the conv.",
          {LAYER: patch(QL, ("return F.silu(y).transpose(1, 2), conv_state", "return y.transpose(1, 2), conv_state"))},
          (LAYER,)),
    Entry("f08-layer-conv-not-transposed", "raises",
          "in_proj_qkv's output [B, T, conv_dim] is handed to causal_conv1d without transposing to [B, C, T], so "
          "the depthwise conv sees T channels and fails.",
          {LAYER: patch(QL, ("y, conv_state = causal_conv1d(mixed.transpose(1, 2), self.conv1d.weight, conv_state)\n"
                             "        return F.silu(y).transpose(1, 2), conv_state",
                             "y, conv_state = causal_conv1d(mixed, self.conv1d.weight, conv_state)\n"
                             "        return F.silu(y), conv_state"))}, (LAYER,)),
    Entry("f08-layer-conv-cache-ignored", "single",
          "convolve never reads the cache's conv_state (always starts from zeros), so decoding with a cache loses "
          "the previous K-1 inputs of the convolution.",
          {LAYER: patch(QL, ("conv_state = None if cache is None else cache.conv_state", "conv_state = None"))}, (LAYER,)),
    Entry("f08-layer-recurrent-cache-ignored", "single",
          "core never reads the cache's recurrent_state (the delta rule always starts from zeros), so decoding with "
          "a cache forgets everything before the current call.",
          {LAYER: patch(QL, ("state = None if cache is None else cache.recurrent_state", "state = None"))}, (LAYER,)),
    Entry("f08-layer-qkv-chunk-three", "raises",
          "q, k, v are cut with qkv.chunk(3) into three equal parts instead of split([Hk Dk, Hk Dk, Hv Dv]), which "
          "fails (or mis-splits) when Hv Dv != Hk Dk.",
          {LAYER: patch(QL, ("q, k, v = qkv.split([self.key_dim, self.key_dim, self.value_dim], dim=-1)",
                             "q, k, v = qkv.chunk(3, dim=-1)"))}, (LAYER,)),
    Entry("f08-layer-merge-without-transpose", "single",
          "The delta rule's output [B, Hv, T, Dv] is reshaped to [B, T, Hv, Dv] without transposing heads and time, "
          "so the norm, the gate z and out_proj get the values of the wrong (token, head) pairs.",
          {LAYER: patch(QL, _QL_MERGE)}, (LAYER,)),
    Entry("f08-layer-l2-over-all-heads", "single",
          "q and k are L2-normalised over the whole projection (all heads together, before splitting into heads) "
          "instead of per head, so each head's vector is not unit length.",
          {LAYER: patch(QL, ("        q, k, v = qkv.split([self.key_dim, self.key_dim, self.value_dim], dim=-1)\n",
                             "        q, k, v = qkv.split([self.key_dim, self.key_dim, self.value_dim], dim=-1)\n"
                             "        q, k = l2_normalize(q.float()).to(qkv.dtype), l2_normalize(k.float()).to(qkv.dtype)\n"),
                        ("q = (l2_normalize(q.float()) * self.head_k_dim ** -0.5).to(qkv.dtype)",
                         "q = q * self.head_k_dim ** -0.5"),
                        ("        k = l2_normalize(k.float()).to(qkv.dtype)\n", ""))}, (LAYER,)),
    Entry("f08-layer-gates-time-major", "raises",
          "beta and g are returned as [B, T, Hv] (in_proj_b / in_proj_a outputs not transposed) instead of "
          "[B, Hv, T], so the delta rule slices and broadcasts them on the wrong axes.",
          {LAYER: patch(QL, ("beta = torch.sigmoid(self.in_proj_b(x)).transpose(1, 2)", "beta = torch.sigmoid(self.in_proj_b(x))"),
                        ("return beta, g.transpose(1, 2)", "return beta, g"))}, (LAYER,)),

    # ---------------- doubles ----------------
    _double("f08-double-linattn-no-diagonal-and-scaled",
            "(1) linear_attention's causal mask is strictly lower-triangular (tril(-1)), dropping position t itself; "
            "(2) the scores are divided by sqrt(Dk).",
            (("linear_attention", LA, [_LA_DIAG]), ("linear_attention", LA, [_LA_SCALE])), ("linear_attention",)),
    _double("f08-double-delta-q-read-and-output-first",
            "(1) delta_rule reads the stored value with the query (q_t S) instead of the key (k_t S); (2) it reads "
            "o_t = q_t S before writing the correction, so o_t uses S_{t-1}.",
            (("delta_rule", DR, [_DR_Q_READ]), ("delta_rule", DR, [_DR_READ_FIRST])), ("delta_rule",)),
    _double("f08-double-gated-g-raw-and-decay-last",
            "(1) gated_delta_rule multiplies the state by g_t instead of exp(g_t); (2) it applies the decay after the "
            "write instead of before the read.",
            (("gated_delta_rule", GD, [_GD_AFTER]), ("gated_delta_rule", GD, [_GD_NO_EXP])), ("gated_delta_rule",)),
    _double("f08-double-chunk-A-diagonal-and-rhs-beta",
            "(1) chunked_gated_delta_rule keeps the diagonal in A (tril() instead of tril(-1)) and solves without "
            "unitriangular=True, so the diagonal is 1 + beta_t |k_t|^2; (2) the right-hand "
            "side lacks the diag(beta) factor.",
            (("chunked_gated_delta_rule", CH, list(_CH_A_DIAG)), ("chunked_gated_delta_rule", CH, [_CH_RHS_NO_BETA])), CHL),
    _double("f08-double-chunk-state-and-conv-state-dropped",
            "(1) chunked_gated_delta_rule never carries the end-of-chunk state to the next chunk; (2) causal_conv1d "
            "ignores the conv_state argument (always zeros on the left).",
            (("chunked_gated_delta_rule", CH, list(_CH_NO_CARRY)), ("causal_conv1d", CV, [_CV_NO_STATE])),
            ("chunked_gated_delta_rule", "causal_conv1d", LAYER)),
    _double("f08-double-layer-q-unscaled-and-raw-beta",
            "(1) the layer does not multiply q by Dk^-1/2 after the L2 normalisation; (2) beta is in_proj_b(x) "
            "without the sigmoid.",
            ((LAYER, QL, [_QL_NO_SCALE]), (LAYER, QL, [_QL_BETA_RAW])), (LAYER,)),
    _double("f08-double-conv-flipped-and-state-from-x",
            "(1) causal_conv1d flips the kernel (weight[..., 0] on the current position); (2) its new conv_state is "
            "the last K-1 columns of x alone instead of cat(old state, x).",
            (("causal_conv1d", CV, [_CV_FLIP]), ("causal_conv1d", CV, [_CV_STATE_X])), CVL),
    _double("f08-double-norm-sigmoid-and-merge",
            "(1) GatedRMSNorm gates with sigmoid(z) instead of SiLU(z); (2) the layer reshapes the delta rule's "
            "[B, Hv, T, Dv] output to [B, T, Hv, Dv] without transposing.",
            (("GatedRMSNorm", GN, [_GN_SIGMOID]), (LAYER, QL, [_QL_MERGE])), (LAYER,)),
    _double("f08-double-recurrences-read-before-write",
            "(1) linear_attention_recurrent reads o_t = q_t S before adding k_t^T v_t; (2) delta_rule likewise reads "
            "o_t before writing its correction (the same habit in both functions).",
            (("linear_attention_recurrent", LR, [_READ_FIRST]), ("delta_rule", DR, [_DR_READ_FIRST])),
            ("linear_attention_recurrent", "delta_rule")),
]

# The definitions this writer did not write are the first writer's (a08), so that the notebook is whole.
HEADER = a08.HEADER + "".join(line + "\n" for line in HEADER.splitlines() if line not in a08.HEADER.splitlines())
CORRECT = {**a08.CORRECT, **CORRECT}
