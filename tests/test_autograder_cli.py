"""`pytest autograder/` as a self-learner runs it: exit codes, messages, table, results.json, and the
notebook left exactly as it was."""
import hashlib
import json
import subprocess
import sys

import pytest

from autograder.engine.assignments import ASSIGNMENTS, EXERCISES
from course.layout import ROOT as REPO
from tests.notebooks import ASSIGNMENT, filled, released_path, source_solutions, write_submission
from tests.student_code import MISTAKES_01
from tests.student_code_03 import MISTAKES as MISTAKES_03
from tests.student_code_gate_qwen35 import MISTAKES as MISTAKES_GATE


def run_grader(*args):
    return subprocess.run([sys.executable, "-m", "pytest", "autograder/", "-p", "no:cacheprovider", *map(str, args)],
                          cwd=REPO, capture_output=True, text=True)


def digest(path):
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_release_stubs_fail_every_exercise_with_not_implemented(tmp_path):
    before = digest(released_path())
    done = run_grader("--submission", released_path().parent.parent, "--results-json", tmp_path / "results.json")
    assert done.returncode == 1, done.stdout
    results = json.loads((tmp_path / "results.json").read_text(encoding="utf-8"))
    assert results["score"] == 0
    assert len(results["tests"]) == len(EXERCISES)
    assert all(t["output"] == "还没有实现（not yet implemented）" for t in results["tests"])
    assert f"总分 Total: 0/{sum(e.points for e in EXERCISES.values())}" in done.stdout
    assert "Traceback" not in done.stdout
    assert digest(released_path()) == before


def max_points(assignment):
    return sum(e.points for e in ASSIGNMENTS[assignment])


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
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
    assert all({"name", "score", "max_score", "output", "visibility"} <= t.keys() for t in results["tests"])
    assert digest(notebook) == before


# One mistake per assignment, in an exercise that no later exercise of the notebook calls.
ONE_MISTAKE = [
    ("01_attention_basics", next(m for m in MISTAKES_01 if m[0] == "padding_mask")),
    ("03_gqa_kv_cache", next(m for m in MISTAKES_03 if m[0] == "kv_cache_bytes")),
    ("05_output_gate", next(m for m in MISTAKES_GATE if m[0] == "gate_gradient")),
]


@pytest.mark.parametrize("assignment, mistake", ONE_MISTAKE, ids=[a for a, _ in ONE_MISTAKE])
def test_single_notebook_with_a_mistake_loses_that_exercise_only(assignment, mistake, tmp_path):
    name, named, code = mistake
    notebook = write_submission(tmp_path, filled({**source_solutions(assignment), name: code}, assignment), assignment)
    done = run_grader("--submission", notebook)
    assert done.returncode == 1
    assert named in done.stdout
    total = max_points(assignment)
    assert f"总分 Total: {total - EXERCISES[name].points}/{total}" in done.stdout


def test_malformed_notebook_fails_every_exercise_with_a_clear_message(tmp_path):
    notebook = tmp_path / ASSIGNMENT / f"{ASSIGNMENT}.ipynb"
    notebook.parent.mkdir()
    notebook.write_text(released_path().read_text(encoding="utf-8")[:5000], encoding="utf-8")
    done = run_grader("--submission", notebook.parent)
    assert done.returncode == 1
    assert done.stdout.count("不是合法的 notebook") >= 5
    assert "总分 Total: 0/12" in done.stdout


def test_missing_path_is_a_usage_error(tmp_path):
    done = run_grader("--submission", tmp_path / "nowhere")
    assert done.returncode == 4
    assert "找不到" in done.stdout + done.stderr
