"""Student code for 09_flash_attention: correct answers and seeded mistakes, written independently of ``solutions/``
and of the graders' mistake catalogue."""
from tests.students import notebook
from tests.students.notebook import swapped

ASSIGNMENT = "09_flash_attention"

HEADER = "import math\nimport torch\n"

# What the notebook provides from 01, the student's own standing in.
BLOCKS = '''
def attention(q, k, v, mask=None):
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.softmax(scores, dim=-1).nan_to_num(0.0)
    return weights @ v, weights


def causal_mask(q_len, k_len=None):
    k_len = q_len if k_len is None else k_len
    return torch.ones(q_len, k_len, dtype=torch.bool).tril(k_len - q_len)
'''

FORWARD = '''
def flash_attention_forward(q, k, v, causal=False, block_q=16, block_k=16):
    Tq, Tk, d = q.shape[-2], k.shape[-2], q.shape[-1]
    shift_pos = Tk - Tq
    out = torch.empty(*q.shape[:-1], v.shape[-1], dtype=q.dtype)
    lse = torch.empty(q.shape[:-1], dtype=q.dtype)
    for i0 in range(0, Tq, block_q):
        i1 = min(Tq, i0 + block_q)
        qi = q[..., i0:i1, :] / math.sqrt(d)
        m = torch.full((*qi.shape[:-1], 1), -math.inf, dtype=q.dtype)
        l = torch.zeros_like(m)
        acc = torch.zeros(*qi.shape[:-1], v.shape[-1], dtype=q.dtype)
        for j0 in range(0, Tk, block_k):
            if causal and j0 > i1 - 1 + shift_pos:
                break
            j1 = min(Tk, j0 + block_k)
            s = torch.einsum("...id,...jd->...ij", qi, k[..., j0:j1, :])
            if causal:
                allowed = torch.arange(j0, j1)[None, :] <= torch.arange(i0, i1)[:, None] + shift_pos
                s = torch.where(allowed, s, -math.inf)
            m_next = torch.maximum(m, s.max(dim=-1, keepdim=True).values)
            safe = torch.where(torch.isinf(m_next), torch.zeros_like(m_next), m_next)
            p = (s - safe).exp()
            corr = (m - safe).exp()
            l = corr * l + p.sum(-1, keepdim=True)
            acc = corr * acc + p @ v[..., j0:j1, :]
            m = m_next
        empty = l == 0
        out[..., i0:i1, :] = torch.where(empty, 0.0, acc / torch.where(empty, 1.0, l))
        lse[..., i0:i1] = torch.where(empty, -math.inf, m + l.log()).squeeze(-1)
    return out, lse
'''

BACKWARD = '''
def flash_attention_backward(q, k, v, o, lse, do, causal=False, block_q=16, block_k=16):
    Tq, Tk = q.shape[-2], k.shape[-2]
    sm = 1.0 / math.sqrt(q.shape[-1])
    shift_pos = Tk - Tq
    D = torch.sum(do * o, dim=-1, keepdim=True)
    L = torch.where(torch.isinf(lse), torch.zeros_like(lse), lse).unsqueeze(-1)
    dq, dk, dv = torch.zeros_like(q), torch.zeros_like(k), torch.zeros_like(v)
    for j0 in range(0, Tk, block_k):
        j1 = min(Tk, j0 + block_k)
        kj, vj = k[..., j0:j1, :], v[..., j0:j1, :]
        dkj, dvj = torch.zeros_like(kj), torch.zeros_like(vj)
        for i0 in range(0, Tq, block_q):
            i1 = min(Tq, i0 + block_q)
            if causal and j0 > i1 - 1 + shift_pos:
                continue
            qi, doi = q[..., i0:i1, :], do[..., i0:i1, :]
            s = torch.matmul(qi, kj.transpose(-1, -2)) * sm
            if causal:
                allowed = torch.arange(j0, j1)[None, :] <= torch.arange(i0, i1)[:, None] + shift_pos
                s = s.masked_fill(~allowed, float("-inf"))
            p = torch.exp(s - L[..., i0:i1, :])
            dvj = dvj + p.transpose(-1, -2) @ doi
            dp = doi @ vj.transpose(-1, -2)
            ds = p * (dp - D[..., i0:i1, :])
            dq[..., i0:i1, :] += sm * (ds @ kj)
            dkj = dkj + sm * (ds.transpose(-1, -2) @ qi)
        dk[..., j0:j1, :] = dkj
        dv[..., j0:j1, :] = dvj
    return dq, dk, dv
'''

