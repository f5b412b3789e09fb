"""Check of ``FlashAttention``, a ``torch.autograd.Function``: ``FlashAttention.apply(q, k, v, causal) → o``, and
the gradients autograd gives q, k and v through its backward (``protocols.call_autograd``), against the reference
in float64. Its two passes are the student's own, graded on their own."""
import torch

from autograder.engine.checks.flash_attention_forward import TOO_LARGE
from autograder.engine.inputs import flash
from autograder.engine.inputs.seeded import generator, randn
from autograder.engine.model import Exercise, Mistake, public
from course.protocols import Case, call_autograd
from solutions.flash_attention import FlashAttention, flash_attention_backward, flash_attention_forward

OUTPUT_NAMES = ("输出 o", "q.grad", "k.grad", "v.grad")


def cases() -> list[Case]:
    gen = generator(92)
    found = []
    for label, lead, q_len, k_len, causal, dtype in (
            ("", (2, 3), 37, 37, False, torch.float32),
            ("", (2, 3), 40, 40, True, torch.float32),
            ("Tq > Tk（前 88 个 query 什么都看不见），", (2, 3), 100, 12, True, torch.float32),
            ("带缓存的预填充，", (2, 3), 20, 45, True, torch.float64)):
        q, k, v = flash.qkv(gen, lead, q_len, k_len, dtype=dtype)
        do = randn(gen, *lead, q_len, v.shape[-1], dtype=dtype)
        found.append(Case(f"{label}q {list(q.shape)}，k/v 长 {k_len}（Dv = {v.shape[-1]}），causal={causal}，{dtype}，"
                          "o.backward(do)", (q, k, v, causal, do)))
    return public(found, 0, 1, 3)


class _Swapped(FlashAttention):
    @staticmethod
    def backward(ctx, do):
        q, k, v, o, lse = ctx.saved_tensors
        dq, dk, dv = flash_attention_backward(q, k, v, o, lse, do, ctx.causal)
        return dk, dq, dv, None


class _CausalForgotten(FlashAttention):
    @staticmethod
    def backward(ctx, do):
        q, k, v, o, lse = ctx.saved_tensors
        return (*flash_attention_backward(q, k, v, o, lse, do), None)


class _NotCausal(FlashAttention):
    @staticmethod
    def forward(ctx, q, k, v, causal=False):
        o, lse = flash_attention_forward(q, k, v)
        ctx.save_for_backward(q, k, v, o, lse)
        ctx.causal = causal
        return o


ORDER = ("backward 返回的梯度按 forward 参数的顺序排：forward(ctx, q, k, v, causal) 对应 return dq, dk, dv, None。")
CAUSAL = ("forward 里把 causal 存到 ctx 上（ctx.causal = causal），backward 调 flash_attention_backward 时传进去："
          "两次用的 mask 要一样。")

MISTAKES = (
    Mistake("backward 返回的 dq 和 dk 顺序反了", ORDER, _Swapped),
    Mistake("backward 没有把 causal 传给 flash_attention_backward", CAUSAL, _CausalForgotten),
    Mistake("forward 没有把 causal 传给 flash_attention_forward", "forward 调 flash_attention_forward 时把 causal 传进去，"
            "再把它存到 ctx 上（ctx.causal = causal）给 backward 用：两次用的 mask 要一样。", _NotCausal),
    Mistake("backward 返回的梯度个数和 forward 的参数对不上", "backward 要为 forward 的每个参数（ctx 除外）各返回一个梯度："
            "forward(ctx, q, k, v, causal) 有四个参数，所以是 return dq, dk, dv, None（causal 不是张量，它的梯度是 None）。"
            "少了会出错，多出来的只能是 None。",
            error=r"incorrect number of gradients"),
    Mistake(TOO_LARGE, "FlashAttention 里也不能有整张分数表：forward 调你的 flash_attention_forward，backward 调你的 "
            "flash_attention_backward：两遍都按块算，不存也不重建 [Tq, Tk] 的表（用 autograd 对普通注意力求导会建出整张 P）。",
            error="TileTooLarge"),
    Mistake("causal 放进了 save_for_backward", "save_for_backward 只存张量；causal 是 bool，直接挂在 ctx 上："
            "ctx.causal = causal，backward 里读 ctx.causal。", error=r"save_for_backward can only save variables"),
    Mistake("backward 读的 ctx 属性，forward 里没有设", "forward 里设了什么，backward 才读得到：forward 里写 "
            "ctx.causal = causal，backward 里读 ctx.causal（名字要一样）。", error=r"Backward' object has no attribute"),
    Mistake("forward 把 (o, lse) 都返回了", "forward 只返回 o；lse 用 ctx.save_for_backward 存起来，backward 里用 "
            "ctx.saved_tensors 取回。", error=r"应该只返回输出 o"),
)

EXERCISE = Exercise("FlashAttention", 2, FlashAttention, cases, MISTAKES, output_names=OUTPUT_NAMES, call=call_autograd,
                    uses=("flash_attention_forward", "flash_attention_backward"))
