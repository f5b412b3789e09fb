"""A mistake keeps its verdict and its name however the code is written: natural mistakes the grader names, graded
in every presentation of ``tests/presentations.py``, and the simulated students' seeded mistakes
(``tests/students``), each in one presentation besides its own, through the real notebook path, one definition per
cell."""
import pytest

from autograder.engine.assignments import ASSIGNMENTS, EXERCISES
from autograder.engine.grading import judge
from tests import natural_mistakes, students
from tests.natural_mistakes import checks
from tests.natural_mistakes.judged import NAMES
from tests.presentations import PRESENTATIONS, graded_cells, present, student_blocks

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


def _seeded():
    """Per student and exercise, the first seeded mistake (every one is named: ``tests/checks/test_seeded_mistakes.py``),
    with the presentation it is graded in: each takes the next one in turn, so that every presentation meets
    seeded mistakes of several assignments (the natural mistakes meet every presentation each)."""
    others = [name for name in PRESENTATIONS if name != "as written"]
    chosen, seen = [], set()
    for module in students.ALL:
        for name, named, source in module.MISTAKES:
            if (module, name) not in seen:
                seen.add((module, name))
                chosen.append((module, name, named, source, others[len(chosen) % len(others)]))
    return chosen


SEEDED = _seeded()


def _seeded_verdict(module, name: str, source: str, presentation: str, sandbox) -> tuple:
    """(points, named mistake) of the exercise in one presentation of the student's notebook with the mistake."""
    cells = graded_cells(present(presentation, student_blocks(module.layout({name: source}))))
    verdict = judge(EXERCISES[name], cells, sandbox, verdicts={})
    return verdict.points, verdict.mistake


@pytest.mark.parametrize("module, name, named, source, presentation", SEEDED,
                         ids=[f"{m.ASSIGNMENT[:2]}-{n}-{p}" for m, n, _, _, p in SEEDED])
def test_a_seeded_mistake_keeps_its_verdict_and_its_name_in_another_presentation(module, name, named, source,
                                                                                 presentation, sandbox):
    written = _seeded_verdict(module, name, source, "as written", sandbox)
    assert written[0] == 0 and named in written[1], written
    assert _seeded_verdict(module, name, source, presentation, sandbox) == written
