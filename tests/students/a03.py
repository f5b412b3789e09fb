"""Student code for 03_gqa_kv_cache: correct answers and seeded mistakes, written independently of
``solutions/`` and of the graders' mistake catalogue."""
from tests.students import a01, notebook

ASSIGNMENT = "03_gqa_kv_cache"

# The notebook provides assignment 01's functions; here a student's own answers to 01 stand in.
HEADER = "import math\nimport torch\nfrom torch import nn\n" + "\n".join(a01.CORRECT.values())

# The notebook hands these out ready-made (assignment 02's answers).
READY = '''
def split_heads(x, num_heads):
    batch, seq, width = x.shape
    return x.view(batch, seq, num_heads, width // num_heads).transpose(1, 2)


def merge_heads(x):
    batch, heads, seq, dim = x.shape
    return x.transpose(1, 2).reshape(batch, seq, heads * dim)
'''

CORRECT = {
    "KVCache": '''
class KVCache:
    def __init__(self):
        self.k_all = None
        self.v_all = None

    def update(self, k, v):
        if self.k_all is None:
            self.k_all, self.v_all = k, v
        else:
            self.k_all = torch.cat((self.k_all, k), dim=-2)
            self.v_all = torch.cat((self.v_all, v), dim=-2)
        return self.k_all, self.v_all

    def __len__(self):
        return 0 if self.k_all is None else self.k_all.size(2)
''',
    "repeat_kv": '''
def repeat_kv(x, n_rep):
    return torch.repeat_interleave(x, repeats=n_rep, dim=1)
''',
    "GroupedQueryAttention": '''
class GroupedQueryAttention(nn.Module):
    def __init__(self, hidden_size, num_heads, num_kv_heads, head_dim=None):
        super().__init__()
        self.h, self.hkv = num_heads, num_kv_heads
        self.d = head_dim if head_dim is not None else hidden_size // num_heads
        self.q_proj = nn.Linear(hidden_size, self.h * self.d, bias=False)
        self.k_proj = nn.Linear(hidden_size, self.hkv * self.d, bias=False)
        self.v_proj = nn.Linear(hidden_size, self.hkv * self.d, bias=False)
        self.o_proj = nn.Linear(self.h * self.d, hidden_size, bias=False)

    def forward(self, x, attention_mask=None, cache=None):
        B, T, _ = x.shape
        q = self.q_proj(x).view(B, T, self.h, self.d).transpose(1, 2)
        k = self.k_proj(x).view(B, T, self.hkv, self.d).transpose(1, 2)
        v = self.v_proj(x).view(B, T, self.hkv, self.d).transpose(1, 2)
        if cache is not None:
            k, v = cache.update(k, v)
        L = k.shape[2]
        mask = causal_mask(T, L)
        if attention_mask is not None:
            mask = mask & padding_mask(attention_mask)
        rep = self.h // self.hkv
        out, _ = attention(q, repeat_kv(k, rep), repeat_kv(v, rep), mask)
        out = out.transpose(1, 2).reshape(B, T, self.h * self.d)
        return self.o_proj(out), cache
''',
    "kv_cache_bytes": '''
def kv_cache_bytes(batch, seq_len, num_layers, num_kv_heads, head_dim, bytes_per_elem):
    per_token_per_layer = 2 * num_kv_heads * head_dim * bytes_per_elem
    return per_token_per_layer * num_layers * seq_len * batch
''',
    "attention_flops": '''
def attention_flops(batch, q_len, k_len, hidden_size, num_heads, num_kv_heads, head_dim):
    q_width, kv_width = num_heads * head_dim, num_kv_heads * head_dim
    macs = q_len * hidden_size * (q_width + kv_width + kv_width)  # q_proj, k_proj, v_proj
    macs += num_heads * q_len * k_len * head_dim                  # Q @ K^T
    macs += num_heads * q_len * k_len * head_dim                  # weights @ V
    macs += q_len * q_width * hidden_size                         # o_proj
    return 2 * batch * macs
''',
}


def _gqa(forward_body: str) -> str:
    """A GroupedQueryAttention with the correct __init__ and the given forward body (8-space indented)."""
    init = CORRECT["GroupedQueryAttention"].split("    def forward")[0]
    return init + "    def forward(self, x, attention_mask=None, cache=None):\n" + forward_body


