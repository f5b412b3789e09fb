"""Student code for 08_gated_deltanet: correct answers and seeded mistakes, written independently of
``solutions/`` and of the graders' mistake catalogue (einsum and matmul loops in the input's own dtype, the
chunked form padded to whole chunks with the inverse built by forward substitution, the conv by ``unfold``)."""
from tests.students import notebook
from tests.students.notebook import swapped

ASSIGNMENT = "08_gated_deltanet"

# What the notebook provides: imports and the cache class the layer decodes through.
HEADER = '''
import math
import torch
import torch.nn.functional as F
from torch import nn


class GatedDeltaNetCache:
    def __init__(self):
        self.conv_state = None
        self.recurrent_state = None

    def update(self, conv_state, recurrent_state):
        self.conv_state = conv_state
        self.recurrent_state = recurrent_state
'''

_LINEAR = '''
def linear_attention(q, k, v):
    T = q.shape[-2]
    w = torch.einsum("bhtd,bhsd->bhts", q, k)
    w = w * torch.tril(torch.ones(T, T, dtype=q.dtype))
    return torch.einsum("bhts,bhsd->bhtd", w, v)
'''

_RECURRENT = '''
def linear_attention_recurrent(q, k, v, state=None):
    B, H, T, Dk = q.shape
    S = torch.zeros(B, H, Dk, v.shape[-1], dtype=q.dtype) if state is None else state
    outs = []
    for t in range(T):
        S = S + k[:, :, t].unsqueeze(-1) @ v[:, :, t].unsqueeze(-2)
        outs.append((q[:, :, t].unsqueeze(-2) @ S).squeeze(-2))
    return torch.stack(outs, dim=2), S
'''

# The gated rule in pieces that the seeded mistakes reorder or replace; delta_rule is the same loop without decay.
_GATED = {
    "head": '''
def gated_delta_rule(q, k, v, g, beta, state=None):
    B, H, T, Dk = q.shape
    S = q.new_zeros(B, H, Dk, v.shape[-1]) if state is None else state.clone()
    outs = []
    for t in range(T):
        kt, vt, bt = k[:, :, t], v[:, :, t], beta[:, :, t, None]
''',
    "decay": '''
        S = S * torch.exp(g[:, :, t])[..., None, None]
''',
    "read": '''
        pred = torch.einsum("bhk,bhkv->bhv", kt, S)
''',
    "write": '''
        S = S + torch.einsum("bhk,bhv->bhkv", kt, bt * (vt - pred))
''',
    "out": '''
        outs.append(torch.einsum("bhk,bhkv->bhv", q[:, :, t], S))
''',
    "end": '''
    return torch.stack(outs, 2), S
''',
}
_ORDER = ("head", "decay", "read", "write", "out", "end")


def _gated(order=_ORDER, **replace: str) -> str:
    return "".join(replace.get(name, _GATED[name]) for name in order)


def _delta(order=_ORDER, **replace: str) -> str:
    body = _gated(tuple(name for name in order if name != "decay"), **replace)
    return body.replace("def gated_delta_rule(q, k, v, g, beta, state=None):", "def delta_rule(q, k, v, beta, state=None):")


# The state kept as [Dv, Dk], everywhere (a given state read in that layout too).
_TRANSPOSED = {"head": _GATED["head"].replace("q.new_zeros(B, H, Dk, v.shape[-1])", "q.new_zeros(B, H, v.shape[-1], Dk)"),
               "read": _GATED["read"].replace('"bhk,bhkv->bhv", kt, S', '"bhk,bhvk->bhv", kt, S'),
               "write": _GATED["write"].replace('"bhk,bhv->bhkv", kt, bt * (vt - pred)', '"bhv,bhk->bhvk", bt * (vt - pred), kt'),
               "out": _GATED["out"].replace('"bhk,bhkv->bhv", q[:, :, t], S', '"bhk,bhvk->bhv", q[:, :, t], S')}

