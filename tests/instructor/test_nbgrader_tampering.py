"""Tampered nbgrader metadata under a real `nbgrader autograde`: a pasted copy of a test cell, renamed and
unknown grade_ids, points raised to 999, a deleted test cell, metadata that is not nbgrader's shape. Each of
these used to stop nbgrader (for the whole class, with an outdated schema); now every notebook is graded from
what the student wrote against the released cells and points (autograder/instructor/nbgrader_cells.py), and
the honest student graded after them is graded as usual."""
import copy
import shutil
import subprocess
import sys

import nbformat
import pytest
from nbformat.corpus.words import generate_corpus_id as random_cell_id
from nbgrader.api import Gradebook

from autograder.engine.assignments import ASSIGNMENTS
from tests.notebooks import filled, source_solutions, write_submission

pytestmark = [pytest.mark.nbgrader, pytest.mark.slow]  # one cold nbgrader run over five notebooks
FIRST = "01_attention_basics"
POINTS = {f"tests_{e.name}": e.points for e in ASSIGNMENTS[FIRST]}
FULL = dict(POINTS)
HONEST = "z-honest"  # nbgrader grades in name order: after every tampered notebook
HALF = ("attention_scores", "causal_mask", "padding_mask")  # what the repointed notebook solved


def cell(nb, grade_id):
    return next(c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") == grade_id)


def pasted_copy(original):
    """``original`` pasted in JupyterLab: its metadata too, under a new cell id."""
    pasted = copy.deepcopy(original)
    pasted.id = random_cell_id()
    return pasted


def pasted():
    """The first test cell pasted twice (at the top and at the end), and a solution cell pasted once more."""
    nb = filled(source_solutions(FIRST), FIRST)
    test = cell(nb, "tests_attention_scores")
    nb.cells = [pasted_copy(test), *nb.cells, pasted_copy(test), pasted_copy(cell(nb, "solution_attention"))]
    return nb


def renamed():
    """One test cell renamed to another's grade_id, one to an unknown grade_id, a solution cell to another's."""
    nb = filled(source_solutions(FIRST), FIRST)
    cell(nb, "tests_causal_mask").metadata.nbgrader.grade_id = "tests_attention_scores"
    cell(nb, "tests_masked_softmax").metadata.nbgrader.grade_id = "tests_bonus"
    cell(nb, "solution_padding_mask").metadata.nbgrader.grade_id = "solution_attention_scores"
    return nb


def repointed():
    """Half done; a passing test cell raised to 999 points, a failing one too, a test cell deleted."""
    solutions = source_solutions(FIRST)
    nb = filled({name: solutions[name] for name in HALF}, FIRST)
    cell(nb, "tests_attention_scores").metadata.nbgrader.points = 999
    cell(nb, "tests_attention").metadata.nbgrader.points = 999
    nb.cells.remove(cell(nb, "tests_causal_mask"))
    return nb


def broken():
    """nbgrader metadata that is a string, a list, without schema_version (nbgrader: 'old version of the
    nbgrader metadata format', which stopped the class) and missing entirely."""
    nb = filled(source_solutions(FIRST), FIRST)
    scores, mask, padding, attention = (cell(nb, grade_id) for grade_id in (
        "tests_attention_scores", "solution_causal_mask", "tests_padding_mask", "tests_attention"))
    scores.metadata.nbgrader = "oops"
    mask.metadata.nbgrader = ["grade"]
    del padding.metadata.nbgrader["schema_version"]
    del attention.metadata["nbgrader"]
    return nb


# student -> (their notebook, the marks they must get: each grade cell's points)
STUDENTS = {
    "a-pasted": (pasted, FULL),
    "b-renamed": (renamed, FULL),
    "c-repointed": (repointed, {**POINTS, **{f"tests_{e.name}": 0 for e in ASSIGNMENTS[FIRST]
                                            if e.name not in HALF}}),
    "d-broken": (broken, FULL),
    HONEST: (lambda: filled(source_solutions(FIRST), FIRST), FULL),
}


@pytest.fixture(scope="module")
def autograded(generated_course, tmp_path_factory):
    """A copy of the generated course, the class above autograded by one `nbgrader autograde`."""
    root = tmp_path_factory.mktemp("tampering") / "course"
    shutil.copytree(generated_course, root)
    for student, (notebook, _) in STUDENTS.items():
        write_submission(root / "submitted" / student, notebook(), FIRST)
    done = subprocess.run([sys.executable, "-m", "nbgrader", "autograde", FIRST, "--create", "--force"],
                          cwd=root, capture_output=True, text=True)
    return root, done


def grades(root, student) -> dict[str, tuple[float, float]]:
    """grade_id -> (score, max score) of each of ``student``'s grade cells, as the gradebook holds them."""
    with Gradebook(f"sqlite:///{root / 'gradebook.db'}") as gradebook:
        notebook = gradebook.find_submission_notebook(FIRST, FIRST, student)
        return {g.name: (g.score, g.max_score) for g in notebook.grades}


def test_the_command_grades_the_whole_class(autograded):
    root, done = autograded
    assert done.returncode == 0, done.stdout + done.stderr
    for student in STUDENTS:
        assert (root / "autograded" / student / FIRST / f"{FIRST}.ipynb").exists(), student


@pytest.mark.parametrize("student", STUDENTS)
def test_each_student_gets_the_marks_of_what_they_wrote(autograded, student):
    root, _ = autograded
    every = grades(root, student)
    # The thinking questions' answer cells are graded by hand and carry no points.
    assert all(max_score == 0 for name, (_, max_score) in every.items() if name.startswith("answer_"))
    got = {name: marks for name, marks in every.items() if not name.startswith("answer_")}
    assert {name: max_score for name, (_, max_score) in got.items()} == POINTS  # the released points
    assert {name: score for name, (score, _) in got.items()} == STUDENTS[student][1]


def test_an_honest_notebook_gives_nbgrader_nothing_to_warn_about(autograded):
    """Each test cell once, with its hidden tests back, and not one warning while the honest notebook is graded:
    the formgrader's Autograde dialog shows warnings only for notebooks that were changed."""
    root, done = autograded
    honest_log = done.stderr.split(f"submitted/{HONEST}/", 1)[1]
    assert "WARNING" not in honest_log, honest_log
    graded = nbformat.read(root / "autograded" / HONEST / FIRST / f"{FIRST}.ipynb", as_version=4)
    released = nbformat.read(root / "release" / FIRST / f"{FIRST}.ipynb", as_version=4)
    ids = [c.metadata.get("nbgrader", {}).get("grade_id") for c in graded.cells]
    assert len(graded.cells) == len(released.cells) and all(ids.count(i) == 1 for i in ids if i)
    tests = [c for c in graded.cells if c.metadata.get("nbgrader", {}).get("grade_id", "").startswith("tests_")]
    assert tests and all("BEGIN HIDDEN TESTS" in c.source for c in tests)
