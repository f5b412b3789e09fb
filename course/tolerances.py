"""How close a student's floating-point output must be to the reference, per dtype.

The reference is computed in float64 from the same inputs, so these bounds only have to absorb the
rounding of the student's own dtype (bfloat16 keeps 8 significant bits, float32 keeps 24). Float64 cases
check the output dtype and the maths, not the last digits: an answer that works in float32 inside, as
Hugging Face does for norms and softmax, is right.
"""
from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class Tolerance:
    atol: float
    rtol: float

    def __str__(self) -> str:
        return f"atol={self.atol:g}, rtol={self.rtol:g}"


DEFAULT = {
    torch.float64: Tolerance(atol=1e-5, rtol=1e-4),
    torch.float32: Tolerance(atol=1e-5, rtol=1e-4),
    torch.float16: Tolerance(atol=3e-3, rtol=3e-3),
    torch.bfloat16: Tolerance(atol=3e-2, rtol=3e-2),
}


def for_dtype(dtype: torch.dtype, overrides: dict | None = None) -> Tolerance:
    """The tolerance of one check for ``dtype``: the check's own override, else the default."""
    return (overrides or {}).get(dtype, DEFAULT[dtype])