_PROJECT = '''
        B, T, _ = x.shape
        q = self.q_proj(x).view(B, T, self.h, self.d).transpose(1, 2)
        k = self.k_proj(x).view(B, T, self.hkv, self.d).transpose(1, 2)
        v = self.v_proj(x).view(B, T, self.hkv, self.d).transpose(1, 2)
        rep = self.h // self.hkv
'''

_FINISH = '''
        out = out.transpose(1, 2).reshape(B, T, self.h * self.d)
        return self.o_proj(out), cache
'''

# (exercise, what the grader should name — a fragment of its message, the student's code)
MISTAKES = [
    ("KVCache", "拼接在了 head 维", CORRECT["KVCache"].replace("dim=-2", "dim=1")),
    ("KVCache", "拼接在了 head_dim", CORRECT["KVCache"].replace("dim=-2", "dim=-1")),
    ("KVCache", "新位置拼在了缓存的前面", CORRECT["KVCache"].replace("(self.k_all, k)", "(k, self.k_all)")
     .replace("(self.v_all, v)", "(v, self.v_all)")),
    ("KVCache", "只返回了新来的", CORRECT["KVCache"].replace("return self.k_all, self.v_all", "return k, v")),
    ("KVCache", "update 的次数", '''
class KVCache:
    def __init__(self):
        self.ks, self.vs = [], []

    def update(self, k, v):
        self.ks.append(k)
        self.vs.append(v)
        return torch.cat(self.ks, dim=2), torch.cat(self.vs, dim=2)

    def __len__(self):
        return len(self.ks)
'''),
    ("KVCache", "len() 取错了维度", CORRECT["KVCache"].replace("self.k_all.size(2)", "len(self.k_all)")),
    ("repeat_kv", "KV 头重复成了 0, 1, 0, 1 的顺序", '''
def repeat_kv(x, n_rep):
    return torch.cat([x] * n_rep, dim=1)
'''),
    ("repeat_kv", "在序列维", '''
def repeat_kv(x, n_rep):
    return x.repeat_interleave(n_rep, dim=2)
'''),
    ("GroupedQueryAttention", "KV 头重复成了 0, 1, 0, 1 的顺序", _gqa(_PROJECT + '''
        if cache is not None:
            k, v = cache.update(k, v)
        L = k.shape[2]
        k = k[:, None].expand(B, rep, self.hkv, L, self.d).reshape(B, self.h, L, self.d)
        v = v[:, None].expand(B, rep, self.hkv, L, self.d).reshape(B, self.h, L, self.d)
        mask = causal_mask(T, L)
        if attention_mask is not None:
            mask = mask & padding_mask(attention_mask)
        out, _ = attention(q, k, v, mask)
''' + _FINISH)),
    # Seed 003's bug: masked_fill for the padding mask, its result thrown away.
    ("GroupedQueryAttention", "忽略了 attention_mask", _gqa(_PROJECT + '''
        if cache is not None:
            k, v = cache.update(k, v)
        L = k.shape[2]
        k, v = repeat_kv(k, rep), repeat_kv(v, rep)
        scores = q @ k.transpose(-1, -2) / math.sqrt(self.d)
        scores = scores.masked_fill(~causal_mask(T, L), float("-inf"))
        if attention_mask is not None:
            scores.masked_fill(attention_mask[:, None, None, :] == 0, float("-inf"))
        out = torch.softmax(scores, dim=-1) @ v
''' + _FINISH)),
    # The same bug on every mask: seed 003's MQA/GQA apply no mask at all.
    ("GroupedQueryAttention", "一个 mask 也没起作用", _gqa(_PROJECT + '''
        if cache is not None:
            k, v = cache.update(k, v)
        L = k.shape[2]
        k, v = repeat_kv(k, rep), repeat_kv(v, rep)
        scores = q @ k.transpose(-1, -2) / math.sqrt(self.d)
        scores.masked_fill(~causal_mask(T, L), float("-inf"))
        if attention_mask is not None:
            scores.masked_fill(attention_mask[:, None, None, :] == 0, float("-inf"))
        out = torch.softmax(scores, dim=-1) @ v
''' + _FINISH)),
    ("GroupedQueryAttention", "因果掩码没有偏移", _gqa(_PROJECT + '''
        if cache is not None:
            k, v = cache.update(k, v)
        L = k.shape[2]
        mask = torch.tril(torch.ones(T, L, dtype=torch.bool))
        if attention_mask is not None:
            mask = mask & padding_mask(attention_mask)
        out, _ = attention(q, repeat_kv(k, rep), repeat_kv(v, rep), mask)
''' + _FINISH)),
    ("GroupedQueryAttention", "没有用它返回的完整 K/V", _gqa(_PROJECT + '''
        if cache is not None:
            cache.update(k, v)
        mask = causal_mask(T, k.shape[2])
        if attention_mask is not None:
            mask = mask & padding_mask(attention_mask)
        out, _ = attention(q, repeat_kv(k, rep), repeat_kv(v, rep), mask)
''' + _FINISH)),
    ("GroupedQueryAttention", "缓存里放的是 repeat_kv 之后的 K/V", _gqa(_PROJECT + '''
        k, v = repeat_kv(k, rep), repeat_kv(v, rep)
        if cache is not None:
            k, v = cache.update(k, v)
        mask = causal_mask(T, k.shape[2])
        if attention_mask is not None:
            mask = mask & padding_mask(attention_mask)
        out, _ = attention(q, k, v, mask)
''' + _FINISH)),
    ("GroupedQueryAttention", "忘了 o_proj", CORRECT["GroupedQueryAttention"].replace(
        "return self.o_proj(out), cache", "return out, cache")),
    ("kv_cache_bytes", "忘了乘 2", '''
def kv_cache_bytes(batch, seq_len, num_layers, num_kv_heads, head_dim, bytes_per_elem):
    return batch * seq_len * num_layers * num_kv_heads * head_dim * bytes_per_elem
'''),
    ("kv_cache_bytes", "忘了乘 bytes_per_elem", '''
def kv_cache_bytes(batch, seq_len, num_layers, num_kv_heads, head_dim, bytes_per_elem):
    return 2 * batch * seq_len * num_layers * num_kv_heads * head_dim
'''),
    ("kv_cache_bytes", "忘了乘层数", '''
def kv_cache_bytes(batch, seq_len, num_layers, num_kv_heads, head_dim, bytes_per_elem):
    return 2 * batch * seq_len * num_kv_heads * head_dim * bytes_per_elem
'''),
    ("kv_cache_bytes", "返回了 float", '''
def kv_cache_bytes(batch, seq_len, num_layers, num_kv_heads, head_dim, bytes_per_elem):
    return 2.0 * batch * seq_len * num_layers * num_kv_heads * head_dim * bytes_per_elem
'''),
    ("attention_flops", "每次乘加只算了 1 个 FLOP", CORRECT["attention_flops"].replace("return 2 * batch * macs",
                                                                                   "return batch * macs")),
    ("attention_flops", "漏了 o_proj", CORRECT["attention_flops"].replace(
        "    macs += q_len * q_width * hidden_size                         # o_proj\n", "")),
    ("attention_flops", "k_proj、v_proj 按 num_heads 个头算了", CORRECT["attention_flops"].replace(
        "kv_width = num_heads * head_dim, num_kv_heads * head_dim", "kv_width = num_heads * head_dim, num_heads * head_dim")),
    ("attention_flops", "分数表按 q_len × q_len 算了", CORRECT["attention_flops"].replace(
        "q_len * k_len * head_dim", "q_len * q_len * head_dim")),
    ("attention_flops", "漏了 weights · V", CORRECT["attention_flops"].replace(
        "    macs += num_heads * q_len * k_len * head_dim                  # weights @ V\n", "")),
    ("attention_flops", "投影按全部 k_len 个 token 算了", CORRECT["attention_flops"].replace(
        "macs = q_len * hidden_size", "macs = k_len * hidden_size").replace(
        "macs += q_len * q_width * hidden_size", "macs += k_len * q_width * hidden_size")),
    ("attention_flops", "漏了 weights · V；投影按全部 k_len 个 token 算了", CORRECT["attention_flops"].replace(  # two at once
        "    macs += num_heads * q_len * k_len * head_dim                  # weights @ V\n", "").replace(
        "macs = q_len * hidden_size", "macs = k_len * hidden_size").replace(
        "macs += q_len * q_width * hidden_size", "macs += k_len * q_width * hidden_size")),
    ("attention_flops", "K 和 V 的投影只算了一份", CORRECT["attention_flops"].replace(
        "(q_width + kv_width + kv_width)", "(q_width + kv_width)")),
    ("attention_flops", "按 num_kv_heads 个头算了", CORRECT["attention_flops"].replace(
        "macs += num_heads * q_len * k_len * head_dim                  # Q @ K^T",
        "macs += num_kv_heads * q_len * k_len * head_dim               # Q @ K^T").replace(
        "macs += num_heads * q_len * k_len * head_dim                  # weights @ V",
        "macs += num_kv_heads * q_len * k_len * head_dim               # weights @ V")),
    ("attention_flops", "只数了因果掩码看得见的那些分数", CORRECT["attention_flops"].replace(
        "num_heads * q_len * k_len * head_dim                  # Q @ K^T",
        "num_heads * (q_len * (k_len - q_len) + q_len * (q_len + 1) // 2) * head_dim").replace(
        "num_heads * q_len * k_len * head_dim                  # weights @ V",
        "num_heads * (q_len * (k_len - q_len) + q_len * (q_len + 1) // 2) * head_dim")),
    ("attention_flops", "也算进了 FLOPs", CORRECT["attention_flops"].replace(
        "return 2 * batch * macs", "return 2 * batch * macs + 5 * batch * num_heads * q_len * k_len  # + softmax")),
    ("attention_flops", "q_proj 按 Qwen3.5 带门的宽度", CORRECT["attention_flops"].replace(
        "(q_width + kv_width + kv_width)", "(2 * q_width + kv_width + kv_width)")),
    ("attention_flops", "分数表按 q_len × (k_len + q_len) 算了", CORRECT["attention_flops"].replace(
        "macs += num_heads * q_len * k_len * head_dim                  # Q @ K^T",
        "macs += num_heads * q_len * (k_len + q_len) * head_dim        # Q @ K^T").replace(
        "macs += num_heads * q_len * k_len * head_dim                  # weights @ V",
        "macs += num_heads * q_len * (k_len + q_len) * head_dim        # weights @ V")),
    ("attention_flops", "忘了乘 batch", CORRECT["attention_flops"].replace("return 2 * batch * macs", "return 2 * macs")),
    # Floats hold every integer only up to 2^53: the large case comes out rounded.
    ("attention_flops", "返回了 float", '''
def attention_flops(batch, q_len, k_len, hidden_size, num_heads, num_kv_heads, head_dim):
    projections = 2 * q_len * hidden_size * head_dim * (2 * num_heads + 2 * num_kv_heads)
    scores_and_values = 4 * num_heads * q_len * k_len * head_dim
    return 1.0 * batch * (projections + scores_and_values)
'''),
]

