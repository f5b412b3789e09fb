"""Check of ``MultiHeadAttention(hidden_size, num_heads)``: ``forward(x, attention_mask=None, causal=True)
→ [B, T, hidden]``, on a hand-readable example, seeded random shapes, padding and three dtypes."""
import functools
import math
import operator

import torch

from autograder.engine.checks import ATTENTION_BASICS
from autograder.engine.inputs import modules
from autograder.engine.inputs.seeded import dtype_name, generator, randn, shape
from autograder.engine.model import Exercise, Mistake, public
from course.protocols import Case, call_module
from solutions.attention_basics import causal_mask, masked_softmax, padding_mask
from solutions.multi_head import MultiHeadAttention, merge_heads, split_heads

PROJECTIONS = ("q_proj", "k_proj", "v_proj", "o_proj")


def _describe(forward: dict) -> str:
    parts = [f"{name}={value.tolist() if isinstance(value, torch.Tensor) else value}"
             for name, value in forward.items()]
    return "，" + "，".join(parts) if parts else ""


def _random(gen, label, hidden, heads, batch, seq, dtype=torch.float32, **forward) -> Case:
    weights = modules.linear_weights(gen, {name: (hidden, hidden) for name in PROJECTIONS}, dtype)
    x = randn(gen, batch, seq, hidden, dtype=dtype)
    return Case(f"{label}：hidden {hidden}，{heads} 个头，x {shape(x)}，{dtype_name(dtype)}{_describe(forward)}",
                ((hidden, heads), weights, x), forward)


def _toy() -> Case:
    """Identity projections and x = (key | value) of 今天 / 天气 / 不错: head 0 sees keys, head 1 values."""
    x = torch.tensor([[[1.0, 0.0, 2.0, 0.0], [0.0, 1.0, 0.0, 2.0], [0.5, 0.5, 1.0, 1.0]]])
    weights = {f"{name}.weight": torch.eye(4) for name in PROJECTIONS}
    return Case("小例子：hidden 4，2 个头，四个投影都是单位矩阵；x 的三行是「今天 / 天气 / 不错」的 (key | value)",
                ((4, 2), weights, x))


def cases() -> list[Case]:
    gen = generator(23)
    right_pad = torch.tensor([[1, 1, 1, 1, 1, 1], [1, 1, 1, 1, 0, 0]])
    left_pad = torch.tensor([[0, 0, 1, 1, 1], [1, 1, 1, 1, 1]])
    return public([
        _toy(),
        _random(gen, "随机权重", 32, 4, 2, 5),
        _random(gen, "第二句右侧有两个 pad", 24, 3, 2, 6, attention_mask=right_pad),
        _random(gen, "不要因果掩码，只有 padding", 16, 2, 2, 5, attention_mask=torch.tensor([[1, 1, 1, 0, 0],
                                                                                        [1, 1, 1, 1, 1]]),
                causal=False),
        _random(gen, "不要因果掩码", 16, 4, 2, 4, causal=False),
        _random(gen, "只有一个 token", 16, 4, 1, 1),
        _random(gen, "只有一个头", 16, 1, 3, 4),
        _random(gen, "第一句左侧有两个 pad（pad 的 query 整行被遮住，输出应为 0）", 24, 4, 2, 5, attention_mask=left_pad),
        _random(gen, "种子 004 的形状", 512, 8, 2, 5),
        _random(gen, "随机权重", 32, 4, 2, 6, torch.float64, attention_mask=right_pad),
        _random(gen, "随机权重", 64, 4, 2, 6, torch.bfloat16, attention_mask=right_pad),
    ], 0, 3, 7, 9, 10)


class _Variant(MultiHeadAttention):
    """Multi-head attention written out step by step; ``_variant`` replaces one step with a mistake."""

    split = staticmethod(split_heads)
    merge = staticmethod(merge_heads)
    combine = staticmethod(operator.and_)
    use_padding = True
    pad_when = staticmethod(lambda causal: True)  # whether the padding mask is used, given ``causal``
    pad_rule = staticmethod(lambda keys: keys)  # what becomes of padding_mask's result
    causal_rule = staticmethod(lambda causal: causal)
    scale_width = staticmethod(lambda q: q.shape[-1])  # the width whose square root scales the scores
    project_out = True
    key_proj = "k_proj"

    def forward(self, x, attention_mask=None, causal=True):
        projections = (self.q_proj, getattr(self, self.key_proj), self.v_proj)
        q, k, v = (self.split(proj(x), self.num_heads) for proj in projections)
        mask = causal_mask(x.shape[1]) if self.causal_rule(causal) else None
        if attention_mask is not None and self.use_padding and self.pad_when(causal):
            keys = self.pad_rule(padding_mask(attention_mask))
            mask = keys if mask is None else self.combine(mask, keys)
        weights = masked_softmax(q @ k.transpose(-2, -1) / math.sqrt(self.scale_width(q)), mask)
        out = self.merge(weights @ v)
        return self.o_proj(out) if self.project_out else out


