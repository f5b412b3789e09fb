"""Grade one exercise: run the student's code on every case in the sandbox, compare each output with the
reference from ``solutions/`` here in the grader, and when it is wrong, say which known mistake it
matches.

Student code never runs in this process: the sandbox hands back plain data (``harness.run``), which is
validated (``sandbox.report.from_bytes``) before anything looks at it. This is the one definition of each
check: ``pytest autograder/``, ``nbgrader autograde`` and the hidden-test cells of the source notebooks all
end here.
"""
import re
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import torch

from autograder.engine import limits, tolerances
from autograder.engine.compare import Mismatch, compare
from autograder.engine.protocols import PROTOCOLS, Case, call_function
from autograder.engine.sandbox.client import Sandbox, SandboxError, shared
from autograder.engine.sandbox.harness import NOT_IMPLEMENTED
from autograder.engine.sandbox.report import TOO_BIG, Error, GraderError, Malformed, Outcome, from_bytes
from autograder.engine.student_code import Cell, StudentCode, missing_definition

_FORGED = "评分进程交回的结果格式不对：代码是不是改动了评分器？"
_MISMATCH_SUMMARY = {"type": "返回值的类型不对", "length": "返回值的个数不对", "shape": "shape 不对",
                     "dtype": "dtype 不对", "nan": "输出里有 NaN", "values": "数值不对", "free": "输出里有 NaN 或 inf"}
_GRADER_PROBLEM = "评分环境出了问题，不是你的代码的问题"
_MUTATED = ("原地修改了输入", "带下划线的操作（masked_fill_、add_ ……）和 x[...] = ... 会改掉调用者传进来的张量："
            "用不带下划线的版本，写成 scores = scores.masked_fill(...)，或者先 clone()。")


@dataclass(frozen=True)
class Mistake:
    """A known mistake: a wrong implementation with the reference's signature (``fn``); where the wrong
    outputs vary too much to reproduce, a test of the student's output (``matches(case, got)``); or, for a
    mistake that shows as an error rather than an output, a pattern searched for in the error message and the
    student's line it quotes (``error``, a regular expression)."""

    name: str
    hint: str
    fn: Callable | None = None
    matches: Callable[[Case, Any], bool] | None = None
    error: str | None = None
    # Run ``fn`` on the case's own dtype rather than on float64: for mistakes that are about precision.
    native_dtype: bool = False


@dataclass(frozen=True)
class Exercise:
    """What a grader needs to know about one exercise of the contract (the names and shapes each notebook states)."""

    name: str
    points: int
    reference: Callable
    cases: Callable[[], list[Case]]
    mistakes: tuple[Mistake, ...] = ()
    output_names: tuple[str, ...] = ()
    tolerance_overrides: dict = field(default_factory=dict)
    # How the code is called, from ``autograder.engine.protocols`` (it runs in the sandbox, so it must live there).
    call: Callable[[Callable, Case], Any] = call_function
    # Extra properties the output must have beyond matching the reference, e.g. exact zeros.
    verify: Callable[[Case, Any], "str | None"] | None = None
    # Positions of the output that no implementation defines (padding queries): any finite value is right.
    free: Callable[[Case], Any] | None = None
    # The notebook's name that holds the code, when it is not the exercise's (a method of a class).
    defines: str = ""
    # For a call protocol that returns ``(output, stages)``: the stages in order, ``(key, label)``. Only the
    # output is graded; the first stage that differs from the reference's is named in the message.
    stages: tuple[tuple[str, str], ...] = ()

    def __post_init__(self):
        if PROTOCOLS.get(self.call.__name__) is not self.call:
            raise ValueError(f"{self.name}: call must be one of autograder.engine.protocols.PROTOCOLS, which the sandbox knows "
                             f"by name; got {self.call!r}")

    def graded(self, value):
        """The part of a call's result that is graded (the output, without the stages)."""
        return value[0] if self.stages and isinstance(value, (tuple, list)) and len(value) == 2 else value

    @property
    def definition(self) -> str:
        return self.defines or self.name

    def tolerance(self, dtype: torch.dtype) -> tolerances.Tolerance:
        return tolerances.for_dtype(dtype, self.tolerance_overrides)


@dataclass(frozen=True)
class Verdict:
    exercise: str
    points: int
    max_points: int
    summary: str  # one line
    details: str = ""
    grader_problem: bool = False  # the grader could not judge this exercise; not the student's doing
    mistake: str = ""  # the known mistake the code matches, when one does (for a class's table of mistakes)

    @property
    def passed(self) -> bool:
        return self.points == self.max_points

    @property
    def message(self) -> str:
        return self.summary + ("\n" + self.details if self.details else "")


