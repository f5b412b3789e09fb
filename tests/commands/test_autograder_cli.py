"""`pytest autograder/` as a self-learner types it: exit codes, the score table, results.json, the usage
error, and the notebooks left exactly as they were. One cold run per behaviour of the command; what each
exercise's verdict is, is tested in this process (tests/engine/test_notebook_verdicts.py, tests/checks/test_seeded_mistakes.py): the
solved run grades two assignments, every assignment's full marks are proven there."""
import json
import os
import re
import subprocess
from pathlib import Path
from typing import NamedTuple

import pytest

from autograder.engine.assignments import ASSIGNMENTS, EXERCISES
from autograder.engine.lanes import LANES_ENV
from tests.commands import digest, finished, start_pytest_autograder
from tests.notebooks import ASSIGNMENT, filled, released_path, source_solutions, write_submission

TOTAL = sum(e.points for e in EXERCISES.values())
SOLVED = ("01_attention_basics", "02_multi_head")  # a table of several assignments, none needing the real models
SOLVED_POINTS = sum(e.points for a in SOLVED for e in ASSIGNMENTS[a])


def max_points(assignment):
    return sum(e.points for e in ASSIGNMENTS[assignment])


class Runs(NamedTuple):
    done: dict[str, subprocess.CompletedProcess]  # by submission name
    folder: Path  # holds <name>.json, the results.json of the runs that write one
    before: dict[Path, str]  # every notebook's digest
    after: dict[Path, str]

    def results(self, name: str) -> dict:
        return json.loads((self.folder / f"{name}.json").read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> Runs:
    """The command on each submission of this file, the runs started together."""
    root = tmp_path_factory.mktemp("cli")
    solved = [write_submission(root / "solved", filled(source_solutions(a), a), a) for a in SOLVED]
    malformed = root / "malformed" / ASSIGNMENT / f"{ASSIGNMENT}.ipynb"
    malformed.parent.mkdir(parents=True)
    malformed.write_text(released_path().read_text(encoding="utf-8")[:5000], encoding="utf-8")
    notebooks = [*solved, *(released_path(a) for a in ASSIGNMENTS)]
    before = {p: digest(p) for p in notebooks}
    started = {
        "solved": start_pytest_autograder("--submission", root / "solved", "--results-json", root / "solved.json",
                                          env={**os.environ, LANES_ENV: "1"}),
        "solved in two lanes": start_pytest_autograder("--submission", root / "solved", "--results-json",
                                                       root / "solved in two lanes.json",
                                                       env={**os.environ, LANES_ENV: "2"}),
        "stubs": start_pytest_autograder("--submission", released_path().parent.parent, "--require-all",
                                         "--results-json", root / "stubs.json"),
        "untouched": start_pytest_autograder("--submission", released_path().parent.parent,
                                             "--results-json", root / "untouched.json"),
        "malformed": start_pytest_autograder("--submission", malformed.parent),
        "missing": start_pytest_autograder("--submission", root / "nowhere"),
    }
    done = {name: finished(run) for name, run in started.items()}
    return Runs(done, root, before, {p: digest(p) for p in notebooks})


def test_solved_notebooks_get_full_marks_and_exit_code_0(runs):
    done = runs.done["solved"]
    assert done.returncode == 0, done.stdout
    table = done.stdout.split("评分 Score")[1].splitlines()
    assert [line for line in table if line in ASSIGNMENTS] == list(SOLVED)
    subtotals = [tuple(map(int, m)) for m in re.findall(r"小计 subtotal\s+(\d+)/(\d+)", done.stdout)]
    assert subtotals == [(max_points(a), max_points(a)) for a in SOLVED]
    assert f"总分 Total: {SOLVED_POINTS}/{SOLVED_POINTS}" in done.stdout
    assert all(f"{a}  未提交" in done.stdout for a in ASSIGNMENTS if a not in SOLVED), done.stdout


def test_results_json_has_a_test_per_exercise_in_gradescopes_format(runs):
    written = runs.results("solved")
    assert written["score"] == SOLVED_POINTS
    assert [t["name"] for t in written["tests"]] == [f"{a} / {e.name}" for a in SOLVED for e in ASSIGNMENTS[a]]
    assert all({"name", "score", "max_score", "output", "visibility"} <= t.keys() for t in written["tests"])
    assert all(t["score"] == t["max_score"] == EXERCISES[t["name"].split(" / ")[1]].points for t in written["tests"])


def test_two_grading_lanes_give_what_one_gives(runs):
    """Two sandboxes grading at once (as on a machine of three cores) write the same table and results.json."""
    one, two = runs.done["solved"], runs.done["solved in two lanes"]
    assert two.returncode == one.returncode == 0, two.stdout
    assert two.stdout.split("评分 Score")[1].split("=====")[0] == one.stdout.split("评分 Score")[1].split("=====")[0]
    assert runs.results("solved in two lanes") == runs.results("solved")


def test_grading_leaves_every_notebook_as_it_was(runs):
    assert runs.after == runs.before


def test_the_walls_notice_is_printed_only_where_walls_are_missing(runs, sandbox):
    """The command's run and this process's sandbox are on the same machine: same walls."""
    done = runs.done["solved"]
    missing = sandbox.hello()["missing"]
    assert done.stdout.count("sandbox walls missing") == (1 if missing else 0), (missing, done.stdout)


def test_release_stubs_fail_every_exercise_with_not_implemented_when_all_are_required(runs):
    """A class's strict run (--require-all) grades every stub: zero, "not yet implemented", no traceback."""
    done, written = runs.done["stubs"], runs.results("stubs")
    assert done.returncode == 1, done.stdout
    assert written["score"] == 0
    assert len(written["tests"]) == len(EXERCISES)
    assert all(t["output"] == "还没有实现（not yet implemented）" for t in written["tests"])
    assert f"总分 Total: 0/{TOTAL}" in done.stdout
    assert "Traceback" not in done.stdout


def test_untouched_notebooks_are_not_started_and_count_neither_as_failures_nor_toward_the_total(runs):
    """A self-learner's run on notebooks nobody has written in yet: each assignment is listed as not started."""
    done, written = runs.done["untouched"], runs.results("untouched")
    assert done.returncode == 0, done.stdout
    assert all(f"{a}  未开始" in done.stdout for a in ASSIGNMENTS), done.stdout
    assert f"总分 Total: 0/0（{len(ASSIGNMENTS)} 个作业未开始，不计入）" in done.stdout, done.stdout
    assert written["score"] == 0 and written["tests"] == []
    assert "未开始（不计入总分）：" + "、".join(ASSIGNMENTS) in written["output"]


def test_malformed_notebook_fails_every_exercise_with_a_clear_message(runs):
    done = runs.done["malformed"]
    assert done.returncode == 1
    assert done.stdout.count("不是合法的 notebook") >= len(ASSIGNMENTS[ASSIGNMENT])
    assert f"总分 Total: 0/{max_points(ASSIGNMENT)}" in done.stdout


def test_missing_path_is_a_usage_error(runs):
    done = runs.done["missing"]
    assert done.returncode == 4
    assert "不存在" in done.stdout + done.stderr
