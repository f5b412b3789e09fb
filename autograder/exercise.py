"""Grade one exercise: run the student's definition on every case in the sandbox, compare each output
with the reference from ``solutions/``, and when it is wrong, say which known mistake it matches.

This is the one definition of each check: ``pytest autograder/`` and the hidden-test cells of the
source notebooks both end here.
"""
import builtins
import traceback
from dataclasses import dataclass, field, replace
from typing import Any, Callable

import torch

from autograder import limits, tolerances
from autograder.compare import Mismatch, compare
from autograder.notebook_source import StudentCode, missing_definition
from autograder.sandbox import SandboxFailure, run_isolated

NOT_IMPLEMENTED = "还没有实现（not yet implemented）"
_FORGED = "评分进程交回的结果格式不对：代码是不是改动了评分器？"
_MISMATCH_SUMMARY = {"type": "返回值的类型不对", "length": "返回值的个数不对", "shape": "shape 不对",
                     "dtype": "dtype 不对", "nan": "输出里有 NaN", "values": "数值不对"}


def _map_tensors(value, fn):
    if isinstance(value, torch.Tensor):
        return fn(value)
    if isinstance(value, tuple):
        return tuple(_map_tensors(v, fn) for v in value)
    if isinstance(value, list):
        return [_map_tensors(v, fn) for v in value]
    if isinstance(value, dict):
        return {k: _map_tensors(v, fn) for k, v in value.items()}
    return value


@dataclass(frozen=True)
class Case:
    """One call of the student's code: ``label`` tells the student what was tried."""

    label: str
    args: tuple = ()
    kwargs: dict = field(default_factory=dict)

    @property
    def dtype(self) -> torch.dtype:
        """The dtype of the first float tensor among the inputs (float32 when there is none)."""
        found = []
        _map_tensors((self.args, self.kwargs), lambda t: found.append(t.dtype) if t.is_floating_point() else None)
        return found[0] if found else torch.float32

    def in_float64(self) -> "Case":
        """The same case with every float tensor converted to float64, for the reference."""
        up = lambda t: t.double() if t.is_floating_point() else t.clone()  # noqa: E731
        return replace(self, args=_map_tensors(self.args, up), kwargs=_map_tensors(self.kwargs, up))


def call_function(fn: Callable, case: Case):
    """How most exercises are called: the function itself, with the case's arguments."""
    return fn(*case.args, **case.kwargs)


@dataclass(frozen=True)
class Mistake:
    """A known mistake: a wrong implementation with the reference's signature (``fn``), or, where the
    wrong outputs vary too much to reproduce, a test of the student's output (``matches(case, got)``)."""

    name: str
    hint: str
    fn: Callable | None = None
    matches: Callable[[Case, Any], bool] | None = None
    # Run ``fn`` on the case's own dtype rather than on float64: for mistakes that are about precision.
    native_dtype: bool = False


@dataclass(frozen=True)
class Exercise:
    """What a grader needs to know about one exercise of the contract (COURSE_SPEC §3)."""

    name: str
    points: int
    reference: Callable
    cases: Callable[[], list[Case]]
    mistakes: tuple[Mistake, ...] = ()
    output_names: tuple[str, ...] = ()
    tolerance_overrides: dict = field(default_factory=dict)
    call: Callable[[Callable, Case], Any] = call_function
    # Extra properties the output must have beyond matching the reference, e.g. exact zeros.
    verify: Callable[[Case, Any], "str | None"] | None = None

    def tolerance(self, dtype: torch.dtype) -> tolerances.Tolerance:
        return tolerances.for_dtype(dtype, self.tolerance_overrides)


@dataclass(frozen=True)
class Verdict:
    exercise: str
    points: int
    max_points: int
    summary: str  # one line
    details: str = ""

    @property
    def passed(self) -> bool:
        return self.points == self.max_points

    @property
    def message(self) -> str:
        return self.summary + ("\n" + self.details if self.details else "")


def _student_frame(exc: BaseException, code: StudentCode):
    """(cell label, line number, qualified function name) of the innermost frame in the student's cells."""
    labels = {cell.label for cell in code.cells}
    frames = [(f.f_code, lineno) for f, lineno in traceback.walk_tb(exc.__traceback__)
              if f.f_code.co_filename in labels]
    if not frames:
        return None
    function, lineno = frames[-1]
    return function.co_filename, lineno, getattr(function, "co_qualname", function.co_name)


