"""Grade one exercise: run the student's code on every case in the sandbox, compare each output with the
reference from ``solutions/`` here in the grader, and when it is wrong, say which known mistake it
matches.

Student code never runs in this process: the sandbox hands back plain data (``harness.run``), which is
validated (``sandbox.report.from_bytes``) before anything looks at it. This is the one definition of each
check: ``pytest autograder/``, ``nbgrader autograde`` and the hidden-test cells of the source notebooks all
end here.
"""
import dataclasses
import re
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import torch

from autograder.engine import clues, combined, diagnosis, limits
from autograder.engine.known_outputs import known
from autograder.engine.model import Budget, Exercise, Mistake, Verdict, grader_problem
from autograder.engine.sandbox.client import Sandbox, SandboxError, shared
from autograder.engine.sandbox.harness import NOT_IMPLEMENTED
from autograder.engine.sandbox.report import TOO_BIG, Error, GraderError, Malformed, Ok, Outcome, Report, from_bytes
from autograder.engine.student_code import Cell, StudentCode, missing_definition
from course import inplace, torch_errors
from course.compare import SUMMARY, Mismatch, compare
from course.protocols import PULLED, Case

_FORGED = "评分进程交回的结果格式不对：代码是不是改动了评分器？"
_MUTATED = ("原地修改了输入", inplace.HINT)
_STOPPED = {
    "timeout": "运行超过 {timeout:.3g} 秒 CPU 时间，被停止了：代码里是不是有死循环，或者在做很大的计算？",
    "too_big": TOO_BIG,
}
_BUSY = ("机器太忙：这一题的代码在 {wall:.3g} 秒里只用了 {cpu:.2g} 秒 CPU 时间（可以用 {timeout:.3g} 秒），重试一次也一样。"
         "这多半是机器上同时在跑的程序太多；代码要是在 sleep 或等待什么，也会这样")


def grade(exercise: Exercise, cells: list[Cell], sandbox: Sandbox | None = None,
          timeout_s: float = limits.EXERCISE_TIMEOUT_S,
          depends: "Callable[[str], Verdict | None] | None" = None) -> Verdict:
    """Grade ``exercise`` against the student's code ``cells``: full points or none, with a message.

    ``depends(name)`` is the verdict on another exercise of the same code (None when it cannot be had): when
    this one fails, the exercises of ``exercise.uses`` that the code reaches are looked up through it.
    """
    judgement = Judgement(exercise, depends)
    try:
        return judgement.run(cells, sandbox, timeout_s)
    finally:
        judgement.expected.finish()


