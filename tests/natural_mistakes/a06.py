"""06_qwen35_attention: ZeroCenteredRMSNorm, apply_partial_rope, Qwen35Attention."""
from . import a01, a03, a04, a05
from .entry import Entry, patch

ASSIGNMENT = "06_qwen35_attention"

HEADER = a01.HEADER

NORM = '''
class ZeroCenteredRMSNorm(nn.Module):
    """x * rsqrt(mean(x^2) + eps) * (1 + weight) over the last dim, in float32; weight starts at 0."""

    def __init__(self, dim: int, eps: float = 1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.zeros(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x32 = x.float()
        variance = x32.pow(2).mean(dim=-1, keepdim=True)
        normed = x32 * torch.rsqrt(variance + self.eps)
        normed = normed * (1.0 + self.weight.float())
        return normed.to(x.dtype)
'''

PARTIAL_ROPE = '''
def apply_partial_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate-half RoPE on the first rotary_dim dims of each head; the other dims pass through."""
    rotary_dim = cos.shape[-1]
    x_rot = x[..., :rotary_dim]
    x_pass = x[..., rotary_dim:]
    return torch.cat([apply_rope(x_rot, cos, sin), x_pass], dim=-1)
'''

QWEN = '''
class Qwen35Attention(nn.Module):
    """Qwen3.5 gated attention: GQA, QK-Norm, partial RoPE and a sigmoid output gate."""

    def __init__(self, config):
        super().__init__()
        self.hidden_size = config.hidden_size
        self.num_heads = config.num_attention_heads
        self.num_kv_heads = config.num_key_value_heads
        self.head_dim = config.head_dim
        heads, kv_heads, dim = self.num_heads, self.num_kv_heads, self.head_dim
        self.q_proj = nn.Linear(self.hidden_size, heads * 2 * dim, bias=False)
        self.k_proj = nn.Linear(self.hidden_size, kv_heads * dim, bias=False)
        self.v_proj = nn.Linear(self.hidden_size, kv_heads * dim, bias=False)
        self.o_proj = nn.Linear(heads * dim, self.hidden_size, bias=False)
        self.q_norm = ZeroCenteredRMSNorm(dim, config.rms_norm_eps)
        self.k_norm = ZeroCenteredRMSNorm(dim, config.rms_norm_eps)

    def project(self, x: torch.Tensor):
        """x [B, T, hidden] -> query, gate [B, T, H, D] and key, value [B, T, Hkv, D]."""
        batch, seq, _ = x.shape
        query, gate = split_query_gate(self.q_proj(x), self.num_heads, self.head_dim)
        key = self.k_proj(x).view(batch, seq, self.num_kv_heads, self.head_dim)
        value = self.v_proj(x).view(batch, seq, self.num_kv_heads, self.head_dim)
        return query, gate, key, value

    def position(self, query: torch.Tensor, key: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor):
        """QK-Norm per head, heads before time, partial RoPE -> [B, H, T, D] and [B, Hkv, T, D]."""
        query = self.q_norm(query).transpose(1, 2)
        key = self.k_norm(key).transpose(1, 2)
        query = apply_partial_rope(query, cos, sin)
        key = apply_partial_rope(key, cos, sin)
        return query, key

    def attend(self, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
               attention_mask: torch.Tensor | None) -> torch.Tensor:
        """Causal (and padding) attention with shared KV heads -> [B, H, T, D]; value is [B, T, Hkv, D]."""
        seq = query.shape[2]
        value = value.transpose(1, 2)
        n_rep = self.num_heads // self.num_kv_heads
        key = repeat_kv(key, n_rep)
        value = repeat_kv(value, n_rep)
        mask = causal_mask(seq, key.shape[2])
        if attention_mask is not None:
            mask = mask & padding_mask(attention_mask)
        out, _ = attention(query, key, value, mask)
        return out

    def gate_and_project(self, out: torch.Tensor, gate: torch.Tensor) -> torch.Tensor:
        """out [B, H, T, D] gated by sigmoid(gate [B, T, H, D]), heads merged, o_proj -> [B, T, hidden]."""
        out = out.transpose(1, 2)                 # [B, T, H, D], like gate
        out = apply_output_gate(out, gate)
        out = out.reshape(out.shape[0], out.shape[1], -1)
        return self.o_proj(out)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
                attention_mask: torch.Tensor | None = None) -> torch.Tensor:
        query, gate, key, value = self.project(x)
        query, key = self.position(query, key, cos, sin)
        return self.gate_and_project(self.attend(query, key, value, attention_mask), gate)
'''

