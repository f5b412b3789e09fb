"""Finding whose notebook is whose in a class folder: each layout and naming pattern `course-grade`
understands, the ambiguous ones it refuses, and zips and links read as safely as single notebooks."""
import io
import zipfile

import pytest

from autograder.engine import limits
from autograder.engine.ipynb import NotebookError
from autograder.instructor.classroom.roster import RosterError, find, read_notebook
from autograder.instructor.classroom.shards import ShardError, parse_shard, shard_students

A, B = "01_attention_basics", "02_multi_head"
NOTEBOOK = b'{"cells": [], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}'


def files(folder, names, data=NOTEBOOK):
    for name in names:
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_bytes(data)
    return folder


def zipped(members: dict[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for name, data in members.items():
            archive.writestr(name, data)
    return buffer.getvalue()


def who(roster) -> list[tuple[str, str]]:
    return [(h.student, h.assignment) for h in roster.handed]


def test_student_folders_as_nbgrader_and_release_lay_them_out(tmp_path):
    files(tmp_path, [f"alice/{A}/{A}.ipynb", f"alice/{A}/timestamp.txt", f"alice/{B}/mine.ipynb",
                     f"bob/{A}/{A}.ipynb", f"bob/{A}/other.ipynb"])
    roster = find(tmp_path)
    assert who(roster) == [("alice", A), ("alice", B), ("bob", A)]
    assert roster.handed[2].source.path.name == f"{A}.ipynb"  # of two notebooks, the one named as in release/
    assert who(find(tmp_path, [B])) == [("alice", B)]


def test_moodle_folders_hold_loose_notebooks(tmp_path):
    files(tmp_path, [f"Li Lei_1042_assignsubmission_file_/{A}.ipynb",
                     f"Han Mei_1043_assignsubmission_file_/{B}-final.ipynb"])
    assert who(find(tmp_path)) == [("Han Mei_1043", B), ("Li Lei_1042", A)]


@pytest.mark.parametrize("name, student, assignment", [
    (f"lilei_1042_990001_{A}.ipynb", "lilei_1042", A),  # Canvas
    (f"lilei_LATE_1042_990001_{A}-1.ipynb", "lilei_1042", A),  # Canvas, late, resubmitted
    (f"Li Lei_1042_assignsubmission_file_{A}.ipynb", "Li Lei_1042", A),  # Moodle
    (f"Attention 01_lilei_attempt_2026-03-01-10-22-45_{A}.ipynb", "lilei", A),  # Blackboard
    (f"lilei_{A}.ipynb", "lilei", A),
    (f"{A}-lilei.ipynb", "lilei", A),
    ("lilei.zip", "lilei", A),  # a zip of notebooks named after their assignments
])
def test_lms_file_names(tmp_path, name, student, assignment):
    data = zipped({f"work/{A}.ipynb": NOTEBOOK, "__MACOSX/._x.ipynb": b""}) if name.endswith(".zip") else NOTEBOOK
    assert who(find(files(tmp_path, [name], data))) == [(student, assignment)]


def test_canvas_marks_late_files_and_the_other_exports_say_nothing(tmp_path):
    files(tmp_path, [f"lilei_LATE_1042_990001_{A}.ipynb", f"hanmei_1043_990002_{A}.ipynb",
                     f"Wang Fang_1044_assignsubmission_file_{A}.ipynb",
                     f"Attention 01_zhaolei_attempt_2026-03-01-10-22-45_{A}.ipynb", f"sunli_{A}.ipynb"])
    files(tmp_path, ["zhouyu_LATE_1045_990005_attention.zip"], zipped({f"{A}.ipynb": NOTEBOOK}))
    assert {h.student: h.late for h in find(tmp_path).handed} == {
        "lilei_1042": True, "hanmei_1043": False, "zhouyu_1045": True,  # Canvas: _LATE or not
        "Wang Fang_1044": None, "zhaolei": None, "sunli": None}  # Moodle, Blackboard, plain: not said
    files(tmp_path / "nbgrader", [f"alice/{A}/{A}.ipynb"])
    assert [h.late for h in find(tmp_path / "nbgrader").handed] == [None]


def test_a_name_without_an_assignment_needs_one_assignment_given(tmp_path):
    files(tmp_path, ["alice.ipynb", "bob.ipynb"])
    with pytest.raises(RosterError, match="alice.ipynb: no assignment in the name"):
        find(tmp_path)
    assert who(find(tmp_path, [B])) == [("alice", B), ("bob", B)]


def test_a_zip_may_hold_several_assignments(tmp_path):
    files(tmp_path, ["alice.zip"], zipped({f"{A}/{A}.ipynb": NOTEBOOK, f"{B}.ipynb": NOTEBOOK}))
    roster = find(tmp_path)
    assert who(roster) == [("alice", A), ("alice", B)]
    assert read_notebook(roster.handed[0].source, tmp_path) == NOTEBOOK


@pytest.mark.parametrize("names, message", [
    ([f"alice_{A}.ipynb", f"{A}_alice.ipynb"], "alice has 2 notebooks for 01_attention_basics"),
    ([f"alice_{A}_{B}.ipynb"], "names more than one assignment"),
    ([f"Alice_{A}.ipynb", f"alice_{A}.ipynb"], "differ only in case"),
    ([f"alice/{A}/{A}.ipynb", f"bob_{A}.ipynb"], "mixes folders"),
    ([f"{A}/{A}.ipynb"], "looks like one student's folder"),
    ([f"{A}.ipynb"], "the student's name cannot be read"),
])
def test_ambiguous_classes_are_refused_with_a_message(tmp_path, names, message):
    with pytest.raises(RosterError, match=message):
        find(files(tmp_path, names))


def test_files_beside_the_submissions_are_listed_not_graded(tmp_path):
    files(tmp_path, [f"alice_{A}.ipynb", "index.html", "alice_attempt.txt"])
    roster = find(tmp_path)
    assert who(roster) == [("alice", A)] and roster.ignored == ["alice_attempt.txt", "index.html"]


def test_a_bad_zip_is_the_students_problem_not_the_class(tmp_path):
    files(tmp_path, [f"alice_{A}.zip"], b"not a zip")
    files(tmp_path, [f"bob_{A}.zip"], zipped({"x.ipynb": NOTEBOOK, "y.ipynb": NOTEBOOK}))
    roster = find(tmp_path)
    assert [h.source for h in roster.handed] == [None, None]
    assert "不是能打开的 zip" in roster.handed[0].problem and "好几个 notebook" in roster.handed[1].problem


def test_zip_members_and_links_are_read_within_the_caps(tmp_path):
    big = b" " * (limits.NOTEBOOK_BYTES + 1)
    files(tmp_path, [f"alice_{A}.zip"], zipped({f"{A}.ipynb": big}))
    outside = tmp_path.parent / "outside.ipynb"
    outside.write_bytes(NOTEBOOK)
    (tmp_path / f"bob_{A}.ipynb").symlink_to(outside)
    roster = find(tmp_path)
    for handed in roster.handed:
        with pytest.raises(NotebookError):
            read_notebook(handed.source, tmp_path)


def test_shards_are_disjoint_slices_that_cover_the_class():
    students = [f"s{i:02d}" for i in range(11)]
    slices = [shard_students(students, (i, 3)) for i in (1, 2, 3)]
    assert sorted(s for part in slices for s in part) == students and {len(s) for s in slices} == {3, 4}
    assert parse_shard("2/3") == (2, 3)
    for bad in ("0/3", "4/3", "1-3", "x"):
        with pytest.raises(ShardError):
            parse_shard(bad)
