"""Student code for 04_rope_mla: correct answers and seeded mistakes, written independently of
``solutions/`` and of the graders' mistake catalogue."""
from tests.students import a01, notebook

ASSIGNMENT = "04_rope_mla"

# The notebook provides assignment 01's functions; here a student's own answers to 01 stand in.
HEADER = "import math\nimport torch\nfrom torch import nn\n" + "\n".join(a01.CORRECT.values())

_NORM = '''
class LatentRMSNorm(nn.Module):
    def __init__(self, dim, eps=1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        x32 = x.to(torch.float32)
        rms = torch.rsqrt(x32.square().mean(-1, keepdim=True) + self.eps)
        return (x32 * rms * self.weight.to(torch.float32)).to(x.dtype)

'''

# __init__ and the query helper; forward (and, in the second cell, forward_absorbed) follow.
_MLA_INIT = '''
class MultiHeadLatentAttention(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.n_heads = config.num_attention_heads
        self.d_nope = config.qk_nope_head_dim
        self.d_rope = config.qk_rope_head_dim
        self.d_v = config.v_head_dim
        self.r_kv = config.kv_lora_rank
        self.theta = config.rope_theta
        d_qk = self.d_nope + self.d_rope
        hidden = config.hidden_size
        self.low_rank_q = config.q_lora_rank is not None
        if self.low_rank_q:
            self.q_a_proj = nn.Linear(hidden, config.q_lora_rank, bias=False)
            self.q_a_layernorm = LatentRMSNorm(config.q_lora_rank, config.rms_norm_eps)
            self.q_b_proj = nn.Linear(config.q_lora_rank, self.n_heads * d_qk, bias=False)
        else:
            self.q_proj = nn.Linear(hidden, self.n_heads * d_qk, bias=False)
        self.kv_a_proj_with_mqa = nn.Linear(hidden, self.r_kv + self.d_rope, bias=False)
        self.kv_a_layernorm = LatentRMSNorm(self.r_kv, config.rms_norm_eps)
        self.kv_b_proj = nn.Linear(self.r_kv, self.n_heads * (self.d_nope + self.d_v), bias=False)
        self.o_proj = nn.Linear(self.n_heads * self.d_v, hidden, bias=False)
        self.softmax_scale = 1.0 / math.sqrt(d_qk)

    def _queries(self, x):
        if self.low_rank_q:
            q = self.q_b_proj(self.q_a_layernorm(self.q_a_proj(x)))
        else:
            q = self.q_proj(x)
        B, T, _ = x.shape
        q = q.view(B, T, self.n_heads, self.d_nope + self.d_rope)
        return q[..., :self.d_nope], q[..., self.d_nope:]

'''

# The body of forward, in pieces that the seeded mistakes replace one at a time.
_ROPE_TABLES = '''
        B, T, _ = x.shape
        past = 0 if cache is None else len(cache)
        cos, sin = rope_cos_sin(torch.arange(past, past + T), self.d_rope, self.theta)
'''
_QUERY = '''
        q_nope, q_pe = self._queries(x)
        q_pe = apply_rope(q_pe.transpose(1, 2), cos, sin)
'''
_LATENT = '''
        c_kv, k_pe = torch.split(self.kv_a_proj_with_mqa(x), [self.r_kv, self.d_rope], dim=-1)
        c_kv = self.kv_a_layernorm(c_kv)
        k_pe = apply_rope(k_pe, cos, sin)
        if cache is not None:
            c_kv, k_pe = cache.update(c_kv, k_pe)
        S = c_kv.shape[1]
'''
_EXPAND = '''
        kv = self.kv_b_proj(c_kv).view(B, S, self.n_heads, self.d_nope + self.d_v)
        k_nope, v = kv[..., :self.d_nope], kv[..., self.d_nope:]
'''
_SCORES = '''
        scores = torch.einsum("bthd,bshd->bhts", q_nope, k_nope) + torch.einsum("bhtd,bsd->bhts", q_pe, k_pe)
        scores = scores * self.softmax_scale
'''
_MASK = '''
        mask = causal_mask(T, S)
        if attention_mask is not None:
            mask = mask & padding_mask(attention_mask)
'''
_MIX = '''
        probs = masked_softmax(scores, mask)
        out = torch.einsum("bhts,bshd->bthd", probs, v).reshape(B, T, self.n_heads * self.d_v)
        return self.o_proj(out), cache
'''
_FORWARD = "    def forward(self, x, attention_mask=None, cache=None):"
_PIECES = {"tables": _ROPE_TABLES, "query": _QUERY, "latent": _LATENT, "expand": _EXPAND, "scores": _SCORES,
           "mask": _MASK, "mix": _MIX}


