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
from typing import NamedTuple

import torch

from course import inplace, layout, protocols, smollm2, torch_errors
from course.compare import SUMMARY, compare
from course.errors import GraderProblem
from course.output_rules import RULES
from course.protocols import Case
from course.tolerances import Tolerance

FORMAT = 1  # of the file: a check refuses a file of another format rather than misread it
MUTATED = "原地修改了输入"
SAME = "same as expected"  # a mistake's output on a case where it gives what the reference gives
RAISES = "raises"  # ... on a case where it raises


class Failure(NamedTuple):
    """Why a check fails: the grader's message, what the student's code raised (None for a wrong output), and
    the known mistake the message names ("" for none)."""

    message: str
    cause: BaseException | None = None
    mistake: str = ""


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
    space = sys._getframe(1).f_globals
    main = sys.modules.get("__main__")
    if main is not None and vars(main) is space:  # a Jupyter kernel's notebook
        notebook = main
    else:
        notebook = types.ModuleType(protocols.STUDENT_MODULE)
        vars(notebook).update(space)
    failure = verdict(name, notebook)
    if failure is not None:
        raise CheckFailed(f"{name}：{failure.message}") from failure.cause
    data = exercise_data(name)
    hidden = f"评分时还有 {data['hidden']} 个不公开的用例" if data["hidden"] else "评分时跑的也是这些用例"
    print(f"✓ {name}：{len(data['cases'])} 个公开用例都对（{hidden}）")


def verdict(name: str, notebook: types.ModuleType) -> Failure | None:
    """None when the definition of exercise ``name`` in ``notebook`` passes its public cases, else why not; a
    wrong answer on exercises it builds on that fail their own public cases is put down to them first, as the
    grader does."""
    data = exercise_data(name)
    definition = data["definition"]
    if not hasattr(notebook, definition):
        return Failure(f"notebook 里还没有 `{definition}` 的定义：先运行上面写 {definition} 的那个单元格，再运行这个检查。")
    code = getattr(notebook, definition)
    failure = judge(data, code, notebook)
    if failure is None or failure.message == torch_errors.NOT_IMPLEMENTED:
        return failure
    broken = _broken_bases(data, code, notebook)
    return Failure(_on_a_broken_base(broken, failure.message), failure.cause) if broken else failure


def _broken_bases(data: dict, code, notebook: types.ModuleType) -> list[tuple[str, str]]:
    """The exercises this one builds on (``uses``) that the notebook's code reaches (or its call protocol hands
    over, ``protocols.PULLED``) and that fail their own public cases, with the first line of what their checks
    say: as the grader does, a wrong answer on a broken base is put down to the base first."""
    found = _all_checks()
    reached = _reached(code, notebook) | set(protocols.PULLED.get(data["call"], ()))  # what the protocol hands over
    broken = []
    for name in data["uses"]:
        base = found.get(name)
        if base is None or base["definition"] not in reached or not hasattr(notebook, base["definition"]):
            continue
        failure = judge(base, getattr(notebook, base["definition"]), notebook)
        if failure is not None:
            broken.append((name, failure.message.splitlines()[0]))
    return broken


def _on_a_broken_base(broken: list[tuple[str, str]], message: str) -> str:
    names = "、".join(name for name, _ in broken)
    it = "它" if len(broken) == 1 else "它们"
    case = next((line for line in message.splitlines() if line.startswith("用例：")), "")
    return "\n".join([f"没有通过：用到的 {names} 还没通过它自己的检查",
                      f"这一题的代码用到了你自己写的 {names}，{it}在自己的检查里没有通过。先让 {names} 通过：在没通过的基础上，"
                      "这一题也对不了，所以这一题自己的错因先不诊断。",
                      *(f"{name} 的检查：{said}" for name, said in broken),
                      *([f"这一题第一个没通过的{case}"] if case else [])])


