"""Student code for 05_output_gate and 06_qwen35_attention: correct answers and seeded mistakes, written
independently of ``solutions/`` and of the graders' mistake catalogue."""

HEADER = "import math\nimport torch\nfrom torch import nn\n"

# 06 builds on attention from 01 and the gate from 05; a student's notebook has these ready-made.
BLOCKS = '''
def attention(q, k, v, mask=None):
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.softmax(scores, dim=-1).nan_to_num(0.0)
    return weights @ v, weights
'''

CORRECT = {
    "split_query_gate": '''
def split_query_gate(q_out, num_heads, head_dim):
    b, t, _ = q_out.shape
    both = q_out.view(b, t, num_heads, 2 * head_dim)
    return both[..., :head_dim], both[..., head_dim:]
''',
    "apply_output_gate": '''
def apply_output_gate(attn_out, gate):
    return attn_out * torch.sigmoid(gate)
''',
    "gate_gradient": '''
def gate_gradient(x, w, r, o, t):
    g = torch.sigmoid(x @ w)
    err = r + g * o - t
    return x.T @ (err * o * g * (1 - g))
''',
    "ZeroCenteredRMSNorm": '''
class ZeroCenteredRMSNorm(nn.Module):
    def __init__(self, dim, eps=1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.zeros(dim))

    def forward(self, x):
        h = x.to(torch.float32)
        rms = torch.sqrt(h.square().mean(-1, keepdim=True) + self.eps)
        return (h / rms * (1 + self.weight.to(torch.float32))).to(x.dtype)
''',
    "rope_cos_sin": '''
def rope_cos_sin(positions, rotary_dim, theta):
    exponent = torch.arange(0, rotary_dim, 2).float() / rotary_dim
    inv_freq = 1.0 / (theta ** exponent)
    freqs = torch.outer(positions.float(), inv_freq)
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos(), emb.sin()
''',
    "apply_partial_rope": '''
def apply_partial_rope(x, cos, sin):
    rd = cos.shape[-1]
    cos, sin = cos.to(x.dtype), sin.to(x.dtype)
    x_rot, x_pass = x[..., :rd], x[..., rd:]
    x1, x2 = x_rot[..., : rd // 2], x_rot[..., rd // 2:]
    rotated = x_rot * cos + torch.cat((-x2, x1), dim=-1) * sin
    return torch.cat((rotated, x_pass), dim=-1)
''',
    "Qwen35Attention": '''
class Qwen35Attention(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.h = config.num_attention_heads
        self.hkv = config.num_key_value_heads
        self.d = config.head_dim
        self.q_proj = nn.Linear(config.hidden_size, self.h * self.d * 2, bias=False)
        self.k_proj = nn.Linear(config.hidden_size, self.hkv * self.d, bias=False)
        self.v_proj = nn.Linear(config.hidden_size, self.hkv * self.d, bias=False)
        self.o_proj = nn.Linear(self.h * self.d, config.hidden_size, bias=False)
        self.q_norm = ZeroCenteredRMSNorm(self.d, config.rms_norm_eps)
        self.k_norm = ZeroCenteredRMSNorm(self.d, config.rms_norm_eps)

    def forward(self, x, cos, sin, attention_mask=None):
        b, t, _ = x.shape
        q, gate = split_query_gate(self.q_proj(x), self.h, self.d)
        k = self.k_proj(x).view(b, t, self.hkv, self.d)
        v = self.v_proj(x).view(b, t, self.hkv, self.d)
        q = apply_partial_rope(self.q_norm(q).transpose(1, 2), cos, sin)
        k = apply_partial_rope(self.k_norm(k).transpose(1, 2), cos, sin)
        v = v.transpose(1, 2)
        k = k.repeat_interleave(self.h // self.hkv, dim=1)
        v = v.repeat_interleave(self.h // self.hkv, dim=1)
        mask = torch.ones(t, t, dtype=torch.bool).tril()
        if attention_mask is not None:
            mask = mask & attention_mask.bool()[:, None, None, :]
        out, _ = attention(q, k, v, mask)
        out = apply_output_gate(out.transpose(1, 2), gate).reshape(b, t, self.h * self.d)
        return self.o_proj(out)
''',
}


def _layer_with(old: str, new: str) -> str:
    assert old in CORRECT["Qwen35Attention"], old
    return CORRECT["Qwen35Attention"].replace(old, new)


