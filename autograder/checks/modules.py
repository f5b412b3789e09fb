"""What the checks of class exercises share: seeded weights; building the student's module with them, so
that a wrong parameter layout gets a clear message instead of a ``load_state_dict`` dump; and unpacking
the two values a method must return."""
import torch
from torch import nn

from autograder.checks.inputs import randn


def linear_weights(gen: torch.Generator, shapes: dict[str, tuple[int, int]], dtype: torch.dtype) -> dict:
    """A state dict of bias-free ``nn.Linear`` weights, ``name -> (out, in)``, scaled by 1/√in so that
    activations stay near unit size whatever the width."""
    return {f"{name}.weight": randn(gen, out, inp, dtype=dtype, scale=inp ** -0.5)
            for name, (out, inp) in shapes.items()}


def _layout_problems(have: dict, want: dict) -> list[str]:
    problems = [f"缺少 {name}" for name in want if name not in have]
    problems += [f"多了 {name}" for name in have if name not in want]
    problems += [f"{name} 的形状应是 {want[name]}，得到 {have[name]}"
                 for name in want if name in have and have[name] != want[name]]
    return problems


def build(cls, init: tuple, weights: dict, dtype: torch.dtype) -> nn.Module:
    """``cls(*init)`` converted to ``dtype`` with ``weights`` loaded."""
    module = cls(*init).to(dtype)
    have = {name: list(t.shape) for name, t in module.state_dict().items()}
    problems = _layout_problems(have, {name: list(t.shape) for name, t in weights.items()})
    if problems:
        raise ValueError("参数和约定不一致：" + "；".join(problems)
                         + "。投影层用 nn.Linear(..., bias=False)，名字是 q_proj、k_proj、v_proj、o_proj。")
    module.load_state_dict(weights)
    return module


def pair(value, what: str) -> tuple:
    """``value`` as a tuple when it holds two things; otherwise a clear error saying ``what`` should return two."""
    if not (isinstance(value, (tuple, list)) and len(value) == 2):
        raise TypeError(f"{what} 应该返回两个值，得到的是 {type(value).__name__}。")
    return tuple(value)