def _reached(code, notebook: types.ModuleType) -> set[str]:
    """The notebook's names that ``code`` (a function or a class) uses, directly or through the notebook's other
    functions and classes it uses."""
    seen: set[str] = set()
    todo = [code]
    while todo:
        for name in _names_used(todo.pop()):
            if name not in seen and hasattr(notebook, name):
                seen.add(name)
                found = getattr(notebook, name)
                if isinstance(found, type) or hasattr(found, "__code__"):
                    todo.append(found)
    return seen


def _names_used(code) -> set[str]:
    """The global names read by a function's code (unwrapped) or by a class's methods, nested code included."""
    objects = [vars(code).get(k) for k in vars(code)] if isinstance(code, type) else [code]
    codes = []
    for thing in objects:
        thing = getattr(thing, "__func__", thing)  # staticmethod, classmethod
        thing = getattr(thing, "__wrapped__", thing)
        if hasattr(thing, "__code__"):
            codes.append(thing.__code__)
    names: set[str] = set()
    while codes:
        current = codes.pop()
        names.update(current.co_names)
        codes.extend(const for const in current.co_consts if isinstance(const, types.CodeType))
    return names


def judge(data: dict, code, notebook: types.ModuleType) -> Failure | None:
    """None when ``code`` passes every public case of ``data`` (one exercise of a checks file), else why not.
    ``notebook`` holds the notebook's other definitions, which the protocols look up (``protocols.neighbour``)."""
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
            return _raised(data, case, outcome)
        got, changed = outcome
        problem = _problem(data, case, got)
        if problem is not None or changed:
            return _wrong(data, outcomes, index, problem, changed)
    return None


def _run(data: dict, code) -> list:
    """Per public case, in order, ``(output, changed inputs)``, or the error that stopped the run; torch's flash
    kernels refused as the grader refuses them (``protocols.REFUSING_FLASH``)."""
    call = protocols.PROTOCOLS[data["call"]]
    with protocols.watches.flash_kernels_refused(data["call"]):
        return _outcomes(data, code, call)


def _outcomes(data: dict, code, call) -> list:
    outcomes = []
    for stored in data["cases"]:
        case = Case(stored["label"], decoded(inplace.copies(stored["args"])), decoded(inplace.copies(stored["kwargs"])),
                    public=True)
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
        return RULES[data["verify"]](Case(case["label"], decoded(case["args"]), decoded(case["kwargs"])), got,
                                     case["expected"])
    return mismatch


def _agrees(data: dict, case: dict, got, wrong) -> bool:
    wrong = case["expected"] if is_same(wrong) else wrong
    return compare(_graded(data, got), wrong, _dtype(case), Tolerance(*case["tolerance"]), names=data["output_names"],
                   equal_nan=True, free=case["free"]) is None


def _fitting(data: dict, outcomes: list, index: int) -> list[tuple[str, str]]:
    """The named mistakes, (name, hint) once per name in the catalogue's order, whose stored outputs give the
    student's on case ``index`` and agree with every other public case that returned where they define one; when
    the student's code then raised, a mistake that does not raise on that case too only fits the cases that ran
    (the grader's ``diagnosis.diagnose``). With them, each mistake given as a test of the output that comes before
    one of them and accepts its outputs on those cases (``claims``): the grader, with its hidden cases too, names
    the first that fits every case; where mistakes of different names fit the public cases, only the hidden cases
    may tell them apart."""
    returned = [(case, outcome[0]) for case, outcome in zip(data["cases"], outcomes) if not isinstance(outcome, BaseException)]
    raised_on = data["cases"][len(returned)] if len(returned) < len(outcomes) else None
    fits = []
    for which in range(len(data["mistakes"])):
        wrong = data["cases"][index]["mistakes"].get(which)
        if wrong is None or is_raises(wrong) or not _agrees(data, data["cases"][index], returned[index][1], wrong):
            continue
        if not all(is_raises(gives := case["mistakes"].get(which)) or gives is None or _agrees(data, case, got, gives)
                   for case, got in returned):
            continue
        if raised_on is not None and not is_raises(raised_on["mistakes"].get(which)):
            continue
        fits.append(which)
    claiming = {test for which in fits for test in data["cases"][index]["claims"] if test < which
                and all(which in case["claims"][test] for case, _ in returned
                        if case["mistakes"].get(which) is not None and not is_raises(case["mistakes"][which]))}
    fitting = []
    for which in sorted({*fits, *claiming}):
        name, hint, _ = data["mistakes"][which]
        if all(name != seen for seen, _ in fitting):
            fitting.append((name, hint))
    return fitting


