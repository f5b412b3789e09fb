"""The LMS round trip with Canvas: `course-grade submissions.zip` takes the download as Canvas hands it over (never
changed, nothing of it left behind), and writes canvas.csv, which Canvas's Gradebook Import reads, and one
feedback zip per assignment, which its "Re-Upload Submissions" routes back to each student."""
import csv
import hashlib
import io
import json
import tempfile
import uuid
import zipfile
from pathlib import Path
from unittest import mock

import pytest

from autograder.engine.assignments import ASSIGNMENTS
from autograder.instructor.classroom.canvas_return import CanvasReturn
from autograder.instructor.classroom.download import unpacked
from autograder.instructor.classroom.graded_class import Entry, GradedClass
from autograder.instructor.classroom.roster import canvas_name, find
from tests.class_of_students import with_mistake
from tests.classroom.test_class_roster import zipped
from tests.classroom.test_course_grade import course_grade
from tests.notebooks import filled, released, source_solutions
from tests.students import a01

A = "01_attention_basics"
MISTAKE = next(m for m in a01.MISTAKES if m[0] == "padding_mask")  # no later exercise calls padding_mask
FULL = sum(e.points for e in ASSIGNMENTS[A])
MISTAKEN = FULL - next(e.points for e in ASSIGNMENTS[A] if e.name == MISTAKE[0])
# Canvas's download names: <lastfirst>[_LATE]_<user id>_<file id>_<the student's own file name>
DOWNLOAD = {
    f"lilei_1042_880001_{A}.ipynb": filled(source_solutions(A)),
    f"hanmei_LATE_1043_880002_{A}-1.ipynb": with_mistake(A, MISTAKE),  # late, and handed in twice
    f"wangfang_1044_880003_{A}.ipynb": released(A),
}
EXPECTED = {"lilei": ("1042", FULL), "hanmei": ("1043", MISTAKEN), "wangfang": ("1044", 0)}
# What a download may also hold, none of it a submission: macOS's copies, a hidden file, a folder entry.
EXTRA = {f"__MACOSX/._lilei_1042_880001_{A}.ipynb": b"\x00\x05\x16\x07", ".DS_Store": b"\x00\x00\x00\x01Bud1",
         "notes/": b""}


def download_zip(path: Path, entries: dict[str, bytes]) -> Path:
    path.write_bytes(zipped(entries))
    return path


def canvas_import_problems(text: str, assignments: list[str]) -> list[str]:
    """What Canvas's Gradebook Import would refuse or misread in ``text``, by the rules its importer applies: a
    header whose first cell names the student and second the ID; SIS User ID and SIS Login ID next; Section the
    last of the student columns; then one column per assignment; a "Points Possible" row; a row per student whose
    ID is a Canvas user id (digits)."""
    problems = []
    rows = list(csv.reader(io.StringIO(text)))
    header = rows[0]
    if not (len(header) > 3 and "Student" in header[0] and "ID" in header[1]):
        problems.append(f"no student header: {header[:2]}")
    if header[2:5] != ["SIS User ID", "SIS Login ID", "Section"]:
        problems.append(f"the student columns do not end in Section: {header[:5]}")
    if header[5:] != assignments:
        problems.append(f"assignment columns {header[5:]}")
    if rows[1][0] != "Points Possible":
        problems.append("no Points Possible row")
    for row in rows[2:]:
        if len(row) != len(header) or not row[1].isdigit():
            problems.append(f"a student row Canvas cannot match by ID: {row}")
    return problems


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    root = tmp_path_factory.mktemp("canvas-class")
    entries = {name: json.dumps(nb).encode() for name, nb in DOWNLOAD.items()} | EXTRA
    download = download_zip(root / "submissions.zip", entries)
    before = hashlib.sha256(download.read_bytes()).hexdigest()
    # The run's temporary folders in one of this test's own: other tests' runs, at the same time, unpack theirs too.
    private = root / "tmp"
    private.mkdir()
    with mock.patch.object(tempfile, "tempdir", str(private)):
        run = course_grade(download, "--out", root / "graded", "--jobs", 1)
    return {"download": download, "before": before, "run": run, "out": root / "graded",
            "left": set(private.glob("course-grade-download-*"))}


@pytest.mark.slow  # one real course-grade run
def test_the_download_is_graded_as_downloaded_and_left_as_it_was(graded):
    assert graded["run"].returncode == 0, graded["run"].stdout + graded["run"].stderr
    with open(graded["out"] / "grades.csv", encoding="utf-8-sig", newline="") as f:
        rows = {row["student"]: row for row in csv.DictReader(f)}
    assert {s: (float(r[A]), r[f"{A}/late"]) for s, r in rows.items()} == {
        "lilei_1042": (FULL, "no"), "hanmei_1043": (MISTAKEN, "yes"), "wangfang_1044": (0, "no")}
    assert hashlib.sha256(graded["download"].read_bytes()).hexdigest() == graded["before"]
    assert graded["left"] == set()  # the unpacked copy is gone with the run


