"""What the checks of module exercises share: seeded weights, and which output rows no implementation
defines."""
import torch

from autograder.checks.inputs import randn


def linear_weights(gen: torch.Generator, shapes: dict[str, tuple[int, int]], dtype: torch.dtype) -> dict:
    """A state dict of bias-free ``nn.Linear`` weights, ``name -> (out, in)``, scaled by 1/√in so that
    activations stay near unit size whatever the width."""
    return {f"{name}.weight": randn(gen, out, inp, dtype=dtype, scale=inp ** -0.5)
            for name, (out, inp) in shapes.items()}


def padding_query_rows(attention_mask: torch.Tensor | None) -> torch.Tensor | None:
    """``[B, T, 1]``, True on the output rows of padding queries (``attention_mask`` 0), or None without a mask.

    Hugging Face, SDPA and the course's reference each fill those rows differently, and nothing reads
    them: any finite value is right there (COURSE_SPEC §4).
    """
    return None if attention_mask is None else (attention_mask == 0)[..., None]
