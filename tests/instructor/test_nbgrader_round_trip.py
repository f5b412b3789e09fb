"""A real nbgrader round trip: generate → submitted → autograde → feedback. Every assignment gets a
correct and an untouched submission, 01 also a half-done one, one with a named mistake, one that passes
the visible checks only, one whose error message no file can hold, and a hostile one, graded first, that
attacks the gradebook, the other students and nbgrader itself. nbgrader's marks must equal `pytest
autograder/`'s and `course-grade`'s (the whole class at once), exercise by exercise, the hostile student must
change nothing but their own marks, and the feedback must show no hidden-test code. (`pytest autograder/`'s
marks are the engine's, graded in this process as the plugin grades: the command itself is tested in
tests/commands/test_autograder_cli.py.)"""
import csv
import shutil
import subprocess
import sys

import pytest
from nbgrader.api import Gradebook

from autograder.engine.assignments import ASSIGNMENTS
from autograder.engine.grading import grade_notebook
from autograder.instructor.classroom.course_grade import main as course_grade
from tests.class_of_students import unwritable
from tests.notebooks import filled, released, source_solutions, write_submission
from tests.students import a01

# Three channels, each started cold on 18 notebooks (nbgrader twice, course-grade's workers): a minute.
pytestmark = [pytest.mark.nbgrader, pytest.mark.slow]
FIRST = "01_attention_basics"
# Passes the notebook's visible checks (float32 only) but not the hidden ones: float64 comes back float32.
SNEAKY_ATTENTION = """
def attention(q, k, v, mask=None):
    weights = masked_softmax(attention_scores(q.float(), k.float()), mask)
    return weights @ v.float(), weights
"""


MISTAKE = next(m for m in a01.MISTAKES if m[0] == "padding_mask")  # no later exercise calls padding_mask
HOSTILE = "aaa-hostile"  # nbgrader grades students in name order: this one goes first


def hostile(root) -> dict:
    """A notebook that, run the way nbgrader runs notebooks, would give itself full marks, zero another
    student's grades, plant files for the students after it and kill nbgrader."""
    planted = [root / "planted.py", root / "autograded" / "correct" / FIRST / "torch.py", root / "gradebook.db"]
    return filled({
        "attention_scores": """
import autograder.instructor.hidden_cells
autograder.instructor.hidden_cells.grade = lambda name: print("✓ " + name)  # in a kernel, every hidden test would pass
def attention_scores(q, k):
    raise NotImplementedError()
""",
        "causal_mask": f"""
import sqlite3
GRADEBOOK = sqlite3.connect({str(root / "gradebook.db")!r}).executescript(
    "UPDATE grade SET auto_score = 0; UPDATE grade SET manual_score = 99;")
def causal_mask(q_len, k_len=None):
    raise NotImplementedError()
""",
        "padding_mask": f"""
PLANTED = [open(path, "a").write("import os; os._exit(0)") for path in {[str(p) for p in planted]!r}]
def padding_mask(attention_mask):
    raise NotImplementedError()
""",
        "masked_softmax": """
import os, signal
KILLED = [os.kill(pid, signal.SIGKILL) for pid in (os.getppid(), -1)]
def masked_softmax(scores, mask=None):
    raise NotImplementedError()
""",
    })


def max_points(assignment):
    return sum(e.points for e in ASSIGNMENTS[assignment])


# (assignment, student) -> the total nbgrader and pytest must both give; the notebooks are built by ``notebook``.
EXPECTED = {
    **{(a, "correct"): max_points(a) for a in ASSIGNMENTS},
    **{(a, "untouched"): 0 for a in ASSIGNMENTS},
    (FIRST, "half"): sum(e.points for e in ASSIGNMENTS[FIRST][:3]),
    (FIRST, "sneaky"): max_points(FIRST) - 3,
    (FIRST, "mistaken"): max_points(FIRST) - 2,
    (FIRST, HOSTILE): 0,
    (FIRST, "unwritable"): max_points(FIRST) - 2,  # its padding_mask raises text no file can hold
}
STUDENTS = sorted({s for _, s in EXPECTED})


def notebook(assignment: str, student: str, root):
    """The notebook ``student`` hands in for ``assignment`` in the course folder ``root``."""
    solutions = source_solutions(assignment)
    return {
        "correct": lambda: filled(solutions, assignment),
        "untouched": lambda: released(assignment),
        "half": lambda: filled({e.name: solutions[e.name] for e in ASSIGNMENTS[FIRST][:3]}),
        "sneaky": lambda: filled({**solutions, "attention": SNEAKY_ATTENTION}),
        "mistaken": lambda: filled({**solutions, "padding_mask": MISTAKE[2]}),
        HOSTILE: lambda: hostile(root),  # built in the course folder, whose paths it attacks
        "unwritable": lambda: unwritable(FIRST),
    }[student]()


