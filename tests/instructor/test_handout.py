"""`course-handout`: it hands out only the assignments named, and no earlier assignment's answers unless
asked; what it hands out holds no solution, no reference and no hidden test; installed plainly (not
editable) it finds the layer-3 stand-in; a notebook from it runs, and grades; `course-work` there points to
the notebooks' own checks, which catch an input changed in place as the grader does."""
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import jupytext
import nbformat
import pytest
import torch
from nbclient import NotebookClient
from torch import nn

from autograder.engine.assignments import ASSIGNMENTS, EXERCISES
from autograder.engine.grading import grade_cells, notebook_cells
from autograder.engine.judging import grade
from autograder.engine.sandbox.client import shared
from autograder.instructor.handout import main, provided_answers
from autograder.instructor.release import solution_code
from course import inplace, layout, protocols
from course.layout import ROOT as REPO
from course.tools import workspace
from tests.students import a01, a02

A, B = "01_attention_basics", "02_multi_head"
RELEASED = [a for a in ASSIGNMENTS if (REPO / "release" / a).is_dir()]


@pytest.fixture(scope="module")
def handout(tmp_path_factory):
    """Every released assignment at once, as at the end of a term."""
    out = tmp_path_factory.mktemp("handout") / "attention-course"
    assert main([str(out), "--assignment", *RELEASED, "--include-earlier-answers"]) == 0
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


_CHECK_IN_THE_HANDOUT = """
import sys
sys.path[:0] = sys.argv[1:3]  # the handout, then the packages torch is installed with (no .pth: python -S)
for grading in ("autograder", "solutions"):
    try:
        __import__(grading)
        raise SystemExit(grading + " can be imported")
    except ModuleNotFoundError:
        pass
import course
from course.checking import CheckFailed, check
assert course.__file__.startswith(sys.argv[1]), course.__file__
import torch
exec(sys.argv[3])
check("causal_mask")
exec(sys.argv[4])
try:
    check("causal_mask")
except CheckFailed as failed:
    print(str(failed).splitlines()[0])
"""


def test_a_handouts_checks_run_with_only_its_public_cases(handout, tmp_path):
    """The checks run where there is no grader: with the handout's ``course/`` and checks files alone, no
    ``autograder`` or ``solutions`` importable. The checks files are the course's, holding only public cases
    (``tests/checks/test_visible_checks.py``)."""
    for assignment in RELEASED:
        ours = REPO / "release" / assignment / layout.CHECKS
        if ours.is_file():
            assert (handout / "release" / assignment / layout.CHECKS).read_bytes() == ours.read_bytes()
    right = solution_code(A)["causal_mask"]
    wrong = right.replace("visible = key_positions <= query_positions", "visible = key_positions < query_positions")
    assert wrong != right
    done = subprocess.run([sys.executable, "-S", "-c", _CHECK_IN_THE_HANDOUT, str(handout),
                           str(Path(torch.__file__).parent.parent), right, wrong],
                          cwd=tmp_path, capture_output=True, text=True, env={k: v for k, v in os.environ.items()
                                                                            if k != "PYTHONPATH"})
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.splitlines()[0].startswith("✓ causal_mask：6 个公开用例都对")
    assert done.stdout.splitlines()[1] == "causal_mask：没有通过：对角线被遮住了：token 看不到自己", done.stdout


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


# --- what an instructor hands out ----------------------------------------------------------------------------

def test_the_assignments_must_be_named(tmp_path, capsys):
    with pytest.raises(SystemExit) as refused:
        main([str(tmp_path / "out")])
    assert refused.value.code == 2 and "--assignment" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_one_assignment_is_handed_out_alone_with_a_note_on_the_answers_it_gives(tmp_path, capsys):
    assert main([str(tmp_path / "out"), "--assignment", B]) == 0
    assert sorted(p.name for p in (tmp_path / "out" / "release").iterdir()) == [B]
    assert f"Note: {B}'s notebook gives the answers of {A}" in capsys.readouterr().out
    assert f"work/{B}/{B}.ipynb" in (tmp_path / "out" / "README.md").read_text(encoding="utf-8")


