"""`pytest autograder/` as a self-learner types it: exit codes, the score table, results.json, the usage
error, and the notebooks left exactly as they were. One cold run per behaviour of the command; what each
exercise's verdict is, is tested in this process (tests/test_notebook_verdicts.py, tests/test_seeded_mistakes*)."""
import json
import re

import pytest

from autograder.engine.assignments import ASSIGNMENTS, EXERCISES
from tests.commands import digest, pytest_autograder
from tests.notebooks import ASSIGNMENT, filled, released_path, source_solutions, write_submission


def max_points(assignment):
    return sum(e.points for e in ASSIGNMENTS[assignment])


@pytest.fixture(scope="module")
def every_solved(tmp_path_factory):
    """One run over a folder holding the solved notebook of every assignment:
    (the finished command, its results.json, each notebook's digest before and after)."""
    folder = tmp_path_factory.mktemp("every-solved")
    notebooks = [write_submission(folder, filled(source_solutions(a), a), a) for a in ASSIGNMENTS]
    before = {p: digest(p) for p in notebooks}
    results = folder / "results.json"
    done = pytest_autograder("--submission", folder, "--results-json", results)
    return done, json.loads(results.read_text(encoding="utf-8")), before, {p: digest(p) for p in notebooks}


def test_every_solved_notebook_gets_full_marks_and_exit_code_0(every_solved):
    done, results, _, _ = every_solved
    assert done.returncode == 0, done.stdout
    table = done.stdout.split("评分 Score")[1].splitlines()
    assert [line for line in table if line in ASSIGNMENTS] == list(ASSIGNMENTS)
    subtotals = [tuple(map(int, m)) for m in re.findall(r"小计 subtotal\s+(\d+)/(\d+)", done.stdout)]
    assert subtotals == [(max_points(a), max_points(a)) for a in ASSIGNMENTS]
    total = sum(e.points for e in EXERCISES.values())
    assert f"总分 Total: {total}/{total}" in done.stdout
    assert "未提交" not in done.stdout


def test_results_json_has_a_test_per_exercise_in_gradescopes_format(every_solved):
    _, results, _, _ = every_solved
    assert results["score"] == sum(e.points for e in EXERCISES.values())
    assert [t["name"] for t in results["tests"]] == [f"{a} / {e.name}" for a in ASSIGNMENTS for e in ASSIGNMENTS[a]]
    assert all({"name", "score", "max_score", "output", "visibility"} <= t.keys() for t in results["tests"])
    assert all(t["score"] == t["max_score"] == EXERCISES[t["name"].split(" / ")[1]].points for t in results["tests"])


def test_grading_leaves_every_notebook_as_it_was(every_solved):
    _, _, before, after = every_solved
    assert after == before


def test_the_walls_notice_is_printed_only_where_walls_are_missing(every_solved, sandbox):
    """The command's run and this process's sandbox are on the same machine: same walls."""
    done, _, _, _ = every_solved
    missing = sandbox.hello()["missing"]
    assert done.stdout.count("sandbox walls missing") == (1 if missing else 0), (missing, done.stdout)


def test_release_stubs_fail_every_exercise_with_not_implemented(tmp_path):
    before = digest(released_path())
    done = pytest_autograder("--submission", released_path().parent.parent, "--results-json", tmp_path / "results.json")
    assert done.returncode == 1, done.stdout
    results = json.loads((tmp_path / "results.json").read_text(encoding="utf-8"))
    assert results["score"] == 0
    assert len(results["tests"]) == len(EXERCISES)
    assert all(t["output"] == "还没有实现（not yet implemented）" for t in results["tests"])
    assert f"总分 Total: 0/{sum(e.points for e in EXERCISES.values())}" in done.stdout
    assert "Traceback" not in done.stdout
    assert digest(released_path()) == before


def test_malformed_notebook_fails_every_exercise_with_a_clear_message(tmp_path):
    notebook = tmp_path / ASSIGNMENT / f"{ASSIGNMENT}.ipynb"
    notebook.parent.mkdir()
    notebook.write_text(released_path().read_text(encoding="utf-8")[:5000], encoding="utf-8")
    done = pytest_autograder("--submission", notebook.parent)
    assert done.returncode == 1
    assert done.stdout.count("不是合法的 notebook") >= len(ASSIGNMENTS[ASSIGNMENT])
    assert f"总分 Total: 0/{max_points(ASSIGNMENT)}" in done.stdout


def test_missing_path_is_a_usage_error(tmp_path):
    done = pytest_autograder("--submission", tmp_path / "nowhere")
    assert done.returncode == 4
    assert "找不到" in done.stdout + done.stderr
