"""What an output must be beyond matching the reference, where matching is not enough: rules that both the grader
(``Exercise.verify``) and the notebook's visible check (``course.checking``) apply, so they live here, beside the
protocols, and are named in the visible checks' data by their function's name (``RULES``). Each is
``rule(case, got, expected)``, ``expected`` the reference's output on the case; it returns what is wrong, or None."""
import torch

from course.protocols import Case


def masked_are_zero(case: Case, got: torch.Tensor, expected) -> str | None:
    """Masked entries of a softmax (``case.args[1]`` False) must be exactly 0, not merely small."""
    mask = case.args[1] if len(case.args) > 1 else None
    if mask is None:
        return None
    leaked = got.masked_select(~mask.expand(got.shape)) != 0
    if leaked.any():
        return f"被遮住的位置应该正好是 0，有 {int(leaked.sum())} 个不是（最大 {got.masked_select(~mask.expand(got.shape)).abs().max().item():.3g}）。"
    return None


def _an_int(got, what: str) -> str | None:
    if type(got) is not int:
        return f"应该返回 Python 的 int（{what}是整数），得到的是 {type(got).__name__}。"
    return None


def bytes_as_int(case: Case, got, expected) -> str | None:
    """A count of bytes is a Python int: exact however large, where a float stops being exact beyond 2⁵³."""
    return _an_int(got, "字节数")


def flops_as_int(case: Case, got, expected) -> str | None:
    """A count of FLOPs is a Python int, as ``bytes_as_int``."""
    return _an_int(got, "FLOPs ")


def _removed_are_zero(got: torch.Tensor, expected: torch.Tensor, how: str) -> str | None:
    """Tokens the reference removed (``expected == 0``) must be exactly 0 in ``got``, not merely small: the sampler
    must never pick them. ``how`` says how to zero them."""
    leaked = (expected == 0) & (got != 0)
    if leaked.any():
        return (f"被去掉的 token 的概率应该正好是 0，有 {int(leaked.sum())} 个不是（最大 {got[leaked].abs().max().item():.3g}）："
                + how)
    return None


def sampled_removed_are_zero(case: Case, got: torch.Tensor, expected) -> str | None:
    """The tokens top-k and top-p remove have probability exactly 0."""
    return _removed_are_zero(got, expected, "用 masked_fill(…, 0.0)（或先在 logits 上填 −inf 再 softmax），不要只是减小它们。")


def min_p_removed_are_zero(case: Case, got: torch.Tensor, expected) -> str | None:
    """The tokens min-p removes have probability exactly 0."""
    return _removed_are_zero(got, expected, "用 masked_fill(…, 0.0) 或 torch.where 把它们置零，再重新归一化。")


RULES = {rule.__name__: rule for rule in (masked_are_zero, bytes_as_int, flops_as_int, sampled_removed_are_zero,
                                          min_p_removed_are_zero)}