def test_a_notebook_and_a_later_one_that_answers_it_are_refused_unless_asked(tmp_path, capsys):
    assert main([str(tmp_path / "out"), "--assignment", B, A]) == 1
    said = capsys.readouterr().err
    assert f"{B}'s notebook gives the answers of {A}" in said and "--include-earlier-answers" in said
    assert not (tmp_path / "out").exists()
    assert main([str(tmp_path / "out"), "--assignment", A, B, "--include-earlier-answers"]) == 0
    assert sorted(p.name for p in (tmp_path / "out" / "release").iterdir()) == [A, B]


# --- what a student can run there ----------------------------------------------------------------------------

def test_course_work_points_to_the_checks_where_there_is_no_grader(handout, tmp_path, monkeypatch, capsys):
    release = handout / layout.RELEASE
    assert workspace.main(["--release", str(release), "--work", str(tmp_path / "mine")]) == 0
    in_the_checkout = capsys.readouterr().out
    assert f"`pytest autograder/ --submission {tmp_path / 'mine'}`" in in_the_checkout
    monkeypatch.setattr(layout, "ROOT", handout)  # course installed from the handout: no autograder/ beside it
    assert workspace.main(["--release", str(release), "--work", str(tmp_path / "work")]) == 0
    in_the_handout = capsys.readouterr().out.splitlines()[-1]
    assert "检查单元" in in_the_handout and "`pytest" not in in_the_handout


@pytest.mark.slow  # a real pip install
def test_course_work_installed_from_the_handout_points_to_the_checks(handout, installed, tmp_path):
    done = subprocess.run([sys.executable, str(installed / "bin" / "course-work"), "--work", str(tmp_path / "work")],
                          cwd=handout, capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(installed)})
    assert done.returncode == 0, done.stderr
    assert sorted(p.parent.name for p in (tmp_path / "work").glob("*/*.ipynb")) == RELEASED  # from ./release
    assert "检查单元" in done.stdout.splitlines()[-1] and "`pytest" not in done.stdout


def _tests_cells(assignment: str) -> dict[str, str]:
    """Exercise -> the visible part of its tests cell in the source notebook (what release/ hands out)."""
    nb = jupytext.read(REPO / "source" / assignment / f"{assignment}.py")
    return {tag.removeprefix("tests:"): cell.source.split("### BEGIN HIDDEN TESTS")[0]
            for cell in nb.cells for tag in cell.metadata.get("tags", []) if tag.startswith("tests:")}


def test_every_visible_check_guards_the_code_it_checks():
    """A check cell runs the grader's public cases (``course.checking``, which applies the grader's rule on inputs
    changed in place: ``tests/checks/test_visible_checks.py``), or, in a notebook whose checks are still written by
    hand, first guards the code it checks."""
    for assignment in ASSIGNMENTS:
        for exercise, check in _tests_cells(assignment).items():
            name = EXERCISES[exercise].definition
            assert check.startswith((f"from course import inplace\n{name} = inplace.guard({name})",
                                     f'from course.checking import check\ncheck("{exercise}")')), (assignment, exercise)


def _run_check(assignment: str, exercise: str, solution: str) -> str:
    """Run the notebook's imports, ``solution`` and the exercise's visible check; what it printed."""
    nb = jupytext.read(REPO / "source" / assignment / f"{assignment}.py")
    imports = next(cell.source for cell in nb.cells if cell.cell_type == "code")
    namespace = {}
    for code in (imports, solution, _tests_cells(assignment)[exercise]):
        exec(compile(code, exercise, "exec"), namespace)
    return namespace.get("got")


