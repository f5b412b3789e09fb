"""`pytest autograder/ --submission ...` on 05_output_gate and 06_qwen35_attention: the source notebook's
solutions typed into the released notebook get full marks, the untouched release fails every exercise as
not implemented, and a mistake in one exercise costs that exercise only."""
import json

import pytest

from autograder.assignments import ASSIGNMENTS, EXERCISES
from autograder.exercise import NOT_IMPLEMENTED
from tests.notebooks import filled, released_path, source_solutions, write_submission
from tests.student_code_gate_qwen35 import MISTAKES
from tests.test_autograder_cli import digest, run_grader

LATER = ["05_output_gate", "06_qwen35_attention"]


def max_points(assignment):
    return sum(e.points for e in ASSIGNMENTS[assignment])


@pytest.mark.parametrize("assignment", LATER)
def test_solved_notebook_gets_full_marks(assignment, tmp_path):
    notebook = write_submission(tmp_path, filled(source_solutions(assignment), assignment), assignment)
    before = digest(notebook)
    done = run_grader("--submission", notebook.parent, "--results-json", tmp_path / "results.json")
    assert done.returncode == 0, done.stdout
    total = max_points(assignment)
    assert f"总分 Total: {total}/{total}" in done.stdout
    results = json.loads((tmp_path / "results.json").read_text(encoding="utf-8"))
    assert results["score"] == total
    assert {t["name"] for t in results["tests"]} == {f"{assignment} / {e.name}" for e in ASSIGNMENTS[assignment]}
    assert digest(notebook) == before


@pytest.mark.parametrize("assignment", LATER)
def test_untouched_release_fails_every_exercise_as_not_implemented(assignment, tmp_path):
    done = run_grader("--submission", released_path(assignment).parent, "--results-json", tmp_path / "results.json")
    assert done.returncode == 1, done.stdout
    results = json.loads((tmp_path / "results.json").read_text(encoding="utf-8"))
    assert results["score"] == 0
    assert len(results["tests"]) == len(ASSIGNMENTS[assignment])
    assert all(t["output"] == NOT_IMPLEMENTED for t in results["tests"]), results["tests"]
    assert f"总分 Total: 0/{max_points(assignment)}" in done.stdout
    assert "Traceback" not in done.stdout


def test_a_mistake_in_one_exercise_costs_only_that_exercise(tmp_path):
    assignment = "05_output_gate"
    name, named, code = next(m for m in MISTAKES if m[0] == "split_query_gate")  # the half split
    notebook = write_submission(tmp_path, filled({**source_solutions(assignment), name: code}, assignment), assignment)
    done = run_grader("--submission", notebook)
    assert done.returncode == 1
    assert named in done.stdout
    total = max_points(assignment)
    assert f"总分 Total: {total - EXERCISES[name].points}/{total}" in done.stdout