FUNCTION = '''
class FlashAttention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, causal=False):
        out, lse = flash_attention_forward(q, k, v, causal=causal)
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.is_causal = causal
        return out

    @staticmethod
    def backward(ctx, grad_out):
        q, k, v, out, lse = ctx.saved_tensors
        grads = flash_attention_backward(q, k, v, out, lse, grad_out, causal=ctx.is_causal)
        return grads[0], grads[1], grads[2], None
'''

CORRECT = {"flash_attention_forward": FORWARD, "flash_attention_backward": BACKWARD, "FlashAttention": FUNCTION}

# (exercise, fragment the grader must name, the student's code)
MISTAKES = [
    ("flash_attention_forward", "累加的输出没有跟着缩放", swapped(FORWARD, "acc = corr * acc + p", "acc = acc + p")),
    ("flash_attention_forward", "lse 存的只是 running max m", swapped(FORWARD, "m + l.log()", "m")),
    ("flash_attention_forward", "忘了 Tk − Tq 的偏移", swapped(FORWARD, "shift_pos = Tk - Tq", "shift_pos = 0")),
    ("flash_attention_forward", "第一个 query 的位置", swapped(FORWARD, "j0 > i1 - 1 + shift_pos", "j0 > i0 + shift_pos")),
    ("flash_attention_forward", "没有跳过", swapped(FORWARD, "            if causal and j0 > i1 - 1 + shift_pos:\n                break\n", "")),
    ("flash_attention_forward", "比一块 [block_q, block_k] 更大", swapped(
        FORWARD, "        for j0 in range(0, Tk, block_k):", "        for j0 in range(0, Tk, Tk):",
        "            j1 = min(Tk, j0 + block_k)", "            j1 = Tk")),
    ("flash_attention_forward", "lse 是 0", swapped(FORWARD, "torch.where(empty, -math.inf, m + l.log())",
                                                    "torch.where(empty, 0.0, m + l.log())")),
    ("flash_attention_forward", "忘了除以 √D", swapped(FORWARD, "qi = q[..., i0:i1, :] / math.sqrt(d)", "qi = q[..., i0:i1, :]")),
    ("flash_attention_forward", "用了 torch 自带的 flash attention", '''
def flash_attention_forward(q, k, v, causal=False, block_q=16, block_k=16):
    out, lse = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(q, k, v, is_causal=causal)[:2]
    return out, lse
'''),
    ("flash_attention_backward", "少了 D 这一项", swapped(BACKWARD, "ds = p * (dp - D[..., i0:i1, :])", "ds = p * dp")),
    ("flash_attention_backward", "没有乘 softmax 的雅可比", swapped(BACKWARD, "ds = p * (dp - D[..., i0:i1, :])", "ds = dp")),
    ("flash_attention_backward", "dk 没有乘 1/√D", swapped(BACKWARD, "dkj = dkj + sm * (ds", "dkj = dkj + (ds")),
    ("flash_attention_backward", "在这一块里做了 softmax", swapped(BACKWARD, "p = torch.exp(s - L[..., i0:i1, :])",
                                                              "p = torch.softmax(s, dim=-1).nan_to_num(0.0)")),
    ("flash_attention_backward", "得到了 NaN", swapped(
        BACKWARD, "L = torch.where(torch.isinf(lse), torch.zeros_like(lse), lse).unsqueeze(-1)", "L = lse.unsqueeze(-1)")),
    ("flash_attention_backward", "D 只在这一块 key 里求和", swapped(BACKWARD, "ds = p * (dp - D[..., i0:i1, :])",
                                                                "ds = p * (dp - (p * dp).sum(-1, keepdim=True))")),
    ("flash_attention_backward", "没有跳过", swapped(BACKWARD, "            if causal and j0 > i1 - 1 + shift_pos:\n                continue\n", "")),
    ("FlashAttention", "顺序反了", swapped(FUNCTION, "return grads[0], grads[1], grads[2], None", "return grads[1], grads[0], grads[2], None")),
    ("FlashAttention", "梯度个数", swapped(FUNCTION, "return grads[0], grads[1], grads[2], None", "return grads")),
    ("FlashAttention", "更大的表", swapped(
        FUNCTION, "        grads = flash_attention_backward(q, k, v, out, lse, grad_out, causal=ctx.is_causal)\n",
        "        with torch.enable_grad():\n"
        "            leaves = [t.detach().requires_grad_() for t in (q, k, v)]\n"
        "            mask = causal_mask(q.shape[-2], k.shape[-2]) if ctx.is_causal else None\n"
        "            grads = torch.autograd.grad(attention(*leaves, mask)[0], leaves, grad_out)\n")),
    ("FlashAttention", "没有把 causal 传给 flash_attention_backward", swapped(FUNCTION, ", causal=ctx.is_causal)", ")")),
]

