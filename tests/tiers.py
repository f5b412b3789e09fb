"""Which tests run the real-size models: the exercises whose cases go through SmolLM2 (07) or a layer of
Qwen3.5's sizes (06, 08). Their whole catalogues are marked ``model`` and run in the full run (``pytest -m ""``);
the default tier keeps, for each of them, the correct code, the stub and one named mistake."""
import pytest

REAL_SIZE = ("Qwen35Attention", "LlamaAttention", "greedy_generate", "sample_generate", "Qwen35GatedDeltaNet")


def marks(exercise: str) -> tuple:
    """The marks of a test of ``exercise``'s catalogue beyond its first named mistake."""
    return (pytest.mark.model,) if exercise in REAL_SIZE else ()


def beyond_the_first(exercises, earlier) -> tuple:
    """The marks of a mistake that breaks ``exercises`` (names), given the exercises broken by the mistakes of the
    same set before it (``earlier``, one collection of names each): ``model`` when it runs real-size exercises
    and earlier mistakes already ran each of them (the first mistake of each stays in the default tier)."""
    seen = {name for names in earlier for name in names}
    real = [name for name in exercises if name in REAL_SIZE]
    return (pytest.mark.model,) if real and all(name in seen for name in real) else ()