def grader_problem(exercise: "Exercise", what: str) -> Verdict:
    """A verdict saying that the grader, not the student, failed on this exercise."""
    return Verdict(exercise.name, 0, exercise.points, f"{_GRADER_PROBLEM}：{what}",
                   "请把这条信息告诉老师或助教；修好评分环境后重新评分。", grader_problem=True)


def _clean(text: str) -> str:
    """Text from the sandbox, safe to print: no control characters, bounded length."""
    kept = "".join(ch for ch in text if ch in "\n\t" or (ch >= " " and not 0x7f <= ord(ch) < 0xa0))
    return kept[:limits.MESSAGE_CHARS]


def _diagnose(exercise: Exercise, case: Case, got, free) -> Mistake | None:
    """The first known mistake whose output matches ``got`` on ``case``."""
    reference_case = case.in_float64()
    tol = exercise.tolerance(case.dtype)
    for mistake in exercise.mistakes:
        if mistake.error is not None:
            continue
        if mistake.matches is not None:
            if mistake.matches(case, got):
                return mistake
            continue
        try:
            wrong = exercise.graded(exercise.call(mistake.fn, case if mistake.native_dtype else reference_case))
        except Exception:  # noqa: BLE001 - a mistake may not even run on this case's shapes
            continue
        if compare(exercise.graded(got), wrong, case.dtype, tol, names=exercise.output_names, equal_nan=True,
                   free=free) is None:
            return mistake
    return None


class References:
    """The reference's results on each case (in float64), computed in a thread of their own from the moment this
    is made: while the sandbox runs the student's code in another process, the grader already works out what
    it should give (torch releases the GIL). ``self[i]`` waits for them; a reference that raises raises there."""

    def __init__(self, exercise: Exercise, cases: list[Case]):
        self._pool = ThreadPoolExecutor(1, thread_name_prefix="reference")
        self._results = self._pool.submit(lambda: [exercise.call(exercise.reference, c.in_float64()) for c in cases])
        self._pool.shutdown(wait=False)

    def __getitem__(self, index: int):
        return self._results.result()[index]

    def finish(self) -> None:
        """Wait until they are computed (raising nothing): a reference still running after its verdict would
        share the grader's cached model, and its hooks, with the next exercise's."""
        self._results.exception()


def check_output(exercise: Exercise, case: Case, got, expected=None) -> Mismatch | str | None:
    """Why ``got`` is not the right output for ``case`` (None when it is); ``expected`` is the reference's
    result on the case, when it is known already."""
    if expected is None:
        expected = exercise.call(exercise.reference, case.in_float64())
    want = exercise.graded(expected)
    free = exercise.free(case) if exercise.free else None
    mismatch = compare(exercise.graded(got), want, case.dtype, exercise.tolerance(case.dtype),
                       names=exercise.output_names, free=free)
    if mismatch is None and exercise.verify is not None:
        return exercise.verify(case, got)
    return mismatch


def _same_stage(mine: tuple, theirs: tuple, dtype: torch.dtype, tol) -> bool | None:
    """Whether a stage's tensors agree (None when they cannot be compared: another layout or count)."""
    if len(mine) != len(theirs) or not mine:
        return None
    for got, want in zip(mine, theirs):
        if not isinstance(got, torch.Tensor) or got.dim() != want.dim():
            return None
        if got.shape != want.shape and got.dim() >= 3 and got.transpose(1, 2).shape == want.shape:
            got = got.transpose(1, 2)  # the same values with heads before time
        if got.shape != want.shape:
            return None
        if compare(got, want, dtype, tol) is not None:
            return False
    return True


def _first_wrong_stage(exercise: Exercise, case: Case, got, reference) -> str | None:
    """The label of the first stage where the student's layer leaves the reference's path (``reference``: the
    reference's ``(output, stages)`` on the case)."""
    if not exercise.stages or not (isinstance(got, (tuple, list)) and len(got) == 2 and isinstance(got[1], dict)):
        return None
    expected = reference[1]
    for key, label in exercise.stages:
        same = _same_stage(tuple(got[1].get(key, ())), expected.get(key, ()), case.dtype,
                           exercise.tolerance(case.dtype))
        if same is False:
            return label
    return None


_STOPPED = {
    "timeout": "运行超过 {timeout:g} 秒，被停止了：代码里是不是有死循环，或者在做很大的计算？",
    "too_big": TOO_BIG,
}


