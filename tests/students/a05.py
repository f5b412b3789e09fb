"""Student code for 05_output_gate: correct answers and seeded mistakes, written independently of ``solutions/``
and of the graders' mistake catalogue."""
from tests.students import notebook

ASSIGNMENT = "05_output_gate"

HEADER = "import math\nimport torch\nfrom torch import nn\n"

# 05 and 06 build on attention from 01; a student's notebook has it ready-made.
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
}

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
    ("apply_output_gate", "乘的是 SiLU(gate)", '''
import torch.nn.functional as F


def apply_output_gate(attn_out, gate):
    return attn_out * F.silu(gate)
'''),
    ("gate_gradient", "斜率写成了 g·(1 − z)", '''
def gate_gradient(x, w, r, o, t):
    z = x @ w
    g = torch.sigmoid(z)
    return ((r + g * o - t) * o * g * (1 - z)) @ x
'''),
    ("gate_gradient", "梯度多乘了 2", '''
def gate_gradient(x, w, r, o, t):
    g = torch.sigmoid(x @ w)
    return (2 * (r + g * o - t) * o * g * (1 - g)) @ x
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
'''),    ("gate_gradient", "tanh 的 1 − g²", '''
def gate_gradient(x, w, r, o, t):
    g = torch.sigmoid(x @ w)
    y = r + g * o
    return x.T @ ((y - t) * o * (1 - g ** 2))
'''),
    ("gate_gradient", "多了 1/2", '''
def gate_gradient(x, w, r, o, t):
    g = torch.sigmoid(x @ w)
    dloss_dy = 0.5 * (r + g * o - t)
    return (dloss_dy * o * g * (1 - g)) @ x
'''),
    ("gate_gradient", "取了平均", '''
def gate_gradient(x, w, r, o, t):
    g = torch.sigmoid(x @ w)
    per_token = (r + g * o - t) * o * g * (1 - g)
    return (per_token[:, None] * x).mean(dim=0)
'''),
    ("apply_output_gate", "tanh(gate)", '''
def apply_output_gate(attn_out, gate):
    return attn_out * gate.tanh()
'''),
    ("apply_output_gate", "sigmoid 包住了整个乘积", '''
def apply_output_gate(attn_out, gate):
    return torch.sigmoid(attn_out * gate)
'''),
    ("apply_output_gate", "每一行只用了一个门", '''
def apply_output_gate(attn_out, gate):
    g = torch.sigmoid(gate.mean(-1, keepdim=True))
    return attn_out * g
'''),
    ("split_query_gate", "门已经过了 sigmoid", '''
def split_query_gate(q_out, num_heads, head_dim):
    b, t, _ = q_out.shape
    per_head = q_out.view(b, t, num_heads, 2 * head_dim)
    return per_head[..., :head_dim], per_head[..., head_dim:].sigmoid()
'''),
    ("split_query_gate", "奇偶交错", '''
def split_query_gate(q_out, num_heads, head_dim):
    b, t, _ = q_out.shape
    pairs = q_out.reshape(b, t, num_heads, head_dim, 2)
    return pairs[..., 0], pairs[..., 1]
'''),
]

# The released notebook's answer cells, as a student finds them.
STUBS = {
    "split_query_gate": '''
def split_query_gate(q_out: torch.Tensor, num_heads: int, head_dim: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Split q_proj's output into the query and the output-gate scores, Qwen3.5 layout.

    q_out: [B, T, H * 2 * D]; head h owns 2D consecutive entries, its query first, then its gate.
    Returns (query [B, T, H, D], gate [B, T, H, D]).
    """
    # 在这里写你的代码
    raise NotImplementedError()
''',
    "apply_output_gate": '''
def apply_output_gate(attn_out: torch.Tensor, gate: torch.Tensor) -> torch.Tensor:
    """Scale the attention output by the output gate, elementwise.

    attn_out: [..., D] (e.g. [B, T, H, D]); gate: gate scores (before the sigmoid), same or broadcastable shape.
    Returns attn_out * sigmoid(gate), shape and dtype of attn_out.
    """
    # 在这里写你的代码
    raise NotImplementedError()
''',
    "gate_gradient": '''
def gate_gradient(x: torch.Tensor, w: torch.Tensor, r: torch.Tensor, o: torch.Tensor,
                  t: torch.Tensor) -> torch.Tensor:
    """Gradient of the loss sum_n (y_n - t_n)^2 / 2 with respect to the gate weights w.

    x: [N, F] one row per token; w: [F]; r, o, t: [N] residual, head output and target per token.
    The gate is g = sigmoid(x @ w) and the layer's output y = r + g * o.
    Returns [F]: sum_n (y_n - t_n) * o_n * g_n * (1 - g_n) * x_n.
    """
    # 在这里写你的代码
    raise NotImplementedError()
''',
}

# Other right ways to write the code, which the grader must accept too.
OTHER_CORRECT = []


def layout(replace: dict[str, str] | None = None) -> list[notebook.Piece]:
    """The student's notebook, cell by cell (``tests/students/notebook.py``), with some answers replaced."""
    return notebook.layout(HEADER + BLOCKS, notebook.answers(CORRECT, replace))


def cells(replace: dict[str, str] | None = None) -> list[notebook.Cell]:
    """The cells the grader reads from the student's notebook, with some answers replaced."""
    return notebook.cells(layout(replace))


def source(replace: dict[str, str] | None = None) -> str:
    """The same code as one cell's source, every import at the top (what ``autograder.grade_code`` takes)."""
    return HEADER + BLOCKS + "\n".join(notebook.answers(CORRECT, replace).values())