_CHUNKED = '''
def chunked_gated_delta_rule(q, k, v, g, beta, chunk_size=64, state=None):
    dtype = q.dtype
    q, k, v, g, beta = (t if t.dtype == torch.float64 else t.float() for t in (q, k, v, g, beta))
    B, H, T, Dk = q.shape
    Dv, C = v.shape[-1], chunk_size
    pad = (-T) % C
    q, k, v = (F.pad(t, (0, 0, 0, pad)) for t in (q, k, v))
    g, beta = F.pad(g, (0, pad)), F.pad(beta, (0, pad))
    n = (T + pad) // C
    q, k, v = (t.reshape(B, H, n, C, -1) for t in (q, k, v))
    g, beta = g.reshape(B, H, n, C), beta.reshape(B, H, n, C)
    G = g.cumsum(-1)
    causal = torch.ones(C, C, dtype=torch.bool).tril()
    D = torch.exp((G[..., :, None] - G[..., None, :]).masked_fill(~causal, float("-inf")))
    kb = k * beta[..., None]
    inv = -(kb @ k.transpose(-1, -2) * D).tril(-1)
    for i in range(1, C):
        row = inv[..., i, :i].clone()
        inv[..., i, :i] = row + (row[..., None] * inv[..., :i, :i]).sum(-2)
    inv = inv + torch.eye(C, dtype=q.dtype)
    U = inv @ (v * beta[..., None])
    W = inv @ (kb * G.exp()[..., None])
    S = torch.zeros(B, H, Dk, Dv, dtype=q.dtype) if state is None else state.to(q.dtype)
    out = []
    for i in range(n):
        new = U[:, :, i] - W[:, :, i] @ S
        last = G[:, :, i, -1:]
        out.append((q[:, :, i] * G[:, :, i, :, None].exp()) @ S + (q[:, :, i] @ k[:, :, i].transpose(-1, -2) * D[:, :, i]) @ new)
        S = S * last[..., None].exp() + (k[:, :, i] * (last - G[:, :, i]).exp()[..., None]).transpose(-1, -2) @ new
    o = torch.cat(out, dim=2)[:, :, :T]
    return o.to(dtype), S.to(dtype)
'''

_CONV = '''
def causal_conv1d(x, weight, conv_state=None):
    B, C, T = x.shape
    K = weight.shape[-1]
    weight = weight.to(x.dtype)
    if conv_state is None:
        conv_state = torch.zeros(B, C, K - 1, dtype=x.dtype)
    padded = torch.cat([conv_state, x], dim=-1)
    windows = padded.unfold(-1, K, 1)
    y = (windows * weight[:, 0, None, :]).sum(-1)
    return y, padded[:, :, T:]
'''

