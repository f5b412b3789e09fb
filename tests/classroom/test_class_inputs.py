"""What `course-grade` reads from outside is checked before it is used: shard folders edited by someone
hostile cannot write outside `--out` or put points into the gradebook that the grader did not give; no cell
of grades.csv or mistakes.csv runs as a spreadsheet formula; and two students whose names differ only in
case or Unicode form are refused before grading, not merged into one."""
import csv
import io
import json
import os
import shutil

import pytest

from autograder.engine.assignments import ASSIGNMENTS
from autograder.engine.model import Verdict
from autograder.instructor.classroom.gradebook import Gradebook
from autograder.instructor.classroom.graded_class import record_file, state_folder
from autograder.instructor.classroom.results_store import RESULT_BYTES, NotebookResult
from autograder.instructor.classroom.roster import RosterError, find
from tests.classroom.test_class_roster import files
from tests.classroom.test_course_grade import course_grade, grades, started
from tests.notebooks import filled, source_solutions, write_submission

A, B = "01_attention_basics", "02_multi_head"
CAP = 3  # seconds per notebook, as in tests/classroom/test_course_grade.py
NFC, NFD = "jos\u00e9", "jose\u0301"
FORMULAS = ['=HYPERLINK("http://x","y")', "+cmd|' /C calc'!A0", "@SUM(1+1)", "-2+3", "\tname", "\rname"]


# --- shards graded by a real run, then edited ---------------------------------------------------------------

@pytest.fixture(scope="module")
def graded_shards(tmp_path_factory):
    """A class of four graded by `course-grade` in two shards: alice's notebook is correct, the others' cannot
    be read; one student's folder name is in NFD (as macOS writes names), two look like formulas."""
    root = tmp_path_factory.mktemp("class")
    folder = root / "submitted"
    write_submission(folder / "alice", filled(source_solutions(A)))
    for student in (NFD, "@SUM(1+1)", "-2+3"):
        files(folder, [f"{student}/{A}/{A}.ipynb"], b'{"cells": [')
    shards = [root / f"shard{i}" for i in (1, 2)]
    for i, shard in enumerate(shards, 1):
        run = course_grade(folder, "--out", shard, "--shard", f"{i}/2", "--jobs", 1, "--notebook-timeout", CAP)
        assert run.returncode == 0, run.stdout + run.stderr
    return shards


@pytest.fixture
def shards(graded_shards, tmp_path):
    """A copy of the two shard folders, to edit."""
    return [shutil.copytree(shard, tmp_path / shard.name) for shard in graded_shards]


def record(shard) -> dict:
    return json.loads(record_file(shard).read_text(encoding="utf-8"))


def edit_record(shard, change) -> None:
    """Rewrite the shard's class.json after ``change(record)`` (as JSON with non-ASCII escaped, which reads
    back the same as course-grade's, and can hold a lone surrogate)."""
    edited = record(shard)
    change(edited)
    record_file(shard).write_text(json.dumps(edited, indent=0), encoding="utf-8")


def entry_of(shard, student: str) -> list:
    return next(e for e in record(shard)["entries"] if e[0] == student)


def result_file(shard, student: str):
    return state_folder(shard) / "results" / f"{entry_of(shard, student)[2]}.json"


def edit_result(shard, student: str, change) -> None:
    """Rewrite ``student``'s result in the shard after ``change(result)``."""
    path = result_file(shard, student)
    edited = json.loads(path.read_text(encoding="utf-8"))
    change(edited)
    path.write_text(json.dumps(edited, ensure_ascii=False, indent=1), encoding="utf-8")


def renamed(old: str, new: str):
    """A change to class.json: the student ``old`` is called ``new``."""
    def change(edited):
        for entry in edited["entries"]:
            if entry[0] == old:
                entry[0] = new
    return change


def rekeyed(student: str, key: str):
    """A change to class.json: ``student``'s result is the one under ``key``."""
    def change(edited):
        for entry in edited["entries"]:
            if entry[0] == student:
                entry[2] = key
    return change


def first_verdict(result: dict, **fields) -> None:
    """A change to a result: ``fields`` of its first verdict (attention_scores, 2 points) are changed."""
    result["verdicts"][0].update(fields)


def refused(run, out, *offending) -> None:
    """The merge stopped with a message naming the offending files, and wrote no gradebook."""
    assert run.returncode == 2, run.stdout + run.stderr
    assert run.stderr.startswith("course-grade: ") and "Traceback" not in run.stderr
    for path in offending:
        assert str(path) in run.stderr, run.stderr
    assert not (out / "grades.csv").exists()


