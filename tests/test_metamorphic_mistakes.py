"""A mistake keeps its verdict and its name however the code is written: natural mistakes the grader names, graded
in every presentation of ``tests/presentations.py`` through the real notebook path, one definition per cell."""
import pytest

from autograder.engine.assignments import ASSIGNMENTS
from autograder.engine.grading import judge
from tests import natural_mistakes
from tests.natural_mistakes import checks
from tests.natural_mistakes.judged import NAMES
from tests.presentations import PRESENTATIONS

pytestmark = pytest.mark.metamorphic


def _named(entry) -> dict[str, str]:
    """The exercises whose message named the entry's mistake itself when it was judged (not a broken base)."""
    return {exercise: name for exercise, name in NAMES.get(entry.id, {}).items() if not name.startswith("用到的")}


def _chosen():
    """Per exercise, the first natural mistake the grader names; per assignment, the first named one that raises
    (its name comes from the error and the student's line, which presentations rewrite)."""
    chosen, seen = [], set()
    for module, entry in natural_mistakes.all_entries():
        key = (entry.exercises[0], "single") if entry.kind == "single" else (module.ASSIGNMENT, "raises")
        if entry.kind in ("single", "raises") and _named(entry) and key not in seen:
            seen.add(key)
            chosen.append((module, entry))
    return chosen


MISTAKES = _chosen()
_GRADED: dict = {}


def _verdicts(module, entry, presentation: str, sandbox) -> tuple:
    """(exercise, points, named mistake) of each exercise that names the entry, in one presentation (each worked out
    once per run). Not the message: the student's lines it quotes are the presentation's, and an error raised by
    another op (einsum's for matmul's) says so in its own words."""
    key = (entry.id, presentation)
    if key not in _GRADED:
        cells, given = checks.presented(module, entry, presentation), {}
        _GRADED[key] = tuple((v.exercise, v.points, v.mistake) for v in (
            judge(e, cells, sandbox, verdicts=given) for e in ASSIGNMENTS[module.ASSIGNMENT] if e.name in _named(entry)))
    return _GRADED[key]


@pytest.mark.parametrize("presentation", [name for name in PRESENTATIONS if name != "as written"])
@pytest.mark.parametrize("module, entry", MISTAKES, ids=[entry.id for _, entry in MISTAKES])
def test_a_mistake_keeps_its_verdict_and_its_name_in_every_presentation(module, entry, presentation, sandbox):
    written = _verdicts(module, entry, "as written", sandbox)
    assert [(exercise, mistake) for exercise, _, mistake in written] == list(_named(entry).items())
    assert _verdicts(module, entry, presentation, sandbox) == written
