"""Whole notebook files graded in this process, as every channel grades them (``grade_notebook``): a mistake in
one exercise costs that exercise's points and no other's, and is named."""
import pytest

from autograder.engine.assignments import ASSIGNMENTS, EXERCISES
from autograder.engine.grading import grade_notebook
from tests.notebooks import filled, source_solutions, write_submission
from tests.students import a01, a03, a05

# One mistake per assignment, in an exercise that no later exercise of the notebook calls.
ONE_MISTAKE = [
    ("01_attention_basics", next(m for m in a01.MISTAKES if m[0] == "padding_mask")),
    ("03_gqa_kv_cache", next(m for m in a03.MISTAKES if m[0] == "kv_cache_bytes")),
    ("05_output_gate", next(m for m in a05.MISTAKES if m[0] == "gate_gradient")),
]


@pytest.mark.parametrize("assignment, mistake", ONE_MISTAKE, ids=[a for a, _ in ONE_MISTAKE])
def test_a_notebook_with_a_mistake_loses_that_exercise_only(assignment, mistake, tmp_path, sandbox):
    name, named, code = mistake
    notebook = write_submission(tmp_path, filled({**source_solutions(assignment), name: code}, assignment), assignment)
    verdicts = grade_notebook(notebook, sandbox=sandbox)
    assert [v.exercise for v in verdicts] == [e.name for e in ASSIGNMENTS[assignment]]
    lost = [v for v in verdicts if not v.passed]
    assert [v.exercise for v in lost] == [name], [v.message for v in lost]
    assert named in lost[0].message and not lost[0].grader_problem
    total = sum(e.points for e in ASSIGNMENTS[assignment])
    assert sum(v.points for v in verdicts) == total - EXERCISES[name].points


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_every_solved_notebook_gets_full_marks(assignment, tmp_path, sandbox):
    """The source notebook's own solutions, released and filled in, earn every point of the assignment (the
    command's cold run, tests/commands/test_autograder_cli.py, grades two of them)."""
    notebook = write_submission(tmp_path, filled(source_solutions(assignment), assignment), assignment)
    verdicts = grade_notebook(notebook, sandbox=sandbox)
    assert [v.exercise for v in verdicts] == [e.name for e in ASSIGNMENTS[assignment]]
    assert all(v.passed for v in verdicts), [v.message for v in verdicts if not v.passed]
