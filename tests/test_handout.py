"""`course-handout`: what a class hands out holds no solution, no reference and no hidden test; installed
plainly (not editable) it finds the layer-3 stand-in; a notebook from it runs, and grades."""
import json
import os
import re
import subprocess
import sys

import nbformat
import pytest
from nbclient import NotebookClient

from autograder.engine.assignments import ASSIGNMENTS
from autograder.engine.grading import grade_cells, notebook_cells
from autograder.engine.sandbox.client import shared
from autograder.instructor.handout import main, provided_answers
from autograder.instructor.release import solution_code
from course.layout import ROOT as REPO

A = "01_attention_basics"
RELEASED = [a for a in ASSIGNMENTS if (REPO / "release" / a).is_dir()]


@pytest.fixture(scope="module")
def handout(tmp_path_factory):
    out = tmp_path_factory.mktemp("handout") / "attention-course"
    assert main([str(out)]) == 0
    return out


@pytest.fixture(scope="module")
def installed(handout, tmp_path_factory):
    """The handout installed with a plain `pip install` (no -e), into a folder of its own."""
    target = tmp_path_factory.mktemp("site")
    done = subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation",
                           "--target", str(target), str(handout)], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
    return target


def test_it_holds_the_course_and_nothing_of_the_graders(handout):
    assert sorted(p.name for p in handout.iterdir()) == ["README.md", "course", "data", "pyproject.toml", "release"]
    assert sorted(p.name for p in (handout / "release").iterdir()) == RELEASED
    files = [p for p in handout.rglob("*") if p.is_file()]
    assert not any(part in ("solutions", "autograder", "source", "tests") for p in files
                   for part in p.relative_to(handout).parts)
    for path in files:
        if path.suffix in (".py", ".ipynb", ".md", ".toml", ".json"):
            text = path.read_text(encoding="utf-8")
            for marker in ("BEGIN SOLUTION", "END SOLUTION", "HIDDEN TESTS", "import autograder", "from autograder",
                           "from solutions", "import solutions"):
                assert marker not in text, f"{marker!r} in {path}"


def _unprovided_code(path) -> str:
    """A notebook's code, without the read-only cells that give earlier assignments' answers by design."""
    cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
    return "\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "code" and not c.get(
        "metadata", {}).get("nbgrader", {}).get("grade_id", "").startswith("provided_"))


def test_no_answer_ships_except_in_a_later_notebooks_provided_cells(handout):
    texts = {p: _unprovided_code(p) if p.suffix == ".ipynb" else p.read_text(encoding="utf-8")
             for p in handout.rglob("*") if p.suffix in (".py", ".ipynb")}
    for assignment in RELEASED:
        for exercise, answer in solution_code(assignment).items():
            lines = [line.strip() for line in answer.splitlines() if len(line.strip()) > 25]
            assert lines, exercise
            for path, text in texts.items():
                assert not all(line in text for line in lines), f"the answer to {exercise} is in {path}"
    assert provided_answers(handout, RELEASED)["02_multi_head"] == [A]  # and the command says so


@pytest.mark.slow  # a real pip install, then a kernel
def test_its_pyproject_installs_course_alone_with_the_stand_in(installed):
    assert sorted(p.name for p in installed.iterdir() if not p.name.endswith(".dist-info")) == ["bin", "course"]
    code = "from course import qwen35_weights; c = qwen35_weights.find_checkpoint(); print(c.folder, c.synthetic)"
    done = subprocess.run([sys.executable, "-c", code], cwd=installed.parent, capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(installed)})
    folder, synthetic = done.stdout.split()
    assert folder == str(installed / "course" / "qwen35_layer3") and synthetic == "True", done.stderr
    requires = (next(installed.glob("*.dist-info")) / "METADATA").read_text(encoding="utf-8")
    assert "Requires-Dist: torch" in requires and not re.search(r"Requires-Dist: (pytest|nbgrader|pyseccomp)", requires)


@pytest.mark.slow  # a real pip install, then a kernel
def test_a_notebook_from_it_runs_and_grades(handout, installed, monkeypatch):
    path = handout / "release" / A / f"{A}.ipynb"
    nb = nbformat.read(path, as_version=4)
    answers = solution_code(A)
    for cell in nb.cells:
        exercise = cell.metadata.get("nbgrader", {}).get("grade_id", "").removeprefix("solution_")
        if exercise in answers:
            cell.source = answers[exercise]
    nb.cells.append(nbformat.v4.new_code_cell("import course\nprint(course.__file__)"))
    with monkeypatch.context() as only_the_kernel:  # the sandbox started below must not import it from there
        only_the_kernel.setenv("PYTHONPATH", str(installed))  # the kernel imports the installed course
        NotebookClient(nb, timeout=300, kernel_name="python3",
                       resources={"metadata": {"path": str(path.parent)}}).execute()
    ran = [c for c in nb.cells if c.cell_type == "code"]
    assert all(c.get("execution_count") for c in ran) and not any(
        o.get("output_type") == "error" for c in ran for o in c.outputs)
    assert nb.cells[-1].outputs[0]["text"].strip() == str(installed / "course" / "__init__.py")
    verdicts = grade_cells(A, notebook_cells(json.dumps(nb).encode(), "", path.name), shared())
    assert [v.passed for v in verdicts] == [True] * len(ASSIGNMENTS[A])
