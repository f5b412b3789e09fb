"""The notebooks' visible checks: ``check("causal_mask")`` tries an exercise's public cases on the notebook's own
definition, in the notebook's kernel, and judges them as the grader does.

The public cases are grader cases marked ``public`` (``course.protocols.Case``). ``course-release`` writes their
inputs, the reference's output on each and each named mistake's output where it defines one into
``release/<assignment>/checks.pt.xz`` (``autograder/engine/public_cases.py``), which ships with the notebooks: no
reference, no hidden case, no check's code. Here they are run through the grader's own call protocol (with its
watches), its rule against changing inputs in place, its comparison and tolerances, and its output rules; a
mistake is named when its stored outputs match the student's on every public case, as the grader names one when
it matches on every case. A ✓ is printed, or ``CheckFailed`` raised with the grader's message.
"""
import functools
import io
import lzma
import re
import sys
import traceback
import types
from pathlib import Path

import torch

from course import inplace, layout, protocols, torch_errors
from course.compare import SUMMARY, compare
from course.errors import GraderProblem
from course.output_rules import RULES
from course.protocols import Case
from course.tolerances import Tolerance

FORMAT = 1  # of the file: a check refuses a file of another format rather than misread it
MUTATED = "原地修改了输入"
SAME = "same as expected"  # a mistake's output on a case where it gives what the reference gives


class CheckFailed(AssertionError):
    """A public case gave what the grader would fail; the message is the grader's."""

    def _render_traceback_(self) -> list[str]:
        """What IPython shows: where the student's code raised (its own frames, not this module's or the
        protocols'), then the message."""
        cause = self.__cause__
        shown = []
        if cause is not None:
            frames = [f for f in traceback.extract_tb(cause.__traceback__) if not f.filename.startswith(_COURSE)]
            shown = ["Traceback（你的代码里出错的位置）:", *traceback.format_list(frames),
                     *traceback.format_exception_only(cause), ""]
        return [*shown, f"CheckFailed: {self}"]


_COURSE = str(Path(__file__).resolve().parent)


def check(name: str) -> None:
    """Run exercise ``name``'s public cases on the notebook's definition of it (looked up in the globals of the
    cell that calls this) and print ✓, or raise ``CheckFailed`` saying what the grader would say."""
    __tracebackhide__ = True  # IPython shows the student's frames and the message, not this module's
    data = exercise_data(name)
    space = sys._getframe(1).f_globals
    main = sys.modules.get("__main__")
    if main is not None and vars(main) is space:  # a Jupyter kernel's notebook
        notebook = main
    else:
        notebook = types.ModuleType(protocols.STUDENT_MODULE)
        vars(notebook).update(space)
    definition = data["definition"]
    if not hasattr(notebook, definition):
        raise CheckFailed(f"notebook 里还没有 `{definition}` 的定义：先运行上面写 {definition} 的那个单元格，再运行这个检查。")
    failure = judge(data, getattr(notebook, definition), notebook)
    if failure is not None:
        message, cause = failure
        raise CheckFailed(f"{name}：{message}") from cause
    print(f"✓ {name}：{len(data['cases'])} 个公开用例都对（评分时还有 {data['hidden']} 个不公开的用例）")


def judge(data: dict, code, notebook: types.ModuleType) -> "tuple[str, BaseException | None] | None":
    """None when ``code`` passes every public case of ``data`` (one exercise of a checks file); else the
    message and the error that caused it (None for a wrong output). ``notebook`` holds the notebook's other
    definitions, which the protocols look up (``protocols.neighbour``)."""
    saved = sys.modules.get(protocols.STUDENT_MODULE)
    sys.modules[protocols.STUDENT_MODULE] = notebook
    try:
        outcomes = _run(data, code)
    finally:
        if saved is None:
            sys.modules.pop(protocols.STUDENT_MODULE, None)
        else:
            sys.modules[protocols.STUDENT_MODULE] = saved
    for index, (case, outcome) in enumerate(zip(data["cases"], outcomes)):
        if isinstance(outcome, BaseException):
            return _raised(data, case, outcome), outcome
        got, changed = outcome
        problem = _problem(data, case, got)
        if problem is None and changed:
            return (f"没有通过：{MUTATED}\n用例：{case['label']}\n{inplace.said(changed)}\n看起来是：{MUTATED}。"
                    f"{inplace.HINT}"), None
        if problem is not None:
            return _wrong(data, outcomes, index, problem, changed), None
    return None


def _run(data: dict, code) -> list:
    """Per public case, in order, ``(output, changed inputs)``, or the error that stopped the run."""
    call = protocols.PROTOCOLS[data["call"]]
    outcomes = []
    for stored in data["cases"]:
        case = Case(stored["label"], inplace.copies(stored["args"]), inplace.copies(stored["kwargs"]), public=True)
        given = protocols.handed_inputs(data["call"], code, case)
        before = [inplace.copies(value) for _, value in given]
        try:
            got = call(code, case)
        except BaseException as e:  # noqa: BLE001 - whatever the student's code raises is judged
            if isinstance(e, KeyboardInterrupt):
                raise
            outcomes.append(e)
            break
        outcomes.append((got, tuple(inplace.changed(given, before))))
    return outcomes