def _mla(**replace: str) -> str:
    """The MultiHeadLatentAttention cell with some pieces of forward replaced (8-space indented bodies)."""
    pieces = {**_PIECES, **replace}
    return _NORM + _MLA_INIT + _FORWARD + "".join(pieces[name] for name in _PIECES)


_ABSORBED = '''
class MultiHeadLatentAttention(MultiHeadLatentAttention):
    def forward_absorbed(self, x, attention_mask=None, cache=None):
        B, T, _ = x.shape
        past = 0 if cache is None else len(cache)
        cos, sin = rope_cos_sin(torch.arange(past, past + T), self.d_rope, self.theta)
        q_nope, q_pe = self._queries(x)
        q_pe = apply_rope(q_pe.transpose(1, 2), cos, sin)
        c_kv, k_pe = torch.split(self.kv_a_proj_with_mqa(x), [self.r_kv, self.d_rope], dim=-1)
        c_kv = self.kv_a_layernorm(c_kv)
        k_pe = apply_rope(k_pe, cos, sin)
        if cache is not None:
            c_kv, k_pe = cache.update(c_kv, k_pe)
        S = c_kv.shape[1]
        # kv_b_proj.weight is [H*(nope+v), r]: per head, nope rows build the key, v rows the value.
        w = self.kv_b_proj.weight.view(self.n_heads, self.d_nope + self.d_v, self.r_kv)
        w_uk, w_uv = w[:, :self.d_nope], w[:, self.d_nope:]
        q_latent = torch.einsum("bthd,hdr->bhtr", q_nope, w_uk)
        scores = torch.einsum("bhtr,bsr->bhts", q_latent, c_kv) + torch.einsum("bhtd,bsd->bhts", q_pe, k_pe)
        scores = scores * self.softmax_scale
        mask = causal_mask(T, S)
        if attention_mask is not None:
            mask = mask & padding_mask(attention_mask)
        probs = masked_softmax(scores, mask)
        context = torch.einsum("bhts,bsr->bhtr", probs, c_kv)
        out = torch.einsum("bhtr,hvr->bthv", context, w_uv).reshape(B, T, self.n_heads * self.d_v)
        return self.o_proj(out), cache
'''

CORRECT = {
    "rope_cos_sin": '''
def rope_cos_sin(positions, rotary_dim, theta):
    exponents = torch.arange(rotary_dim // 2, dtype=torch.float32) * 2 / rotary_dim
    inv_freq = theta ** (-exponents)
    freqs = torch.outer(positions.to(torch.float32), inv_freq)
    emb = torch.cat((freqs, freqs), dim=-1)
    return torch.cos(emb), torch.sin(emb)
''',
    "apply_rope": '''
def apply_rope(x, cos, sin):
    cos = cos.to(dtype=x.dtype)
    sin = sin.to(dtype=x.dtype)
    half = x.shape[-1] // 2
    first, second = x[..., :half], x[..., half:]
    rotated = torch.cat((-second, first), dim=-1)
    return x * cos + rotated * sin
''',
    "LatentKVCache": '''
class LatentKVCache:
    def __init__(self):
        self.c_kv = None
        self.k_pe = None

    def update(self, latent, k_rope):
        if self.c_kv is not None:
            latent = torch.cat([self.c_kv, latent], dim=1)
            k_rope = torch.cat([self.k_pe, k_rope], dim=1)
        self.c_kv, self.k_pe = latent, k_rope
        return latent, k_rope

    def __len__(self):
        if self.c_kv is None:
            return 0
        return self.c_kv.shape[1]
''',
    "MultiHeadLatentAttention": _mla(),
    # The second cell: a subclass under the same name adds the method to the class above.
    "forward_absorbed": _ABSORBED,
    "mla_cache_bytes": '''
def mla_cache_bytes(batch, seq_len, num_layers, kv_lora_rank, qk_rope_head_dim, bytes_per_elem):
    numbers_per_token = kv_lora_rank + qk_rope_head_dim
    per_layer_token = numbers_per_token * bytes_per_elem
    return per_layer_token * num_layers * seq_len * batch
''',
}

