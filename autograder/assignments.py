"""The assignments the graders know, their exercises in notebook order, and where their notebooks are."""
from pathlib import Path

from autograder.checks import attention, attention_scores, causal_mask, masked_softmax, padding_mask
from autograder.exercise import Exercise

ASSIGNMENTS: dict[str, tuple[Exercise, ...]] = {
    "01_attention_basics": (
        attention_scores.EXERCISE,
        causal_mask.EXERCISE,
        padding_mask.EXERCISE,
        masked_softmax.EXERCISE,
        attention.EXERCISE,
    ),
}

EXERCISES: dict[str, Exercise] = {e.name: e for exercises in ASSIGNMENTS.values() for e in exercises}

REPO = Path(__file__).resolve().parent.parent
RELEASE = REPO / "release"


def assignment_of(notebook: Path) -> str | None:
    """The assignment a notebook belongs to, by its folder or its file name (e.g. ``01_...ipynb``)."""
    for name in ASSIGNMENTS:
        if notebook.parent.name == name or notebook.stem.startswith(name) or notebook.stem.startswith(name[:3]):
            return name
    return None