def _variant(**steps):
    return type("Mistake", (_Variant,), {name: staticmethod(s) if callable(s) else s for name, s in steps.items()})


_STEP_OF = {"split_heads": "split", "merge_heads": "merge"}


@functools.cache
def _on_base(fn, name: str, base):
    """``fn`` (the reference or a mistake) with its step that uses ``name`` made by ``base`` (Exercise.on_base)."""
    step = _STEP_OF.get(name)
    mistake = isinstance(fn, type) and issubclass(fn, _Variant)
    if step is None or (mistake and step in vars(fn)):  # the mistake is in that very step
        return None
    root = fn if mistake else _Variant
    return type("OnBase", (root,), {step: staticmethod(base)})


MISTAKES = (
    Mistake("忘了 o_proj", "各头拼接成 [B, T, hidden] 之后还要过 o_proj：没有它，输出的每一段只来自一个头，头和头之间没有交流。",
            _variant(project_out=False)),
    Mistake("合并多头时没有先 transpose，各头的结果被打乱了", "[B, H, T, D] 先 transpose(1, 2) 成 [B, T, H, D]，再 reshape 成 [B, T, H·D]。",
            _variant(merge=lambda out: out.reshape(out.shape[0], out.shape[2], -1))),
    Mistake("拆分多头时直接 view 成了 [B, H, T, D]", "先 view(B, T, H, D)，再 transpose(1, 2)。",
            _variant(split=lambda t, h: t.reshape(t.shape[0], h, t.shape[1], -1))),
    Mistake("忽略了 attention_mask（padding 掩码没有生效）",
            "用 padding_mask(attention_mask) 转成 [B, 1, 1, T]，和因果掩码用 & 合并后交给 attention。"
            "自己写 masked_fill 的话要接住它的返回值：scores = scores.masked_fill(...)，它不会原地修改 scores。",
            _variant(use_padding=False)),
    Mistake("没有加因果掩码", "causal=True（默认）时，query i 只能看 j ≤ i 的 key：用 causal_mask(T)。",
            _variant(causal_rule=lambda causal: False)),
    Mistake("causal=False 时仍然加了因果掩码", "causal=False 表示每个 token 都能看整句（只遮 padding）。",
            _variant(causal_rule=lambda causal: True)),
    Mistake("padding 掩码和因果掩码用 | 合并了", "两个条件都满足才能看：用 &，不是 |。",
            _variant(combine=operator.or_)),
    Mistake("有 attention_mask 时只用了 padding 掩码，因果掩码被替换掉了", "两个掩码要同时生效：causal_mask(T) & "
            "padding_mask(attention_mask)，广播成 [B, 1, T, T]；只留 padding 掩码，每个 token 就能看到后面的 token。",
            _variant(combine=lambda causal, padding: padding)),
    Mistake("key 用 q_proj 算了", "q、k、v 各有自己的投影：k = k_proj(x)。三行复制粘贴的时候最容易漏改这一处。",
            _variant(key_proj="q_proj")),
    Mistake("分数缩放了两次", "只除一次 √D：q 先除以 √D 再交给算分数的地方（那里又除一次 √D），分数就被除了 D。",
            _variant(scale_width=lambda q: q.shape[-1] ** 2)),
    Mistake("用 √hidden_size 而不是 √head_dim 缩放了分数", "每个头的分数除以 √D，D = hidden_size / num_heads。",
            _variant(scale_width=lambda q: q.shape[1] * q.shape[-1])),
    Mistake("因果掩码的条件写反了：causal=True 时没加，causal=False 时反而加了", "causal=True（默认）才加因果掩码："
            "if causal: mask = causal_mask(T)。", _variant(causal_rule=lambda causal: not causal)),
    Mistake("padding 掩码取反了（~padding_mask(...)）", "padding_mask 给的已经是「可以看」：True 是真 token，"
            "直接和因果掩码用 & 合并，不要再取反。", _variant(pad_rule=operator.invert)),
    Mistake("causal=True 时没有用 padding 掩码（if causal … elif attention_mask …）", "两个掩码是各自独立的："
            "先按 causal 决定要不要因果掩码，再在 attention_mask 不是 None 时合并 padding 掩码，不要写成 elif。",
            _variant(pad_when=lambda causal: not causal)),
)

EXERCISE = Exercise("MultiHeadAttention", 4, MultiHeadAttention, cases, MISTAKES, call=call_module,
                    free=lambda case: modules.padding_query_rows(case.kwargs.get("attention_mask")),
                    uses=("split_heads", "merge_heads", *ATTENTION_BASICS), on_base=_on_base)
