"""What the checks of module exercises share: seeded weights, the arguments of a forward pass, and which
output rows no implementation defines."""
import torch

from autograder.engine.inputs.seeded import randn


def linear_weights(gen: torch.Generator, shapes: dict[str, tuple[int, int]], dtype: torch.dtype) -> dict:
    """A state dict of bias-free ``nn.Linear`` weights, ``name -> (out, in)``, scaled by 1/√in so that
    activations stay near unit size whatever the width."""
    return {f"{name}.weight": randn(gen, out, inp, dtype=dtype, scale=inp ** -0.5)
            for name, (out, inp) in shapes.items()}


def padding_query_rows(attention_mask: torch.Tensor | None) -> torch.Tensor | None:
    """``[B, T, 1]``, True on the output rows of padding queries (``attention_mask`` 0), or None without a mask.

    Hugging Face, SDPA and the course's reference each fill those rows differently, and nothing reads
    them: any finite value is right there (the README says so to students).
    """
    return None if attention_mask is None else (attention_mask == 0)[..., None]


def forward_arguments(attention_mask: torch.Tensor | None, steps) -> tuple[dict, str]:
    """The keyword arguments of a decoder case (``attention_mask``; ``steps``, the chunk sizes to decode
    through a cache, for ``protocols.call_decoder``), and how the case's label says them."""
    kwargs, label = {}, ""
    if attention_mask is not None:
        kwargs["attention_mask"] = attention_mask
        label += f"，attention_mask={attention_mask.tolist()}"
    if steps is not None:
        kwargs["steps"] = steps
        label += f"；带缓存逐段解码，每段的 token 数：{list(steps)}"
    return kwargs, label
