"""Code as students write it: a correct 01 and seeded mistakes, each a replacement for one function.

Written independently of ``solutions/`` and of the graders' mistake catalogue, so that a grader
naming a mistake is evidence, not an echo.
"""
from tests.students import notebook
from tests.students.notebook import swapped

ASSIGNMENT = "01_attention_basics"

CORRECT = {
    "attention_scores": '''
def attention_scores(q, k):
    d = q.size(-1)
    return torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(d)
''',
    "causal_mask": '''
def causal_mask(q_len, k_len=None, window=None):
    if k_len is None:
        k_len = q_len
    ones = torch.ones(q_len, k_len, dtype=torch.bool)
    mask = ones.tril(diagonal=k_len - q_len)
    if window is not None:
        mask = mask & ones.triu(diagonal=k_len - q_len - window + 1)
    return mask
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
    # Normalised after every block (the output is always the softmax-weighted mean so far), not once at the end.
    "online_softmax_attention": '''
def online_softmax_attention(q, k, v, mask=None, block_size=16):
    n = k.shape[-2]
    if mask is not None:
        mask = mask.expand(*mask.shape[:-1], n)
    m = l = o = None
    for i in range(0, n, block_size):
        s = attention_scores(q, k[..., i:i + block_size, :])
        if mask is not None:
            s = s.masked_fill(~mask[..., i:i + block_size], float("-inf"))
        block_max = s.amax(-1, keepdim=True)
        m_new = block_max if m is None else torch.maximum(m, block_max)
        safe = torch.where(torch.isinf(m_new), torch.zeros_like(m_new), m_new)
        p = torch.exp(s - safe)
        pv = p @ v[..., i:i + block_size, :]
        if m is None:
            l_new = p.sum(-1, keepdim=True)
            o = torch.where(l_new > 0, pv / l_new.clamp_min(1e-30), torch.zeros_like(pv))
        else:
            old = l * torch.exp(m - safe)
            l_new = old + p.sum(-1, keepdim=True)
            o = torch.where(l_new > 0, (o * old + pv) / l_new.clamp_min(1e-30), torch.zeros_like(o))
        m, l = m_new, l_new
    return o
''',
}

HEADER = "import math\nimport torch\n"

# Online softmax written the textbook way (running max m, sum l, output o, each rescaled by c = e^(m - m')):
# right as it is; each mistake below changes one or two of its lines.
_ONLINE = '''
def online_softmax_attention(q, k, v, mask=None, block_size=16):
    n = k.shape[-2]
    if mask is not None:
        mask = mask.expand(*mask.shape[:-1], n)
    m = torch.full(q.shape[:-1] + (1,), float("-inf"), dtype=q.dtype)
    l = torch.zeros(q.shape[:-1] + (1,), dtype=q.dtype)
    o = torch.zeros(q.shape[:-1] + (v.shape[-1],), dtype=q.dtype)
    for i in range(0, n, block_size):
        s = attention_scores(q, k[..., i:i + block_size, :])
        if mask is not None:
            s = s.masked_fill(~mask[..., i:i + block_size], float("-inf"))
        m_new = torch.maximum(m, s.amax(-1, keepdim=True))
        shift = m_new.nan_to_num(neginf=0.0)
        p = torch.exp(s - shift)
        c = torch.exp(m - shift)
        l = l * c + p.sum(-1, keepdim=True)
        o = o * c + p @ v[..., i:i + block_size, :]
        m = m_new
    return torch.where(l > 0, o / l, 0.0)
'''


# (exercise, what the grader should name — a fragment of its message, the student's code)
MISTAKES = [
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
def causal_mask(q_len, k_len=None, window=None):
    k_len = k_len or q_len
    return torch.triu(torch.ones(q_len, k_len, dtype=torch.bool), diagonal=k_len - q_len + 1)
'''),
    ("causal_mask", "上下三角弄反了", '''
def causal_mask(q_len, k_len=None, window=None):
    k_len = k_len or q_len
    return torch.ones(q_len, k_len).triu(k_len - q_len) > 0
'''),
    ("causal_mask", "没有偏移", '''
def causal_mask(q_len, k_len=None, window=None):
    k_len = k_len or q_len
    return torch.tril(torch.ones(q_len, k_len)).bool()
'''),
    ("causal_mask", "对角线被遮住了", '''
def causal_mask(q_len, k_len=None, window=None):
    k_len = k_len or q_len
    i = torch.arange(q_len)[:, None] + (k_len - q_len)
    j = torch.arange(k_len)[None, :]
    return j < i
'''),
    ("causal_mask", "0/1 的浮点数", '''
def causal_mask(q_len, k_len=None, window=None):
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
    ("causal_mask", "还没有 window 参数", '''
def causal_mask(q_len, k_len=None):
    k_len = q_len if k_len is None else k_len
    return torch.ones(q_len, k_len, dtype=torch.bool).tril(k_len - q_len)
'''),
    ("causal_mask", "窗口多算了一个 key", '''
def causal_mask(q_len, k_len=None, window=None):
    k_len = q_len if k_len is None else k_len
    pos = torch.arange(q_len)[:, None] + k_len - q_len
    key = torch.arange(k_len)[None, :]
    keep = key <= pos
    if window:
        keep &= key >= pos - window
    return keep
'''),
    ("causal_mask", "没有用 window", '''
def causal_mask(q_len, k_len=None, window=None):
    k_len = q_len if k_len is None else k_len
    return torch.ones(q_len, k_len, dtype=torch.bool).tril(k_len - q_len)
'''),
    ("causal_mask", "丢了因果", '''
def causal_mask(q_len, k_len=None, window=None):
    k_len = q_len if k_len is None else k_len
    pos = torch.arange(k_len - q_len, k_len)[:, None]
    key = torch.arange(k_len)[None, :]
    if window is None:
        return key <= pos
    return (pos - key).abs() < window
'''),
    ("causal_mask", "窗口的下边界按 query 的行号算", '''
def causal_mask(q_len, k_len=None, window=None):
    k_len = q_len if k_len is None else k_len
    ones = torch.ones(q_len, k_len, dtype=torch.bool)
    mask = ones.tril(k_len - q_len)
    if window is not None:
        mask = mask & ones.triu(1 - window)
    return mask
'''),
    ("online_softmax_attention", "累加的输出没有跟着缩放",
     swapped(_ONLINE, "o = o * c + p @ v", "o = o + p @ v")),
    ("online_softmax_attention", "用了 torch 自带的 flash attention", '''
def online_softmax_attention(q, k, v, mask=None, block_size=16):
    import torch.nn.functional as F
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask).nan_to_num(0.0)
'''),
    ("online_softmax_attention", "缩放因子写反了", swapped(_ONLINE, "c = torch.exp(m - shift)", "c = torch.exp(shift - m)")),
    ("online_softmax_attention", "每一块只用这一块自己的最大值平移", swapped(
        _ONLINE, "m_new = torch.maximum(m, s.amax(-1, keepdim=True))", "m_new = s.amax(-1, keepdim=True)")),
    ("online_softmax_attention", "每一块的 exp 减的是这一块自己的最大值", swapped(
        _ONLINE, "p = torch.exp(s - shift)", "p = torch.exp(s - s.amax(-1, keepdim=True).nan_to_num(neginf=0.0))")),
    ("online_softmax_attention", "running sum 没有跟着缩放", swapped(_ONLINE, "l = l * c + p.sum", "l = l + p.sum")),
    # FlashAttention's issue #2082: the shift that stands in for a -inf running max is kept as the running max.
    ("online_softmax_attention", "running max 被记成了 0", swapped(_ONLINE, "        m = m_new\n", "        m = shift\n")),
    # Memory-efficient attention before its fix: the block's max is taken before the mask.
    ("online_softmax_attention", "每块的最大值是在 mask 之前取的",
     swapped(_ONLINE, """        if mask is not None:
            s = s.masked_fill(~mask[..., i:i + block_size], float("-inf"))
        m_new = torch.maximum(m, s.amax(-1, keepdim=True))
""", """        m_new = torch.maximum(m, s.amax(-1, keepdim=True))
        if mask is not None:
            s = s.masked_fill(~mask[..., i:i + block_size], float("-inf"))
""")),
    ("online_softmax_attention", "running max 从 0 开始",
     swapped(_ONLINE, 'm = torch.full(q.shape[:-1] + (1,), float("-inf"), dtype=q.dtype)',
             "m = torch.full(q.shape[:-1] + (1,), 0.0, dtype=q.dtype)")),
    ("online_softmax_attention", "running max 还是 −inf 时直接拿它平移",
     swapped(_ONLINE, "shift = m_new.nan_to_num(neginf=0.0)", "shift = m_new",
             "return torch.where(l > 0, o / l, 0.0)", "return o / l")),
    ("online_softmax_attention", "最后一个不满 block_size 的块被丢掉了",
     swapped(_ONLINE, "for i in range(0, n, block_size):", "for i in range(0, n - n % block_size, block_size):")),
    ("online_softmax_attention", "忘了除以 √D",
     swapped(_ONLINE, "s = attention_scores(q, k[..., i:i + block_size, :])",
             "s = attention_scores(q, k[..., i:i + block_size, :]) * math.sqrt(q.shape[-1])")),
    ("online_softmax_attention", "每一块单独做了 softmax", '''