_LAYER = '''
class GatedNorm(nn.Module):
    def __init__(self, dim, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, o, z):
        o32 = o.float()
        o32 = o32 / torch.sqrt(o32.pow(2).mean(-1, keepdim=True) + self.eps)
        return (self.weight.float() * o32 * F.silu(z.float())).to(o.dtype)


class Qwen35GatedDeltaNet(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.nk, self.nv = config.linear_num_key_heads, config.linear_num_value_heads
        self.dk, self.dv = config.linear_key_head_dim, config.linear_value_head_dim
        K, d = config.linear_conv_kernel_dim, config.hidden_size
        conv_dim = 2 * self.nk * self.dk + self.nv * self.dv
        self.in_proj_qkv = nn.Linear(d, conv_dim, bias=False)
        self.in_proj_z = nn.Linear(d, self.nv * self.dv, bias=False)
        self.in_proj_b = nn.Linear(d, self.nv, bias=False)
        self.in_proj_a = nn.Linear(d, self.nv, bias=False)
        self.conv1d = nn.Conv1d(conv_dim, conv_dim, K, groups=conv_dim, bias=False)
        self.dt_bias = nn.Parameter(torch.ones(self.nv))
        self.A_log = nn.Parameter(torch.zeros(self.nv))
        self.norm = GatedNorm(self.dv, config.rms_norm_eps)
        self.out_proj = nn.Linear(self.nv * self.dv, d, bias=False)

    def forward(self, x, attention_mask=None, cache=None):
        B, T, _ = x.shape
        if attention_mask is not None:
            x = x * attention_mask[:, -T:].unsqueeze(-1).to(x.dtype)
        conv_state = cache.conv_state if cache is not None else None
        mixed, conv_state = causal_conv1d(self.in_proj_qkv(x).transpose(1, 2), self.conv1d.weight, conv_state)
        mixed = F.silu(mixed).transpose(1, 2)
        kd = self.nk * self.dk
        q = mixed[..., :kd].reshape(B, T, self.nk, self.dk)
        k = mixed[..., kd:2 * kd].reshape(B, T, self.nk, self.dk)
        v = mixed[..., 2 * kd:].reshape(B, T, self.nv, self.dv)
        q = F.normalize(q.float(), dim=-1) / math.sqrt(self.dk)
        k = F.normalize(k.float(), dim=-1)
        r = self.nv // self.nk
        q = q.transpose(1, 2).repeat_interleave(r, 1)
        k = k.transpose(1, 2).repeat_interleave(r, 1)
        v = v.transpose(1, 2).float()
        beta = torch.sigmoid(self.in_proj_b(x).float()).transpose(1, 2)
        g = -torch.exp(self.A_log.float()) * F.softplus(self.in_proj_a(x).float() + self.dt_bias.float())
        g = g.transpose(1, 2)
        state = cache.recurrent_state if cache is not None else None
        if T == 1 and state is not None:
            o, state = gated_delta_rule(q, k, v, g, beta, state)
        else:
            o, state = chunked_gated_delta_rule(q, k, v, g, beta, chunk_size=64, state=state)
        if cache is not None:
            cache.update(conv_state, state)
        z = self.in_proj_z(x).reshape(B, T, self.nv, self.dv)
        o = self.norm(o.transpose(1, 2).to(x.dtype), z)
        return self.out_proj(o.reshape(B, T, -1)), cache
'''

CORRECT = {"linear_attention": _LINEAR, "linear_attention_recurrent": _RECURRENT, "delta_rule": _delta(),
           "gated_delta_rule": _gated(), "chunked_gated_delta_rule": _CHUNKED, "causal_conv1d": _CONV,
           "Qwen35GatedDeltaNet": _LAYER}


