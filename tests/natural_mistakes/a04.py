"""04_rope_mla: rope_cos_sin, apply_rope, LatentKVCache, MultiHeadLatentAttention, forward_absorbed,
mla_cache_bytes."""
from . import a01
from .entry import Entry, patch

ASSIGNMENT = "04_rope_mla"

HEADER = a01.HEADER

ROPE_COS_SIN = '''
def rope_cos_sin(positions: torch.Tensor, rotary_dim: int, theta: float) -> tuple[torch.Tensor, torch.Tensor]:
    """cos, sin [T, rotary_dim] float32; frequency i is theta^(-2i / rotary_dim); angles cat(freqs, freqs)."""
    exponent = torch.arange(0, rotary_dim, 2, dtype=torch.float32) / rotary_dim
    inv_freq = 1.0 / (theta ** exponent)
    angles = positions.to(torch.float32)[:, None] * inv_freq[None, :]
    table = torch.cat([angles, angles], dim=-1)
    return table.cos(), table.sin()
'''

ROTATE_HALF = '''
def rotate_half(x: torch.Tensor) -> torch.Tensor:
    """[x1, x2] -> [-x2, x1] over the last dim."""
    half = x.shape[-1] // 2
    x1 = x[..., :half]
    x2 = x[..., half:]
    return torch.cat([-x2, x1], dim=-1)
'''

APPLY_ROPE = '''
def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate-half RoPE over every dim of x [..., T, D] with cos, sin [T, D]."""
    cos = cos.to(x.dtype)
    sin = sin.to(x.dtype)
    return x * cos + rotate_half(x) * sin
'''

LATENT_CACHE = '''
class LatentKVCache:
    """MLA's cache for one layer: the normalised latent [B, T, r] and the rotated rope key [B, T, d_rope]."""

    def __init__(self):
        self.latent = None
        self.k_rope = None

    def update(self, latent: torch.Tensor, k_rope: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Append latent [B, T_new, r] and k_rope [B, T_new, d_rope] along T; return everything cached."""
        if self.latent is None:
            self.latent = latent
            self.k_rope = k_rope
        else:
            self.latent = torch.cat([self.latent, latent], dim=1)
            self.k_rope = torch.cat([self.k_rope, k_rope], dim=1)
        return self.latent, self.k_rope

    def __len__(self) -> int:
        return 0 if self.latent is None else self.latent.shape[1]
'''

RMSNORM = '''
class RMSNorm(nn.Module):
    """Plain RMSNorm over the last dim: x * rsqrt(mean(x^2) + eps) * weight, weight from 1, in float32."""

    def __init__(self, dim: int, eps: float = 1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x32 = x.float()
        normed = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps)
        return (normed * self.weight.float()).to(x.dtype)
'''

