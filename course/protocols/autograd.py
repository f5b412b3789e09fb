"""09's ``FlashAttention``, a ``torch.autograd.Function``: run forward through ``apply`` and backward through
autograd, as training would, each pass under the tile watch of the function it stands for."""
import torch

from course.protocols.case import Case
from course.protocols.watches import TileWatch


def call_autograd(cls, case: Case) -> tuple:
    """``o = cls.apply(q, k, v, causal)``, then ``o.backward(do)``: returns ``(o, dq, dk, dv)``, the gradients as
    autograd hands them to q, k and v (``case.args = (q, k, v, causal, do)``)."""
    q, k, v, causal, do = case.args
    leaves = [t.detach().clone().requires_grad_(True) for t in (q, k, v)]
    o = _watched(cls, q, k, v, causal).apply(*leaves, causal)
    if not isinstance(o, torch.Tensor):
        raise TypeError(f"FlashAttention.apply 应该只返回输出 o（一个张量），得到的是 {type(o).__name__}："
                        "forward 把 lse 用 ctx.save_for_backward 存起来给 backward 用，不作为输出返回。")
    if not o.requires_grad:
        raise TypeError("FlashAttention.apply 返回的 o 不需要梯度（requires_grad=False）：o 要是 forward 的返回值本身，"
                        "不要在 forward 里 detach，也不要在 apply 外面再包一层 torch.no_grad()。")
    o.backward(do)
    missing = [name for name, leaf in zip("qkv", leaves) if leaf.grad is None]
    if missing:
        raise TypeError(f"backward 之后 {', '.join(missing)} 没有梯度：backward 要按 forward 参数的顺序返回 "
                        "(dq, dk, dv, None)，最后的 None 是 causal 的（它不是张量，没有梯度）。")
    return (o.detach(), *(leaf.grad for leaf in leaves))


def _watched(cls, q, k, v, causal):
    """``cls`` with its forward and its backward each run under a tile watch with the default tiles (as the
    two passes it is made of are watched), where the shapes let the watch be sound. Autograd runs the backward
    outside any mode the caller entered, so the watch is entered inside it."""
    forward_watch, backward_watch = (TileWatch(q, k, v, causal, 16, 16, per_tile) for per_tile in (2, 3))
    if not forward_watch.sound:
        return cls

    def forward(ctx, *args):
        with forward_watch:
            return cls.forward(ctx, *args)

    def backward(ctx, *grads):
        with backward_watch:
            return cls.backward(ctx, *grads)

    # The student's name: autograd names the backward node and its errors after the class ("FlashAttentionBackward").
    return type(cls.__name__, (cls,), {"forward": staticmethod(forward), "backward": staticmethod(backward),
                                       "__qualname__": cls.__qualname__})
