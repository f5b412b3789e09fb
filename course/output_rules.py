"""What an output must be beyond matching the reference, where matching is not enough: rules that both the grader
(``Exercise.verify``) and the notebook's visible check (``course.checking``) apply, so they live here, beside the
protocols, and are named in the visible checks' data by their function's name (``RULES``)."""
import torch

from course.protocols import Case


def masked_are_zero(case: Case, got: torch.Tensor) -> str | None:
    """Masked entries of a softmax (``case.args[1]`` False) must be exactly 0, not merely small."""
    mask = case.args[1] if len(case.args) > 1 else None
    if mask is None:
        return None
    leaked = got.masked_select(~mask.expand(got.shape)) != 0
    if leaked.any():
        return f"被遮住的位置应该正好是 0，有 {int(leaked.sum())} 个不是（最大 {got.masked_select(~mask.expand(got.shape)).abs().max().item():.3g}）。"
    return None


RULES = {rule.__name__: rule for rule in (masked_are_zero,)}