@pytest.mark.slow  # shares one real two-shard course-grade run
def test_honest_shards_merge_with_nfc_names_and_safe_cells(shards, tmp_path):
    shard1, shard2 = shards
    assert {e[0] for e in record(shard1)["entries"]} == {"-2+3", "alice"}
    assert {e[0] for e in record(shard2)["entries"]} == {"@SUM(1+1)", NFC}  # the roster's NFC, not the folder's NFD
    out = tmp_path / "merged"
    run = course_grade("--merge", shard1, shard2, "--out", out)
    assert run.returncode == 0, run.stdout + run.stderr
    rows = grades(out)
    assert set(rows) == {"'-2+3", "'@SUM(1+1)", "alice", NFC}
    assert rows["alice"]["total"] == str(sum(e.points for e in ASSIGNMENTS[A])) and rows["'-2+3"]["total"] == "0"
    assert sorted(os.listdir(out / "feedback")) == sorted(["-2+3", "@SUM(1+1)", "alice", NFC])


@pytest.mark.slow  # shares one real two-shard course-grade run
def test_a_student_name_with_dotdot_writes_nothing_outside_out(shards, tmp_path):
    shard1, shard2 = shards
    edit_record(shard1, renamed("alice", "../../escaped"))
    out = tmp_path / "merged"
    refused(course_grade("--merge", shard1, shard2, "--out", out), out, record_file(shard1))
    assert not list(tmp_path.rglob("escaped*"))


@pytest.mark.slow  # shares one real two-shard course-grade run
def test_a_result_key_with_dotdot_writes_nothing_outside_out(shards, tmp_path):
    shard1, shard2 = shards
    key = "../../../escaped"
    shutil.copy(result_file(shard1, "alice"), tmp_path / "escaped.json")  # where the key leads in the shard
    edit_record(shard1, rekeyed("alice", key))
    out = tmp_path / "deep" / "merged"  # the key leads from its store to tmp_path/deep/escaped.json
    refused(course_grade("--merge", shard1, shard2, "--out", out), out, record_file(shard1))
    assert not (tmp_path / "deep" / "escaped.json").exists()


@pytest.mark.slow  # shares one real two-shard course-grade run
def test_points_beyond_the_exercise_never_reach_the_gradebook(shards, tmp_path):
    shard1, shard2 = shards
    edit_result(shard1, "alice", lambda result: first_verdict(result, points=999))
    out = tmp_path / "merged"
    run = started("--merge", shard1, shard2, "--out", out)  # as a command: its exit status and its stderr
    stdout, stderr = run.communicate(timeout=120)
    assert run.returncode == 2 and "Traceback" not in stderr, stdout + stderr
    assert str(result_file(shard1, "alice")) in stderr and "999 points" in stderr
    assert not (out / "grades.csv").exists()


@pytest.mark.slow  # shares one real two-shard course-grade run
@pytest.mark.parametrize("change", [
    lambda r: first_verdict(r, points=-1),
    lambda r: first_verdict(r, points=True),  # an int to Python
    lambda r: first_verdict(r, points=2.0),
    lambda r: first_verdict(r, points="2"),
    lambda r: first_verdict(r, points=999, max_points=999),
    lambda r: first_verdict(r, max_points=1),
    lambda r: first_verdict(r, exercise="forged"),
    lambda r: first_verdict(r, summary=42),
    lambda r: first_verdict(r, grader_problem="no"),
    lambda r: first_verdict(r, forged=1),
    lambda r: r["verdicts"].pop(),
    lambda r: r["verdicts"].append(r["verdicts"][-1]),
    lambda r: r["verdicts"].reverse(),
    lambda r: r.update(assignment="99_no_such_assignment"),
    lambda r: r.update(seconds=float("nan")),
    lambda r: r.update(seconds=-1),
    lambda r: r.update(extra=True),
    lambda r: r.pop("verdicts"),
], ids=["negative", "bool", "float", "text", "max-raised-too", "max-lowered", "unknown-exercise", "summary-number",
        "grader-problem-text", "unknown-field", "verdict-dropped", "verdict-added", "reordered", "unknown-assignment",
        "nan-seconds", "negative-seconds", "extra-key", "no-verdicts"])
def test_an_edited_result_is_refused_naming_its_file(shards, tmp_path, change):
    shard1, shard2 = shards
    edit_result(shard1, "alice", change)
    out = tmp_path / "merged"
    refused(course_grade("--merge", shard1, shard2, "--out", out), out, result_file(shard1, "alice"))