CORRECT = {**a01.CORRECT, "repeat_kv": a03.REPEAT_KV, "rope_cos_sin": a04.ROPE_COS_SIN,
           "rotate_half": a04.ROTATE_HALF, "apply_rope": a04.APPLY_ROPE,
           "split_query_gate": a05.SPLIT_QUERY_GATE, "apply_output_gate": a05.APPLY_OUTPUT_GATE,
           "ZeroCenteredRMSNorm": NORM, "apply_partial_rope": PARTIAL_ROPE, "Qwen35Attention": QWEN}

N, PR, Q = "ZeroCenteredRMSNorm", "apply_partial_rope", "Qwen35Attention"

NORM_PLAIN_WEIGHT = patch(NORM, ("normed = normed * (1.0 + self.weight.float())", "normed = normed * self.weight.float()"))
ROTATE_LAST_DIMS = '''
def apply_partial_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate-half RoPE on the first rotary_dim dims of each head; the other dims pass through."""
    rotary_dim = cos.shape[-1]
    x_pass = x[..., :-rotary_dim]
    x_rot = x[..., -rotary_dim:]
    return torch.cat([x_pass, apply_rope(x_rot, cos, sin)], dim=-1)
'''
Q_HALF_SPLIT = patch(QWEN, ("        query, gate = split_query_gate(self.q_proj(x), self.num_heads, self.head_dim)\n",
                            "        query, gate = self.q_proj(x).chunk(2, dim=-1)\n"
                            "        query = query.reshape(batch, seq, self.num_heads, self.head_dim)\n"
                            "        gate = gate.reshape(batch, seq, self.num_heads, self.head_dim)\n"))