def _crash_message(detail: dict) -> str:
    if detail.get("left_running"):
        return "代码关掉了交回结果的通道，却还在运行：评分时不要关闭文件描述符。"
    signal_name = detail.get("signal")
    if signal_name in ("SIGXCPU", "SIGKILL"):
        return "运行进程被停止了：CPU 时间或内存用得太多。是不是有死循环，或者建了特别大的张量？"
    if signal_name:
        return f"运行进程因为信号 {signal_name} 崩溃了。"
    return (f"运行进程提前退出了（退出码 {detail.get('exit')}），没有交回结果："
            "代码里是不是调用了 os._exit()、exit() 或 sys.exit()？")


def grade(exercise: Exercise, cells: list[Cell], sandbox: Sandbox | None = None,
          timeout_s: float = limits.EXERCISE_TIMEOUT_S) -> Verdict:
    """Grade ``exercise`` against the student's code ``cells``: full points or none, with a message."""
    def fail(summary: str, details: str = "", mistake: str = "") -> Verdict:
        return Verdict(exercise.name, 0, exercise.points, summary, details, mistake=mistake)

    cases = exercise.cases()
    expected = References(exercise, cases)
    try:
        return _run_and_judge(exercise, cells, sandbox, timeout_s, cases, expected, fail)
    finally:
        expected.finish()


def _run_and_judge(exercise, cells, sandbox, timeout_s, cases, expected, fail) -> Verdict:
    """Run the student's code on ``cases`` in the sandbox and judge what comes back against ``expected``."""
    job = {"exercise": exercise.definition, "call": exercise.call.__name__,
           "cells": [(cell.label, cell.source, cell.shown) for cell in cells], "cases": cases}
    try:
        answer = (sandbox or shared()).run(job, timeout_s)
    except SandboxError as e:
        return grader_problem(exercise, str(e))
    if answer.kind == "grader":
        return grader_problem(exercise, answer.detail.get("message", ""))
    if answer.kind in _STOPPED:
        return fail(_STOPPED[answer.kind].format(timeout=timeout_s))
    if answer.kind != "report":
        return fail(_crash_message(answer.detail or {}))
    try:
        report = from_bytes(answer.data, len(cases))
    except Malformed:
        return fail(_FORGED)
    if report.error is not None:
        return fail(_clean(report.error.summary), _clean(report.error.details))
    missing = missing_definition(StudentCode(cells, defined=report.defined, syntax_errors=report.syntax_errors),
                                 exercise.definition)
    if missing:
        return fail(_clean(missing))
    return _judge(exercise, cases, expected, report.outcomes, fail)


def _judge(exercise: Exercise, cases: list[Case], expected: References, outcomes: tuple[Outcome, ...],
           fail) -> Verdict:
    """The verdict on the outcomes of the cases, in order: the first wrong one decides."""
    for index, (case, outcome) in enumerate(zip(cases, outcomes)):
        if isinstance(outcome, GraderError):  # the harness vouches that the grader's own code raised it
            return grader_problem(exercise, _clean(outcome.what))
        if isinstance(outcome, Error):
            info = outcome.info
            if info.summary == NOT_IMPLEMENTED:
                return fail(NOT_IMPLEMENTED)
            lines = [f"用例：{case.label}", _clean(info.details)]
            said = info.summary + "\n" + info.details
            mistake = next((m for m in exercise.mistakes if m.error and re.search(m.error, said)), None)
            if mistake:
                lines.append(f"看起来是：{mistake.name}。{mistake.hint}")
            return fail(_clean(info.summary), "\n".join(x for x in lines if x), mistake.name if mistake else "")
        got, changed = outcome.output, outcome.changed
        problem = check_output(exercise, case, got, expected[index])
        if problem is None and changed:
            return fail(f"没有通过：{_MUTATED[0]}", f"用例：{case.label}\n调用之后，{'、'.join(map(_clean, changed))}"
                                                 f"的值变了。\n看起来是：{_MUTATED[0]}。{_MUTATED[1]}", _MUTATED[0])
        if problem is None:
            continue
        text, kind = (problem.text, problem.kind) if isinstance(problem, Mismatch) else (problem, "values")
        lines = [f"用例：{case.label}", text]
        stage = _first_wrong_stage(exercise, case, got, expected[index])
        if stage:
            lines.append(f"第一个和参考不一样的步骤：{stage}。")
        free = exercise.free(case) if exercise.free else None
        mistake = _diagnose(exercise, case, got, free)
        if mistake is None and changed:
            mistake = Mistake(*_MUTATED)
        if mistake:
            lines.append(f"看起来是：{mistake.name}。{mistake.hint}")
        return fail(f"没有通过：{mistake.name if mistake else _MISMATCH_SUMMARY[kind]}", "\n".join(lines),
                    mistake.name if mistake else "")
    if len(outcomes) < len(cases):
        return fail("评分进程没有跑完所有用例。")
    return Verdict(exercise.name, exercise.points, exercise.points, "通过")