def online_softmax_attention(q, k, v, mask=None, block_size=16):
    out = 0
    if mask is not None:
        mask = mask.expand(*mask.shape[:-1], k.shape[-2])
    for i in range(0, k.shape[-2], block_size):
        block_mask = None if mask is None else mask[..., i:i + block_size]
        out = out + attention(q, k[..., i:i + block_size, :], v[..., i:i + block_size, :], block_mask)[0]
    return out
'''),
    ("online_softmax_attention", "一次算出了多于 block_size 个 key 的分数", '''
def online_softmax_attention(q, k, v, mask=None, block_size=16):
    return attention(q, k, v, mask)[0]
'''),
    ("online_softmax_attention", "exp 之前没有减去 running max", '''
def online_softmax_attention(q, k, v, mask=None, block_size=16):
    num = 0
    den = 0
    if mask is not None:
        mask = mask.expand(*mask.shape[:-1], k.shape[-2])
    for i in range(0, k.shape[-2], block_size):
        e = torch.exp(attention_scores(q, k[..., i:i + block_size, :]))
        if mask is not None:
            e = e * mask[..., i:i + block_size]
        num = num + e @ v[..., i:i + block_size, :]
        den = den + e.sum(-1, keepdim=True)
    return torch.where(den > 0, num / den, torch.zeros_like(num))