MLA = '''
class MultiHeadLatentAttention(nn.Module):
    """DeepSeek-V2's multi-head latent attention with a decoupled, shared RoPE key."""

    def __init__(self, config):
        super().__init__()
        self.hidden_size = config.hidden_size
        self.num_heads = config.num_attention_heads
        self.q_lora_rank = config.q_lora_rank
        self.kv_lora_rank = config.kv_lora_rank
        self.nope_dim = config.qk_nope_head_dim
        self.rope_dim = config.qk_rope_head_dim
        self.v_dim = config.v_head_dim
        self.q_head_dim = self.nope_dim + self.rope_dim
        self.rope_theta = config.rope_theta
        self.scale = self.q_head_dim ** -0.5
        heads = self.num_heads
        if self.q_lora_rank is None:
            self.q_proj = nn.Linear(self.hidden_size, heads * self.q_head_dim, bias=False)
        else:
            self.q_a_proj = nn.Linear(self.hidden_size, self.q_lora_rank, bias=False)
            self.q_a_layernorm = RMSNorm(self.q_lora_rank, config.rms_norm_eps)
            self.q_b_proj = nn.Linear(self.q_lora_rank, heads * self.q_head_dim, bias=False)
        self.kv_a_proj_with_mqa = nn.Linear(self.hidden_size, self.kv_lora_rank + self.rope_dim, bias=False)
        self.kv_a_layernorm = RMSNorm(self.kv_lora_rank, config.rms_norm_eps)
        self.kv_b_proj = nn.Linear(self.kv_lora_rank, heads * (self.nope_dim + self.v_dim), bias=False)
        self.o_proj = nn.Linear(heads * self.v_dim, self.hidden_size, bias=False)

    def project_query(self, x):
        if self.q_lora_rank is None:
            return self.q_proj(x)
        return self.q_b_proj(self.q_a_layernorm(self.q_a_proj(x)))

    def prepare(self, x: torch.Tensor, attention_mask: torch.Tensor | None, cache):
        """q_nope [B, H, T, nope], rotated q_rope [B, H, T, rope], latents [B, k_len, r], rope keys
        [B, k_len, rope] of every position, and the mask."""
        batch, seq, _ = x.shape
        start = 0 if cache is None else len(cache)
        positions = torch.arange(start, start + seq)
        cos, sin = rope_cos_sin(positions, self.rope_dim, self.rope_theta)

        q = self.project_query(x).view(batch, seq, self.num_heads, self.q_head_dim).transpose(1, 2)
        q_nope, q_rope = torch.split(q, [self.nope_dim, self.rope_dim], dim=-1)
        q_rope = apply_rope(q_rope, cos, sin)

        compressed = self.kv_a_proj_with_mqa(x)
        latent, k_rope = torch.split(compressed, [self.kv_lora_rank, self.rope_dim], dim=-1)
        latent = self.kv_a_layernorm(latent)
        k_rope = apply_rope(k_rope, cos, sin)
        if cache is not None:
            latent, k_rope = cache.update(latent, k_rope)

        k_len = latent.shape[1]
        mask = causal_mask(seq, k_len)
        if attention_mask is not None:
            mask = mask & padding_mask(attention_mask)
        return q_nope, q_rope, latent, k_rope, mask

    def forward(self, x: torch.Tensor, attention_mask: torch.Tensor | None = None, cache=None):
        batch, seq, _ = x.shape
        q_nope, q_rope, latent, k_rope, mask = self.prepare(x, attention_mask, cache)
        k_len = latent.shape[1]
        kv = self.kv_b_proj(latent).view(batch, k_len, self.num_heads, self.nope_dim + self.v_dim)
        kv = kv.transpose(1, 2)
        k_nope, value = torch.split(kv, [self.nope_dim, self.v_dim], dim=-1)
        scores = q_nope @ k_nope.transpose(-2, -1)
        scores = scores + q_rope @ k_rope.unsqueeze(1).transpose(-2, -1)
        weights = masked_softmax(scores * self.scale, mask)
        out = weights @ value
        out = out.transpose(1, 2).reshape(batch, seq, self.num_heads * self.v_dim)
        return self.o_proj(out), cache
'''

FORWARD_ABSORBED = '''
class MultiHeadLatentAttention(MultiHeadLatentAttention):
    def forward_absorbed(self, x: torch.Tensor, attention_mask: torch.Tensor | None = None, cache=None):
        """The same as forward, computed in latent space: no per-head key or value is ever built."""
        batch, seq, _ = x.shape
        q_nope, q_rope, latent, k_rope, mask = self.prepare(x, attention_mask, cache)
        w = self.kv_b_proj.weight.view(self.num_heads, self.nope_dim + self.v_dim, self.kv_lora_rank)
        w_uk = w[:, :self.nope_dim, :]   # [H, nope, r]
        w_uv = w[:, self.nope_dim:, :]   # [H, v, r]
        q_latent = q_nope @ w_uk         # [B, H, T, r]
        latent_h = latent.unsqueeze(1)   # [B, 1, k_len, r]
        scores = q_latent @ latent_h.transpose(-2, -1)
        scores = scores + q_rope @ k_rope.unsqueeze(1).transpose(-2, -1)
        weights = masked_softmax(scores * self.scale, mask)
        context = weights @ latent_h                 # [B, H, T, r]
        out = context @ w_uv.transpose(-2, -1)       # [B, H, T, v]
        out = out.transpose(1, 2).reshape(batch, seq, self.num_heads * self.v_dim)
        return self.o_proj(out), cache
'''

MLA_BYTES = '''
def mla_cache_bytes(batch: int, seq_len: int, num_layers: int, kv_lora_rank: int, qk_rope_head_dim: int,
                    bytes_per_elem: int) -> int:
    """Bytes of an MLA cache: each position of each layer keeps one latent and one shared rope key."""
    per_position = kv_lora_rank + qk_rope_head_dim
    return batch * seq_len * num_layers * per_position * bytes_per_elem
'''

