"""Grading entry points: one exercise, one notebook's code, one notebook file, one source text. Every channel
— ``pytest autograder/``, ``course-grade``, Gradescope, nbgrader, the hidden-test cells and the public API of
``autograder`` — ends in ``judge`` here, so they all give the same verdicts.

A failure of the grader itself (the sandbox cannot start, a check raises) is that exercise's zero marked
``grader_problem``, never a lost verdict: every exercise asked for gets one.
"""
import contextlib
import threading
import time
from pathlib import Path

import torch

from autograder.engine import limits
from autograder.engine.assignments import ASSIGNMENTS, EXERCISES
from autograder.engine.ipynb import NotebookError, parse_code_cells, read_code_cells
from autograder.engine.judging import grade
from autograder.engine.model import Verdict, grader_problem
from autograder.engine.sandbox.client import Sandbox, shared
from autograder.engine.student_code import Cell
from autograder.engine.submission import SubmissionError, notebooks

# No measured figure in it: the verdict's text is the same on every machine and in every run.
OUT_OF_TIME = ("整本 notebook 的评分时间是 {cap:g} 秒 CPU 时间，前面的练习用过之后剩下的不到 {least:g} 秒，"
               "不够评这一题，这一题没有评分：前面的练习是不是有死循环，或者算得特别慢？")
OUT_OF_WALL = "机器太忙：整本 notebook 已经评了 {wall:.0f} 秒（CPU 时间还没用完），这一题没有评分"


def judge(exercise, cells: "list[Cell] | NotebookError", sandbox: Sandbox | None = None,
          timeout_s: float = limits.EXERCISE_TIMEOUT_S, verdicts: dict | None = None) -> Verdict:
    """The verdict on ``exercise`` (an ``Exercise``) for the student's ``cells``; an unreadable notebook
    fails it with the notebook's message.

    ``verdicts`` (exercise name -> Verdict) holds the verdicts already given on these cells, and gets this one:
    an exercise built on another the code got wrong is told so (``Exercise.uses``), and each is graded once.
    """
    verdicts = {} if verdicts is None else verdicts
    if verdicts.get(exercise.name) is not None:
        return verdicts[exercise.name]
    if isinstance(cells, NotebookError):
        return Verdict(exercise.name, 0, exercise.points, str(cells))
    verdicts[exercise.name] = None  # being graded: a dependency that leads back here is not consulted

    def depends(name: str) -> Verdict | None:
        if name not in EXERCISES or name in verdicts and verdicts[name] is None:
            return None
        return judge(EXERCISES[name], cells, sandbox, timeout_s, verdicts)

    with _one_torch_thread():
        try:
            verdict = grade(exercise, cells, sandbox, timeout_s=timeout_s, depends=depends)
        except Exception as e:  # noqa: BLE001 - a grader failure is this exercise's zero, never a lost verdict
            verdict = grader_problem(exercise, f"{type(e).__name__}: {e}")
    verdicts[exercise.name] = verdict
    return verdict


_threads_lock = threading.Lock()
_threads = {"grading": 0, "before": 1}


@contextlib.contextmanager
def _one_torch_thread():
    """The grader's own torch work (references, known mistakes) on one thread, as in the sandbox: it is small or
    memory-bound (07 decodes token by token), and threads that wait on each other on a busy machine made it 5-15x
    slower (measured on two shared cores). Torch's thread count is the process's: the first grading to start sets
    it and the last to end puts it back, however many threads grade at once."""
    with _threads_lock:
        if not _threads["grading"]:
            _threads["before"] = torch.get_num_threads()
            torch.set_num_threads(1)
        _threads["grading"] += 1
    try:
        yield
    finally:
        with _threads_lock:
            _threads["grading"] -= 1
            if not _threads["grading"]:
                torch.set_num_threads(_threads["before"])


def notebook_cells(data: bytes | None, problem: str, name: str) -> list[Cell] | NotebookError:
    """The code cells of a notebook's bytes, or why there are none (``problem`` when there are no bytes)."""
    if data is None:
        return NotebookError(problem)
    try:
        return parse_code_cells(data, name)
    except NotebookError as e:
        return e


def grade_cells(assignment: str, cells: list[Cell] | NotebookError, sandbox: Sandbox | None = None,
                cap_s: float | None = None) -> list[Verdict]:
    """The verdict on each exercise of ``assignment``, in order. Once the student's code has used ``cap_s``
    seconds of CPU time (no cap when None), the exercises left fail with ``OUT_OF_TIME``; once the notebook has
    taken ``cap_s × limits.BUSY_RETRY_FACTOR`` seconds of wall time with CPU time left, they are the grader's
    problem (``OUT_OF_WALL``): the machine is too busy, whatever the code does."""
    sandbox = sandbox or shared()
    start, used_before = time.monotonic(), sandbox.cpu_used_s
    verdicts, given = [], {}
    for exercise in ASSIGNMENTS[assignment]:
        left = limits.EXERCISE_TIMEOUT_S if cap_s is None else cap_s - (sandbox.cpu_used_s - used_before)
        wall = time.monotonic() - start
        if isinstance(cells, NotebookError) or cap_s is None or exercise.name in given:
            verdicts.append(judge(exercise, cells, sandbox, limits.EXERCISE_TIMEOUT_S, given))
        elif left < limits.LEAST_EXERCISE_S:
            verdicts.append(Verdict(exercise.name, 0, exercise.points, OUT_OF_TIME.format(
                cap=cap_s, least=limits.LEAST_EXERCISE_S)))
        elif wall > cap_s * limits.BUSY_RETRY_FACTOR:
            verdicts.append(grader_problem(exercise, OUT_OF_WALL.format(wall=wall)))
        else:
            verdicts.append(judge(exercise, cells, sandbox, min(limits.EXERCISE_TIMEOUT_S, left), given))
    return verdicts


def grade_notebook(path: str | Path, assignment: str | None = None, *, sandbox: Sandbox | None = None,
                   cap_s: float | None = None) -> list[Verdict]:
    """Grade the notebook file at ``path``: one ``Verdict`` per exercise of its assignment, in notebook order.

    The assignment comes from the file's name or folder (``01_attention_basics.ipynb``) unless given. Raises
    ``SubmissionError`` when it cannot be told; a notebook that cannot be read fails every exercise with a
    message saying why. The notebook is never written to.
    """
    path = Path(path)
    if assignment is None:
        (assignment,) = notebooks(path)
    elif assignment not in ASSIGNMENTS:
        raise SubmissionError(f"没有叫 {assignment} 的作业：课程里有 {', '.join(ASSIGNMENTS)}。")
    try:
        cells = read_code_cells(path)
    except NotebookError as e:
        cells = e
    return grade_cells(assignment, cells, sandbox, cap_s)


def grade_code(exercise: str, source: str, *, sandbox: Sandbox | None = None) -> Verdict:
    """Grade one exercise (its contract name, e.g. ``"causal_mask"``) on Python ``source``: the code of a
    notebook's cells joined together, or a module a web form received."""
    if exercise not in EXERCISES:
        raise KeyError(f"no exercise named {exercise!r}; the course has {', '.join(EXERCISES)}")
    return judge(EXERCISES[exercise], [Cell("代码单元 #1", source, "你的代码")], sandbox)