@pytest.mark.slow  # shares one real two-shard course-grade run
@pytest.mark.parametrize("damage", [
    lambda path: path.write_bytes(b"\xff\xfe not UTF-8"),
    lambda path: path.write_text("[1, 2]", encoding="utf-8"),
    lambda path: path.write_bytes(b" " * (RESULT_BYTES + 1)),
    lambda path: (path.unlink(), os.mkfifo(path)),  # reading it would wait forever
    lambda path: (path.unlink(), path.mkdir()),
], ids=["not-utf8", "not-a-record", "too-big", "fifo", "folder"])
def test_a_result_file_that_is_not_one_is_refused(shards, tmp_path, damage):
    shard1, shard2 = shards
    path = result_file(shard1, "alice")
    damage(path)
    out = tmp_path / "merged"
    refused(course_grade("--merge", shard1, shard2, "--out", out), out, path)


@pytest.mark.slow  # shares one real two-shard course-grade run
def test_a_result_of_another_assignment_is_refused(shards, tmp_path):
    shard1, shard2 = shards
    verdicts = tuple(Verdict(e.name, e.points, e.points, "通过") for e in ASSIGNMENTS[B])
    result_file(shard1, "alice").write_text(NotebookResult(B, verdicts, 1.0).to_json(), encoding="utf-8")
    out = tmp_path / "merged"
    refused(course_grade("--merge", shard1, shard2, "--out", out), out, result_file(shard1, "alice"))


def _first_entry(index: int, value):
    """A change to class.json: field ``index`` of its first entry (shard 2's "@SUM(1+1)") is ``value``."""
    def change(edited):
        edited["entries"][0][index] = value
    return change


def _another_assignment_than_graded(edited):
    edited["only"] = [A]
    edited["entries"][0][1] = B


@pytest.mark.slow  # shares one real two-shard course-grade run
@pytest.mark.parametrize("change", [
    _first_entry(0, "a\x00b"),
    _first_entry(0, "a\nb"),
    _first_entry(0, "a\u2028b"),  # Unicode's line separator
    _first_entry(0, "\ud800"),  # a lone surrogate: not writable as UTF-8
    _first_entry(0, "..\\escaped"),
    _first_entry(0, "x/y"),
    _first_entry(0, ".."),
    _first_entry(0, ""),
    _first_entry(0, "  "),
    _first_entry(0, 42),
    _first_entry(1, "99_no_such_assignment"),
    _another_assignment_than_graded,
    _first_entry(2, "abc"),
    _first_entry(2, "A" * 64),
    _first_entry(3, None),
    lambda r: r["entries"][0].pop(),
    lambda r: r["entries"].append(list(r["entries"][0])),  # one student's assignment twice
    lambda r: r["entries"].append([NFD, *r["entries"][0][1:]]),  # NFD beside NFC in one file
    lambda r: r.update(only=["99_no_such_assignment"]),
    lambda r: r.update(only=[]),
    lambda r: r.update(shard=[0, 2]),
    lambda r: r.update(shard=[3, 2]),
    lambda r: r.update(shard=["2", "2"]),
    lambda r: r.update(shard=[2]),
    lambda r: r.update(fingerprint=None),
    lambda r: r.update(entries="alice"),
    lambda r: r.pop("fingerprint"),
], ids=["nul", "newline", "line-separator", "surrogate", "backslash", "slash", "dotdot", "empty", "blank",
        "name-number", "unknown-assignment", "assignment-not-graded", "short-key", "uppercase-key", "source-none",
        "short-entry", "duplicate-entry", "nfc-and-nfd", "unknown-only", "empty-only", "shard-zero", "shard-past-n",
        "shard-text", "shard-short", "fingerprint-none", "entries-text", "no-fingerprint"])
def test_an_edited_class_record_is_refused_naming_its_file(shards, tmp_path, change):
    shard1, shard2 = shards
    edit_record(shard2, change)
    out = tmp_path / "merged"
    refused(course_grade("--merge", shard1, shard2, "--out", out), out, record_file(shard2))


