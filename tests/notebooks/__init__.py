"""Notebooks for the tests: the released ones, and copies filled in as a student would."""
import copy
from pathlib import Path
from typing import TYPE_CHECKING

from autograder.instructor.release import solution_code
from course.layout import ROOT as REPO

if TYPE_CHECKING:  # imported where used: with jsonschema, seconds that a test of the grader alone should not pay
    import nbformat

ASSIGNMENT = "01_attention_basics"
# Each solved source notebook is executed once in a full run: these in JupyterLab itself (tests/notebooks/test_browser.py),
# the others by nbclient (tests/instructor/test_release.py).
IN_THE_BROWSER = ("01_attention_basics",)


def released_path(assignment: str = ASSIGNMENT) -> Path:
    return REPO / "release" / assignment / f"{assignment}.ipynb"


def released(assignment: str = ASSIGNMENT) -> "nbformat.NotebookNode":
    import nbformat

    return nbformat.read(released_path(assignment), as_version=4)


def source_solutions(assignment: str = ASSIGNMENT) -> dict[str, str]:
    """Exercise -> the source notebook's solution, markers removed: what a student would type."""
    return solution_code(assignment)


def filled(answers: dict[str, str], assignment: str = ASSIGNMENT) -> "nbformat.NotebookNode":
    """The released notebook with the solution cells of ``answers`` replaced by their code."""
    nb = copy.deepcopy(released(assignment))
    for cell in nb.cells:
        grade_id = cell.metadata.get("nbgrader", {}).get("grade_id", "")
        exercise = grade_id.removeprefix("solution_")
        if grade_id.startswith("solution_") and exercise in answers:
            cell.source = answers[exercise]
    return nb


def write_submission(folder: Path, nb: "nbformat.NotebookNode", assignment: str = ASSIGNMENT) -> Path:
    """Lay ``nb`` out like release/: ``folder/<assignment>/<assignment>.ipynb``."""
    path = folder / assignment / f"{assignment}.ipynb"
    path.parent.mkdir(parents=True, exist_ok=True)
    import nbformat

    nbformat.write(nb, path)
    return path
