"""Which tests run the real-size models: the exercises whose cases go through SmolLM2 (07) or a layer of
Qwen3.5's sizes (06, 08). Their whole catalogues are marked ``model`` and run in the full run (``pytest -m ""``);
the default tier keeps, for each of them, the correct code, the stub and one named mistake."""
import pytest

REAL_SIZE = ("Qwen35Attention", "LlamaAttention", "greedy_generate", "sample_generate", "Qwen35GatedDeltaNet")


def marks(exercise: str) -> tuple:
    """The marks of a test of ``exercise``'s catalogue beyond its first named mistake."""
    return (pytest.mark.model,) if exercise in REAL_SIZE else ()