'''),
]

# The released notebook's answer cells, as a student finds them.
STUBS = {
    "attention_scores": '''
def attention_scores(q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    """Scaled dot-product scores.

    q: [..., Tq, D], k: [..., Tk, D] (leading dims equal or broadcastable).
    Returns [..., Tq, Tk]: entry (i, j) is q_i . k_j / sqrt(D), in the dtype of q.
    """
    # 在这里写你的代码
    raise NotImplementedError()
''',
    "causal_mask": '''
def causal_mask(q_len: int, k_len: int | None = None, window: int | None = None) -> torch.Tensor:
    """Causal mask, bool [q_len, k_len], True = may attend.

    k_len defaults to q_len. The queries are the last q_len positions of the sequence, so query i
    sits at absolute position p = k_len - q_len + i and may see every key j <= p. With a sliding
    window (window=w), only the last w of them: p - w < j <= p.
    """
    # 在这里写你的代码
    raise NotImplementedError()
''',
    "padding_mask": '''
def padding_mask(attention_mask: torch.Tensor) -> torch.Tensor:
    """Key-padding mask, True = may attend.

    attention_mask: [B, Tk] of 0/1 as a Hugging Face tokenizer returns it (1 = real token).
    Returns bool [B, 1, 1, Tk], which broadcasts over heads and query rows of [B, H, Tq, Tk].
    """
    # 在这里写你的代码
    raise NotImplementedError()
''',
    "masked_softmax": '''
def masked_softmax(scores: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
    """Softmax over the last dim in which masked entries get exactly zero weight.

    scores: [..., Tq, Tk]. mask: bool, broadcastable to scores, True = may attend (None = no mask).
    Returns weights of the broadcast shape and the dtype of scores. Each row sums to 1, except a
    fully masked row, which is all zeros (never NaN).
    """
    # 在这里写你的代码
    raise NotImplementedError()
''',
    "attention": '''
def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
              mask: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Scaled dot-product attention.

    q: [..., Tq, D], k: [..., Tk, D], v: [..., Tk, Dv]; mask: bool broadcastable to
    [..., Tq, Tk], True = may attend (None = attend everywhere).
    Returns (output [..., Tq, Dv], weights [..., Tq, Tk]), both in the dtype of the inputs.
    """
    # 在这里写你的代码
    raise NotImplementedError()
''',
    "online_softmax_attention": '''
def online_softmax_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None = None,
                             block_size: int = 16) -> torch.Tensor:
    """attention(q, k, v, mask)[0], computed over blocks of block_size keys.

    q: [..., Tq, D], k: [..., Tk, D], v: [..., Tk, Dv]; mask: bool broadcastable to [..., Tq, Tk],
    True = may attend. Holds the scores of one block ([..., Tq, block_size]) at a time, with a running
    max m and sum z per query ([..., Tq, 1]). Returns [..., Tq, Dv] in q's dtype; fully masked rows are 0.
    """
    # 在这里写你的代码
    raise NotImplementedError()
''',
}

# Other right ways to write the code, which the grader must accept too.
OTHER_CORRECT = [
    # Found by a fresh writer: one block of scores at a time, each block's partial results combined at the end. Its
    # peak memory stays low only where freed blocks go back to the system (zygote._give_freed_blocks_back).
    ("online_softmax_attention", "each block's max, sum and output kept, combined at the end (split-K)", '''
def online_softmax_attention(q, k, v, mask=None, block_size=16):
    out_dtype = q.dtype
    work = torch.promote_types(q.dtype, torch.float32)
    q, k, v = q.to(work), k.to(work), v.to(work)
    if mask is not None:
        mask = mask.expand(*mask.shape[:-1], k.shape[-2])
    maxes, sums, outs = [], [], []
    for start in range(0, k.shape[-2], block_size):
        s = attention_scores(q, k[..., start:start + block_size, :])
        if mask is not None:
            s = s.masked_fill(~mask[..., start:start + block_size], float("-inf"))
        block_max = s.amax(-1, keepdim=True)
        p = torch.exp(s - block_max.masked_fill(torch.isinf(block_max), 0.0))
        maxes.append(block_max)
        sums.append(p.sum(-1, keepdim=True))
        outs.append(p @ v[..., start:start + block_size, :])
    top = torch.stack(maxes).amax(0)
    top = top.masked_fill(torch.isinf(top), 0.0)
    total, numer = torch.zeros_like(sums[0]), torch.zeros_like(outs[0])
    for block_max, block_sum, block_out in zip(maxes, sums, outs):
        weight = torch.exp(block_max - top)
        total = total + weight * block_sum
        numer = numer + weight * block_out
    return torch.where(total > 0, numer / total, 0.0).to(out_dtype)
'''),
]


def layout(replace: dict[str, str] | None = None) -> list[notebook.Piece]:
    """The student's notebook, cell by cell (``tests/students/notebook.py``), with some answers replaced."""
    return notebook.layout(HEADER, notebook.answers(CORRECT, replace))


def cells(replace: dict[str, str] | None = None) -> list[notebook.Cell]:
    """The cells the grader reads from the student's notebook, with some answers replaced."""
    return notebook.cells(layout(replace))


def source(replace: dict[str, str] | None = None) -> str:
    """The same code as one cell's source, every import at the top (what ``autograder.grade_code`` takes)."""
    return HEADER + "\n".join(notebook.answers(CORRECT, replace).values())
