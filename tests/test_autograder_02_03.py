"""`pytest autograder/ --submission ...` on 02_multi_head and 03_gqa_kv_cache: the source notebook's
solutions typed into the released notebook get full marks (with the notebook's ready-made cells graded
along), and a mistake in an exercise nothing else builds on costs that exercise only."""
import json

import pytest

from autograder.assignments import ASSIGNMENTS, EXERCISES
from tests.notebooks import filled, source_solutions, write_submission
from tests.student_code_03 import MISTAKES
from tests.test_autograder_cli import digest, run_grader


def max_points(assignment):
    return sum(e.points for e in ASSIGNMENTS[assignment])


@pytest.mark.parametrize("assignment", ["02_multi_head", "03_gqa_kv_cache"])
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


def test_a_mistake_in_one_exercise_costs_only_that_exercise(tmp_path):
    assignment = "03_gqa_kv_cache"
    name, named, code = next(m for m in MISTAKES if m[0] == "kv_cache_bytes")
    notebook = write_submission(tmp_path, filled({**source_solutions(assignment), name: code}, assignment), assignment)
    done = run_grader("--submission", notebook)
    assert done.returncode == 1
    assert named in done.stdout
    total = max_points(assignment)
    assert f"总分 Total: {total - EXERCISES[name].points}/{total}" in done.stdout