# The released notebook's answer cells, as a student finds them.
STUBS = {
    "flash_attention_forward": '''
def flash_attention_forward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False,
                            block_q: int = 16, block_k: int = 16) -> tuple[torch.Tensor, torch.Tensor]:
    """Softmax attention, one [block_q, block_k] tile of scores at a time.

    q: [..., Tq, D], k: [..., Tk, D], v: [..., Tk, Dv]. With causal=True query i sits at position Tk - Tq + i
    and the key tiles wholly after a query tile's last position are skipped. Returns o [..., Tq, Dv] and
    lse [..., Tq] (the log-sum-exp of each row's scores), in q's dtype; rows that see no key: o = 0, lse = -inf.
    """
    # 在这里写你的代码
    raise NotImplementedError()
''',
    "flash_attention_backward": '''
def flash_attention_backward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, o: torch.Tensor, lse: torch.Tensor,
                             do: torch.Tensor, causal: bool = False, block_q: int = 16,
                             block_k: int = 16) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Gradients of o = softmax(q kᵀ/√D) v for the upstream gradient do [..., Tq, Dv], tile by tile.

    o, lse: the forward's outputs. Each tile's probabilities are recomputed as exp(S - lse); D = rowsum(do ∘ o).
    Returns (dq [..., Tq, D], dk [..., Tk, D], dv [..., Tk, Dv]); never holds more than one [block_q, block_k] tile.
    """
    # 在这里写你的代码
    raise NotImplementedError()
''',
    "FlashAttention": '''
class FlashAttention(torch.autograd.Function):
    """FlashAttention.apply(q, k, v, causal=False) -> o; saves q, k, v, o and lse, recomputes P in backward."""

    @staticmethod
    def forward(ctx, q, k, v, causal=False):
        # 在这里写你的代码
        raise NotImplementedError()

    @staticmethod
    def backward(ctx, do):
        # 在这里写你的代码
        raise NotImplementedError()
''',
}