@pytest.fixture(scope="module")
def course(generated_course, tmp_path_factory):
    """A copy of the generated course, every submission autograded and given feedback by nbgrader."""
    root = tmp_path_factory.mktemp("course") / "course"
    shutil.copytree(generated_course, root)
    for assignment, student in EXPECTED:
        write_submission(root / "submitted" / student, notebook(assignment, student, root), assignment)
    for step in (["autograde", "--create"], ["generate_feedback"]):  # every assignment in one nbgrader run
        done = subprocess.run([sys.executable, "-m", "nbgrader", *step, "*", "--force"],
                              cwd=root, capture_output=True, text=True)
        assert done.returncode == 0, done.stdout + done.stderr
    return root


def nbgrader_marks(root, assignment, student) -> dict[str, float]:
    with Gradebook(f"sqlite:///{root / 'gradebook.db'}") as gradebook:
        notebook = gradebook.find_submission_notebook(assignment, assignment, student)
        return {g.name.removeprefix("tests_"): g.score for g in notebook.grades if g.name.startswith("tests_")}


@pytest.fixture(scope="module")
def pytest_marks(course, sandbox) -> dict[tuple[str, str], dict[str, float]]:
    """(assignment, student) -> exercise -> points, as `pytest autograder/` grades the submitted notebook."""
    return {(assignment, student): {v.exercise: v.points for v in grade_notebook(
                course / "submitted" / student / assignment / f"{assignment}.ipynb", sandbox=sandbox)}
            for assignment, student in EXPECTED}


@pytest.fixture(scope="module")
def course_grade_marks(course, tmp_path_factory) -> dict[tuple[str, str], dict[str, float]]:
    """(assignment, student) -> exercise -> points from one `course-grade` run over the whole class."""
    out = tmp_path_factory.mktemp("course-grade")
    # One worker: the test run's workers already fill the cores, and a second would only add its start-up.
    assert course_grade([str(course / "submitted"), "--out", str(out), "--jobs", "1"]) == 0
    marks = {}
    with open(out / "grades.csv", encoding="utf-8-sig", newline="") as f:
        for row in csv.DictReader(f):
            for column, points in row.items():
                assignment, _, exercise = column.partition("/")
                if exercise and points:  # an exercise's column, of an assignment this student handed in
                    marks.setdefault((assignment, row["student"]), {})[exercise] = float(points)
    return marks


def feedback(root, assignment, student) -> str:
    return (root / "feedback" / student / assignment / f"{assignment}.html").read_text(encoding="utf-8")


@pytest.mark.parametrize("assignment, student", EXPECTED, ids=[f"{a}-{s}" for a, s in EXPECTED])
def test_nbgrader_and_pytest_agree(course, pytest_marks, assignment, student):
    by_nbgrader = nbgrader_marks(course, assignment, student)
    assert sum(by_nbgrader.values()) == EXPECTED[assignment, student]
    assert by_nbgrader == pytest_marks[assignment, student]


@pytest.mark.parametrize("assignment, student", EXPECTED, ids=[f"{a}-{s}" for a, s in EXPECTED])
def test_course_grade_agrees_with_nbgrader(course, course_grade_marks, assignment, student):
    assert course_grade_marks[assignment, student] == nbgrader_marks(course, assignment, student)


@pytest.mark.parametrize("assignment, student", EXPECTED, ids=[f"{a}-{s}" for a, s in EXPECTED])
def test_feedback_shows_no_hidden_tests(course, assignment, student):
    html = feedback(course, assignment, student)
    assert "HIDDEN TESTS" not in html
    assert "import grade" not in html and "grade(" not in html  # the hidden cells' code
    assert "Traceback (most recent call last)" not in html and "judging.py" not in html  # nor grader source


def test_a_hostile_student_changes_nothing_outside_their_own_marks(course):
    """Every other student's marks are checked by test_nbgrader_and_pytest_agree; here, what else it tried."""
    assert not (course / "planted.py").exists()
    assert not (course / "autograded" / "correct" / FIRST / "torch.py").exists()
    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gradebook:
        for student in STUDENTS:
            notebook = gradebook.find_submission_notebook(FIRST, FIRST, student)
            assert all(g.manual_score is None for g in notebook.grades), student
    html = feedback(course, FIRST, HOSTILE)
    assert "执行 notebook 里的定义时出错" in html  # its attacks, run in the sandbox, failed


def test_feedback_explains_a_hidden_failure(course):
    html = feedback(course, FIRST, "sneaky")
    assert "GradingFailure" in html
    assert "dtype 不对" in html