@pytest.mark.slow  # shares one real two-shard course-grade run
def test_a_name_in_nfd_is_merged_in_nfc(shards, tmp_path):
    shard1, shard2 = shards
    edit_record(shard2, renamed(NFC, NFD))
    out = tmp_path / "merged"
    run = course_grade("--merge", shard1, shard2, "--out", out)
    assert run.returncode == 0, run.stdout + run.stderr
    assert NFC in grades(out) and (out / "feedback" / NFC).is_dir() and not (out / "feedback" / NFD).exists()
    assert NFC in {e[0] for e in record(out)["entries"]}


# Shard 1 holds "-2+3" and alice, shard 2 "@SUM(1+1)" and NFC: one name of one shard renamed.
@pytest.mark.slow  # shares one real two-shard course-grade run
@pytest.mark.parametrize("shard, old, new", [
    (2, "@SUM(1+1)", "alice"),
    (2, "@SUM(1+1)", "Alice"),
    (1, "-2+3", NFD),
    (1, "-2+3", "JOSE\u0301"),
], ids=["same", "case", "nfd", "case-and-nfd"])
def test_one_student_in_two_shards_is_refused_naming_both(shards, tmp_path, shard, old, new):
    edit_record(shards[shard - 1], renamed(old, new))
    out = tmp_path / "merged"
    refused(course_grade("--merge", *shards, "--out", out), out, *map(record_file, shards))


# --- spreadsheet-safe CSV -------------------------------------------------------------------------------------

def _cells(text: str) -> list[list[str]]:
    assert text.startswith("\ufeff")
    return list(csv.reader(io.StringIO(text[1:], newline="")))


def test_no_cell_of_the_gradebook_runs_as_a_formula():
    exercises = ASSIGNMENTS[A]
    passed = NotebookResult(A, tuple(Verdict(e.name, e.points, e.points, "通过") for e in exercises), 1.0)
    failed = NotebookResult(A, tuple(Verdict(e.name, 0, e.points, "没有通过", mistake="=1+1 " + e.name)
                                     for e in exercises), 1.0)
    book = Gradebook([A])
    for name in FORMULAS:
        book.add(name, {A: failed})
    book.add("o'brien", {A: passed})
    grades_rows = _cells(book.grades_csv())
    assert [row[0] for row in grades_rows[1:]] == ["'" + name for name in FORMULAS] + ["o'brien"]
    full = str(sum(e.points for e in exercises))
    # numbers stay numbers; the late column is empty (no LMS marker)
    assert grades_rows[-1][1:] == [*(str(e.points) for e in exercises), full, "", full, "100.0"]
    assert all(row[1:] == ["0"] * (len(exercises) + 1) + ["", "0", "0.0"] for row in grades_rows[1:-1])
    mistakes = _cells(book.mistakes_csv())[1:]
    assert [row[2] for row in mistakes] == [f"'=1+1 {e.name}" for e in exercises]
    assert {row[3] for row in mistakes} == {str(len(FORMULAS))}
    assert all(row[4].startswith("'\t") for row in mistakes)  # the tab-first name sorts first


# --- one identity per student ---------------------------------------------------------------------------------

@pytest.mark.parametrize("first, second, shown", [
    (NFC, NFD, ["'jos\\xe9'", "'jose\\u0301'"]),
    ("Alice", "alice", ["'Alice'", "'alice'"]),
    ("Jos\u00e9", NFD, ["'Jos\\xe9'", "'jose\\u0301'"]),
], ids=["nfc-nfd", "case", "case-and-nfd"])
def test_names_that_are_one_student_are_refused_before_grading(tmp_path, first, second, shown):
    folder, out = tmp_path / "submitted", tmp_path / "graded"
    files(folder, [f"{first}/{A}/{A}.ipynb", f"{second}/{B}/{B}.ipynb"])
    with pytest.raises(RosterError, match="differ only in case") as refusal:
        find(folder)
    assert all(name in str(refusal.value) for name in shown)
    run = course_grade(folder, "--out", out)
    assert run.returncode == 2 and "Traceback" not in run.stderr
    assert all(name in run.stderr for name in shown) and not out.exists()  # refused before anything was graded


def test_a_name_in_nfd_is_used_in_nfc(tmp_path):
    roster = find(files(tmp_path, [f"{NFD}/{A}/{A}.ipynb"]))
    assert roster.students == [NFC] and [h.student for h in roster.handed] == [NFC]


@pytest.mark.parametrize("name", ["a..b", "tab\tname", "bell\x07", "back\\slash", "new\nline"])
def test_a_name_that_cannot_be_a_folder_is_refused(tmp_path, name):
    with pytest.raises(RosterError, match="student name"):
        find(files(tmp_path, [f"{name}_{A}.ipynb"]))
