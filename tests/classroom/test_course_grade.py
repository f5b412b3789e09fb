"""`course-grade` on a small class, run as an instructor runs it: the outputs, a second run that grades only
what changed, Ctrl-C and resuming, the cap per notebook, shards merged into exactly one run's outputs, and
a hostile student who can change nothing but their own grade."""
import csv
import hashlib
import io
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from contextlib import redirect_stderr, redirect_stdout
from dataclasses import dataclass
from pathlib import Path

import pytest

from autograder.engine import limits
from autograder.engine.assignments import ASSIGNMENTS
from autograder.engine.grading import OUT_OF_TIME
from autograder.instructor.classroom.course_grade import main
from autograder.instructor.classroom.graded_class import record_file, state_folder
from course.layout import ROOT as REPO
from tests.class_of_students import half_done, hostile, unwritable, with_mistake
from tests.notebooks import filled, released, source_solutions, write_submission
from tests.students import a01

A = "01_attention_basics"
CAP = 3  # seconds per notebook: far above an honest 01 notebook, and the stalling one costs no more
MISTAKE = next(m for m in a01.MISTAKES if m[0] == "padding_mask")  # no later exercise calls padding_mask
POINTS = {e.name: e.points for e in ASSIGNMENTS[A]}
FULL = sum(POINTS.values())
HALF = sum(list(POINTS.values())[:(len(POINTS) + 1) // 2])  # what tests.class_of_students.half_done solves
EXPECTED = {"alice": FULL, "bob": HALF, "carol": FULL - POINTS["padding_mask"], "dave": 0, "eve": 0, "frank": FULL,
            "grace": 0, "heidi": FULL - POINTS["padding_mask"]}
DISTINCT = len(EXPECTED) - 1  # notebooks graded: frank's is alice's, byte for byte


@dataclass
class Run:
    returncode: int
    stdout: str
    stderr: str


def course_grade(*args) -> Run:
    """`course-grade ARGS` in this process (its workers are processes of their own all the same)."""
    stdout, stderr = io.StringIO(), io.StringIO()
    with redirect_stdout(stdout), redirect_stderr(stderr):
        code = main([str(a) for a in args])
    return Run(code, stdout.getvalue(), stderr.getvalue())


def started(*args, session: bool = False) -> subprocess.Popen:
    """`course-grade ARGS` as a command of its own, running, in a session of its own when ``session``. It
    takes Ctrl-C as in a terminal even when these tests run in the background, where it would be ignored."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        return subprocess.Popen([sys.executable, "-m", "autograder.instructor.classroom.course_grade", *map(str, args)],
                                cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                start_new_session=session)
    finally:
        signal.signal(signal.SIGINT, previous)


def digest(path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def outputs(out) -> dict[str, str]:
    """Every output file's text (a zip's bytes), the measured seconds (slowest submissions) left out."""
    files = {p.relative_to(out).as_posix(): p.read_bytes() if p.suffix == ".zip" else p.read_text(encoding="utf-8")
             for p in out.rglob("*") if p.is_file() and state_folder(out) not in p.parents}
    files["report.html"] = re.sub(r'<section class="slowest">.*?</section>', "", files["report.html"], flags=re.DOTALL)
    return files


@dataclass
class Interrupted:
    returncode: int
    stderr: str
    saved: list  # the results on disk when it stopped
    outputs_written: bool


def interrupt(folder, out) -> Interrupted:
    """Start grading one notebook at a time and press Ctrl-C once the first result is saved."""
    run = started(folder, "--out", out, "--jobs", 1, "--notebook-timeout", CAP, session=True)
    results = state_folder(out) / "results"
    deadline = time.monotonic() + 60
    while not (results.is_dir() and any(results.glob("*.json"))) and time.monotonic() < deadline:
        time.sleep(0.05)
    os.killpg(run.pid, signal.SIGINT)  # what Ctrl-C in a terminal does: the whole foreground group
    _, stderr = run.communicate(timeout=60)
    return Interrupted(run.returncode, stderr, sorted(results.glob("*.json")), (out / "grades.csv").exists())


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    """A class of eight and one `course-grade` run over it: (class folder, output folder, the run, the
    hostile's victim's hash)."""
    root = tmp_path_factory.mktemp("class")
    folder, out = root / "submitted", root / "graded"
    victim = write_submission(folder / "alice", filled(source_solutions(A)))
    write_submission(folder / "bob", half_done(A))
    write_submission(folder / "carol", with_mistake(A, MISTAKE))
    write_submission(folder / "dave", released(A))
    targets = [victim, out / "grades.csv", state_folder(out) / "results" / "forged.json"]
    write_submission(folder / "eve", hostile(A, targets, stall=True))
    write_submission(folder / "frank", filled(source_solutions(A)))  # the same bytes as alice: graded once
    broken = folder / "grace" / A / f"{A}.ipynb"
    broken.parent.mkdir(parents=True)
    broken.write_text('{"cells": [', encoding="utf-8")
    write_submission(folder / "heidi", unwritable(A))
    before = digest(victim)
    return folder, out, course_grade(folder, "--out", out, "--jobs", 2, "--notebook-timeout", CAP), before


def grades(out) -> dict[str, dict[str, str]]:
    with open(out / "grades.csv", encoding="utf-8-sig", newline="") as f:
        return {row["student"]: row for row in csv.DictReader(f)}


@pytest.mark.slow  # a run of its own, stopped, and the run that finishes it
def test_ctrl_c_leaves_a_state_that_the_next_run_finishes(graded, tmp_path):
    folder, out, _, _ = graded
    again = tmp_path / "graded"
    stopped = interrupt(folder, again)
    assert stopped.returncode == 130, stopped.stderr
    assert "run the same command again" in stopped.stderr
    assert 1 <= len(stopped.saved) < DISTINCT and not stopped.outputs_written
    finished = course_grade(folder, "--out", again, "--jobs", 2, "--notebook-timeout", CAP)
    assert finished.returncode == 0, finished.stdout + finished.stderr
    assert f"{DISTINCT - len(stopped.saved)} graded" in finished.stdout  # it took up where the first run stopped
    assert outputs(again) == outputs(out)  # and ended with what one run gives


def test_a_class_is_graded_into_a_gradebook(graded):
    _, out, run, _ = graded
    assert run.returncode == 0, run.stdout + run.stderr
    assert "ETA" in run.stderr
    rows = grades(out)
    assert {s: int(r["total"]) for s, r in rows.items()} == EXPECTED
    assert list(rows["alice"]) == ["student", *(f"{A}/{e.name}" for e in ASSIGNMENTS[A]), A, f"{A}/late", "total",
                                   "percent"]
    assert {r[f"{A}/late"] for r in rows.values()} == {""}  # nbgrader's submitted/ says nothing about lateness
    assert rows["carol"][f"{A}/padding_mask"] == "0" and rows["carol"][A] == str(EXPECTED["carol"])
    assert rows["bob"]["percent"] == f"{100 * HALF / FULL:.1f}"
    results = list((state_folder(out) / "results").glob("*.json"))
    assert len(results) == DISTINCT
    assert all(json.loads(p.read_text(encoding="utf-8"))["verdicts"] for p in results)


def test_named_mistakes_are_counted(graded):
    _, out, _, _ = graded
    with open(out / "mistakes.csv", encoding="utf-8-sig", newline="") as f:
        rows = list(csv.DictReader(f))
    assert rows[0].keys() == {"assignment", "exercise", "mistake", "count", "students"}
    carol = [r for r in rows if r["students"] == "carol"]
    assert [(r["exercise"], r["count"]) for r in carol] == [("padding_mask", "1")]
    assert MISTAKE[1] in carol[0]["mistake"]


def test_the_report_is_one_file_with_real_plots(graded):
    _, out, _, _ = graded
    html = (out / "report.html").read_text(encoding="utf-8")
    assert html.count("data:image/png;base64,") == 3  # histogram, pass rates, mistakes
    assert not re.search(r"(src|href)=['\"](https?:|//|/)", html)  # nothing to fetch: it opens offline
    assert "Slowest submissions" in html and "eve" in html.split("Slowest submissions")[1]


def test_feedback_shows_verdicts_and_no_hidden_code(graded):
    _, out, _, _ = graded
    pages = sorted(p.relative_to(out / "feedback").as_posix() for p in (out / "feedback").rglob("*.html"))
    assert pages == [f"{s}/{A}.html" for s in sorted(EXPECTED)]
    carol = (out / "feedback" / "carol" / f"{A}.html").read_text(encoding="utf-8")
    assert f"{EXPECTED['carol']} / {FULL}" in carol and MISTAKE[1] in carol
    grace = (out / "feedback" / "grace" / f"{A}.html").read_text(encoding="utf-8")
    assert "不是合法的 notebook" in grace
    for page in (out / "feedback").rglob("*.html"):
        text = page.read_text(encoding="utf-8")
        assert "HIDDEN TESTS" not in text and "grade(" not in text and "Traceback" not in text
        assert "<script" not in text


def test_the_cap_per_notebook_stops_a_stalling_notebook(graded):
    _, out, _, _ = graded
    eve = (out / "feedback" / "eve" / f"{A}.html").read_text(encoding="utf-8")
    assert f"运行超过 {CAP:g} 秒" in eve
    assert eve.count(OUT_OF_TIME.format(cap=CAP, least=limits.LEAST_EXERCISE_S)) == len(ASSIGNMENTS[A]) - 1


def test_text_no_file_can_hold_costs_only_its_exercise(graded):
    """A message with lone surrogates in it (``raise ValueError("\\ud800")``) is written everywhere with "?" in their
    place: the class's results, the gradebook and the feedback page; the exercise is lost, nothing else."""
    _, out, run, _ = graded
    assert run.returncode == 0, run.stdout + run.stderr  # the class was graded: none of it stopped
    page = (out / "feedback" / "heidi" / f"{A}.html").read_text(encoding="utf-8")
    assert "ValueError: ??" in page and "名字" in page and "\x1b" not in page
    assert int(grades(out)["heidi"]["total"]) == EXPECTED["heidi"]


def test_a_hostile_student_changes_only_their_own_grade(graded):
    folder, out, _, before = graded
    assert digest(folder / "alice" / A / f"{A}.ipynb") == before
    assert not (state_folder(out) / "results" / "forged.json").exists()
    assert "forged" not in (out / "grades.csv").read_text(encoding="utf-8")
    assert int(grades(out)["eve"]["total"]) == 0  # and everyone else's totals are as expected (first test)


def test_a_second_run_grades_only_what_changed(graded, tmp_path):
    folder, out, _, _ = graded
    again = tmp_path / "again"
    shutil.copytree(out, again)
    first = outputs(again)
    same = course_grade(folder, "--out", again, "--notebook-timeout", CAP)
    assert same.returncode == 0 and "all unchanged since the last run" in same.stdout
    assert outputs(again) == first
    bob = folder / "bob" / A / f"{A}.ipynb"
    original = bob.read_bytes()
    finished = filled(source_solutions(A))
    finished.metadata["edited"] = True  # not the same bytes as alice's
    try:
        write_submission(folder / "bob", finished)
        changed = course_grade(folder, "--out", again, "--notebook-timeout", CAP)
    finally:
        bob.write_bytes(original)
    assert changed.returncode == 0, changed.stdout + changed.stderr
    assert "1 graded" in changed.stdout and f"{len(EXPECTED) - 1} unchanged" in changed.stdout
    assert grades(again)["bob"]["total"] == str(FULL)


@pytest.mark.slow  # two runs side by side, each starting its own workers
def test_shards_merged_give_the_outputs_of_one_run(graded, tmp_path):
    folder, out, _, _ = graded
    shards = [tmp_path / f"shard{i}" for i in (1, 2)]
    runs = [started(folder, "--out", shard, "--shard", f"{i}/2", "--jobs", 1, "--notebook-timeout", CAP)
            for i, shard in enumerate(shards, 1)]  # side by side, as a batch engine runs them
    for run in runs:
        stdout, stderr = run.communicate(timeout=300)
        assert run.returncode == 0, stdout + stderr
    assert sorted(len(grades(s)) for s in shards) == [len(EXPECTED) // 2, len(EXPECTED) - len(EXPECTED) // 2]
    merged = course_grade("--merge", *shards, "--out", tmp_path / "merged")
    assert merged.returncode == 0, merged.stdout + merged.stderr
    assert outputs(tmp_path / "merged") == outputs(out)
    incomplete = course_grade("--merge", shards[0], "--out", tmp_path / "incomplete")
    assert incomplete.returncode == 2 and "every shard" in incomplete.stderr


# --- late flags from an LMS download -----------------------------------------------------------------------------

CANVAS = {"hanmei_1043": f"hanmei_1043_990002_{A}.ipynb", "lilei_1042": f"lilei_LATE_1042_990001_{A}.ipynb",
          "wangfang_1044": f"wangfang_1044_990003_{A}.ipynb"}


@pytest.fixture(scope="module")
def canvas_shards(tmp_path_factory):
    """A Canvas download of three notebooks, lilei's late, graded in two shards (lilei alone in the second).
    The notebooks cannot be read, so grading them is quick: what is tested is the flag, not the points."""
    root = tmp_path_factory.mktemp("canvas")
    folder = root / "download"
    folder.mkdir()
    for name in CANVAS.values():
        (folder / name).write_text('{"cells": [', encoding="utf-8")
    shards = [root / f"shard{i}" for i in (1, 2)]
    for i, shard in enumerate(shards, 1):
        run = course_grade(folder, "--out", shard, "--shard", f"{i}/2", "--jobs", 1, "--notebook-timeout", CAP)
        assert run.returncode == 0, run.stdout + run.stderr
    return folder, shards


@pytest.mark.slow  # shares two real shard runs of course-grade
def test_a_late_canvas_file_is_late_in_the_merged_gradebook_and_after_a_rerun(canvas_shards, tmp_path):
    folder, shards = canvas_shards
    merged = course_grade("--merge", *shards, "--out", tmp_path / "merged")
    assert merged.returncode == 0, merged.stdout + merged.stderr
    assert {s: r[f"{A}/late"] for s, r in grades(tmp_path / "merged").items()} == {
        "hanmei_1043": "no", "lilei_1042": "yes", "wangfang_1044": "no"}
    again = shutil.copytree(shards[1], tmp_path / "again")
    rerun = course_grade(folder, "--out", again, "--shard", "2/2", "--notebook-timeout", CAP)
    assert rerun.returncode == 0 and "all unchanged since the last run" in rerun.stdout
    assert outputs(again) == outputs(shards[1]) and grades(again)["lilei_1042"][f"{A}/late"] == "yes"


@pytest.mark.slow  # shares two real shard runs of course-grade
@pytest.mark.parametrize("forged", [1, 0, "yes", "true", [True]])
def test_a_forged_late_value_in_a_shard_is_refused(canvas_shards, tmp_path, forged):
    _, shards = canvas_shards
    edited = shutil.copytree(shards[1], tmp_path / "shard2")
    record = json.loads(record_file(edited).read_text(encoding="utf-8"))
    record["entries"][0][4] = forged
    record_file(edited).write_text(json.dumps(record), encoding="utf-8")
    merged = course_grade("--merge", shards[0], edited, "--out", tmp_path / "merged")
    assert merged.returncode == 2 and str(record_file(edited)) in merged.stderr and "late" in merged.stderr
    assert not (tmp_path / "merged" / "grades.csv").exists()


@pytest.mark.slow  # a class run of its own, its sandboxes without Landlock
def test_without_landlock_no_notebook_reads_a_classmates(tmp_path, monkeypatch, request):
    """The class folder and the outputs are the run's own: where Landlock is missing, each run's mount namespace
    shows them empty, so a student who copies a classmate's answer from the class folder gets nothing."""
    monkeypatch.setenv("ATTENTION_COURSE_SANDBOX_OFF", "landlock")
    # Readable by everyone, and outside /tmp (which each run's namespace already replaces), as a class often is.
    folder = Path(tempfile.mkdtemp(prefix="class-", dir="/var/tmp")) / "submitted"
    folder.parent.chmod(0o755)
    request.addfinalizer(lambda: shutil.rmtree(folder.parent, ignore_errors=True))
    alice = write_submission(folder / "alice", filled(source_solutions(A)))
    copy = f'''
import json
import math
import torch
def attention_scores(q, k):
    cells = json.load(open({str(alice)!r}))["cells"]
    space = {{"torch": torch, "math": math}}
    exec(next("".join(c["source"]) for c in cells if "def attention_scores" in "".join(c["source"])), space)
    return space["attention_scores"](q, k)
'''
    write_submission(folder / "mallory", filled({**source_solutions(A), "attention_scores": copy}))
    run = course_grade(folder, "--out", tmp_path / "graded", "--notebook-timeout", CAP)
    assert run.returncode == 0, run.stdout + run.stderr
    rows = grades(tmp_path / "graded")
    assert rows["alice"][f"{A}/attention_scores"] == str(POINTS["attention_scores"])
    assert rows["mallory"][f"{A}/attention_scores"] == "0", rows["mallory"]
    page = (tmp_path / "graded" / "feedback" / "mallory" / f"{A}.html").read_text(encoding="utf-8")
    assert "FileNotFoundError" in page or "PermissionError" in page, page