ENTRIES = [
    # ---- ZeroCenteredRMSNorm (Qwen35Attention's q_norm / k_norm) ----
    Entry("06-norm-weight-not-one-plus", "cascade",
          "ZeroCenteredRMSNorm multiplies by weight instead of (1 + weight), so a fresh norm (weight 0) outputs "
          "zeros and checkpoint weights scale by w instead of 1 + w; Qwen35Attention uses it for q_norm/k_norm",
          {N: NORM_PLAIN_WEIGHT},
          (N, Q)),
    Entry("06-norm-init-ones", "single",
          "ZeroCenteredRMSNorm initialises weight to ones while also multiplying by (1 + weight), so a fresh "
          "norm scales by 2",
          {N: patch(NORM, ("self.weight = nn.Parameter(torch.zeros(dim))", "self.weight = nn.Parameter(torch.ones(dim))"))},
          (N,)),
    Entry("06-norm-eps-outside-sqrt", "single",
          "ZeroCenteredRMSNorm adds eps outside the square root: x / (sqrt(mean(x^2)) + eps)",
          {N: patch(NORM, ("normed = x32 * torch.rsqrt(variance + self.eps)", "normed = x32 / (torch.sqrt(variance) + self.eps)"))},
          (N,)),
    Entry("06-norm-input-dtype", "single",
          "ZeroCenteredRMSNorm computes in the input dtype instead of float32, so float16 inputs overflow in "
          "x^2 (300^2 > 65504) and give wrong results",
          {N: patch(NORM, ("x32 = x.float()", "x32 = x"), ("(1.0 + self.weight.float())", "(1.0 + self.weight.to(x.dtype))"))},
          (N,)),
    Entry("06-norm-no-cast-back", "cascade",
          "ZeroCenteredRMSNorm computes in float32 but returns float32 instead of casting back to the input "
          "dtype; in a bfloat16 Qwen35Attention the float32 query/key then meet bfloat16 values",
          {N: patch(NORM, ("return normed.to(x.dtype)", "return normed"))},
          (N, Q)),
    Entry("06-norm-mean-over-all", "cascade",
          "ZeroCenteredRMSNorm takes the mean of x^2 over every element (no dim) instead of over the last dim, "
          "so all rows share one scale",
          {N: patch(NORM, ("variance = x32.pow(2).mean(dim=-1, keepdim=True)", "variance = x32.pow(2).mean()"))},
          (N, Q)),
    Entry("06-norm-layernorm-centering", "single",
          "ZeroCenteredRMSNorm subtracts the mean of x before normalising (so it divides by the standard "
          "deviation, like LayerNorm: 'zero-centred' read as centring x) instead of dividing x by its root "
          "mean square",
          {N: patch(NORM, ("variance = x32.pow(2).mean(dim=-1, keepdim=True)",
                           "x32 = x32 - x32.mean(dim=-1, keepdim=True)\n        variance = x32.pow(2).mean(dim=-1, keepdim=True)"))},
          (N, Q)),
    # ---- apply_partial_rope ----
    Entry("06-partial-rotates-last-dims", "cascade",
          "apply_partial_rope rotates the last rotary_dim dims of each head and passes the first ones through, "
          "instead of rotating the first rotary_dim dims",
          {PR: ROTATE_LAST_DIMS},
          (PR, Q)),
    Entry("06-partial-whole-head", "raises",
          "apply_partial_rope calls apply_rope on the whole head, so the [T, rotary_dim] tables do not "
          "broadcast against D > rotary_dim dims",
          {PR: '''
def apply_partial_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate-half RoPE on the first rotary_dim dims of each head; the other dims pass through."""
    return apply_rope(x, cos, sin)
'''},
          (PR, Q)),
    Entry("06-partial-drops-pass-dims", "cascade",
          "apply_partial_rope returns only the rotated rotary_dim dims and drops the D - rotary_dim pass-through "
          "dims",
          {PR: patch(PARTIAL_ROPE, ("return torch.cat([apply_rope(x_rot, cos, sin), x_pass], dim=-1)",
                                    "return apply_rope(x_rot, cos, sin)"))},
          (PR, Q)),
    Entry("06-partial-no-cast", "cascade",
          "apply_partial_rope rotates by hand with the float32 cos/sin tables without casting them to x's dtype, "
          "so bfloat16 input comes back float32 (and a bfloat16 Qwen35Attention mixes dtypes)",
          {PR: '''
def apply_partial_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate-half RoPE on the first rotary_dim dims of each head; the other dims pass through."""
    rotary_dim = cos.shape[-1]
    x_rot, x_pass = x[..., :rotary_dim], x[..., rotary_dim:]
    x_rot = x_rot * cos + rotate_half(x_rot) * sin
    return torch.cat([x_rot, x_pass.to(x_rot.dtype)], dim=-1)
'''},
          (PR, Q)),
    # ---- Qwen35Attention ----
    Entry("06-qwen-half-split", "single",
          "Qwen35Attention.project splits q_proj's output into the first H*D outputs (query) and the last H*D "
          "(gate) instead of per head [query_h | gate_h]",
          {Q: Q_HALF_SPLIT},
          (Q,)),
    Entry("06-qwen-norm-after-rope", "single",
          "Qwen35Attention applies partial RoPE first and q_norm / k_norm afterwards (QK-Norm must come before "
          "RoPE)",
          {Q: patch(QWEN, ("        query = self.q_norm(query).transpose(1, 2)\n        key = self.k_norm(key).transpose(1, 2)\n"
                           "        query = apply_partial_rope(query, cos, sin)\n        key = apply_partial_rope(key, cos, sin)\n",
                           "        query = apply_partial_rope(query.transpose(1, 2), cos, sin)\n"
                           "        key = apply_partial_rope(key.transpose(1, 2), cos, sin)\n"
                           "        query = self.q_norm(query)\n        key = self.k_norm(key)\n"))},
          (Q,)),
    Entry("06-qwen-no-k-norm", "single",
          "Qwen35Attention normalises the query with q_norm but never applies k_norm to the key",
          {Q: patch(QWEN, ("key = self.k_norm(key).transpose(1, 2)", "key = key.transpose(1, 2)"))},
          (Q,)),
    Entry("06-qwen-repeat-tiled", "single",
          "Qwen35Attention shares the KV heads with key.repeat(1, n_rep, 1, 1) (tiled: query head h reads KV head "
          "h % Hkv) instead of repeat_kv / repeat_interleave (h // n_rep)",
          {Q: patch(QWEN, ("        key = repeat_kv(key, n_rep)\n        value = repeat_kv(value, n_rep)\n",
                           "        key = key.repeat(1, n_rep, 1, 1)\n        value = value.repeat(1, n_rep, 1, 1)\n"))},
          (Q,)),
    Entry("06-qwen-gate-after-o-proj", "raises",
          "Qwen35Attention applies the gate after o_proj (to the [B, T, hidden] output) instead of to each "
          "head's output before o_proj; the [B, T, H*D] gate does not match when hidden != H*D",
          {Q: patch(QWEN, ("        out = apply_output_gate(out, gate)\n        out = out.reshape(out.shape[0], out.shape[1], -1)\n"
                           "        return self.o_proj(out)\n",
                           "        out = self.o_proj(out.reshape(out.shape[0], out.shape[1], -1))\n"
                           "        return apply_output_gate(out, gate.reshape(out.shape[0], out.shape[1], -1))\n"))},
          (Q,)),
    Entry("06-qwen-gate-before-transpose", "raises",
          "Qwen35Attention multiplies the gate [B, T, H, D] onto the attention output while it is still "
          "[B, H, T, D] (before moving the heads back), which fails to broadcast unless T == H",
          {Q: patch(QWEN, ("        out = out.transpose(1, 2)                 # [B, T, H, D], like gate\n"
                           "        out = apply_output_gate(out, gate)\n",
                           "        out = apply_output_gate(out, gate)\n"
                           "        out = out.transpose(1, 2)\n"))},
          (Q,)),
    Entry("06-qwen-merge-without-transpose", "single",
          "Qwen35Attention gates the [B, H, T, D] output with gate.transpose(1, 2) and then reshapes it to "
          "[B, T, H*D] without moving the heads back, mixing tokens inside each row",
          {Q: patch(QWEN, ("        out = out.transpose(1, 2)                 # [B, T, H, D], like gate\n"
                           "        out = apply_output_gate(out, gate)\n"
                           "        out = out.reshape(out.shape[0], out.shape[1], -1)\n",
                           "        out = apply_output_gate(out, gate.transpose(1, 2))\n"
                           "        out = out.reshape(out.shape[0], out.shape[2], -1)\n"))},
          (Q,)),
    Entry("06-qwen-no-causal-mask", "single",
          "Qwen35Attention applies only the padding mask and never the causal mask",
          {Q: patch(QWEN, ("        mask = causal_mask(seq, key.shape[2])\n        if attention_mask is not None:\n"
                           "            mask = mask & padding_mask(attention_mask)\n",
                           "        mask = None\n        if attention_mask is not None:\n"
                           "            mask = padding_mask(attention_mask)\n"))},
          (Q,)),
    Entry("06-qwen-ignores-padding", "single",
          "Qwen35Attention never uses attention_mask, so left padding changes the real tokens' outputs",
          {Q: patch(QWEN, ("        if attention_mask is not None:\n            mask = mask & padding_mask(attention_mask)\n", ""))},
          (Q,)),
    Entry("06-qwen-value-not-transposed", "raises",
          "Qwen35Attention.attend uses value as [B, T, Hkv, D] without moving the heads before time, so "
          "repeat_kv and weights @ value work on the wrong dims",
          {Q: patch(QWEN, ("        value = value.transpose(1, 2)\n", ""))},
          (Q,)),
    # ---- two mistakes ----
    Entry("06-double-plain-weight-and-last-dims", "double",
          "two mistakes: ZeroCenteredRMSNorm multiplies by weight instead of (1 + weight), and apply_partial_rope "
          "rotates the last rotary_dim dims instead of the first",
          {N: NORM_PLAIN_WEIGHT, PR: ROTATE_LAST_DIMS},
          (N, PR, Q)),
    Entry("06-double-half-split-and-no-sigmoid", "double",
          "two mistakes in Qwen35Attention: it splits q_proj's output in half instead of per head, and it "
          "multiplies by the raw gate scores without the sigmoid",
          {Q: patch(Q_HALF_SPLIT, ("        out = apply_output_gate(out, gate)\n", "        out = out * gate\n"))},
          (Q,)),
    Entry("06-double-eps-outside-and-no-causal", "double",
          "two mistakes: ZeroCenteredRMSNorm adds eps outside the square root, and Qwen35Attention never applies "
          "the causal mask",
          {N: patch(NORM, ("normed = x32 * torch.rsqrt(variance + self.eps)", "normed = x32 / (torch.sqrt(variance) + self.eps)")),
           Q: patch(QWEN, ("        mask = causal_mask(seq, key.shape[2])\n        if attention_mask is not None:\n"
                           "            mask = mask & padding_mask(attention_mask)\n",
                           "        mask = None\n        if attention_mask is not None:\n"
                           "            mask = padding_mask(attention_mask)\n"))},
          (N, Q)),
    Entry("06-double-init-ones-and-no-k-norm", "double",
          "two mistakes: ZeroCenteredRMSNorm initialises weight to ones (a fresh norm scales by 2), and "
          "Qwen35Attention never applies k_norm",
          {N: patch(NORM, ("self.weight = nn.Parameter(torch.zeros(dim))", "self.weight = nn.Parameter(torch.ones(dim))")),
           Q: patch(QWEN, ("key = self.k_norm(key).transpose(1, 2)", "key = key.transpose(1, 2)"))},
          (N, Q)),
    # A later set, written from the notebooks alone.
    Entry("06-double-norm-sum-and-rotary-half-head", "double",
          "two mistakes: ZeroCenteredRMSNorm divides by sqrt(sum(x²) + eps) instead of sqrt(mean(x²) + eps), and "
          "apply_partial_rope hardcodes rotary_dim = head_dim // 2 (Qwen3.5's factor) instead of reading it "
          "from cos.shape[-1]",
          {N: patch(NORM, ("variance = x32.pow(2).mean(dim=-1, keepdim=True)", "variance = x32.pow(2).sum(dim=-1, keepdim=True)")),
           PR: patch(PARTIAL_ROPE, ("rotary_dim = cos.shape[-1]", "rotary_dim = x.shape[-1] // 2  # partial_rotary_factor"))},
          (N, PR, Q)),
    Entry("06-double-norm-var-and-k-norm-for-query", "double",
          "two mistakes: ZeroCenteredRMSNorm uses x.var(dim=-1) (the unbiased variance about the mean) instead "
          "of mean(x²), and Qwen35Attention normalises the query with k_norm instead of q_norm",
          {N: patch(NORM, ("variance = x32.pow(2).mean(dim=-1, keepdim=True)", "variance = x32.var(dim=-1, keepdim=True)")),
           Q: patch(QWEN, ("query = self.q_norm(query).transpose(1, 2)", "query = self.k_norm(query).transpose(1, 2)"))},
          (N, Q)),
    # A held-out set, written from the notebooks alone.
    Entry("06-ho-double-norm-weight-not-parameter-and-rope-query-only", "double",
          "two mistakes: ZeroCenteredRMSNorm stores its weight as a plain tensor (torch.zeros(dim)) instead of an "
          "nn.Parameter, so it is missing from the state dict and parameters (load_state_dict with a weight raises "
          "an unexpected-key error, and q_norm / k_norm keep weight 0); and Qwen35Attention applies partial RoPE to the query only, never to the key",
          {N: patch(NORM, ("self.weight = nn.Parameter(torch.zeros(dim))", "self.weight = torch.zeros(dim)")),
           Q: patch(QWEN, ("        key = apply_partial_rope(key, cos, sin)\n", ""))},
          (N, Q)),
    Entry("06-ho-double-partial-pass-first-and-masks-or", "double",
          "two mistakes: apply_partial_rope rotates the first rotary_dim dims but concatenates the result after "
          "the pass-through dims (cat([x_pass, rotated])), moving the rotated part to the end of each head; and "
          "Qwen35Attention combines the causal and padding masks with | instead of &",
          {PR: patch(PARTIAL_ROPE, ("return torch.cat([apply_rope(x_rot, cos, sin), x_pass], dim=-1)",
                                    "return torch.cat([x_pass, apply_rope(x_rot, cos, sin)], dim=-1)")),
           Q: patch(QWEN, ("mask = mask & padding_mask(attention_mask)", "mask = mask | padding_mask(attention_mask)"))},
          (PR, Q)),
    Entry("06-ho-double-norm-sqrt-and-value-normalised", "double",
          "two mistakes: ZeroCenteredRMSNorm multiplies x by torch.sqrt(mean(x²) + eps) instead of torch.rsqrt "
          "(it scales by the root mean square instead of dividing by it); and Qwen35Attention also applies k_norm "
          "to the value heads, although QK-Norm normalises only queries and keys",
          {N: patch(NORM, ("normed = x32 * torch.rsqrt(variance + self.eps)", "normed = x32 * torch.sqrt(variance + self.eps)")),
           Q: patch(QWEN, ("value = self.v_proj(x).view(batch, seq, self.num_kv_heads, self.head_dim)",
                           "value = self.k_norm(self.v_proj(x).view(batch, seq, self.num_kv_heads, self.head_dim))"))},
          (N, Q)),
]
