"""The Python API for integrators, ``autograder.grade_notebook`` and ``autograder.grade_code``: the verdicts
every command gives, for a whole notebook file or for one exercise's source text."""
import hashlib

import pytest

import autograder
from autograder.engine.assignments import ASSIGNMENTS
from autograder.engine.submission import SubmissionError
from tests.notebooks import ASSIGNMENT, filled, released_path, source_solutions, write_submission
from tests.students import a01


def test_a_solved_notebook_gets_every_point_and_is_left_as_it_was(tmp_path):
    notebook = write_submission(tmp_path, filled(source_solutions()))
    before = hashlib.sha256(notebook.read_bytes()).hexdigest()
    verdicts = autograder.grade_notebook(notebook)
    assert [v.exercise for v in verdicts] == [e.name for e in ASSIGNMENTS[ASSIGNMENT]]
    assert all(v.passed and not v.grader_problem for v in verdicts), [v.message for v in verdicts if not v.passed]
    assert hashlib.sha256(notebook.read_bytes()).hexdigest() == before


def test_the_released_stubs_are_not_implemented():
    verdicts = autograder.grade_notebook(released_path())
    assert {v.summary for v in verdicts} == {"还没有实现（not yet implemented）"}
    assert sum(v.points for v in verdicts) == 0


def test_grade_code_names_a_known_mistake():
    exercise, named, code = next(m for m in a01.MISTAKES if m[0] == "padding_mask")
    verdict = autograder.grade_code(exercise, a01.source({exercise: code}))
    assert not verdict.passed and named in verdict.message and verdict.mistake


def test_grade_code_passes_correct_code():
    verdict = autograder.grade_code("causal_mask", a01.source({"causal_mask": source_solutions()["causal_mask"]}))
    assert verdict.passed and verdict.points == verdict.max_points


def test_bad_requests_say_what_is_wrong(tmp_path):
    with pytest.raises(KeyError, match="causal_msk"):
        autograder.grade_code("causal_msk", "")
    stray = tmp_path / "homework.ipynb"
    stray.write_text("{}", encoding="utf-8")
    with pytest.raises(SubmissionError, match="属于哪个作业"):
        autograder.grade_notebook(stray)
    broken = tmp_path / f"{ASSIGNMENT}.ipynb"
    broken.write_text("{", encoding="utf-8")
    assert all("不是合法的 notebook" in v.summary for v in autograder.grade_notebook(broken))