class Judgement:
    """The judging of one exercise on one student's code: its cases, the reference's results on them (worked
    out while the sandbox runs the code), and the verdicts on the exercises it builds on (``depends``)."""

    def __init__(self, exercise: Exercise, depends: "Callable[[str], Verdict | None] | None" = None):
        self.exercise = exercise
        self.cases = exercise.made_cases()
        self.expected = References(exercise, self.cases)
        self.depends = depends
        self.reached: set[str] = set()  # the definitions the code reaches, once the sandbox has said
        self._broken: list[tuple[str, Verdict]] | None = None
        # (base, its mistake) when the code gives what the reference gives on that broken base of the student's
        self.right_on_base: tuple[str, str] | None = None
        self.own_stage: str | None = None  # the label of a wrong stage that runs before any broken base

    def run(self, cells: list[Cell], sandbox: Sandbox | None, timeout_s: float) -> Verdict:
        """Run the student's code on the cases in the sandbox and judge what comes back; then, when every case
        is right, on the budget's cases (``within_budget``)."""
        exercise, sandbox = self.exercise, sandbox or shared()
        report = self.ran(sandbox, job_for(exercise, cells, self.cases), timeout_s)
        if isinstance(report, Verdict):
            return report
        missing = missing_definition(StudentCode(cells, defined=report.defined, syntax_errors=report.syntax_errors),
                                     exercise.definition)
        if missing:
            return self.fail(missing)
        self.reached = {*report.reaches, *PULLED.get(exercise.call.__name__, ())}
        verdict = self.on_a_broken_base(self.judge(report.outcomes))
        if verdict.passed and exercise.budget is not None:
            return self.within_budget(sandbox, cells, timeout_s)
        return verdict

    def ran(self, sandbox: Sandbox, job: dict, timeout_s: float, budget: Budget | None = None) -> "Report | Verdict":
        """The report of ``job`` run in the sandbox, validated; or the verdict when there is no report to judge (the
        grader's problem, a run stopped or crashed, a forged report, an error while defining, a run that went over
        ``budget``, whatever it reports)."""
        exercise = self.exercise
        try:
            answer = sandbox.run(job, timeout_s)
        except SandboxError as e:
            return grader_problem(exercise, str(e))
        if answer.kind == "grader":
            return grader_problem(exercise, answer.detail.get("message", ""))
        if answer.kind == "busy":
            return grader_problem(exercise, _BUSY.format(wall=answer.detail["wall_s"],
                                                         cpu=answer.detail.get("cpu_s") or 0.0, timeout=timeout_s))
        over = _over(budget, answer) if budget else ""
        if over:
            return self.over_budget(job["cases"], over)
        if answer.kind in _STOPPED:
            return self.fail(_STOPPED[answer.kind].format(timeout=timeout_s))
        if answer.kind != "report":
            return self.fail(_crash_message(answer.detail or {}))
        try:
            report = from_bytes(answer.data, len(job["cases"]))
        except Malformed:
            return self.fail(_FORGED)
        if report.error is not None:
            return self.fail(report.error.summary, report.error.details)
        return report

    def within_budget(self, sandbox: Sandbox, cells: list[Cell], timeout_s: float) -> Verdict:
        """The verdict on the budget's cases (``model.Budget``), run alone once every other case is right: a run
        over the budget fails however right its outputs; within it, each output must be the reference's (not
        diagnosed: every known mistake failed an ordinary case already)."""
        budget, cases = self.exercise.budget, self.exercise.made_budget_cases()
        expected = References(self.exercise, cases)
        try:
            report = self.ran(sandbox, budget_job(self.exercise, cells), budget.cpu_s or timeout_s, budget)
            if isinstance(report, Verdict):
                return report
            return self.first_wrong(cases, expected, report.outcomes,
                                    lambda _, index, problem: self.undiagnosed(cases[index], problem))
        finally:
            expected.finish()

    def over_budget(self, cases: tuple[Case, ...], over: str) -> Verdict:
        """The verdict on a run of the budget's cases that went ``over`` it (what it used, against what it may)."""
        budget = self.exercise.budget
        return self.fail(f"没有通过：{budget.mistake.name}", "\n".join([
            f"用例：{'；'.join(case.label for case in cases)}", f"{over}：{budget.why}",
            f"看起来是：{budget.mistake.name}。{budget.mistake.hint}"]), budget.mistake.name)

    def judge(self, outcomes: tuple[Outcome, ...]) -> Verdict:
        """The verdict on the outcomes of the cases, in order: the first wrong one decides. A wrong output is not
        diagnosed when ``broken()`` lists exercises it builds on that fail: the verdict will name them instead."""
        return self.first_wrong(self.cases, self.expected, outcomes, self.wrong)

    def first_wrong(self, cases: tuple[Case, ...], expected, outcomes: tuple[Outcome, ...], wrong) -> Verdict:
        """The verdict on the outcomes of ``cases`` (``expected[i]``: the reference's result on case i), in order: the
        first case that went wrong decides (an error, an input changed in place, or a wrong output, which
        ``wrong(outcomes, index, problem)`` tells)."""
        for index, (case, outcome) in enumerate(zip(cases, outcomes)):
            if isinstance(outcome, GraderError):  # the harness vouches that the grader's own code raised it
                return grader_problem(self.exercise, outcome.what)
            if isinstance(outcome, Error):
                return self.raised(case, outcome.info)
            got, changed = outcome.output, outcome.changed
            problem = check_output(self.exercise, case, got, expected[index])
            if problem is None and changed:
                return self.fail(f"没有通过：{_MUTATED[0]}", f"用例：{case.label}\n{inplace.said(changed)}"
                                                          f"\n看起来是：{_MUTATED[0]}。{_MUTATED[1]}", _MUTATED[0])
            if problem is not None:
                return wrong(outcomes, index, problem)
        if len(outcomes) < len(cases):
            return self.fail("评分进程没有跑完所有用例。")
        return Verdict(self.exercise.name, self.exercise.points, self.exercise.points, "通过")

    def undiagnosed(self, case: Case, problem: Mismatch | str) -> Verdict:
        """The verdict on a wrong output on ``case``, saying only how it differs."""
        text, kind = _text_and_kind(problem)
        return self.fail(f"没有通过：{SUMMARY[kind]}", f"用例：{case.label}\n{text}")

    def raised(self, case: Case, info) -> Verdict:
        """The verdict when the student's code raised on ``case``: a known mistake the error shows, else what the
        error means in the course's terms."""
        if info.summary == NOT_IMPLEMENTED:
            return self.fail(NOT_IMPLEMENTED)
        lines = [f"用例：{case.label}", info.details]
        said = info.summary + "\n" + info.details
        mistake = next((m for m in self.exercise.mistakes if m.error and re.search(m.error, said)), None)
        if mistake:
            lines.append(f"看起来是：{mistake.name}。{mistake.hint}")
        else:
            meaning = torch_errors.explain(info.summary, self.exercise.works_in_float32)
            if meaning:
                lines.append(f"这是什么意思：{meaning}")
        return self.fail(info.summary, "\n".join(x for x in lines if x), mistake.name if mistake else "")

    def wrong(self, outcomes: tuple[Outcome, ...], index: int, problem: Mismatch | str) -> Verdict:
        """The verdict when case ``index`` is the first with a wrong output: the known mistake that explains every
        case (or two that do together, ``combined``), or else facts about the output. On a broken base only a
        known mistake of this exercise is said: one that fits every case with the reference in place of the
        exercises it builds on, or with the base's own named mistake in their place; facts about the output could
        be the base's doing."""
        exercise, cases, expected = self.exercise, self.cases, self.expected
        case, got, changed = cases[index], outcomes[index].output, outcomes[index].changed
        text, kind = _text_and_kind(problem)
        lines = [f"用例：{case.label}", text]
        returned = [o for o in outcomes if isinstance(o, Ok)]
        right = [i != index and (i < index or check_output(exercise, cases[i], o.output, expected[i]) is None)
                 for i, o in enumerate(returned)]
        outputs, wanted = [o.output for o in returned], [expected[i] for i in range(len(returned))]
        found = diagnosis.diagnose(exercise, cases, outputs, wanted, right, index)
        if found.named is None and found.fits_until_raised is None:
            found = self.two_at_once(outputs, wanted, right, index)
        self.right_on_base = next(((name, base.mistake) for name, base in self.broken() if found.named is not None
                                   and combined.is_base_only(found.named, name)), None)
        stage = _first_wrong_stage(exercise, case, got, expected[index])
        if self.broken() and (found.named is None or self.right_on_base):
            self.own_stage = stage and self.before_the_base(stage[0])
            return self.fail(f"没有通过：{SUMMARY[kind]}", "\n".join(lines))
        if stage:
            lines.append(f"第一个和参考不一样的步骤：{stage[1]}。")
        mistake = found.named
        if mistake is None and changed:
            mistake = Mistake(*_MUTATED)
        if mistake:
            lines.append(f"看起来是：{mistake.name}。{mistake.hint}")
        else:
            facts = clues.about_output(exercise.reference, case, exercise.graded(got), exercise.graded(expected[index]),
                                       exercise.tolerance(case.dtype), exercise.output_names)
            facts.append(clues.about_cases(cases[:len(returned)], right))
            if found.fits_until_raised:  # a fact about the cases that ran, not a name: it would not raise where this did
                crash = outcomes[len(returned)]
                said = f"（{crash.info.summary}）" if isinstance(crash, Error) else ""
                facts.insert(0, f"在跑完的 {len(returned)} 个用例上，你的输出和「{found.fits_until_raised.name}」的写法一模一样；"
                                f"可是用例「{cases[len(returned)].label}」上你的代码出错了{said}，那种写法在那里不会出错："
                                "这个错误的原因要另外找。")
            lines += [f"线索：{fact}" for fact in facts if fact]
        return self.fail(f"没有通过：{mistake.name if mistake else SUMMARY[kind]}", "\n".join(lines),
                         mistake.name if mistake else "")

    def two_at_once(self, outputs: list, expected: list, right: list[bool], index: int) -> diagnosis.Diagnosis:
        """When no one known mistake fits: two that do together (``combined``). On a broken base, the base's named
        mistake under this exercise's reference or one of its mistakes; on a sound one, two of this exercise's."""
        broken = self.broken()
        candidates = tuple(m for name, found in broken if found.mistake
                           for m in combined.on_base(self.exercise, name, found.mistake)) if broken \
            else combined.pairs(self.exercise)
        if not candidates:
            return diagnosis.Diagnosis()
        return diagnosis.diagnose(dataclasses.replace(self.exercise, mistakes=candidates), self.cases, outputs,
                                  expected, right, index)

    def before_the_base(self, key: str) -> str | None:
        """The label of stage ``key`` when no stage up to it runs a broken exercise of ``uses`` (else None)."""
        broken = {name for name, _ in self.broken()}
        for stage, label in self.exercise.stages:
            if broken & set(self.exercise.stage_uses.get(stage, ())):
                return None
            if stage == key:
                return label
        return None

    def on_a_broken_base(self, verdict: Verdict) -> Verdict:
        """``verdict``, or, when exercises this one builds on fail their own checks (``broken()``), a verdict
        naming them first."""
        if verdict.passed or verdict.grader_problem or verdict.summary == NOT_IMPLEMENTED:
            return verdict
        broken = self.broken()
        if not broken:
            return verdict
        names = "、".join(name for name, _ in broken)
        first, found = broken[0]
        base = [f"{first} 的检查：{found.summary}", *found.details.splitlines()[:limits.DEPENDENCY_LINES]]
        it = "它" if len(broken) == 1 else "它们"
        # A known mistake of this exercise fits every case (``wrong``): said beside the base, unless the base's
        # own check names the same mistake, which then explains it.
        if verdict.mistake and all(verdict.mistake != found.mistake for _, found in broken):
            return self.fail(f"没有通过：{verdict.mistake}（用到的 {names} 也还没通过）", "\n".join([
                verdict.details, f"另外，这一题的代码用到了你自己写的 {names}，{it}在自己的检查里也没有通过：上面的错也可能"
                f"是从{it}那里来的，先让 {names} 通过，再看这一题。", *base]), verdict.mistake)
        if self.right_on_base:
            name, mistake = self.right_on_base
            lines = [f"这一题的代码用到了你自己写的 {names}，{it}在自己的检查里没有通过。把参考实现里的 {name} 换成"
                     f"和你一样的写法（{mistake}），得到的结果和你的一模一样：这一题自己的代码看来没有错，"
                     f"先让 {names} 通过。", *base]
        elif self.own_stage:
            lines = [f"这一题的代码用到了你自己写的 {names}，{it}在自己的检查里没有通过，要先让 {names} 通过。"
                     f"不过这一题自己也有错：第一个和参考不一样的步骤是{self.own_stage}，那时还没有用到 {names}。", *base]
        else:
            lines = [f"这一题的代码用到了你自己写的 {names}，{it}在自己的检查里没有通过。"
                     f"先让 {names} 通过：在没通过的基础上，这一题也对不了，所以这一题自己的错因先不诊断。", *base]
        case = next((line for line in verdict.details.splitlines() if line.startswith("用例：")), "")
        if case:
            lines.append(f"这一题第一个没通过的{case}")
        return self.fail(f"没有通过：用到的 {names} 还没通过它自己的检查", "\n".join(lines))

    def broken(self) -> list[tuple[str, Verdict]]:
        """The exercises of ``exercise.uses`` that the code reaches and that fail their own checks, with their
        verdicts: looked up once, and only for a wrong answer."""
        if self._broken is None:
            self._broken = [] if self.depends is None else [
                (name, found) for name in self.exercise.uses if name in self.reached and name != self.exercise.name
                for found in [self.depends(name)] if found is not None and not found.passed and not found.grader_problem]
        return self._broken

    def fail(self, summary: str, details: str = "", mistake: str = "") -> Verdict:
        return Verdict(self.exercise.name, 0, self.exercise.points, summary, details, mistake=mistake)


