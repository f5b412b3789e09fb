"""Code as students write it: a correct 01 and seeded mistakes, each a replacement for one function.

Written independently of ``solutions/`` and of the graders' mistake catalogue, so that a grader
naming a mistake is evidence, not an echo.
"""

CORRECT_01 = {
    "attention_scores": '''
def attention_scores(q, k):
    d = q.size(-1)
    return torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(d)
''',
    "causal_mask": '''
def causal_mask(q_len, k_len=None):
    if k_len is None:
        k_len = q_len
    return torch.ones(q_len, k_len, dtype=torch.bool).tril(diagonal=k_len - q_len)
''',
    "padding_mask": '''
def padding_mask(attention_mask):
    return attention_mask.bool().unsqueeze(1).unsqueeze(2)
''',
    "masked_softmax": '''
def masked_softmax(scores, mask=None):
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.softmax(scores, dim=-1)
    return torch.nan_to_num(weights, nan=0.0)
''',
    "attention": '''
def attention(q, k, v, mask=None):
    weights = masked_softmax(attention_scores(q, k), mask)
    return weights @ v, weights
''',
}

HEADER = "import math\nimport torch\n"

# (exercise, what the grader should name — a fragment of its message, the student's code)
MISTAKES_01 = [
    ("attention_scores", "忘了除以 √D", '''
def attention_scores(q, k):
    return q @ k.transpose(-2, -1)
'''),
    ("attention_scores", "用序列长度代替了 head_dim", '''
def attention_scores(q, k):
    return q @ k.transpose(-2, -1) / math.sqrt(k.shape[-2])
'''),
    ("attention_scores", "分数矩阵转置了", '''
def attention_scores(q, k):
    return k @ q.transpose(-2, -1) / math.sqrt(q.shape[-1])
'''),
    ("attention_scores", "除以了 D 而不是 √D", '''
def attention_scores(q, k):
    return q @ k.transpose(-2, -1) / q.shape[-1]
'''),
    ("causal_mask", "掩码反了", '''
def causal_mask(q_len, k_len=None):
    k_len = k_len or q_len
    return torch.triu(torch.ones(q_len, k_len, dtype=torch.bool), diagonal=k_len - q_len + 1)
'''),
    ("causal_mask", "上下三角弄反了", '''
def causal_mask(q_len, k_len=None):
    k_len = k_len or q_len
    return torch.ones(q_len, k_len).triu(k_len - q_len) > 0
'''),
    ("causal_mask", "没有偏移", '''
def causal_mask(q_len, k_len=None):
    k_len = k_len or q_len
    return torch.tril(torch.ones(q_len, k_len)).bool()
'''),
    ("causal_mask", "对角线被遮住了", '''
def causal_mask(q_len, k_len=None):
    k_len = k_len or q_len
    i = torch.arange(q_len)[:, None] + (k_len - q_len)
    j = torch.arange(k_len)[None, :]
    return j < i
'''),
    ("causal_mask", "0/1 的浮点数", '''
def causal_mask(q_len, k_len=None):
    k_len = k_len or q_len
    return torch.ones(q_len, k_len).tril(k_len - q_len)
'''),
    ("padding_mask", "只加了一个维度", '''
def padding_mask(attention_mask):
    return attention_mask.unsqueeze(1) == 1
'''),
    ("padding_mask", "遮住的是 query", '''
def padding_mask(attention_mask):
    return (attention_mask == 1)[:, None, :, None]
'''),
    ("padding_mask", "掩码反了", '''
def padding_mask(attention_mask):
    return (attention_mask == 0).view(attention_mask.shape[0], 1, 1, -1)
'''),
    ("masked_softmax", "整行都被遮住时得到了 NaN", '''
def masked_softmax(scores, mask=None):
    if mask is not None:
        scores = scores.masked_fill(mask == False, float("-inf"))
    return torch.softmax(scores, dim=-1)
'''),
    ("masked_softmax", "用一个很大的负数代替了真正的掩码", '''
def masked_softmax(scores, mask=None):
    if mask is not None:
        scores = scores.masked_fill(~mask, -1e9)
    return scores.softmax(-1)
'''),
    ("masked_softmax", "在 softmax 之后才用 mask", '''
def masked_softmax(scores, mask=None):
    w = torch.softmax(scores, dim=-1)
    if mask is not None:
        w = w * mask
    return w
'''),
    ("masked_softmax", "softmax 做在了倒数第二维", '''
def masked_softmax(scores, mask=None):
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    return torch.nan_to_num(torch.softmax(scores, dim=-2))
'''),
    ("masked_softmax", "exp 溢出了", '''
def masked_softmax(scores, mask=None):
    e = torch.exp(scores)
    if mask is not None:
        e = e * mask
    s = e.sum(dim=-1, keepdim=True)
    return torch.where(s > 0, e / s, torch.zeros_like(e))
'''),
    ("masked_softmax", "原地修改了输入", '''
def masked_softmax(scores, mask=None):
    if mask is not None:
        scores.masked_fill_(~mask, float("-inf"))
    return torch.softmax(scores, dim=-1).nan_to_num(0.0)
'''),
    ("attention", "返回顺序反了", '''
def attention(q, k, v, mask=None):
    w = masked_softmax(attention_scores(q, k), mask)
    return w, w @ v
'''),
    ("attention", "没有用 mask", '''
def attention(q, k, v, mask=None):
    w = masked_softmax(attention_scores(q, k))
    return w @ v, w
'''),
    ("attention", "忘了除以 √D", '''
def attention(q, k, v, mask=None):
    w = masked_softmax(q @ k.transpose(-2, -1), mask)
    return w @ v, w
'''),
]


def notebook_code(replace: dict[str, str] | None = None, header: str = HEADER) -> str:
    """The source of one cell defining all of 01, with some functions replaced."""
    functions = {**CORRECT_01, **(replace or {})}
    return header + "\n".join(functions.values())
