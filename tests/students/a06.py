"""Student code for 06_qwen35_attention: correct answers and seeded mistakes, written independently of
``solutions/`` and of the graders' mistake catalogue. The student wrote ``rope_cos_sin`` (04's exercise, which the
notebook provides) again, and it is graded as 04's."""
from tests.students import a05, notebook

ASSIGNMENT = "06_qwen35_attention"

# 06 builds on attention from 01 and the gate from 05; a student's notebook has these ready-made.
HEADER = a05.HEADER + a05.BLOCKS + a05.CORRECT["split_query_gate"] + a05.CORRECT["apply_output_gate"]

CORRECT = {
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
    ("ZeroCenteredRMSNorm", "乘的是 weight 而不是 (1 + weight)",
     CORRECT["ZeroCenteredRMSNorm"].replace("(1 + self.weight.to(torch.float32))", "self.weight.to(torch.float32)")),
    ("ZeroCenteredRMSNorm", "没有在 float32 里计算",
     CORRECT["ZeroCenteredRMSNorm"].replace("h = x.to(torch.float32)", "h = x").replace(
         "self.weight.to(torch.float32)", "self.weight")),
    ("ZeroCenteredRMSNorm", "weight 没有初始化成 0",
     CORRECT["ZeroCenteredRMSNorm"].replace("torch.zeros(dim)", "torch.ones(dim)")),
    ("ZeroCenteredRMSNorm", "乘上了均方根",
     CORRECT["ZeroCenteredRMSNorm"].replace("return (h / rms", "return (h * rms")),
    ("ZeroCenteredRMSNorm", "用 x.var() 代替了 mean(x²)",
     CORRECT["ZeroCenteredRMSNorm"].replace("torch.sqrt(h.square().mean(-1, keepdim=True) + self.eps)",
                                            "torch.sqrt(h.var(-1, keepdim=True) + self.eps)")),
    ("Qwen35Attention", "query 也用 k_norm 做了归一化",
     _layer_with("q = apply_partial_rope(self.q_norm(q)", "q = apply_partial_rope(self.k_norm(q)")),
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

# The released notebook's answer cells, as a student finds them.
STUBS = {
    "ZeroCenteredRMSNorm": '''
class ZeroCenteredRMSNorm(nn.Module):
    """Zero-centred RMSNorm over the last dim: x * rsqrt(mean(x^2) + eps) * (1 + weight).

    weight: [dim], initialised to zeros (so a fresh norm scales by exactly 1).
    forward(x [..., dim]) -> [..., dim], computed in float32 and returned in x's dtype.
    """

    def __init__(self, dim: int, eps: float = 1e-6):
        super().__init__()
        # 在这里写你的代码
        raise NotImplementedError()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # 在这里写你的代码
        raise NotImplementedError()
''',
    "rope_cos_sin": '''
def rope_cos_sin(positions: torch.Tensor, rotary_dim: int, theta: float) -> tuple[torch.Tensor, torch.Tensor]:
    """RoPE tables for rotate-half.

    positions: [T] integer positions. Frequency i is theta^(-2i / rotary_dim), i < rotary_dim / 2.
    Returns (cos, sin), each [T, rotary_dim] float32, the angle table being cat(freqs, freqs).
    """
    # 在这里写你的代码
    raise NotImplementedError()
''',
    "apply_partial_rope": '''
def apply_partial_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate-half RoPE on the first rotary_dim dims of each head; the other dims pass through.

    x: [B, H, T, D]; cos, sin: [T, rotary_dim] (rotary_dim <= D), cast to x's dtype.
    Returns [B, H, T, D] in x's dtype.
    """
    # 在这里写你的代码
    raise NotImplementedError()
''',
    "Qwen35Attention": '''
class Qwen35Attention(nn.Module):
    """Qwen3.5 gated attention: GQA, QK-Norm, partial RoPE and a sigmoid output gate.

    config: Hugging Face attribute names (hidden_size, num_attention_heads, num_key_value_heads,
    head_dim, rms_norm_eps); d = hidden_size. Submodules q_proj [H*2D, d], k_proj / v_proj [Hkv*D, d],
    o_proj [d, H*D], q_norm / k_norm [D], so a checkpoint's state dict loads unchanged.
    forward(x [B, T, d], cos / sin [T, rotary_dim], attention_mask [B, T] of 0/1 or None)
    -> [B, T, d].
    """

    def __init__(self, config):
        super().__init__()
        # 在这里写你的代码
        raise NotImplementedError()

    def project(self, x: torch.Tensor):
        """Step 1: x [B, T, d] -> query, gate [B, T, H, D] and key, value [B, T, Hkv, D]."""
        # 在这里写你的代码
        raise NotImplementedError()

    def position(self, query: torch.Tensor, key: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor):
        """Step 2: QK-Norm per head, heads before time, partial RoPE -> [B, H, T, D] and [B, Hkv, T, D]."""
        # 在这里写你的代码
        raise NotImplementedError()

    def attend(self, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
               attention_mask: torch.Tensor | None) -> torch.Tensor:
        """Step 3: causal (and padding) attention with shared KV heads -> [B, H, T, D]; value is [B, T, Hkv, D]."""
        # 在这里写你的代码
        raise NotImplementedError()

    def gate_and_project(self, out: torch.Tensor, gate: torch.Tensor) -> torch.Tensor:
        """Step 4: out [B, H, T, D] gated by sigmoid(gate [B, T, H, D]), heads merged, o_proj -> [B, T, d]."""
        # 在这里写你的代码
        raise NotImplementedError()

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
                attention_mask: torch.Tensor | None = None) -> torch.Tensor:
        query, gate, key, value = self.project(x)
        query, key = self.position(query, key, cos, sin)
        return self.gate_and_project(self.attend(query, key, value, attention_mask), gate)
''',
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