def _graded(data: dict, value):
    return value[0] if data["stages"] and isinstance(value, (tuple, list)) and len(value) == 2 else value


def _dtype(case: dict) -> torch.dtype:
    return Case(case["label"], case["args"], case["kwargs"]).dtype


def _problem(data: dict, case: dict, got):
    """Why ``got`` is not the right output for ``case``: the grader's ``check_output``."""
    mismatch = compare(_graded(data, got), case["expected"], _dtype(case), Tolerance(*case["tolerance"]),
                       names=data["output_names"], free=case["free"])
    if mismatch is None and data["verify"]:
        return RULES[data["verify"]](Case(case["label"], case["args"], case["kwargs"]), got)
    return mismatch


def _agrees(data: dict, case: dict, got, wrong) -> bool:
    wrong = case["expected"] if isinstance(wrong, str) and wrong == SAME else wrong
    return compare(_graded(data, got), wrong, _dtype(case), Tolerance(*case["tolerance"]), names=data["output_names"],
                   equal_nan=True, free=case["free"]) is None


def _named(data: dict, outcomes: list, index: int) -> "tuple[str, str] | None":
    """The first named mistake whose stored outputs give the student's on case ``index`` and agree with every
    other public case that returned, where it defines one."""
    returned = [(case, outcome[0]) for case, outcome in zip(data["cases"], outcomes) if not isinstance(outcome, BaseException)]
    for which, (name, hint, _) in enumerate(data["mistakes"]):
        wrong = data["cases"][index]["mistakes"].get(which)
        if wrong is None or not _agrees(data, data["cases"][index], returned[index][1], wrong):
            continue
        if all(case["mistakes"].get(which) is None or _agrees(data, case, got, case["mistakes"][which])
               for case, got in returned):
            return name, hint
    return None


def _wrong(data: dict, outcomes: list, index: int, problem, changed) -> str:
    case = data["cases"][index]
    text, kind = (problem.text, problem.kind) if hasattr(problem, "kind") else (problem, "values")
    lines = [f"用例：{case['label']}", text]
    named = _named(data, outcomes, index) or ((MUTATED, inplace.HINT) if changed else None)
    if named:
        lines.append(f"看起来是：{named[0]}。{named[1]}")
    return f"没有通过：{named[0] if named else SUMMARY[kind]}\n" + "\n".join(lines)


def _raised(data: dict, case: dict, error: BaseException) -> str:
    """What the grader says when the code raised on ``case``: not yet implemented, the grader's own problem, a
    named mistake the error shows, or what the error means in the course's terms."""
    if isinstance(error, NotImplementedError) and not re.search(torch_errors.NO_KERNEL, str(error)):
        return torch_errors.NOT_IMPLEMENTED
    if type(error) is GraderProblem:
        return f"课程的文件出了问题，不是你的代码的问题：{error}"
    summary = torch_errors.summary(error)
    lines = [f"用例：{case['label']}"]
    said = summary + "\n" + "\n".join(line for line in _lines_of(error))
    mistake = next(((name, hint) for name, hint, pattern in data["mistakes"] if pattern and re.search(pattern, said)), None)
    if mistake:
        lines.append(f"看起来是：{mistake[0]}。{mistake[1]}")
    else:
        meaning = torch_errors.explain(summary, data["works_in_float32"])
        if meaning:
            lines.append(f"这是什么意思：{meaning}")
    return summary + "\n" + "\n".join(lines)


def _lines_of(error: BaseException) -> list[str]:
    """The source lines of the traceback's frames (a named mistake's pattern may be in the student's line)."""
    return [frame.line or "" for frame in traceback.extract_tb(error.__traceback__)]


def exercise_data(name: str) -> dict:
    """Exercise ``name``'s entry of the checks files this notebook can find."""
    found = _all_checks()
    if name not in found:
        raise CheckFailed(f"找不到 {name} 的公开用例：课程文件夹的 release/ 里应该有 {layout.CHECKS}（由 course-release 生成）。"
                          "从老师发的完整文件夹里运行 notebook，或者请老师重新生成。")
    return found[name]


@functools.cache
def _all_checks() -> dict:
    """Exercise name -> its data, from the checks files of the course's ``release/`` (a checkout, a handout), else
    the one beside the notebook, the kernel's working folder (put there by an nbgrader fetch, or by
    ``course-work`` for a course installed without ``release/``)."""
    found = {}
    places = [*sorted((layout.ROOT / layout.RELEASE).glob(f"*/{layout.CHECKS}")), Path.cwd() / layout.CHECKS]
    for path in places:
        if path.is_file():
            for name, data in load(path).items():
                found.setdefault(name, data)
    return found


def load(path: Path) -> dict:
    """A checks file's exercises; ``CheckFailed`` for one that is not a checks file of this format."""
    try:
        data = torch.load(io.BytesIO(lzma.decompress(path.read_bytes())), weights_only=True)
    except Exception as e:  # noqa: BLE001 - any unreadable file says the same
        raise CheckFailed(f"{path} 读不出来（{type(e).__name__}）：请从老师发的文件夹里重新拷一份，或者请老师运行 course-release。") from None
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise CheckFailed(f"{path} 不是这个版本的课程写的公开用例文件：请更新课程文件夹，或者请老师运行 course-release。")
    return data["exercises"]