def test_the_visible_check_fails_a_solution_that_changes_its_input_in_place(capsys):
    in_place = next(code for name, mistake, code in a01.MISTAKES if name == "masked_softmax" and "原地" in mistake)
    with pytest.raises(AssertionError, match=r"masked_softmax：没有通过：原地修改了输入\n.*\n调用之后，输入的值变了：参数 scores。") as failed:
        _run_check(A, "masked_softmax", in_place)
    assert "x.clone()" in str(failed.value)
    _run_check(A, "masked_softmax", solution_code(A)["masked_softmax"])
    assert "✓ masked_softmax" in capsys.readouterr().out
    in_place = a02.CORRECT["split_heads"].replace("def split_heads(x, num_heads):", "def split_heads(x, num_heads):\n    x.mul_(2)")
    with pytest.raises(AssertionError, match=r"split_heads：没有通过：原地修改了输入\n用例：.*\n.*\n调用之后，输入的值变了：参数 x。"):
        _run_check(B, "split_heads", in_place)  # the output is wrong too: the changed input is still named


def test_the_grader_names_a_changed_input_as_the_visible_check_does():
    """The grader applies the visible check's rule (``course.inplace``) and its words: an input is named by the
    parameter of the student's own code it is handed to, for a function and for a module's forward alike."""
    in_place = next(code for name, mistake, code in a01.MISTAKES if name == "masked_softmax" and "原地" in mistake)
    verdict = grade(EXERCISES["masked_softmax"], a01.cells({"masked_softmax": in_place}))
    assert verdict.mistake == "原地修改了输入" and "调用之后，输入的值变了：参数 scores。" in verdict.details, verdict.message
    forward = a02.CORRECT["MultiHeadAttention"].replace(
        "def forward(self, x, attention_mask=None, causal=True):",
        "def forward(self, hidden, attention_mask=None, causal=True):\n        x = hidden.clone()").replace(
        "        return self.o_proj(", "        hidden.mul_(2)\n        return self.o_proj(")
    verdict = grade(EXERCISES["MultiHeadAttention"], a02.cells({"MultiHeadAttention": forward}))
    assert verdict.mistake == "原地修改了输入" and "调用之后，输入的值变了：参数 hidden。" in verdict.details, verdict.message
    assert set(protocols.HANDED) <= set(protocols.PROTOCOLS)


def test_the_guard_follows_the_graders_rule():
    class Layer(nn.Module):
        def forward(self, x):
            return self.scaled(x * 1)  # scaled changes a tensor of forward's own, not an input: as the grader sees it

        def scaled(self, y):
            return y.mul_(3)

        def rotated(self, x, cos_sin):
            cos_sin[1].mul_(2)
            return x

    forward = inplace.guard(Layer).forward
    assert inplace.guard(Layer) is Layer and Layer.forward is forward  # guarding twice changes nothing
    assert torch.equal(Layer()(torch.ones(2)), torch.full((2,), 3.0))
    with pytest.raises(AssertionError, match="Layer.rotated 原地修改了输入：调用之后，输入的值变了：参数 cos_sin 的第 2 项。"):
        Layer().rotated(torch.ones(2), (torch.ones(2), torch.ones(2)))
    with pytest.raises(AssertionError, match="参数 y。"):
        Layer().scaled(torch.ones(1))
    nan = torch.tensor([float("nan"), 1.0])
    assert inplace.changed_inputs(inplace.copies({"x": nan}), {"x": nan}, "参数 kwargs") == []  # NaN where NaN was
    assert inplace.changed_inputs(inplace.copies((nan,)), [nan.double()], "参数 xs") == ["参数 xs 的第 1 项"]


def test_the_guard_watches_an_autograd_functions_static_passes():
    """09's visible check guards ``FlashAttention``: a backward that changes the gradient it is handed is caught."""
    class Doubled(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x, causal=False):
            return x * 2

        @staticmethod
        def backward(ctx, grad):
            return grad.mul_(2), None

    guarded = inplace.guard(Doubled)
    assert guarded is Doubled and inplace.guard(Doubled).forward is Doubled.forward  # guarding twice changes nothing
    x = torch.ones(3, requires_grad=True)
    assert torch.equal(guarded.apply(x, False), torch.full((3,), 2.0))
    with pytest.raises(AssertionError, match="Doubled.backward 原地修改了输入：调用之后，输入的值变了：参数 grad。"):
        guarded.apply(x, False).backward(torch.ones(3))
