"""Notebooks for the tests: the released 01, and copies of it filled in as a student would."""
import copy
from pathlib import Path

import nbformat

from autograder.assignments import REPO
from autograder.release import build_source_notebook

ASSIGNMENT = "01_attention_basics"
RELEASED = REPO / "release" / ASSIGNMENT / f"{ASSIGNMENT}.ipynb"
SOURCE_PY = REPO / "source" / ASSIGNMENT / f"{ASSIGNMENT}.py"


def released() -> nbformat.NotebookNode:
    return nbformat.read(RELEASED, as_version=4)


def source_solutions() -> dict[str, str]:
    """Exercise -> the source notebook's solution cell, markers removed: what a student would type."""
    solutions = {}
    for cell in build_source_notebook(SOURCE_PY, ASSIGNMENT).cells:
        grade_id = cell.metadata.get("nbgrader", {}).get("grade_id", "")
        if grade_id.startswith("solution_"):
            lines = [line for line in cell.source.splitlines() if "### BEGIN SOLUTION" not in line
                     and "### END SOLUTION" not in line]
            solutions[grade_id.removeprefix("solution_")] = "\n".join(lines)
    return solutions


def filled(answers: dict[str, str]) -> nbformat.NotebookNode:
    """The released notebook with the solution cells of ``answers`` replaced by their code."""
    nb = copy.deepcopy(released())
    for cell in nb.cells:
        grade_id = cell.metadata.get("nbgrader", {}).get("grade_id", "")
        exercise = grade_id.removeprefix("solution_")
        if grade_id.startswith("solution_") and exercise in answers:
            cell.source = answers[exercise]
    return nb


def write_submission(folder: Path, nb: nbformat.NotebookNode) -> Path:
    """Lay ``nb`` out like release/: ``folder/01_attention_basics/01_attention_basics.ipynb``."""
    path = folder / ASSIGNMENT / f"{ASSIGNMENT}.ipynb"
    path.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, path)
    return path