def is_raises(stored) -> bool:
    """Whether a mistake's stored output on a case says it raises there."""
    return isinstance(stored, str) and stored == RAISES


def is_same(stored) -> bool:
    """Whether a mistake's stored output on a case says it gives the reference's output there."""
    return isinstance(stored, str) and stored == SAME


def _wrong(data: dict, outcomes: list, index: int, problem, changed) -> Failure:
    """What the grader says of a wrong output on case ``index`` (``problem``, None when only an input changed in
    place: ``changed``)."""
    case = data["cases"][index]
    text, kind = (problem.text, problem.kind) if hasattr(problem, "kind") else (problem, "values")
    lines = [f"用例：{case['label']}", *([text] if problem is not None else []),
             *([inplace.said(changed)] if changed else [])]
    # Code that changed its input in place on this case gave its output from inputs no mistake was tried on.
    fitting = [(MUTATED, inplace.HINT)] if changed else _fitting(data, outcomes, index)
    named = fitting[0] if len(fitting) == 1 else None
    if named:
        lines.append(f"看起来是：{named[0]}。{named[1]}")
    elif fitting:
        lines.append("公开的用例分不出是下面哪一种：" + "；".join(name for name, _ in fitting[:3]) + "。")
    return Failure(f"没有通过：{named[0] if named else SUMMARY[kind]}\n" + "\n".join(lines),
                   mistake=named[0] if named else "")


def _raised(data: dict, case: dict, error: BaseException) -> Failure:
    """What the grader says when the code raised on ``case``: not yet implemented, the grader's own problem, a
    named mistake the error shows, or what the error means in the course's terms."""
    if isinstance(error, NotImplementedError) and not re.search(torch_errors.NO_KERNEL, str(error)):
        return Failure(torch_errors.NOT_IMPLEMENTED, error)
    if type(error) is GraderProblem:
        return Failure(f"课程的文件出了问题，不是你的代码的问题：{error}", error)
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
    return Failure(summary + "\n" + "\n".join(lines), error, mistake[0] if mistake else "")


def _lines_of(error: BaseException) -> list[str]:
    """The source lines of the traceback's frames (a named mistake's pattern may be in the student's line)."""
    return [frame.line or "" for frame in traceback.extract_tb(error.__traceback__)]


_NAMESPACE = "__namespace__"
_MODEL_FOLDER = "__model_folder__"


def encoded(value):
    """``value`` as a checks file holds it: a ``SimpleNamespace`` (a layer's config) as a marked dict, which
    ``torch.load(weights_only=True)`` reads back; the model's folder (``smollm2.ModelFolder``), a path of the
    machine that wrote the file, as a marker; everything else as it is."""
    if isinstance(value, types.SimpleNamespace):
        return {_NAMESPACE: encoded(vars(value))}
    if isinstance(value, smollm2.ModelFolder):
        return {_MODEL_FOLDER: smollm2.MODEL_NAME}
    if isinstance(value, (tuple, list)):
        return type(value)(encoded(v) for v in value)
    if isinstance(value, dict):
        return {k: encoded(v) for k, v in value.items()}
    return value


def decoded(value):
    """``encoded``'s inverse."""
    if isinstance(value, dict):
        if set(value) == {_NAMESPACE}:
            return types.SimpleNamespace(**decoded(value[_NAMESPACE]))
        if set(value) == {_MODEL_FOLDER}:
            try:
                return smollm2.ModelFolder(smollm2.find_model())
            except smollm2.WeightsMissing as e:
                raise CheckFailed(str(e)) from None
        return {k: decoded(v) for k, v in value.items()}
    if isinstance(value, (tuple, list)):
        return type(value)(decoded(v) for v in value)
    return value


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
