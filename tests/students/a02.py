"""Student code for 02_multi_head: correct answers and seeded mistakes, written independently of
``solutions/`` and of the graders' mistake catalogue."""
from tests.students import a01, notebook

ASSIGNMENT = "02_multi_head"

# The notebook provides assignment 01's functions; here a student's own answers to 01 stand in.
HEADER = "import math\nimport torch\nfrom torch import nn\n" + "\n".join(a01.CORRECT.values())

CORRECT = {
    "split_heads": '''
def split_heads(x, num_heads):
    B, T, C = x.shape
    return x.view(B, T, num_heads, C // num_heads).transpose(1, 2)
''',
    "merge_heads": '''
def merge_heads(x):
    B, H, T, D = x.shape
    return x.transpose(1, 2).contiguous().view(B, T, H * D)
''',
    "MultiHeadAttention": '''
class MultiHeadAttention(nn.Module):
    def __init__(self, hidden_size, num_heads):
        super().__init__()
        self.n_heads = num_heads
        self.q_proj = nn.Linear(hidden_size, hidden_size, bias=False)
        self.k_proj = nn.Linear(hidden_size, hidden_size, bias=False)
        self.v_proj = nn.Linear(hidden_size, hidden_size, bias=False)
        self.o_proj = nn.Linear(hidden_size, hidden_size, bias=False)

    def forward(self, x, attention_mask=None, causal=True):
        T = x.size(1)
        q = split_heads(self.q_proj(x), self.n_heads)
        k = split_heads(self.k_proj(x), self.n_heads)
        v = split_heads(self.v_proj(x), self.n_heads)
        mask = causal_mask(T) if causal else None
        if attention_mask is not None:
            pad = padding_mask(attention_mask)
            mask = pad if mask is None else mask & pad
        out, _ = attention(q, k, v, mask)
        return self.o_proj(merge_heads(out))
''',
}


def _mha(forward_body: str) -> str:
    """A MultiHeadAttention with the correct __init__ and the given forward body (8-space indented)."""
    init = CORRECT["MultiHeadAttention"].split("    def forward")[0]
    return init + "    def forward(self, x, attention_mask=None, causal=True):\n" + forward_body