def _describe_error(exc: BaseException, code: StudentCode, name: str) -> dict:
    frame = _student_frame(exc, code)
    where = ""
    if frame:
        label, lineno, _ = frame
        where = f"出错位置：{label} 第 {lineno} 行：{code.line(label, lineno)}"
    if isinstance(exc, NotImplementedError):
        # A function, or a method of a class, is the exercise itself or one it builds on.
        raised_in = frame[2].split(".")[0] if frame else name
        if raised_in in (name, "<module>"):
            return {"summary": NOT_IMPLEMENTED, "details": ""}
        return {"summary": f"{NOT_IMPLEMENTED}：`{name}` 调用的 `{raised_in}` 还没有实现。", "details": where}
    if isinstance(exc, SystemExit):
        return {"summary": "代码调用了 exit() / sys.exit()：评分时不能退出进程。", "details": where}
    if isinstance(exc, MemoryError) or "allocate" in str(exc):
        return {"summary": "内存不够：代码申请的内存超出了评分的上限。是不是建了一个特别大的张量？", "details": where}
    text = str(exc).strip().splitlines()
    first = text[0][:300] if text else ""
    return {"summary": f"运行出错：{type(exc).__name__}: {first}", "details": where}


def _run_cases(exercise: Exercise, code: StudentCode, cases: list[Case]):
    """Runs in the sandbox: execute the student's definitions, then call them on each case."""
    namespace = {"__name__": "__student__", "__builtins__": builtins}
    try:
        for compiled in code.compiled:
            exec(compiled, namespace)
    except BaseException as e:  # noqa: BLE001 - anything the student's code raises is reported
        info = _describe_error(e, code, exercise.name)
        info["summary"] = "执行 notebook 里的定义时出错，" + info["summary"]
        return [("error", info)]
    student = namespace[exercise.name]
    outcomes = []
    for case in cases:
        try:
            outcomes.append(("ok", exercise.call(student, case)))
        except BaseException as e:  # noqa: BLE001
            outcomes.append(("error", _describe_error(e, code, exercise.name)))
            break
    return outcomes


def _diagnose(exercise: Exercise, case: Case, got) -> Mistake | None:
    """The first known mistake whose output matches ``got`` on ``case``."""
    reference_case = case.in_float64()
    tol = exercise.tolerance(case.dtype)
    for mistake in exercise.mistakes:
        if mistake.matches is not None:
            if mistake.matches(case, got):
                return mistake
            continue
        try:
            wrong = exercise.call(mistake.fn, case if mistake.native_dtype else reference_case)
        except Exception:  # noqa: BLE001 - a mistake may not even run on this case's shapes
            continue
        if compare(got, wrong, case.dtype, tol, names=exercise.output_names, equal_nan=True) is None:
            return mistake
    return None


def check_output(exercise: Exercise, case: Case, got) -> Mismatch | str | None:
    """Why ``got`` is not the right output for ``case`` (None when it is)."""
    want = exercise.call(exercise.reference, case.in_float64())
    mismatch = compare(got, want, case.dtype, exercise.tolerance(case.dtype), names=exercise.output_names)
    if mismatch is None and exercise.verify is not None:
        return exercise.verify(case, got)
    return mismatch


def grade(exercise: Exercise, code: StudentCode, timeout_s: float = limits.EXERCISE_TIMEOUT_S) -> Verdict:
    """Grade ``exercise`` against the student's ``code``: full points or none, with a message."""
    def fail(summary: str, details: str = "") -> Verdict:
        return Verdict(exercise.name, 0, exercise.points, summary, details)

    missing = missing_definition(code, exercise.name)
    if missing:
        return fail(missing)
    cases = exercise.cases()
    try:
        outcomes = run_isolated(lambda: _run_cases(exercise, code, cases), timeout_s)
        outcomes = [(status, got) for status, got in outcomes]
    except SandboxFailure as e:
        return fail(str(e))
    except (TypeError, ValueError):
        return fail(_FORGED)
    for case, (status, got) in zip(cases, outcomes):
        if status == "error":
            if not isinstance(got, dict) or not {"summary", "details"} <= got.keys():
                return fail(_FORGED)
            if got["summary"] == NOT_IMPLEMENTED:
                return fail(NOT_IMPLEMENTED)
            return fail(got["summary"], "\n".join(x for x in (f"用例：{case.label}", got["details"]) if x))
        problem = check_output(exercise, case, got)
        if problem is None:
            continue
        text, kind = (problem.text, problem.kind) if isinstance(problem, Mismatch) else (problem, "values")
        lines = [f"用例：{case.label}", text]
        mistake = _diagnose(exercise, case, got)
        if mistake:
            lines.append(f"看起来是：{mistake.name}。{mistake.hint}")
        return fail(f"没有通过：{mistake.name if mistake else _MISMATCH_SUMMARY[kind]}", "\n".join(lines))
    if len(outcomes) < len(cases):
        return fail("评分进程没有跑完所有用例。")
    return Verdict(exercise.name, exercise.points, exercise.points, "通过")