@pytest.mark.slow
def test_canvas_csv_is_what_the_gradebook_import_reads(graded):
    assert "canvas.csv" in graded["run"].stdout and "Re-Upload Submissions" in graded["run"].stdout
    text = (graded["out"] / "canvas.csv").read_text(encoding="utf-8")
    assert canvas_import_problems(text, [A]) == []
    rows = list(csv.reader(io.StringIO(text)))
    assert rows[1][5] == str(FULL)
    assert {row[0]: (row[1], float(row[5])) for row in rows[2:]} == EXPECTED


def routed_to(file_name: str) -> list[str]:
    """The user id and file id Canvas's "Re-Upload Submissions" reads from a file's name: its first two parts
    of digits between underscores."""
    return [part for part in file_name.split("_") if part.isdigit()][:2]


@pytest.mark.slow
def test_each_feedback_page_goes_back_to_its_students_submission(graded):
    with zipfile.ZipFile(graded["out"] / "canvas-feedback" / f"{A}.zip") as archive:
        pages = {name: archive.read(name).decode("utf-8") for name in archive.namelist()}
    assert len(pages) == len(DOWNLOAD)
    for downloaded in DOWNLOAD:
        canvas = canvas_name(downloaded)
        (page,) = [name for name in pages if routed_to(name) == routed_to(downloaded)]
        assert routed_to(page) == [canvas.user, canvas.prefix.rsplit("_", 1)[1]]
        student = f"{canvas.name}_{canvas.user}"
        assert pages[page] == (graded["out"] / "feedback" / student / f"{A}.html").read_text(encoding="utf-8")


@pytest.mark.slow
def test_the_same_results_give_the_same_bytes(graded, tmp_path):
    again = course_grade(graded["download"], "--out", tmp_path / "again", "--jobs", 1)
    assert again.returncode == 0, again.stdout + again.stderr
    for name in ("canvas.csv", f"canvas-feedback/{A}.zip"):
        assert (tmp_path / "again" / name).read_bytes() == (graded["out"] / name).read_bytes(), name


@pytest.mark.parametrize("kind", ["up", "absolute", "down and up"])
def test_an_entry_that_points_outside_the_folder_refuses_the_download(tmp_path, kind):
    name = f"outside-{uuid.uuid4().hex}.ipynb"
    # Where each entry would land: the unpacked folder lies in the temporary folder.
    landing = Path(tempfile.gettempdir()) / name if kind != "absolute" else tmp_path / name
    entry = {"up": f"../{name}", "absolute": str(landing), "down and up": f"a/../../{name}"}[kind]
    download = download_zip(tmp_path / "submissions.zip", {entry: b"{}"})
    run = course_grade(download, "--out", tmp_path / "graded")
    assert run.returncode == 2 and repr(entry) in run.stderr and "outside" in run.stderr
    assert not landing.exists() and not (tmp_path / "graded" / "grades.csv").exists()


def test_a_damaged_download_is_refused_with_its_name(tmp_path):
    whole = download_zip(tmp_path / "whole.zip", {f"lilei_1042_880001_{A}.ipynb": b"{}" * 1000})
    cut = tmp_path / "submissions.zip"
    cut.write_bytes(whole.read_bytes()[:200])
    run = course_grade(cut, "--out", tmp_path / "graded")
    assert run.returncode == 2 and str(cut) in run.stderr and not (tmp_path / "graded" / "grades.csv").exists()


def test_a_class_not_from_canvas_writes_nothing_for_canvas_and_removes_an_older_run(tmp_path):
    (tmp_path / "canvas-feedback").mkdir()
    for old in (tmp_path / "canvas.csv", tmp_path / "canvas-feedback" / f"{A}.zip"):
        old.write_text("from an earlier run", encoding="utf-8")
    graded = GradedClass([Entry("alice", A, "0" * 64, f"alice/{A}/{A}.ipynb", None)], None, (1, 1), "")
    canvas = CanvasReturn(tmp_path, graded)
    canvas.add("alice", {A: FULL}, {A: "<p>page</p>"})
    assert canvas.close() is False
    assert not (tmp_path / "canvas.csv").exists() and not (tmp_path / "canvas-feedback").exists()


def test_a_file_id_is_what_canvas_wrote_and_other_names_are_not_canvas():
    found = canvas_name(f"hanmei_LATE_1043_880002_{A}-1.ipynb")
    assert (found.name, found.late, found.user, found.prefix) == ("hanmei", True, "1043", "hanmei_LATE_1043_880002")
    assert canvas_name(f"alice_{A}.ipynb") is None and canvas_name(f"Li Lei_123_assignsubmission_file_{A}.ipynb") is None


def test_moodles_and_blackboards_downloads_are_read_as_their_folders_are(tmp_path):
    notebook = json.dumps(released(A)).encode()
    moodle = download_zip(tmp_path / "moodle.zip", {f"Li Lei_123_assignsubmission_file_/{A}.ipynb": notebook,
                                                    f"Han Mei_124_assignsubmission_file_/{A}.zip": zipped({f"{A}.ipynb": notebook})})
    blackboard = download_zip(tmp_path / "blackboard.zip",
                              {f"Attention_u42_attempt_2026-03-01-10-00-00_{A}.ipynb": notebook})
    for download, students in ((moodle, ["Han Mei_124", "Li Lei_123"]), (blackboard, ["u42"])):
        with unpacked(download) as folder:
            assert find(folder).students == students
        assert not folder.exists()