# (exercise, what the grader should name — a fragment of its message, the student's code)
MISTAKES = [
    ("split_heads", "直接 view 成了 [B, H, T, D]", '''
def split_heads(x, num_heads):
    B, T, C = x.shape
    return x.view(B, num_heads, T, C // num_heads)
'''),
    ("split_heads", "少了 transpose", '''
def split_heads(x, num_heads):
    return x.reshape(x.shape[0], x.shape[1], num_heads, -1)
'''),
    ("split_heads", "顺序拆反了", '''
def split_heads(x, num_heads):
    B, T, C = x.shape
    return x.view(B, T, -1, num_heads).permute(0, 3, 1, 2)
'''),
    ("merge_heads", "没有先 transpose 就 reshape", '''
def merge_heads(x):
    B, H, T, D = x.shape
    return x.reshape(B, T, H * D)
'''),
    ("merge_heads", "拼接顺序反了", '''
def merge_heads(x):
    return x.permute(0, 2, 3, 1).flatten(2)
'''),
    ("split_heads", "transpose 的是最后两维", '''
def split_heads(x, num_heads):
    B, T, C = x.shape
    return x.view(B, T, num_heads, C // num_heads).transpose(-2, -1)
'''),
    ("merge_heads", "transpose 的是最后两维", '''
def merge_heads(x):
    B, H, T, D = x.shape
    return x.transpose(-2, -1).reshape(B, T, H * D)
'''),
    ("merge_heads", "从第 1 维起全部展平了", '''
def merge_heads(x):
    return x.transpose(1, 2).flatten(1)
'''),
    ("merge_heads", "把各头加在一起了", '''
def merge_heads(x):
    return x.sum(dim=1)
'''),
    ("MultiHeadAttention", "忘了 o_proj", _mha('''
        T = x.size(1)
        q, k, v = (split_heads(p(x), self.n_heads) for p in (self.q_proj, self.k_proj, self.v_proj))
        mask = causal_mask(T) if causal else None
        if attention_mask is not None:
            mask = padding_mask(attention_mask) if mask is None else mask & padding_mask(attention_mask)
        return merge_heads(attention(q, k, v, mask)[0])
''')),
    # Seed 003's bug: the padding mask goes through masked_fill, whose result is thrown away.
    ("MultiHeadAttention", "忽略了 attention_mask", _mha('''
        B, T, C = x.shape
        d = C // self.n_heads
        q = split_heads(self.q_proj(x), self.n_heads)
        k = split_heads(self.k_proj(x), self.n_heads)
        v = split_heads(self.v_proj(x), self.n_heads)
        scores = q @ k.transpose(-2, -1) / math.sqrt(d)
        if causal:
            scores = scores.masked_fill(~causal_mask(T), float("-inf"))
        if attention_mask is not None:
            scores.masked_fill(attention_mask[:, None, None, :] == 0, float("-inf"))
        weights = torch.softmax(scores, dim=-1)
        return self.o_proj(merge_heads(weights @ v))
''')),
    ("MultiHeadAttention", "各头的结果被打乱了", _mha('''
        B, T, C = x.shape
        q, k, v = (split_heads(p(x), self.n_heads) for p in (self.q_proj, self.k_proj, self.v_proj))
        mask = causal_mask(T) if causal else None
        if attention_mask is not None:
            mask = padding_mask(attention_mask) if mask is None else mask & padding_mask(attention_mask)
        out, _ = attention(q, k, v, mask)
        return self.o_proj(out.reshape(B, T, C))
''')),
    ("MultiHeadAttention", "causal=False 时仍然加了因果掩码", _mha('''
        T = x.size(1)
        q, k, v = (split_heads(p(x), self.n_heads) for p in (self.q_proj, self.k_proj, self.v_proj))
        mask = causal_mask(T)
        if attention_mask is not None:
            mask = mask & padding_mask(attention_mask)
        return self.o_proj(merge_heads(attention(q, k, v, mask)[0]))
''')),
    ("MultiHeadAttention", "key 用 q_proj 算了", _mha('''
        T = x.size(1)
        q = split_heads(self.q_proj(x), self.n_heads)
        k = split_heads(self.q_proj(x), self.n_heads)
        v = split_heads(self.v_proj(x), self.n_heads)
        mask = causal_mask(T) if causal else None
        if attention_mask is not None:
            mask = padding_mask(attention_mask) if mask is None else mask & padding_mask(attention_mask)
        return self.o_proj(merge_heads(attention(q, k, v, mask)[0]))
''')),
    ("MultiHeadAttention", "因果掩码被替换掉了", _mha('''
        T = x.size(1)
        q, k, v = (split_heads(p(x), self.n_heads) for p in (self.q_proj, self.k_proj, self.v_proj))
        mask = causal_mask(T) if causal else None
        if attention_mask is not None:
            mask = padding_mask(attention_mask)
        return self.o_proj(merge_heads(attention(q, k, v, mask)[0]))
''')),
    ("MultiHeadAttention", "分数缩放了两次", _mha('''
        T = x.size(1)
        q, k, v = (split_heads(p(x), self.n_heads) for p in (self.q_proj, self.k_proj, self.v_proj))
        q = q / math.sqrt(q.shape[-1])
        mask = causal_mask(T) if causal else None
        if attention_mask is not None:
            mask = padding_mask(attention_mask) if mask is None else mask & padding_mask(attention_mask)
        return self.o_proj(merge_heads(attention(q, k, v, mask)[0]))
''')),
    ("MultiHeadAttention", "用 √hidden_size 而不是 √head_dim", _mha('''
        B, T, C = x.shape
        q, k, v = (split_heads(p(x), self.n_heads) for p in (self.q_proj, self.k_proj, self.v_proj))
        scores = q @ k.transpose(-2, -1) / math.sqrt(C)
        if causal:
            scores = scores.masked_fill(~causal_mask(T), float("-inf"))
        if attention_mask is not None:
            scores = scores.masked_fill(~padding_mask(attention_mask), float("-inf"))
        weights = torch.softmax(scores, dim=-1).nan_to_num(0.0)
        return self.o_proj(merge_heads(weights @ v))
''')),    ("MultiHeadAttention", "因果掩码的条件写反了", _mha('''
        T = x.size(1)
        q, k, v = (split_heads(p(x), self.n_heads) for p in (self.q_proj, self.k_proj, self.v_proj))
        mask = None if causal else causal_mask(T)
        if attention_mask is not None:
            mask = padding_mask(attention_mask) if mask is None else mask & padding_mask(attention_mask)
        return self.o_proj(merge_heads(attention(q, k, v, mask)[0]))
''')),
    ("MultiHeadAttention", "padding 掩码取反了", _mha('''
        T = x.size(1)
        q, k, v = (split_heads(p(x), self.n_heads) for p in (self.q_proj, self.k_proj, self.v_proj))
        mask = causal_mask(T) if causal else None
        if attention_mask is not None:
            blocked = ~padding_mask(attention_mask)
            mask = blocked if mask is None else mask & blocked
        return self.o_proj(merge_heads(attention(q, k, v, mask)[0]))
''')),
    ("MultiHeadAttention", "causal=True 时没有用 padding 掩码", _mha('''
        T = x.size(1)
        q, k, v = (split_heads(p(x), self.n_heads) for p in (self.q_proj, self.k_proj, self.v_proj))
        if causal:
            mask = causal_mask(T)
        elif attention_mask is not None:
            mask = padding_mask(attention_mask)
        else:
            mask = None
        return self.o_proj(merge_heads(attention(q, k, v, mask)[0]))
''')),
    ("split_heads", "先 transpose 成 [B, H·D, T] 再 reshape", '''
def split_heads(x, num_heads):
    B, T, C = x.shape
    return x.transpose(1, 2).reshape(B, num_heads, T, C // num_heads)
'''),
    ("split_heads", "切出的是宽 num_heads 的块", '''
def split_heads(x, num_heads):
    return torch.stack(torch.split(x, num_heads, dim=2), dim=1)
'''),
    ("merge_heads", "先 reshape 成 [B, H·D, T] 再 transpose", '''
def merge_heads(x):
    B, H, T, D = x.shape
    return x.reshape(B, H * D, T).permute(0, 2, 1)
'''),
]

STUBS = {
    "split_heads": "def split_heads(x, num_heads):\n    raise NotImplementedError()\n",
    "merge_heads": "def merge_heads(x):\n    raise NotImplementedError()\n",
    "MultiHeadAttention": '''
class MultiHeadAttention(nn.Module):
    def __init__(self, hidden_size, num_heads):
        super().__init__()
        raise NotImplementedError()

    def forward(self, x, attention_mask=None, causal=True):
        raise NotImplementedError()
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