def job_for(exercise: Exercise, cells: list[Cell], cases: tuple[Case, ...]) -> dict:
    """What the sandbox runs (``harness.run``): ``exercise``'s code in the student's ``cells`` on ``cases``."""
    return {"exercise": exercise.definition, "call": exercise.call.__name__,
            "cells": [(cell.label, cell.source, cell.shown) for cell in cells], "cases": cases}


def budget_job(exercise: Exercise, cells: list[Cell]) -> dict:
    """The job of ``exercise``'s budget cases; for a memory budget it asks the fork server for a true peak (``peak``:
    freed blocks go back to the system, ``zygote._give_freed_blocks_back``)."""
    return {**job_for(exercise, cells, exercise.made_budget_cases()), "peak": exercise.budget.memory_bytes is not None}


def check_output(exercise: Exercise, case: Case, got, expected=None) -> Mismatch | str | None:
    """Why ``got`` is not the right output for ``case`` (None when it is); ``expected`` is the reference's
    result on the case, when it is known already."""
    if expected is None:
        expected = reference_result(exercise, case)
    want = exercise.graded(expected)
    free = exercise.free_in(case)
    mismatch = compare(exercise.graded(got), want, case.dtype, exercise.tolerance(case.dtype),
                       names=exercise.output_names, free=free)
    if mismatch is None and exercise.verify is not None:
        return exercise.verify(case, got, want)
    return mismatch