CORRECT = {**a01.CORRECT, "rope_cos_sin": ROPE_COS_SIN, "rotate_half": ROTATE_HALF, "apply_rope": APPLY_ROPE,
           "LatentKVCache": LATENT_CACHE, "RMSNorm": RMSNORM, "MultiHeadLatentAttention": MLA,
           "forward_absorbed": FORWARD_ABSORBED, "mla_cache_bytes": MLA_BYTES}

RC, RH, AR, LC, ML, FA, MB = ("rope_cos_sin", "rotate_half", "apply_rope", "LatentKVCache",
                              "MultiHeadLatentAttention", "forward_absorbed", "mla_cache_bytes")
BOTH = (ML, FA)

ROPE_INTERLEAVED_TABLE = patch(ROPE_COS_SIN, ("table = torch.cat([angles, angles], dim=-1)",
                                              "table = torch.repeat_interleave(angles, 2, dim=-1)"))
ROTATE_HALF_SIGN = patch(ROTATE_HALF, ("return torch.cat([-x2, x1], dim=-1)", "return torch.cat([x2, -x1], dim=-1)"))
MLA_NOPE_SCALE = patch(MLA, ("self.scale = self.q_head_dim ** -0.5", "self.scale = self.nope_dim ** -0.5"))
MLA_POS_FROM_ZERO = patch(MLA, ("positions = torch.arange(start, start + seq)", "positions = torch.arange(seq)"))

