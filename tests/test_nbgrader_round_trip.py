"""A real nbgrader round trip: generate → submitted → autograde → feedback, for a correct, an untouched
and a half-done submission. nbgrader's marks must equal `pytest autograder/`'s, exercise by exercise,
and the feedback must show no hidden-test code."""
import json
import shutil
import subprocess
import sys

import pytest
from nbgrader.api import Gradebook

from autograder.assignments import ASSIGNMENTS, REPO
from autograder.release import generate
from tests.notebooks import ASSIGNMENT, filled, released, source_solutions, write_submission

EXERCISES = [e.name for e in ASSIGNMENTS[ASSIGNMENT]]
# Passes the notebook's visible checks (float32 only) but not the hidden ones: float64 comes back float32.
SNEAKY_ATTENTION = """
def attention(q, k, v, mask=None):
    weights = masked_softmax(attention_scores(q.float(), k.float()), mask)
    return weights @ v.float(), weights
"""


@pytest.fixture(scope="module")
def course(tmp_path_factory):
    root = tmp_path_factory.mktemp("course")
    shutil.copy(REPO / "nbgrader_config.py", root)
    generate(root)
    solutions = source_solutions()
    submissions = {
        "correct": filled(solutions),
        "untouched": released(),
        "half": filled({name: solutions[name] for name in EXERCISES[:3]}),
        "sneaky": filled({**solutions, "attention": SNEAKY_ATTENTION}),
    }
    for student, nb in submissions.items():
        write_submission(root / "submitted" / student, nb)
    for step in (["autograde", "--create"], ["generate_feedback"]):
        done = subprocess.run([sys.executable, "-m", "nbgrader", *step, ASSIGNMENT, "--force"],
                              cwd=root, capture_output=True, text=True)
        assert done.returncode == 0, done.stdout + done.stderr
    return root


def nbgrader_marks(root, student) -> dict[str, float]:
    with Gradebook(f"sqlite:///{root / 'gradebook.db'}") as gradebook:
        notebook = gradebook.find_submission_notebook(ASSIGNMENT, ASSIGNMENT, student)
        return {g.name.removeprefix("tests_"): g.score for g in notebook.grades if g.name.startswith("tests_")}


def pytest_marks(root, student, tmp_path) -> dict[str, float]:
    results = tmp_path / f"{student}.json"
    subprocess.run([sys.executable, "-m", "pytest", "autograder/", "-p", "no:cacheprovider",
                    "--submission", root / "submitted" / student, "--results-json", results],
                   cwd=REPO, capture_output=True, text=True)
    tests = json.loads(results.read_text(encoding="utf-8"))["tests"]
    # The submission folder holds this assignment only; the others are graded 0 as missing: leave them out.
    return {t["name"].split(" / ")[1]: t["score"] for t in tests if t["name"].startswith(f"{ASSIGNMENT} / ")}


@pytest.mark.parametrize("student, expected", [("correct", 12), ("untouched", 0), ("half", 6), ("sneaky", 9)])
def test_nbgrader_and_pytest_agree(course, student, expected, tmp_path):
    by_nbgrader = nbgrader_marks(course, student)
    assert sum(by_nbgrader.values()) == expected
    assert by_nbgrader == pytest_marks(course, student, tmp_path)


@pytest.mark.parametrize("student", ["correct", "untouched", "half", "sneaky"])
def test_feedback_shows_no_hidden_tests(course, student):
    html = (course / "feedback" / student / ASSIGNMENT / f"{ASSIGNMENT}.html").read_text(encoding="utf-8")
    assert "HIDDEN TESTS" not in html
    assert "autograder" not in html
    assert "grade(" not in html


def test_feedback_explains_a_hidden_failure(course):
    html = (course / "feedback" / "sneaky" / ASSIGNMENT / f"{ASSIGNMENT}.html").read_text(encoding="utf-8")
    assert "GradingFailure" in html
    assert "dtype 不对" in html