STUBS = {
    "KVCache": '''
class KVCache:
    def __init__(self):
        raise NotImplementedError()

    def update(self, k, v):
        raise NotImplementedError()

    def __len__(self):
        raise NotImplementedError()
''',
    "repeat_kv": "def repeat_kv(x, n_rep):\n    raise NotImplementedError()\n",
    "GroupedQueryAttention": '''
class GroupedQueryAttention(nn.Module):
    def __init__(self, hidden_size, num_heads, num_kv_heads, head_dim=None):
        super().__init__()
        raise NotImplementedError()

    def forward(self, x, attention_mask=None, cache=None):
        raise NotImplementedError()
''',
    "kv_cache_bytes": "def kv_cache_bytes(batch, seq_len, num_layers, num_kv_heads, head_dim, bytes_per_elem):\n"
                      "    raise NotImplementedError()\n",
    "attention_flops": "def attention_flops(batch, q_len, k_len, hidden_size, num_heads, num_kv_heads, head_dim):\n"
                       "    raise NotImplementedError()\n",
}

# Other right ways to write the code, which the grader must accept too.
OTHER_CORRECT = []


def layout(replace: dict[str, str] | None = None) -> list[notebook.Piece]:
    """The student's notebook, cell by cell (``tests/students/notebook.py``), with some answers replaced."""
    return notebook.layout(HEADER + READY, notebook.answers(CORRECT, replace))


def cells(replace: dict[str, str] | None = None) -> list[notebook.Cell]:
    """The cells the grader reads from the student's notebook, with some answers replaced."""
    return notebook.cells(layout(replace))


def source(replace: dict[str, str] | None = None) -> str:
    """The same code as one cell's source, every import at the top (what ``autograder.grade_code`` takes)."""
    return HEADER + READY + "\n".join(notebook.answers(CORRECT, replace).values())