ENTRIES = [
    # ---- rope_cos_sin (MLA calls it) ----
    Entry("04-cos-sin-interleaved-table", "cascade",
          "rope_cos_sin repeats each angle twice side by side ([a, a, b, b], repeat_interleave) instead of "
          "cat(freqs, freqs) ([a, b, a, b]) that rotate-half needs; MLA, which calls it, is otherwise correct",
          {RC: ROPE_INTERLEAVED_TABLE},
          (RC,) + BOTH),
    Entry("04-cos-sin-positive-exponent", "cascade",
          "rope_cos_sin uses inv_freq = theta^(+2i/rotary_dim) (the minus sign is lost), so the frequencies "
          "grow instead of shrinking",
          {RC: patch(ROPE_COS_SIN, ("inv_freq = 1.0 / (theta ** exponent)", "inv_freq = theta ** exponent"))},
          (RC,) + BOTH),
    Entry("04-cos-sin-ignores-positions", "single",
          "rope_cos_sin uses arange(len(positions)) instead of the given positions, so a table for positions "
          "that do not start at 0 (after a cache) is wrong",
          {RC: patch(ROPE_COS_SIN, ("angles = positions.to(torch.float32)[:, None]",
                                    "angles = torch.arange(len(positions), dtype=torch.float32)[:, None]"))},
          (RC,) + BOTH),
    # ---- apply_rope / rotate_half ----
    Entry("04-rotate-half-sign", "cascade",
          "the rotate_half helper returns cat(x2, -x1) instead of cat(-x2, x1), so apply_rope (correct itself) "
          "turns every pair the wrong way",
          {RH: ROTATE_HALF_SIGN},
          (AR,) + BOTH),
    Entry("04-apply-rope-interleaved-pairs", "single",
          "apply_rope pairs adjacent dims (x0, x1), (x2, x3), ... (the interleaved layout) instead of dim i "
          "with dim i + D/2 (rotate-half)",
          {AR: '''
def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate-half RoPE over every dim of x [..., T, D] with cos, sin [T, D]."""
    cos = cos.to(x.dtype)
    sin = sin.to(x.dtype)
    half = x.shape[-1] // 2
    c, s = cos[..., :half], sin[..., :half]
    even, odd = x[..., 0::2], x[..., 1::2]
    return torch.stack([even * c - odd * s, even * s + odd * c], dim=-1).flatten(-2)
'''},
          (AR,) + BOTH),
    Entry("04-apply-rope-no-cast", "cascade",
          "apply_rope multiplies by the float32 cos/sin without casting them to x's dtype, so bfloat16 input "
          "comes back float32 (and a bfloat16 MLA, correct itself, then mixes float32 and bfloat16 tensors)",
          {AR: patch(APPLY_ROPE, ("    cos = cos.to(x.dtype)\n    sin = sin.to(x.dtype)\n", ""))},
          (AR,) + BOTH),
    # ---- LatentKVCache (MLA uses it) ----
    Entry("04-latent-cache-cat-feature-dim", "raises",
          "LatentKVCache.update concatenates along the last dim (features) instead of dim=1 (T), which raises "
          "once the second update brings a different number of positions",
          {LC: patch(LATENT_CACHE, ("self.latent = torch.cat([self.latent, latent], dim=1)",
                                    "self.latent = torch.cat([self.latent, latent], dim=-1)"),
                     ("self.k_rope = torch.cat([self.k_rope, k_rope], dim=1)",
                      "self.k_rope = torch.cat([self.k_rope, k_rope], dim=-1)"))},
          (LC,) + BOTH),
    Entry("04-latent-cache-len-counts-updates", "cascade",
          "LatentKVCache.__len__ counts update calls instead of positions; MLA (correct) then starts RoPE at "
          "the wrong position after a multi-token prefill",
          {LC: '''
class LatentKVCache:
    """MLA's cache for one layer: the normalised latent [B, T, r] and the rotated rope key [B, T, d_rope]."""

    def __init__(self):
        self.latent = None
        self.k_rope = None
        self.updates = 0

    def update(self, latent: torch.Tensor, k_rope: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Append latent [B, T_new, r] and k_rope [B, T_new, d_rope] along T; return everything cached."""
        self.updates += 1
        if self.latent is None:
            self.latent = latent
            self.k_rope = k_rope
        else:
            self.latent = torch.cat([self.latent, latent], dim=1)
            self.k_rope = torch.cat([self.k_rope, k_rope], dim=1)
        return self.latent, self.k_rope

    def __len__(self) -> int:
        return self.updates
'''},
          (LC,) + BOTH),
    # ---- MultiHeadLatentAttention ----
    Entry("04-mla-scale-tutorial", "single",
          "MultiHeadLatentAttention scales by 1 / (sqrt(d_nope) + sqrt(d_rope)) (the simplified tutorial's "
          "divisor) instead of (d_nope + d_rope)^-1/2",
          {ML: patch(MLA, ("self.scale = self.q_head_dim ** -0.5",
                           "self.scale = 1.0 / (math.sqrt(self.nope_dim) + math.sqrt(self.rope_dim))"))},
          BOTH),
    Entry("04-mla-positions-from-zero", "single",
          "MultiHeadLatentAttention always uses RoPE positions arange(T) instead of len(cache) + arange(T), so "
          "decoding with a cache rotates the new query and key as if they were at the start",
          {ML: MLA_POS_FROM_ZERO},
          BOTH),
    Entry("04-mla-latent-not-normalised", "single",
          "MultiHeadLatentAttention never applies kv_a_layernorm to the latent",
          {ML: patch(MLA, ("        latent = self.kv_a_layernorm(latent)\n", ""))},
          BOTH),
    Entry("04-mla-caches-raw-latent", "single",
          "MultiHeadLatentAttention puts the un-normalised latent into the cache and normalises only after "
          "cache.update, so the cache does not hold the normalised latent (the output is unchanged)",
          {ML: patch(MLA, ("        latent = self.kv_a_layernorm(latent)\n", ""),
                     ("            latent, k_rope = cache.update(latent, k_rope)\n",
                      "            latent, k_rope = cache.update(latent, k_rope)\n        latent = self.kv_a_layernorm(latent)\n"))},
          BOTH),
    Entry("04-mla-rope-key-rotated-after-cache", "raises",
          "MultiHeadLatentAttention caches the un-rotated rope key and rotates the whole cached k_rope with the "
          "new positions' table, which does not match [k_len, d_rope] once the cache holds earlier positions",
          {ML: patch(MLA, ("        k_rope = apply_rope(k_rope, cos, sin)\n        if cache is not None:\n"
                           "            latent, k_rope = cache.update(latent, k_rope)\n",
                           "        if cache is not None:\n            latent, k_rope = cache.update(latent, k_rope)\n"
                           "        k_rope = apply_rope(k_rope, cos, sin)\n"))},
          BOTH),
    Entry("04-mla-query-half-split", "single",
          "MultiHeadLatentAttention splits the query projection into all heads' nope parts first and all "
          "heads' rope parts after (first H*d_nope outputs / last H*d_rope), instead of [nope_h | rope_h] "
          "within each head",
          {ML: patch(MLA, ("        q = self.project_query(x).view(batch, seq, self.num_heads, self.q_head_dim).transpose(1, 2)\n"
                           "        q_nope, q_rope = torch.split(q, [self.nope_dim, self.rope_dim], dim=-1)\n",
                           "        q = self.project_query(x)\n"
                           "        q_nope = q[..., :self.num_heads * self.nope_dim]\n"
                           "        q_rope = q[..., self.num_heads * self.nope_dim:]\n"
                           "        q_nope = q_nope.reshape(batch, seq, self.num_heads, self.nope_dim).transpose(1, 2)\n"
                           "        q_rope = q_rope.reshape(batch, seq, self.num_heads, self.rope_dim).transpose(1, 2)\n"))},
          BOTH),
    Entry("04-mla-kv-b-half-split", "single",
          "MultiHeadLatentAttention.forward splits kv_b_proj's output into the first H*d_nope outputs as keys "
          "and the rest as values, instead of [k_nope_h | v_h] within each head",
          {ML: patch(MLA, ("        kv = self.kv_b_proj(latent).view(batch, k_len, self.num_heads, self.nope_dim + self.v_dim)\n"
                           "        kv = kv.transpose(1, 2)\n"
                           "        k_nope, value = torch.split(kv, [self.nope_dim, self.v_dim], dim=-1)\n",
                           "        kv = self.kv_b_proj(latent)\n"
                           "        k_nope = kv[..., :self.num_heads * self.nope_dim]\n"
                           "        value = kv[..., self.num_heads * self.nope_dim:]\n"
                           "        k_nope = k_nope.reshape(batch, k_len, self.num_heads, self.nope_dim).transpose(1, 2)\n"
                           "        value = value.reshape(batch, k_len, self.num_heads, self.v_dim).transpose(1, 2)\n"))},
          (ML,)),
    Entry("04-mla-ignores-padding", "single",
          "MultiHeadLatentAttention never uses attention_mask (only the causal mask)",
          {ML: patch(MLA, ("        if attention_mask is not None:\n            mask = mask & padding_mask(attention_mask)\n", ""))},
          BOTH),
    # ---- forward_absorbed ----
    Entry("04-absorbed-key-value-parts-swapped", "single",
          "forward_absorbed slices each head's kv_b_proj block the wrong way round: W_uk from the rows after "
          "d_nope (the value part) and W_uv from the first d_nope rows (the key part); silently wrong when "
          "d_nope == d_v, a shape error otherwise",
          {FA: patch(FORWARD_ABSORBED, ("w_uk = w[:, :self.nope_dim, :]   # [H, nope, r]",
                                        "w_uk = w[:, self.nope_dim:, :]   # [H, nope, r]"),
                     ("w_uv = w[:, self.nope_dim:, :]   # [H, v, r]", "w_uv = w[:, :self.nope_dim, :]   # [H, v, r]"))},
          (FA,)),
    Entry("04-absorbed-weight-view-transposed", "single",
          "forward_absorbed views kv_b_proj.weight as [H, r, d_nope + d_v] (as if it were [in, out]) instead "
          "of [H, d_nope + d_v, r], scrambling W_uk and W_uv",
          {FA: patch(FORWARD_ABSORBED, ("w = self.kv_b_proj.weight.view(self.num_heads, self.nope_dim + self.v_dim, self.kv_lora_rank)",
                                        "w = self.kv_b_proj.weight.view(self.num_heads, self.kv_lora_rank, self.nope_dim + self.v_dim).transpose(1, 2)"))},
          (FA,)),
    Entry("04-absorbed-no-rope-term", "single",
          "forward_absorbed scores only q_latent . latent and leaves out the q_rope . k_rope term",
          {FA: patch(FORWARD_ABSORBED, ("        scores = scores + q_rope @ k_rope.unsqueeze(1).transpose(-2, -1)\n", ""))},
          (FA,)),
    Entry("04-absorbed-uv-not-transposed", "raises",
          "forward_absorbed multiplies the weighted latents by W_uv [H, d_v, r] without transposing it, a shape "
          "error whenever d_v != r",
          {FA: patch(FORWARD_ABSORBED, ("out = context @ w_uv.transpose(-2, -1)       # [B, H, T, v]",
                                        "out = context @ w_uv       # [B, H, T, v]"))},
          (FA,)),
    # ---- mla_cache_bytes ----
    Entry("04-mla-bytes-times-two", "single",
          "mla_cache_bytes multiplies by 2 as for separate keys and values, although MLA caches one latent and "
          "one rope key per position",
          {MB: patch(MLA_BYTES, ("per_position = kv_lora_rank + qk_rope_head_dim", "per_position = 2 * (kv_lora_rank + qk_rope_head_dim)"))},
          (MB,)),
    Entry("04-mla-bytes-no-rope", "single",
          "mla_cache_bytes counts only the latent and leaves out the rope key",
          {MB: patch(MLA_BYTES, ("per_position = kv_lora_rank + qk_rope_head_dim", "per_position = kv_lora_rank"))},
          (MB,)),
    # ---- two mistakes ----
    Entry("04-double-interleaved-table-and-sign", "double",
          "two mistakes: rope_cos_sin builds the interleaved [a, a, b, b] table, and rotate_half returns "
          "cat(x2, -x1) (the wrong sign)",
          {RC: ROPE_INTERLEAVED_TABLE, RH: ROTATE_HALF_SIGN},
          (RC, AR) + BOTH),
    Entry("04-double-mla-scale-and-positions", "double",
          "two mistakes in MultiHeadLatentAttention: the scale is d_nope^-1/2 and the RoPE positions restart "
          "at 0 on every call",
          {ML: patch(MLA_NOPE_SCALE, ("positions = torch.arange(start, start + seq)", "positions = torch.arange(seq)"))},
          BOTH),
    Entry("04-double-cache-len-and-bytes", "double",
          "two mistakes: LatentKVCache.__len__ returns the latent width instead of the number of positions, "
          "and mla_cache_bytes leaves out the rope key",
          {LC: patch(LATENT_CACHE, ("return 0 if self.latent is None else self.latent.shape[1]",
                                    "return 0 if self.latent is None else self.latent.shape[-1]")),
           MB: patch(MLA_BYTES, ("per_position = kv_lora_rank + qk_rope_head_dim", "per_position = kv_lora_rank"))},
          (LC, MB) + BOTH),
    Entry("04-double-interleaved-pairs-and-bytes-times-two", "double",
          "two mistakes: apply_rope pairs adjacent dims (interleaved) instead of rotate-half, and mla_cache_bytes "
          "multiplies by 2 as if keys and values were cached separately",
          {AR: '''
def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate-half RoPE over every dim of x [..., T, D] with cos, sin [T, D]."""
    cos = cos.to(x.dtype)
    sin = sin.to(x.dtype)
    half = x.shape[-1] // 2
    c, s = cos[..., :half], sin[..., :half]
    even, odd = x[..., 0::2], x[..., 1::2]
    return torch.stack([even * c - odd * s, even * s + odd * c], dim=-1).flatten(-2)
''',
           MB: patch(MLA_BYTES, ("per_position = kv_lora_rank + qk_rope_head_dim", "per_position = 2 * (kv_lora_rank + qk_rope_head_dim)"))},
          (AR, MB) + BOTH),
    # A later set, written from the notebooks alone.
    Entry("04-double-exponent-step-one-and-bytes-no-layers", "double",
          "two mistakes: rope_cos_sin builds the exponents as arange(rotary_dim // 2) / rotary_dim, i.e. i / d "
          "instead of 2i / d (frequencies theta^(-i/d)), and mla_cache_bytes never multiplies by num_layers",
          {RC: patch(ROPE_COS_SIN, ("exponent = torch.arange(0, rotary_dim, 2, dtype=torch.float32) / rotary_dim",
                                    "exponent = torch.arange(rotary_dim // 2, dtype=torch.float32) / rotary_dim")),
           MB: patch(MLA_BYTES, ("return batch * seq_len * num_layers * per_position * bytes_per_elem",
                                 "return batch * seq_len * per_position * bytes_per_elem"))},
          (RC, ML, FA, MB)),
    Entry("04-double-cos-sin-swapped-and-cache-returns-new", "double",
          "two mistakes: apply_rope computes x·sin + rotate_half(x)·cos (cos and sin swapped), and "
          "LatentKVCache.update stores the concatenation but returns only the new latent and rope key",
          {AR: patch(APPLY_ROPE, ("return x * cos + rotate_half(x) * sin", "return x * sin + rotate_half(x) * cos")),
           LC: patch(LATENT_CACHE, ("        return self.latent, self.k_rope\n", "        return latent, k_rope\n"))},
          (AR, LC, ML, FA)),
    Entry("04-double-no-q-a-norm-and-absorbed-unscaled", "double",
          "two mistakes: with q_lora_rank set, MultiHeadLatentAttention skips q_a_layernorm between q_a_proj and "
          "q_b_proj, and forward_absorbed forgets to multiply the scores by (nope + rope)^-1/2",
          {ML: patch(MLA, ("return self.q_b_proj(self.q_a_layernorm(self.q_a_proj(x)))", "return self.q_b_proj(self.q_a_proj(x))")),
           FA: patch(FORWARD_ABSORBED, ("weights = masked_softmax(scores * self.scale, mask)", "weights = masked_softmax(scores, mask)"))},
          (ML, FA)),
    # A held-out set, written from the notebooks alone.
    Entry("04-ho-double-rotate-half-even-odd-and-merge-no-transpose", "double",
          "two mistakes: the rotate_half helper splits x into its even and odd dims (x[..., ::2], x[..., 1::2], "
          "the interleaved layout) but concatenates them as [-x_odd, x_even], which does not match the "
          "cat(freqs, freqs) tables, so apply_rope rotates the wrong pairs; and MultiHeadLatentAttention.forward "
          "reshapes the [B, H, T, d_v] output straight to [B, T, H*d_v] without moving the heads after time",
          {RH: '''
def rotate_half(x: torch.Tensor) -> torch.Tensor:
    """[x1, x2] -> [-x2, x1] over the last dim."""
    x1 = x[..., ::2]
    x2 = x[..., 1::2]
    return torch.cat([-x2, x1], dim=-1)
''',
           ML: patch(MLA, ("out = out.transpose(1, 2).reshape(batch, seq, self.num_heads * self.v_dim)",
                           "out = out.reshape(batch, seq, self.num_heads * self.v_dim)"))},
          (AR, ML, FA)),
    Entry("04-ho-double-cache-len-batch-and-absorbed-scale-after-softmax", "double",
          "two mistakes: LatentKVCache.__len__ returns self.latent.shape[0] (the batch size) instead of "
          "shape[1] (the cached positions), so MLA starts the RoPE positions of the next call at B; and "
          "forward_absorbed multiplies the softmax weights by the scale (masked_softmax(scores, mask) * scale) "
          "instead of scaling the scores before the softmax",
          {LC: patch(LATENT_CACHE, ("return 0 if self.latent is None else self.latent.shape[1]",
                                    "return 0 if self.latent is None else self.latent.shape[0]")),
           FA: patch(FORWARD_ABSORBED, ("weights = masked_softmax(scores * self.scale, mask)",
                                        "weights = masked_softmax(scores, mask) * self.scale"))},
          (LC, ML, FA)),
    Entry("04-ho-double-exponent-over-half-and-kv-parts-swapped", "double",
          "two mistakes: rope_cos_sin divides the exponents arange(0, d, 2) by d // 2 (the number of frequencies) "
          "instead of d, so frequency i is theta^(-4i/d); and MultiHeadLatentAttention.forward reads each head's "
          "kv_b_proj output as [v_h | k_nope_h] (split [d_v, d_nope]) instead of [k_nope_h | v_h]",
          {RC: patch(ROPE_COS_SIN, ("exponent = torch.arange(0, rotary_dim, 2, dtype=torch.float32) / rotary_dim",
                                    "exponent = torch.arange(0, rotary_dim, 2, dtype=torch.float32) / (rotary_dim // 2)")),
           ML: patch(MLA, ("k_nope, value = torch.split(kv, [self.nope_dim, self.v_dim], dim=-1)",
                           "value, k_nope = torch.split(kv, [self.v_dim, self.nope_dim], dim=-1)"))},
          (RC, ML, FA)),
]