def reference_result(exercise: Exercise, case: Case):
    """What ``exercise.call`` gives for the reference on ``case`` in float64, once per process for cases of the
    same contents (``known_outputs``): a check's ``Mistake.matches`` that compares with it costs nothing more."""
    return known((exercise.name, exercise.call, exercise.reference), case,
                 lambda: exercise.call(exercise.reference, case.in_float64()), stored=(exercise, "reference"))


class References:
    """The reference's results on each case (in float64), computed in a thread of their own from the moment this
    is made: while the sandbox runs the student's code in another process, the grader already works out what
    it should give (torch releases the GIL); and only once per process for cases of the same contents
    (``known_outputs``). ``self[i]`` waits for them; a reference that raises raises there."""

    def __init__(self, exercise: Exercise, cases: list[Case]):
        self._pool = ThreadPoolExecutor(1, thread_name_prefix="reference")
        self._results = self._pool.submit(lambda: [reference_result(exercise, c) for c in cases])
        self._pool.shutdown(wait=False)

    def __getitem__(self, index: int):
        return self._results.result()[index]

    def finish(self) -> None:
        """Wait until they are computed (raising nothing): a reference still running after its verdict would
        share the grader's cached model, and its hooks, with the next exercise's."""
        self._results.exception()


def _first_wrong_stage(exercise: Exercise, case: Case, got, reference) -> tuple[str, str] | None:
    """The key and label of the first stage where the student's layer leaves the reference's path
    (``reference``: the reference's ``(output, stages)`` on the case)."""
    if not exercise.stages or not (isinstance(got, (tuple, list)) and len(got) == 2 and isinstance(got[1], dict)):
        return None
    expected = reference[1]
    for key, label in exercise.stages:
        mine = got[1].get(key, ())
        same = _same_stage(tuple(mine) if isinstance(mine, (tuple, list)) else (mine,), expected.get(key, ()), case.dtype,
                           exercise.tolerance(case.dtype))
        if same is False:
            return key, label
    return None


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
        # A step may work in float32 on low-precision input (08's gates and core): compared in the case's dtype.
        if compare(got.to(dtype) if got.is_floating_point() else got, want, dtype, tol) is not None:
            return False
    return True