# Other right ways to write the code, which the grader must accept too.
OTHER_CORRECT = [
    # A score tile multiplied out twice (once for the max, once for the exponentials): wasteful, still one tile.
    ("flash_attention_forward", "每块的分数算两遍", swapped(
        FORWARD, "            p = (s - safe).exp()",
        "            s_again = torch.einsum(\"...id,...jd->...ij\", qi, k[..., j0:j1, :])\n"
        "            if causal:\n"
        "                s_again = torch.where(allowed, s_again, -math.inf)\n"
        "            p = (s_again - safe).exp()")),
    # Pᵀ made by its own product, kᵀ-side first: a third tile-sized product per tile.
    ("flash_attention_backward", "Pᵀ 单独乘出来", swapped(
        BACKWARD, "            dvj = dvj + p.transpose(-1, -2) @ doi",
        "            s_t = torch.matmul(kj, qi.transpose(-1, -2)) * sm\n"
        "            if causal:\n"
        "                s_t = s_t.masked_fill(~allowed.T, float(\"-inf\"))\n"
        "            dvj = dvj + torch.exp(s_t - L[..., i0:i1, :].transpose(-1, -2)) @ doi")),
    # FlashAttention-1's loop order: key tiles outside, the running statistics of every query kept across them.
    ("flash_attention_forward", "key 块在外层（第一版的循环顺序）", '''
def flash_attention_forward(q, k, v, causal=False, block_q=16, block_k=16):
    Tq, Tk = q.shape[-2], k.shape[-2]
    off = Tk - Tq
    m = q.new_full(q.shape[:-1], float("-inf"))
    l = q.new_zeros(q.shape[:-1])
    acc = q.new_zeros(*q.shape[:-1], v.shape[-1])
    for j0 in range(0, Tk, block_k):
        kj, vj = k[..., j0:j0 + block_k, :], v[..., j0:j0 + block_k, :]
        for i0 in range(0, Tq, block_q):
            i1 = min(i0 + block_q, Tq)
            if causal and j0 > off + i1 - 1:
                continue
            s = q[..., i0:i1, :] @ kj.mT / q.shape[-1] ** 0.5
            if causal:
                pos = torch.arange(i0, i1).unsqueeze(1) + off
                s = s.masked_fill(torch.arange(j0, j0 + kj.shape[-2]) > pos, float("-inf"))
            old = m[..., i0:i1]
            new = torch.maximum(old, s.amax(-1))
            base = torch.nan_to_num(new, neginf=0.0)
            p = torch.exp(s - base.unsqueeze(-1))
            scale = torch.exp(old - base)
            l[..., i0:i1] = l[..., i0:i1] * scale + p.sum(-1)
            acc[..., i0:i1, :] = acc[..., i0:i1, :] * scale.unsqueeze(-1) + p @ vj
            m[..., i0:i1] = new
    seen = l > 0
    o = torch.where(seen.unsqueeze(-1), acc / l.clamp_min(1e-30).unsqueeze(-1), torch.zeros_like(acc))
    return o, torch.where(seen, m + torch.log(l), torch.full_like(m, float("-inf")))
'''),
    ("flash_attention_backward", "query 块在外层", '''
def flash_attention_backward(q, k, v, o, lse, do, causal=False, block_q=16, block_k=16):
    Tq, Tk = q.shape[-2], k.shape[-2]
    c = q.shape[-1] ** -0.5
    delta = torch.einsum("...td,...td->...t", do, o)
    lse0 = torch.nan_to_num(lse, neginf=0.0)
    dq, dk, dv = torch.zeros_like(q), torch.zeros_like(k), torch.zeros_like(v)
    for i0 in range(0, Tq, block_q):
        i1 = min(i0 + block_q, Tq)
        qi, doi = q[..., i0:i1, :], do[..., i0:i1, :]
        for j0 in range(0, Tk, block_k):
            if causal and j0 > Tk - Tq + i1 - 1:
                break
            j1 = min(j0 + block_k, Tk)
            s = c * torch.einsum("...id,...jd->...ij", qi, k[..., j0:j1, :])
            if causal:
                ok = torch.arange(j0, j1)[None] <= (torch.arange(i0, i1) + Tk - Tq)[:, None]
                s = torch.where(ok, s, float("-inf"))
            p = (s - lse0[..., i0:i1, None]).exp()
            dv[..., j0:j1, :] += torch.einsum("...ij,...id->...jd", p, doi)
            ds = p * (torch.einsum("...id,...jd->...ij", doi, v[..., j0:j1, :]) - delta[..., i0:i1, None])
            dq[..., i0:i1, :] += c * torch.einsum("...ij,...jd->...id", ds, k[..., j0:j1, :])
            dk[..., j0:j1, :] += c * torch.einsum("...ij,...id->...jd", ds, qi)
    return dq, dk, dv
'''),
]


def layout(replace: dict[str, str] | None = None) -> list[notebook.Piece]:
    """The student's notebook, cell by cell (``tests/students/notebook.py``), with some answers replaced."""
    return notebook.layout(HEADER + BLOCKS, notebook.answers(CORRECT, replace))


def cells(replace: dict[str, str] | None = None) -> list[notebook.Cell]:
    """The cells the grader reads from the student's notebook, with some answers replaced."""
    return notebook.cells(layout(replace))


def source(replace: dict[str, str] | None = None) -> str:
    """The same code as one cell's source, every import at the top (what ``autograder.grade_code`` takes)."""
    return HEADER + BLOCKS + "\n".join(notebook.answers(CORRECT, replace).values())
