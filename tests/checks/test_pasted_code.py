"""Answer cells written the way public codebases write them (``tests/pasted_code.py``), each pasted into its
released notebook beside the reference answers and graded as every channel grades a notebook file: a correct
one earns every point of the exercises it reaches, a bug that shipped in public code loses exactly the exercises it
breaks."""
import re

import pytest

from autograder.engine.assignments import ASSIGNMENTS, EXERCISES
from autograder.engine.grading import judge
from autograder.engine.ipynb import read_code_cells
from course.protocols import PULLED
from tests.notebooks import filled, source_solutions, write_submission
from tests.pasted_code import PASTED, Pasted


def _id(entry: Pasted) -> str:
    words = re.findall(r"[a-z0-9]+", entry.origin.lower())[:6]
    return "-".join([entry.assignment[:2], entry.exercise, *words, *(["bug"] if entry.fails else [])])


IDS = [_id(entry) for entry in PASTED]


def test_the_pasted_answers_cover_every_exercise_and_name_real_ones():
    assert len(set(IDS)) == len(IDS), "two entries would share a test id"
    correct = {(e.assignment, e.exercise) for e in PASTED if not e.fails}
    missing = [(a, x.name) for a, exercises in ASSIGNMENTS.items() for x in exercises if (a, x.name) not in correct]
    assert not missing, f"exercises without a correct pasted answer: {missing}"
    for entry in PASTED:
        names = {x.name for x in ASSIGNMENTS[entry.assignment]}
        assert entry.exercise in names and set(entry.fails) <= names, entry.origin


def _reaching(entry: Pasted) -> list[str]:
    """The exercises of the entry's notebook whose checks run its answer: its own, those of the same definition (a
    method added to its class) and those built on it. The others run the reference answers alone."""
    pasted = EXERCISES[entry.exercise]
    return [x.name for x in ASSIGNMENTS[entry.assignment] if x.definition == pasted.definition
            or pasted.name in x.uses or pasted.definition in PULLED.get(x.call.__name__, ())]


@pytest.mark.slow
@pytest.mark.parametrize("entry", PASTED, ids=IDS)
def test_pasted_code_gets_the_verdicts_its_code_deserves(entry, tmp_path, sandbox):
    notebook = filled({**source_solutions(entry.assignment), entry.exercise: entry.code}, entry.assignment)
    assert any(cell.source == entry.code for cell in notebook.cells), f"no answer cell solution_{entry.exercise}"
    cells, given = read_code_cells(write_submission(tmp_path, notebook, entry.assignment)), {}
    graded = _reaching(entry)
    assert set(entry.fails) <= set(graded), f"{entry.origin}: fails exercises its answer does not reach"
    verdicts = [judge(EXERCISES[name], cells, sandbox, verdicts=given) for name in graded]
    # A correct answer passes everything; a real bug fails what it breaks, by the grader's own judgement (a
    # grader problem is no verdict on the code), and nothing else.
    wrong = {v.exercise: ("passed, though the code has the bug" if v.passed else v.message)
             for v in verdicts if v.passed == (v.exercise in entry.fails) or v.grader_problem}
    assert not wrong, "\n\n".join(f"{name}: {message}" for name, message in wrong.items())
