"""Grade one notebook: every exercise of its assignment, through the engine (``autograder.exercise.grade``),
exactly as ``pytest autograder/`` does, within a cap on the whole notebook."""
import time

from autograder import limits
from autograder.assignments import ASSIGNMENTS
from autograder.exercise import Verdict, grade, grader_problem
from autograder.notebook_file import NotebookError, parse_code_cells
from autograder.notebook_source import Cell
from autograder.sandbox.client import Sandbox

# Below this many seconds left, an exercise is not started: it could not finish, and its message would
# blame a timeout the student's code did not cause.
_LEAST_S = 1.0
OUT_OF_TIME = ("整本 notebook 的评分时间（{cap:g} 秒）已经用完，这一题没有评分："
               "前面的练习是不是有死循环，或者算得特别慢？")


def notebook_cells(data: bytes | None, problem: str, name: str) -> list[Cell] | NotebookError:
    """The code cells of a notebook's bytes, or why there are none (``problem`` when there are no bytes)."""
    if data is None:
        return NotebookError(problem)
    try:
        return parse_code_cells(data, name)
    except NotebookError as e:
        return e


def grade_notebook(assignment: str, cells: list[Cell] | NotebookError, sandbox: Sandbox,
                   cap_s: float = limits.NOTEBOOK_TIMEOUT_S) -> list[Verdict]:
    """The verdict on each exercise of ``assignment``, in order. An unreadable notebook fails every exercise
    with its message; once ``cap_s`` seconds are spent, the exercises left fail with ``OUT_OF_TIME``."""
    deadline = time.monotonic() + cap_s
    verdicts = []
    for exercise in ASSIGNMENTS[assignment]:
        left = deadline - time.monotonic()
        if isinstance(cells, NotebookError):
            verdict = Verdict(exercise.name, 0, exercise.points, str(cells))
        elif left < _LEAST_S:
            verdict = Verdict(exercise.name, 0, exercise.points, OUT_OF_TIME.format(cap=cap_s))
        else:
            try:
                verdict = grade(exercise, cells, sandbox, timeout_s=min(limits.EXERCISE_TIMEOUT_S, left))
            except Exception as e:  # noqa: BLE001 - a grader failure is this exercise's zero, never a lost notebook
                verdict = grader_problem(exercise, f"{type(e).__name__}: {e}")
        verdicts.append(verdict)
    return verdicts
