"""A real nbgrader round trip: generate → submitted → autograde → feedback. Every assignment gets a
correct and an untouched submission, 01 also a half-done one and one that passes the visible checks
only. nbgrader's marks must equal `pytest autograder/`'s, exercise by exercise, and the feedback must
show no hidden-test code."""
import json
import shutil
import subprocess
import sys

import pytest
from nbgrader.api import Gradebook

from autograder.assignments import ASSIGNMENTS, REPO
from autograder.release import generate
from tests.notebooks import filled, released, source_solutions, write_submission

FIRST = "01_attention_basics"
# Passes the notebook's visible checks (float32 only) but not the hidden ones: float64 comes back float32.
SNEAKY_ATTENTION = """
def attention(q, k, v, mask=None):
    weights = masked_softmax(attention_scores(q.float(), k.float()), mask)
    return weights @ v.float(), weights
"""


def max_points(assignment):
    return sum(e.points for e in ASSIGNMENTS[assignment])


def submissions() -> dict:
    """(assignment, student) -> (notebook, the total nbgrader and pytest must both give)."""
    found = {}
    for assignment in ASSIGNMENTS:
        found[assignment, "correct"] = filled(source_solutions(assignment), assignment), max_points(assignment)
        found[assignment, "untouched"] = released(assignment), 0
    solutions = source_solutions(FIRST)
    first_three = {e.name: solutions[e.name] for e in ASSIGNMENTS[FIRST][:3]}
    found[FIRST, "half"] = filled(first_three), sum(e.points for e in ASSIGNMENTS[FIRST][:3])
    found[FIRST, "sneaky"] = filled({**solutions, "attention": SNEAKY_ATTENTION}), max_points(FIRST) - 3
    return found


SUBMISSIONS = submissions()


@pytest.fixture(scope="module")
def course(tmp_path_factory):
    root = tmp_path_factory.mktemp("course")
    shutil.copy(REPO / "nbgrader_config.py", root)
    generate(root)
    for (assignment, student), (nb, _) in SUBMISSIONS.items():
        write_submission(root / "submitted" / student, nb, assignment)
    for assignment in ASSIGNMENTS:
        for step in (["autograde", "--create"], ["generate_feedback"]):
            done = subprocess.run([sys.executable, "-m", "nbgrader", *step, assignment, "--force"],
                                  cwd=root, capture_output=True, text=True)
            assert done.returncode == 0, done.stdout + done.stderr
    return root


def nbgrader_marks(root, assignment, student) -> dict[str, float]:
    with Gradebook(f"sqlite:///{root / 'gradebook.db'}") as gradebook:
        notebook = gradebook.find_submission_notebook(assignment, assignment, student)
        return {g.name.removeprefix("tests_"): g.score for g in notebook.grades if g.name.startswith("tests_")}


def pytest_marks(root, assignment, student, tmp_path) -> dict[str, float]:
    results = tmp_path / f"{student}.json"
    subprocess.run([sys.executable, "-m", "pytest", "autograder/", "-p", "no:cacheprovider",
                    "--submission", root / "submitted" / student / assignment, "--results-json", results],
                   cwd=REPO, capture_output=True, text=True)
    tests = json.loads(results.read_text(encoding="utf-8"))["tests"]
    return {t["name"].split(" / ")[1]: t["score"] for t in tests}


def feedback(root, assignment, student) -> str:
    return (root / "feedback" / student / assignment / f"{assignment}.html").read_text(encoding="utf-8")


@pytest.mark.parametrize("assignment, student", SUBMISSIONS, ids=[f"{a}-{s}" for a, s in SUBMISSIONS])
def test_nbgrader_and_pytest_agree(course, assignment, student, tmp_path):
    by_nbgrader = nbgrader_marks(course, assignment, student)
    assert sum(by_nbgrader.values()) == SUBMISSIONS[assignment, student][1]
    assert by_nbgrader == pytest_marks(course, assignment, student, tmp_path)


@pytest.mark.parametrize("assignment, student", SUBMISSIONS, ids=[f"{a}-{s}" for a, s in SUBMISSIONS])
def test_feedback_shows_no_hidden_tests(course, assignment, student):
    html = feedback(course, assignment, student)
    assert "HIDDEN TESTS" not in html
    assert "autograder" not in html
    assert "grade(" not in html


def test_feedback_explains_a_hidden_failure(course):
    html = feedback(course, FIRST, "sneaky")
    assert "GradingFailure" in html
    assert "dtype 不对" in html