def _text_and_kind(problem: Mismatch | str) -> tuple[str, str]:
    """What a wrong output's problem says, and its kind (``compare.SUMMARY``'s key)."""
    return (problem.text, problem.kind) if isinstance(problem, Mismatch) else (problem, "values")


def _over(budget: Budget, answer) -> str:
    """What the run of a budget's cases used beyond the budget, said for the student ("" when it fits); a run
    stopped at its CPU limit used it all."""
    grew, cpu = (answer.detail or {}).get("grew_bytes") or 0, (answer.detail or {}).get("cpu_s") or 0.0
    if budget.memory_bytes is not None and grew > budget.memory_bytes:
        return f"这次运行占用的内存比开始时多了 {grew / 2**20:.0f} MiB，这个用例最多只能多 {budget.memory_bytes / 2**20:.0f} MiB"
    if budget.cpu_s is not None and (answer.kind == "timeout" or cpu > budget.cpu_s):
        return f"这次运行用了 {cpu:.2g} 秒 CPU 时间，这个用例最多只能用 {budget.cpu_s:.2g} 秒"
    return ""


def _crash_message(detail: dict) -> str:
    if detail.get("left_running"):
        return "代码关掉了交回结果的通道，却还在运行：评分时不要关闭文件描述符。"
    signal_name = detail.get("signal")
    if signal_name in ("SIGXCPU", "SIGKILL"):  # before its CPU time was used up (that is a timeout): memory
        return "运行进程被停止了：内存用得太多（或者用了特别多的 CPU 时间）。是不是建了特别大的张量？"
    if signal_name:
        return f"运行进程因为信号 {signal_name} 崩溃了。"
    return (f"运行进程提前退出了（退出码 {detail.get('exit')}），没有交回结果："
            "代码里是不是调用了 os._exit()、exit() 或 sys.exit()？")