_READ_FIRST = ("head", "decay", "read", "out", "write", "end")
MISTAKES = [
    ("linear_attention", "没有因果掩码", swapped(_LINEAR, "    w = w * torch.tril(torch.ones(T, T, dtype=q.dtype))\n", "")),
    ("linear_attention", "掩码把对角线也去掉了", swapped(_LINEAR, "torch.ones(T, T, dtype=q.dtype))",
                                                    "torch.ones(T, T, dtype=q.dtype), diagonal=-1)")),
    ("linear_attention", "用了 softmax", swapped(_LINEAR, "w = w * torch.tril(torch.ones(T, T, dtype=q.dtype))",
                                              'w = torch.softmax(w.masked_fill(torch.ones(T, T, dtype=torch.bool).triu(1), '
                                              'float("-inf")), dim=-1)')),
    ("linear_attention", "分数除以了 √Dk", swapped(_LINEAR, 'q, k)\n', 'q, k) / math.sqrt(q.shape[-1])\n')),
    ("linear_attention", "除以了权重之和", swapped(_LINEAR, "    return", "    w = w / w.sum(-1, keepdim=True)\n    return")),
    ("linear_attention", "特征映射", swapped(_LINEAR, "    T = q.shape[-2]\n",
                                             "    T = q.shape[-2]\n    q, k = F.elu(q) + 1, F.elu(k) + 1\n")),
    ("linear_attention", "分数算成了 k @ qᵀ", swapped(_LINEAR, '"bhtd,bhsd->bhts", q, k', '"bhtd,bhsd->bhts", k, q')),
    ("linear_attention_recurrent", "状态的布局转置了", swapped(
        _RECURRENT, "torch.zeros(B, H, Dk, v.shape[-1]", "torch.zeros(B, H, v.shape[-1], Dk",
        "k[:, :, t].unsqueeze(-1) @ v[:, :, t].unsqueeze(-2)", "v[:, :, t].unsqueeze(-1) @ k[:, :, t].unsqueeze(-2)",
        "(q[:, :, t].unsqueeze(-2) @ S).squeeze(-2)", "(S @ q[:, :, t].unsqueeze(-1)).squeeze(-1)")),
    ("linear_attention_recurrent", "先读后写", swapped(
        _RECURRENT, "        S = S + k[:, :, t].unsqueeze(-1) @ v[:, :, t].unsqueeze(-2)\n"
                    "        outs.append((q[:, :, t].unsqueeze(-2) @ S).squeeze(-2))\n",
        "        outs.append((q[:, :, t].unsqueeze(-2) @ S).squeeze(-2))\n"
        "        S = S + k[:, :, t].unsqueeze(-1) @ v[:, :, t].unsqueeze(-2)\n")),
    ("linear_attention_recurrent", "忽略了传进来的 state", swapped(_RECURRENT, " if state is None else state", "")),
    ("delta_rule", "β 只乘了 v", _delta(write=swapped(_GATED["write"], "bt * (vt - pred)", "bt * vt - pred"))),
    ("delta_rule", "写入的不是修正量", _delta(write=swapped(_GATED["write"], "bt * (vt - pred)", "bt * vt"))),
    ("delta_rule", "修正量的符号反了", _delta(write=swapped(_GATED["write"], "bt * (vt - pred)", "bt * (pred - vt)"))),
    ("delta_rule", "先读后写", _delta(_READ_FIRST)),
    ("delta_rule", "修正量里读旧值时用了 q", _delta(read=swapped(_GATED["read"], "kt, S", "q[:, :, t], S"))),
    ("delta_rule", "修正量里读旧值时用了 q（应是 k）；先读后写",  # two of one builder's mistakes at once
     _delta(_READ_FIRST, read=swapped(_GATED["read"], "kt, S", "q[:, :, t], S"))),
    ("delta_rule", "状态的布局转置了", _delta(**_TRANSPOSED)),
    ("delta_rule", "忽略了传进来的 state", _delta(head=swapped(_GATED["head"], " if state is None else state.clone()", ""))),
    ("gated_delta_rule", "衰减放在了写入之后", _gated(("head", "read", "write", "decay", "out", "end"))),
    ("gated_delta_rule", "修正量里的 Sᵀk 是衰减之前读的", _gated(("head", "read", "decay", "write", "out", "end"))),
    ("gated_delta_rule", "衰减放在了每一步的最后", _gated(("head", "read", "write", "out", "decay", "end"))),
    ("gated_delta_rule", "修正量里读旧值时用了 q", _gated(read=swapped(_GATED["read"], "kt, S", "q[:, :, t], S"))),
    ("gated_delta_rule", "每一步衰减了两次", _gated(("head", "decay", "read", "decay", "write", "out", "end"))),
    ("gated_delta_rule", "衰减用的是累积和", _gated(decay=swapped(_GATED["decay"], "torch.exp(g[:, :, t])",
                                                           "torch.exp(g[:, :, :t + 1].sum(-1))"))),
    ("gated_delta_rule", "状态本身没有衰减", _gated(decay=swapped(_GATED["decay"], "S = S *", "decayed = S *"),
                                                 read=swapped(_GATED["read"], "kt, S", "kt, decayed"))),
    ("gated_delta_rule", "衰减乘的是 g 本身", _gated(decay=swapped(_GATED["decay"], "torch.exp(g[:, :, t])", "g[:, :, t]"))),
    ("gated_delta_rule", "衰减乘的是 exp(−g)", _gated(decay=swapped(_GATED["decay"], "torch.exp(g[:, :, t])",
                                                              "torch.exp(-g[:, :, t])"))),
    ("gated_delta_rule", "没有衰减", _gated(decay="")),
    ("gated_delta_rule", "β 只乘了 v", _gated(write=swapped(_GATED["write"], "bt * (vt - pred)", "bt * vt - pred"))),
    ("gated_delta_rule", "写入的不是修正量", _gated(write=swapped(_GATED["write"], "bt * (vt - pred)", "bt * vt"))),
    ("gated_delta_rule", "先读后写", _gated(_READ_FIRST)),
    ("gated_delta_rule", "状态的布局转置了", _gated(**_TRANSPOSED)),
    ("gated_delta_rule", "忽略了传进来的 state", _gated(head=swapped(_GATED["head"], " if state is None else state.clone()", ""))),
    ("chunked_gated_delta_rule", "块与块之间没有传递状态", swapped(
        _CHUNKED, "    out = []\n", "    start, out = S, []\n", "- W[:, :, i] @ S", "- W[:, :, i] @ start",
        "G[:, :, i, :, None].exp()) @ S", "G[:, :, i, :, None].exp()) @ start",
        "        S = S * last[..., None].exp()", "        S = start * last[..., None].exp()")),
    ("chunked_gated_delta_rule", "块内的输出掩码不含对角线", swapped(_CHUNKED, "* D[:, :, i])", "* D[:, :, i].tril(-1))")),
    ("chunked_gated_delta_rule", "UT 系统多算了对角线", swapped(
        _CHUNKED, '''    inv = -(kb @ k.transpose(-1, -2) * D).tril(-1)
    for i in range(1, C):
        row = inv[..., i, :i].clone()
        inv[..., i, :i] = row + (row[..., None] * inv[..., :i, :i]).sum(-2)
    inv = inv + torch.eye(C, dtype=q.dtype)
''', '''    eye = torch.eye(C, dtype=q.dtype)
    A = eye + (kb @ k.transpose(-1, -2) * D).tril()
    inv = torch.linalg.solve_triangular(A, eye.expand_as(A), upper=False)
''')),
    ("chunked_gated_delta_rule", "UT 系统里漏了 β", swapped(_CHUNKED, "inv = -(kb @ k.transpose", "inv = -(k @ k.transpose")),
    ("chunked_gated_delta_rule", "块内用的是普通的因果掩码", swapped(
        _CHUNKED, "    kb = k * beta[..., None]\n", "    D = causal.to(q.dtype).expand_as(D)\n    kb = k * beta[..., None]\n")),
    ("chunked_gated_delta_rule", "最后一块不满 chunk_size 时，块末的累积衰减 γ_C 当成了 0", swapped(
        _CHUNKED, "        last = G[:, :, i, -1:]\n",
        "        last = G[:, :, i, -1:] if (i + 1) * C <= T else torch.zeros_like(G[:, :, i, -1:])\n")),
    ("chunked_gated_delta_rule", "忽略了传进来的 state", swapped(_CHUNKED, " if state is None else state.to(q.dtype)", "")),
    ("chunked_gated_delta_rule", "UT 系统的符号反了", swapped(_CHUNKED, "inv = -(kb @ k.transpose", "inv = (kb @ k.transpose")),
    ("chunked_gated_delta_rule", "UT 系统没有起作用", swapped(
        _CHUNKED, "    inv = inv + torch.eye(C, dtype=q.dtype)\n", "    inv = torch.eye(C, dtype=q.dtype).expand_as(inv)\n")),
    ("chunked_gated_delta_rule", "A 里的 β 乘在了列上", swapped(
        _CHUNKED, "inv = -(kb @ k.transpose(-1, -2) * D)", "inv = -(k @ kb.transpose(-1, -2) * D)")),
    ("chunked_gated_delta_rule", "块内的衰减矩阵反了", swapped(
        _CHUNKED, "(G[..., :, None] - G[..., None, :])", "(G[..., None, :] - G[..., :, None])")),
    ("chunked_gated_delta_rule", "γ 用的是不含自己的累积和", swapped(_CHUNKED, "G = g.cumsum(-1)", "G = g.cumsum(-1) - g")),
    ("chunked_gated_delta_rule", "块末更新状态时 k 乘的是 exp(γ_i)", swapped(
        _CHUNKED, "(k[:, :, i] * (last - G[:, :, i]).exp()[..., None])", "(k[:, :, i] * G[:, :, i].exp()[..., None])")),
    ("chunked_gated_delta_rule", "读块开始时的状态时 q 没有乘 exp(γ_i)", swapped(
        _CHUNKED, "(q[:, :, i] * G[:, :, i, :, None].exp()) @ S", "q[:, :, i] @ S")),
    ("chunked_gated_delta_rule", "块末更新状态时 k 没有乘 exp(γ_C − γ_i)", swapped(
        _CHUNKED, "(k[:, :, i] * (last - G[:, :, i]).exp()[..., None]).transpose(-1, -2)", "k[:, :, i].transpose(-1, -2)")),
    ("chunked_gated_delta_rule", "右边读块开始时的状态时 k 没有乘 exp(γ_i)", swapped(
        _CHUNKED, "W = inv @ (kb * G.exp()[..., None])", "W = inv @ kb")),
    ("chunked_gated_delta_rule", "右边漏了 β", swapped(swapped(
        _CHUNKED, "U = inv @ (v * beta[..., None])", "U = inv @ v"),
        "W = inv @ (kb * G.exp()[..., None])", "W = inv @ (k * G.exp()[..., None])")),
    ("chunked_gated_delta_rule", "块末的状态里，块开始时的状态没有乘 exp(γ_C)", swapped(
        _CHUNKED, "S = S * last[..., None].exp() + ", "S = S + ")),
    ("chunked_gated_delta_rule", "块末更新状态时 k 乘的是 exp(γ_i − γ_C)", swapped(
        _CHUNKED, "(last - G[:, :, i]).exp()", "(G[:, :, i] - last).exp()")),
    ("chunked_gated_delta_rule", "γ 是整个序列的累积和", swapped(
        _CHUNKED, "G = g.cumsum(-1)", "G = g.reshape(B, H, -1).cumsum(-1).reshape(B, H, n, C)")),
    ("chunked_gated_delta_rule", "没有按块计算", '''
def chunked_gated_delta_rule(q, k, v, g, beta, chunk_size=64, state=None):
    outs = []
    for s in range(0, q.shape[2], chunk_size):
        e = s + chunk_size
        o, state = gated_delta_rule(q[:, :, s:e], k[:, :, s:e], v[:, :, s:e], g[:, :, s:e], beta[:, :, s:e], state)
        outs.append(o)
    return torch.cat(outs, 2), state
'''),
    ("causal_conv1d", "卷积不是因果的", swapped(
        _CONV, '''    windows = padded.unfold(-1, K, 1)
    y = (windows * weight[:, 0, None, :]).sum(-1)
''', '''    y = F.conv1d(padded, weight, padding="same", groups=C)[..., -T:]
''')),
    ("causal_conv1d", "卷积不是因果的", swapped(  # padding="same" on x alone: the state never reaches the output
        _CONV, '''    windows = padded.unfold(-1, K, 1)
    y = (windows * weight[:, 0, None, :]).sum(-1)
''', '''    y = F.conv1d(x, weight, padding="same", groups=C)
''')),
    ("causal_conv1d", "卷积看的是当前和后面 K − 1 个输入", swapped(
        _CONV, '''    windows = padded.unfold(-1, K, 1)
    y = (windows * weight[:, 0, None, :]).sum(-1)
''', '''    y = F.conv1d(x, weight, padding=K - 1, groups=C)[..., -T:]
''')),
    ("causal_conv1d", "没有用传进来的 conv_state", swapped(_CONV, "    if conv_state is None:\n        conv_state =",
                                                     "    conv_state =")),
    ("causal_conv1d", "返回的 conv_state 只取了这一段的 x", swapped(_CONV, "padded[:, :, T:]", "x[:, :, -(K - 1):]")),
    ("causal_conv1d", "conv_state 存了 K 个位置", swapped(_CONV, "padded[:, :, T:]", "padded[:, :, -K:]")),
    ("causal_conv1d", "卷积核的方向反了", swapped(_CONV, "weight[:, 0, None, :]", "weight[:, 0, None, :].flip(-1)")),
    ("causal_conv1d", "卷积之后做了 SiLU", swapped(_CONV, "    return y,", "    return F.silu(y),")),
    ("Qwen35GatedDeltaNet", "q、k 没有做 L2 归一化", swapped(
        _LAYER, "F.normalize(q.float(), dim=-1)", "q.float()", "F.normalize(k.float(), dim=-1)", "k.float()")),
    ("Qwen35GatedDeltaNet", "L2 归一化做在了拆成头之前", swapped(
        _LAYER, "q = mixed[..., :kd].reshape", "q = F.normalize(mixed[..., :kd], dim=-1).reshape",
        "k = mixed[..., kd:2 * kd].reshape", "k = F.normalize(mixed[..., kd:2 * kd], dim=-1).reshape",
        "F.normalize(q.float(), dim=-1)", "q.float()", "F.normalize(k.float(), dim=-1)", "k.float()")),
    ("Qwen35GatedDeltaNet", "L2 归一化之后 q 没有乘 Dk^(−1/2)", swapped(_LAYER, " / math.sqrt(self.dk)", "")),
    ("Qwen35GatedDeltaNet", "q 缩放了两次", swapped(_LAYER, " / math.sqrt(self.dk)", " / self.dk")),
    ("Qwen35GatedDeltaNet", "g 里忘了 softplus", swapped(_LAYER, "F.softplus(self.in_proj_a(x)", "(self.in_proj_a(x)")),
    ("Qwen35GatedDeltaNet", "eps 没有用 config.rms_norm_eps",
     swapped(_LAYER, "GatedNorm(self.dv, config.rms_norm_eps)", "GatedNorm(self.dv, 1e-6)")),
    ("Qwen35GatedDeltaNet", "g 里忘了 dt_bias", swapped(_LAYER, " + self.dt_bias.float()", "")),
    ("Qwen35GatedDeltaNet", "A_log 没有取 exp", swapped(_LAYER, "torch.exp(self.A_log.float())", "self.A_log.float()")),
    ("Qwen35GatedDeltaNet", "β 没有过 sigmoid", swapped(_LAYER, "torch.sigmoid(self.in_proj_b(x).float())",
                                                  "self.in_proj_b(x).float()")),
    ("Qwen35GatedDeltaNet", "卷积之后没有做 SiLU", swapped(_LAYER, "mixed = F.silu(mixed).transpose(1, 2)",
                                                   "mixed = mixed.transpose(1, 2)")),
    ("Qwen35GatedDeltaNet", "输出门用了 sigmoid(z)", swapped(_LAYER, "F.silu(z.float())", "torch.sigmoid(z.float())")),
    ("Qwen35GatedDeltaNet", "输出的 RMSNorm 乘的是 (1 + weight)", swapped(_LAYER, "(self.weight.float() * o32",
                                                                   "((1 + self.weight.float()) * o32")),
    ("Qwen35GatedDeltaNet", "门乘在了 RMSNorm 之前", swapped(
        _LAYER, "        o32 = o.float()\n", "        o32 = o.float() * F.silu(z.float())\n",
        "self.weight.float() * o32 * F.silu(z.float())", "self.weight.float() * o32")),
    ("Qwen35GatedDeltaNet", "key 头重复成了 0, 1, 0, 1 的顺序", swapped(_LAYER, ".repeat_interleave(r, 1)", ".repeat(1, r, 1, 1)")),
    ("Qwen35GatedDeltaNet", "忽略了 attention_mask", swapped(
        _LAYER, "        if attention_mask is not None:\n            x = x * attention_mask[:, -T:].unsqueeze(-1).to(x.dtype)\n",
        "")),
    ("Qwen35GatedDeltaNet", "解码时没有用 cache 里的 conv_state", swapped(
        _LAYER, "conv_state = cache.conv_state if cache is not None else None", "conv_state = None")),
    ("Qwen35GatedDeltaNet", "一次来几个 token 就把 conv_state 和 recurrent_state 都当成了空的", swapped(
        _LAYER, "conv_state = cache.conv_state if cache is not None else None",
        "conv_state = cache.conv_state if cache is not None and T == 1 else None",
        "state = cache.recurrent_state if cache is not None else None",
        "state = cache.recurrent_state if cache is not None and T == 1 else None")),
    ("Qwen35GatedDeltaNet", "输出 norm 的 weight 没有从 1 开始", swapped(_LAYER, "self.weight = nn.Parameter(torch.ones(dim))",
                                                      "self.weight = nn.Parameter(torch.zeros(dim))")),
    ("Qwen35GatedDeltaNet", "解码时没有用 cache 里的 recurrent_state", swapped(
        _LAYER, "state = cache.recurrent_state if cache is not None else None", "state = None")),
]