# (exercise, fragment the grader must name, the student's code)
MISTAKES = [
    ("split_query_gate", "前一半 / 后一半", '''
def split_query_gate(q_out, num_heads, head_dim):
    q, g = torch.chunk(q_out, 2, dim=-1)
    b, t, _ = q_out.shape
    return q.reshape(b, t, num_heads, head_dim), g.reshape(b, t, num_heads, head_dim)
'''),
    ("split_query_gate", "query 和门弄反了", '''
def split_query_gate(q_out, num_heads, head_dim):
    g, q = q_out.unflatten(-1, (num_heads, 2 * head_dim)).chunk(2, dim=-1)
    return q, g
'''),
    ("apply_output_gate", "没有过 sigmoid", '''
def apply_output_gate(attn_out, gate):
    return attn_out * gate
'''),
    ("apply_output_gate", "1 − sigmoid", '''
def apply_output_gate(attn_out, gate):
    return attn_out * torch.sigmoid(-gate)
'''),
    ("gate_gradient", "漏了 sigmoid 的导数", '''
def gate_gradient(x, w, r, o, t):
    y = r + torch.sigmoid(x @ w) * o
    return ((y - t) * o) @ x
'''),
    ("gate_gradient", "符号反了", '''
def gate_gradient(x, w, r, o, t):
    g = torch.sigmoid(x @ w)
    return ((t - r - g * o) * o * g * (1 - g)) @ x
'''),
    ("ZeroCenteredRMSNorm", "乘的是 weight 而不是 (1 + weight)",
     CORRECT["ZeroCenteredRMSNorm"].replace("(1 + self.weight.to(torch.float32))", "self.weight.to(torch.float32)")),
    ("ZeroCenteredRMSNorm", "没有在 float32 里计算",
     CORRECT["ZeroCenteredRMSNorm"].replace("h = x.to(torch.float32)", "h = x").replace(
         "self.weight.to(torch.float32)", "self.weight")),
    ("ZeroCenteredRMSNorm", "weight 没有初始化成 0",
     CORRECT["ZeroCenteredRMSNorm"].replace("torch.zeros(dim)", "torch.ones(dim)")),
    ("ZeroCenteredRMSNorm", "eps 加在了根号外面",
     CORRECT["ZeroCenteredRMSNorm"].replace("torch.sqrt(h.square().mean(-1, keepdim=True) + self.eps)",
                                            "torch.sqrt(h.square().mean(-1, keepdim=True)) + self.eps")),
    ("rope_cos_sin", "交错排列", CORRECT["rope_cos_sin"].replace(
        "torch.cat((freqs, freqs), dim=-1)", "torch.repeat_interleave(freqs, 2, dim=-1)")),
    ("rope_cos_sin", "符号反了", CORRECT["rope_cos_sin"].replace("1.0 / (theta ** exponent)", "theta ** exponent")),
    ("apply_partial_rope", "交错式", '''
def apply_partial_rope(x, cos, sin):
    rd = cos.shape[-1]
    cos, sin = cos.to(x.dtype)[..., ::2], sin.to(x.dtype)[..., ::2]
    even, odd = x[..., 0:rd:2], x[..., 1:rd:2]
    out = torch.stack((even * cos - odd * sin, odd * cos + even * sin), dim=-1).flatten(-2)
    return torch.cat((out, x[..., rd:]), dim=-1)
'''),
    ("apply_partial_rope", "交错式", '''
def apply_partial_rope(x, cos, sin):
    rd = cos.shape[-1]
    half = rd // 2
    c = cos[:, :half].to(x.dtype).repeat_interleave(2, dim=-1)
    s = sin[:, :half].to(x.dtype).repeat_interleave(2, dim=-1)
    rot = x[..., :rd]
    pairs = torch.stack((-rot[..., 1::2], rot[..., 0::2]), dim=-1).reshape(rot.shape)
    return torch.cat((rot * c + pairs * s, x[..., rd:]), dim=-1)
'''),
    ("apply_partial_rope", "最后 rotary_dim 维", '''
def apply_partial_rope(x, cos, sin):
    rd = cos.shape[-1]
    cos, sin = cos.to(x.dtype), sin.to(x.dtype)
    x_pass, x_rot = x[..., :-rd], x[..., -rd:]
    x1, x2 = x_rot.chunk(2, dim=-1)
    return torch.cat((x_pass, x_rot * cos + torch.cat((-x2, x1), dim=-1) * sin), dim=-1)
'''),
    ("apply_partial_rope", "符号反了", CORRECT["apply_partial_rope"].replace("torch.cat((-x2, x1), dim=-1)",
                                                                          "torch.cat((x2, -x1), dim=-1)")),
    ("Qwen35Attention", "门乘在了 o_proj 之后", _layer_with(
        "out = apply_output_gate(out.transpose(1, 2), gate).reshape(b, t, self.h * self.d)\n        return self.o_proj(out)",
        "out = self.o_proj(out.transpose(1, 2).reshape(b, t, self.h * self.d))\n"
        "        return out * torch.sigmoid(gate.reshape(b, t, -1))")),
    ("Qwen35Attention", "QK-Norm 放在了 RoPE 之后", _layer_with(
        "q = apply_partial_rope(self.q_norm(q).transpose(1, 2), cos, sin)\n"
        "        k = apply_partial_rope(self.k_norm(k).transpose(1, 2), cos, sin)",
        "q = self.q_norm(apply_partial_rope(q.transpose(1, 2), cos, sin))\n"
        "        k = self.k_norm(apply_partial_rope(k.transpose(1, 2), cos, sin))")),
    ("Qwen35Attention", "KV 头重复成了 0, 1, 0, 1 的顺序", _layer_with(
        "k = k.repeat_interleave(self.h // self.hkv, dim=1)\n        v = v.repeat_interleave(self.h // self.hkv, dim=1)",
        "k = k.repeat(1, self.h // self.hkv, 1, 1)\n        v = v.repeat(1, self.h // self.hkv, 1, 1)")),
    ("Qwen35Attention", "没有因果掩码", _layer_with(
        "mask = torch.ones(t, t, dtype=torch.bool).tril()", "mask = torch.ones(t, t, dtype=torch.bool)")),
    ("Qwen35Attention", "没有用 attention_mask", _layer_with(
        "mask = mask & attention_mask.bool()[:, None, None, :]", "pass")),
    ("Qwen35Attention", "前一半 / 后一半", _layer_with(
        "q, gate = split_query_gate(self.q_proj(x), self.h, self.d)",
        "q, gate = self.q_proj(x).view(b, t, 2, self.h, self.d).unbind(2)")),
    ("Qwen35Attention", "门没有过 sigmoid", _layer_with(
        "out = apply_output_gate(out.transpose(1, 2), gate)", "out = (out.transpose(1, 2) * gate)")),
]


def notebook_code(replace: dict[str, str] | None = None) -> str:
    """One cell defining the building blocks and every exercise of 05 and 06, some replaced."""
    return HEADER + BLOCKS + "\n".join({**CORRECT, **(replace or {})}.values())