# (exercise, what the grader should name — a fragment of its message, the student's code)
MISTAKES = [
    ("rope_cos_sin", "角度是交错排列的", CORRECT["rope_cos_sin"].replace(
        "emb = torch.cat((freqs, freqs), dim=-1)", "emb = freqs.repeat_interleave(2, dim=-1)")),
    ("rope_cos_sin", "指数的符号反了", CORRECT["rope_cos_sin"].replace("theta ** (-exponents)", "theta ** exponents")),

    # RoFormer's original pairing: dims (0, 1), (2, 3), ... each turned at its own pair's frequency.
    ("apply_rope", "按相邻两维一组旋转（交错式）", '''
def apply_rope(x, cos, sin):
    half = x.shape[-1] // 2
    c = cos.to(x.dtype)[..., :half]
    s = sin.to(x.dtype)[..., :half]
    even, odd = x[..., 0::2], x[..., 1::2]
    out = torch.stack((even * c - odd * s, odd * c + even * s), dim=-1)
    return out.flatten(-2)
'''),
    ("apply_rope", "rotate_half 的符号反了", CORRECT["apply_rope"].replace("(-second, first)", "(second, -first)")),
    ("apply_rope", "cos 和 sin 用反了", CORRECT["apply_rope"].replace(
        "return x * cos + rotated * sin", "return x * sin + rotated * cos")),
    ("apply_rope", "没有把 cos/sin 转成 x 的 dtype", '''
def apply_rope(x, cos, sin):
    half = x.shape[-1] // 2
    rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
    return x * cos + rotated * sin
'''),

    ("LatentKVCache", "拼接在了错误的维度上", CORRECT["LatentKVCache"].replace("dim=1)", "dim=-1)")),
    ("LatentKVCache", "新位置拼在了缓存的前面", CORRECT["LatentKVCache"].replace(
        "[self.c_kv, latent]", "[latent, self.c_kv]").replace("[self.k_pe, k_rope]", "[k_rope, self.k_pe]")),
    ("LatentKVCache", "update 只返回了新来的", '''
class LatentKVCache:
    def __init__(self):
        self.c_kv = None
        self.k_pe = None

    def update(self, latent, k_rope):
        if self.c_kv is None:
            self.c_kv, self.k_pe = latent, k_rope
        else:
            self.c_kv = torch.cat([self.c_kv, latent], dim=1)
            self.k_pe = torch.cat([self.k_pe, k_rope], dim=1)
        return latent, k_rope

    def __len__(self):
        return 0 if self.c_kv is None else self.c_kv.shape[1]
'''),
    ("LatentKVCache", "len() 数的是 update 的次数", '''
class LatentKVCache:
    def __init__(self):
        self.latents = []
        self.rope_keys = []

    def update(self, latent, k_rope):
        self.latents.append(latent)
        self.rope_keys.append(k_rope)
        return torch.cat(self.latents, dim=1), torch.cat(self.rope_keys, dim=1)

    def __len__(self):
        return len(self.latents)
'''),

    # The tutorial chapter's scale.
    ("MultiHeadLatentAttention", "1/(√d + √d_rope)", _mla().replace(
        "self.softmax_scale = 1.0 / math.sqrt(d_qk)",
        "self.softmax_scale = 1.0 / (math.sqrt(self.d_nope) + math.sqrt(self.d_rope))")),
    ("MultiHeadLatentAttention", "漏了 q_a_layernorm", _mla().replace(
        "q = self.q_b_proj(self.q_a_layernorm(self.q_a_proj(x)))", "q = self.q_b_proj(self.q_a_proj(x))")),
    ("MultiHeadLatentAttention", "只用 √qk_nope_head_dim 缩放", _mla().replace(
        "self.softmax_scale = 1.0 / math.sqrt(d_qk)", "self.softmax_scale = self.d_nope ** -0.5")),
    # Partial RoPE as in Qwen (rotate the first rotary dims of the head): those are the query's nope dims.
    ("MultiHeadLatentAttention", "RoPE 转在了 nope 部分", _mla(query='''
        q_nope, q_pe = self._queries(x)
        q = torch.cat([q_nope, q_pe], dim=-1).transpose(1, 2)
        q = torch.cat([apply_rope(q[..., :self.d_rope], cos, sin), q[..., self.d_rope:]], dim=-1)
        q_nope, q_pe = q[..., :self.d_nope].transpose(1, 2), q[..., self.d_nope:]
''')),
    # Llama-style: every dim of every query and key head rotated (keys at positions 0 .. S-1).
    ("MultiHeadLatentAttention", "RoPE 转了整个头", _mla(query='''
        q_nope, q_pe = self._queries(x)
        d_qk = self.d_nope + self.d_rope
        cos_q, sin_q = rope_cos_sin(torch.arange(past, past + T), d_qk, self.theta)
        q = apply_rope(torch.cat([q_nope, q_pe], dim=-1).transpose(1, 2), cos_q, sin_q)
''', latent='''
        c_kv, k_pe = torch.split(self.kv_a_proj_with_mqa(x), [self.r_kv, self.d_rope], dim=-1)
        c_kv = self.kv_a_layernorm(c_kv)
        if cache is not None:
            c_kv, k_pe = cache.update(c_kv, k_pe)
        S = c_kv.shape[1]
''', scores='''
        k = torch.cat([k_nope, k_pe[:, :, None].expand(B, S, self.n_heads, self.d_rope)], dim=-1).transpose(1, 2)
        cos_k, sin_k = rope_cos_sin(torch.arange(S), d_qk, self.theta)
        k = apply_rope(k, cos_k, sin_k)
        scores = (q @ k.transpose(-1, -2)) * self.softmax_scale
''')),
    # A rope key per head, as in multi-head attention: kv_a_proj_with_mqa is too wide for the checkpoint.
    ("MultiHeadLatentAttention", "每个头各有一个 rope key", _mla(latent='''
        c_kv, k_pe = torch.split(self.kv_a_proj_with_mqa(x), [self.r_kv, self.n_heads * self.d_rope], dim=-1)
        c_kv = self.kv_a_layernorm(c_kv)
        k_pe = apply_rope(k_pe.view(B, T, self.n_heads, self.d_rope).transpose(1, 2), cos, sin)
        k_pe = k_pe.transpose(1, 2).reshape(B, T, self.n_heads * self.d_rope)
        if cache is not None:
            c_kv, k_pe = cache.update(c_kv, k_pe)
        S = c_kv.shape[1]
''', scores='''
        k_pe = k_pe.view(B, S, self.n_heads, self.d_rope)
        scores = torch.einsum("bthd,bshd->bhts", q_nope, k_nope) + torch.einsum("bhtd,bshd->bhts", q_pe, k_pe)
        scores = scores * self.softmax_scale
''').replace("nn.Linear(hidden, self.r_kv + self.d_rope, bias=False)",
             "nn.Linear(hidden, self.r_kv + self.n_heads * self.d_rope, bias=False)")),
    ("MultiHeadLatentAttention", "rope key 没有旋转", _mla(latent=_LATENT.replace(
        "        k_pe = apply_rope(k_pe, cos, sin)\n", ""))),
    ("MultiHeadLatentAttention", "latent 没有做 RMSNorm", _mla(latent=_LATENT.replace(
        "        c_kv = self.kv_a_layernorm(c_kv)\n", ""))),
    ("MultiHeadLatentAttention", "[所有头的 key | 所有头的 value]", _mla(expand='''
        kv = self.kv_b_proj(c_kv)
        k_nope = kv[..., :self.n_heads * self.d_nope].view(B, S, self.n_heads, self.d_nope)
        v = kv[..., self.n_heads * self.d_nope:].view(B, S, self.n_heads, self.d_v)
''')),
    ("MultiHeadLatentAttention", "query 按 [rope | nope] 切开了", _mla(query='''
        q_all = torch.cat(self._queries(x), dim=-1)
        q_pe, q_nope = q_all[..., :self.d_rope], q_all[..., self.d_rope:]
        q_pe = apply_rope(q_pe.transpose(1, 2), cos, sin)
''')),
    # Per-head keys and values ([B, T, H, ·], so a cache appending along dim 1 takes them) go into the cache.
    ("MultiHeadLatentAttention", "缓存里存的是展开后的每头 K/V", _mla(latent='''
        c_kv, k_pe = torch.split(self.kv_a_proj_with_mqa(x), [self.r_kv, self.d_rope], dim=-1)
        c_kv = self.kv_a_layernorm(c_kv)
        k_pe = apply_rope(k_pe, cos, sin)
        kv = self.kv_b_proj(c_kv).view(B, T, self.n_heads, self.d_nope + self.d_v)
        k_heads = torch.cat([kv[..., :self.d_nope], k_pe[:, :, None].expand(B, T, self.n_heads, self.d_rope)], -1)
        v_heads = kv[..., self.d_nope:]
        if cache is not None:
            k_heads, v_heads = cache.update(k_heads, v_heads)
        S = k_heads.shape[1]
''', expand='''
        k_nope, k_pe, v = k_heads[..., :self.d_nope], k_heads[:, :, 0, self.d_nope:], v_heads
''')),
    ("MultiHeadLatentAttention", "解码时位置从 0 重新开始", _mla(tables='''
        B, T, _ = x.shape
        cos, sin = rope_cos_sin(torch.arange(T), self.d_rope, self.theta)
''')),
    ("MultiHeadLatentAttention", "因果掩码没有偏移", _mla(mask='''
        mask = torch.ones(T, S, dtype=torch.bool).tril()
        if attention_mask is not None:
            mask = mask & padding_mask(attention_mask)
''')),

    # Reads kv_b_proj.weight as if it were [in, out] = [r, H*(nope+v)].
    ("forward_absorbed", "吸收矩阵转置了", _ABSORBED.replace(
        "w = self.kv_b_proj.weight.view(self.n_heads, self.d_nope + self.d_v, self.r_kv)\n"
        "        w_uk, w_uv = w[:, :self.d_nope], w[:, self.d_nope:]",
        "w = self.kv_b_proj.weight.view(self.r_kv, self.n_heads, self.d_nope + self.d_v).permute(1, 2, 0)\n"
        "        w_uk, w_uv = w[:, :self.d_nope], w[:, self.d_nope:]")),
    # Takes each head's rows as [v | k_nope]: the value rows end up in the key part.
    ("forward_absorbed", "吸收矩阵切错了", _ABSORBED.replace(
        "w_uk, w_uv = w[:, :self.d_nope], w[:, self.d_nope:]", "w_uv, w_uk = w[:, :self.d_v], w[:, self.d_v:]")),

    ("mla_cache_bytes", "忘了 rope key", '''
def mla_cache_bytes(batch, seq_len, num_layers, kv_lora_rank, qk_rope_head_dim, bytes_per_elem):
    return batch * seq_len * num_layers * kv_lora_rank * bytes_per_elem
'''),
    ("mla_cache_bytes", "乘了 2", '''
def mla_cache_bytes(batch, seq_len, num_layers, kv_lora_rank, qk_rope_head_dim, bytes_per_elem):
    return 2 * batch * seq_len * num_layers * (kv_lora_rank + qk_rope_head_dim) * bytes_per_elem
'''),
    ("mla_cache_bytes", "忘了乘 bytes_per_elem", '''
def mla_cache_bytes(batch, seq_len, num_layers, kv_lora_rank, qk_rope_head_dim, bytes_per_elem):
    return batch * seq_len * num_layers * (kv_lora_rank + qk_rope_head_dim)
'''),
    ("mla_cache_bytes", "返回了 float", '''
def mla_cache_bytes(batch, seq_len, num_layers, kv_lora_rank, qk_rope_head_dim, bytes_per_elem):
    bits = batch * seq_len * num_layers * (kv_lora_rank + qk_rope_head_dim) * bytes_per_elem * 8
    return bits / 8
'''),
]

