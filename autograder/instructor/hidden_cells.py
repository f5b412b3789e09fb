"""``grade(name)`` for the hidden-test cells of the source notebooks, when an instructor runs one in
JupyterLab (or ``nbgrader validate`` does). ``nbgrader autograde`` never runs these cells: its verdicts
come from ``autograder.instructor.nbgrader_verdicts``, on the submitted file, outside any kernel.

The cells the kernel has executed so far are graded by the same engine as ``pytest autograder/``: the
student's code runs in the sandbox, not in this kernel.
"""
from autograder.engine.assignments import EXERCISES
from autograder.engine.grading import judge
from autograder.engine.student_code import Cell


class GradingFailure(Exception):
    """A failed exercise. IPython shows only the message (no code), so feedback leaks no hidden test."""

    def _render_traceback_(self):
        return [f"GradingFailure: {self}"]


def _executed_cells() -> list[Cell]:
    from IPython import get_ipython

    shell = get_ipython()
    if shell is None:
        raise RuntimeError("grade() runs inside a Jupyter notebook.")
    return [Cell(f"In[{n}]", source, f"In [{n}]") for n, source in enumerate(shell.user_ns["In"]) if source]


def grade(name: str) -> None:
    """Grade exercise ``name`` on the code executed so far; print the verdict, raise when it fails."""
    verdict = judge(EXERCISES[name], _executed_cells())
    if not verdict.passed:
        raise GradingFailure(verdict.headline())
    print(f"✓ {name}：通过（{verdict.points}/{verdict.max_points} 分）")