# Other right ways to write the code, which the grader must accept too.
OTHER_CORRECT = [
    ("causal_conv1d", "F.conv1d with left padding", '''
def causal_conv1d(x, weight, conv_state=None):
    K = weight.shape[-1]
    left = x.new_zeros(*x.shape[:2], K - 1) if conv_state is None else conv_state
    full = torch.cat([left, x], dim=2)
    return F.conv1d(full, weight.type_as(x), groups=x.shape[1]), full[:, :, full.shape[2] - K + 1:]
'''),
]

STUBS = {
    "linear_attention": "def linear_attention(q, k, v):\n    raise NotImplementedError()\n",
    "linear_attention_recurrent": "def linear_attention_recurrent(q, k, v, state=None):\n    raise NotImplementedError()\n",
    "delta_rule": "def delta_rule(q, k, v, beta, state=None):\n    raise NotImplementedError()\n",
    "gated_delta_rule": "def gated_delta_rule(q, k, v, g, beta, state=None):\n    raise NotImplementedError()\n",
    "chunked_gated_delta_rule": "def chunked_gated_delta_rule(q, k, v, g, beta, chunk_size=64, state=None):\n"
                                "    raise NotImplementedError()\n",
    "causal_conv1d": "def causal_conv1d(x, weight, conv_state=None):\n    raise NotImplementedError()\n",
    "Qwen35GatedDeltaNet": '''
class Qwen35GatedDeltaNet(nn.Module):
    def __init__(self, config):
        super().__init__()
        raise NotImplementedError()

    def forward(self, x, attention_mask=None, cache=None):
        raise NotImplementedError()
''',
}


def layout(replace: dict[str, str] | None = None) -> list[notebook.Piece]:
    """The student's notebook, cell by cell (``tests/students/notebook.py``), with some answers replaced."""
    return notebook.layout(HEADER, notebook.answers(CORRECT, replace))


def cells(replace: dict[str, str] | None = None) -> list[notebook.Cell]:
    """The cells the grader reads from the student's notebook, with some answers replaced."""
    return notebook.cells(layout(replace))


def source(replace: dict[str, str] | None = None) -> str:
    """The same code as one cell's source, every import at the top (what ``autograder.grade_code`` takes)."""
    return HEADER + "\n".join(notebook.answers(CORRECT, replace).values())