STUBS = {
    "rope_cos_sin": "def rope_cos_sin(positions, rotary_dim, theta):\n    raise NotImplementedError()\n",
    "apply_rope": "def apply_rope(x, cos, sin):\n    raise NotImplementedError()\n",
    "LatentKVCache": '''
class LatentKVCache:
    def __init__(self):
        raise NotImplementedError()

    def update(self, latent, k_rope):
        raise NotImplementedError()

    def __len__(self):
        raise NotImplementedError()
''',
    "MultiHeadLatentAttention": '''
class MultiHeadLatentAttention(nn.Module):
    def __init__(self, config):
        super().__init__()
        raise NotImplementedError()

    def forward(self, x, attention_mask=None, cache=None):
        raise NotImplementedError()
''',
    "forward_absorbed": '''
class MultiHeadLatentAttention(MultiHeadLatentAttention):
    def forward_absorbed(self, x, attention_mask=None, cache=None):
        raise NotImplementedError()
''',
    "mla_cache_bytes": "def mla_cache_bytes(batch, seq_len, num_layers, kv_lora_rank, qk_rope_head_dim, bytes_per_elem):\n"
                       "    raise NotImplementedError()\n",
}

# Other right ways to write the code, which the grader must accept too.
OTHER_CORRECT = []


def layout(replace: dict[str, str] | None = None) -> list[notebook.Piece]:
    """The student's notebook, cell by cell (``tests/students/notebook.py``), with some answers replaced."""
    return notebook.layout(HEADER, notebook.answers(CORRECT, replace))


def cells(replace: dict[str, str] | None = None) -> list[notebook.Cell]:
    """The cells the grader reads from the student's notebook, with some answers replaced."""
    return notebook.cells(layout(replace))


def source(replace: dict[str, str] | None = None) -> str:
    """The same code as one cell's source, every import at the top (what ``autograder.grade_code`` takes)."""
    return HEADER + "\n".join(notebook.answers(CORRECT, replace).values())
