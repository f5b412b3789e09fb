"""What runs inside the sandbox, behind the walls: compile the student's definitions, call them on each
case with the exercise's call protocol, and hand back a ``report.Report`` of plain data (tensors, numbers,
strings, tuples and dicts) for the grader to compare. Nothing here knows an expected output.
"""
import ast
import builtins
import re
import sys
import traceback
import types
from dataclasses import replace

import torch

from autograder.engine import limits
from autograder.engine.sandbox.report import (
    DTYPES,
    INTS,
    TOO_BIG,
    Error,
    ErrorInfo,
    GraderError,
    Ok,
    Report,
    TooBig,
    is_plain_tensor,
    shape_fits,
)
from autograder.engine.student_code import Cell, StudentCode, student_code
from course import inplace, protocols, torch_errors
from course.errors import GraderProblem

NOT_IMPLEMENTED = torch_errors.NOT_IMPLEMENTED
GRADING_PACKAGES = ("autograder", "solutions")
TOO_MUCH_TEXT = (f"交回的结果里的名字、字符串或数据项太多（超过 {limits.HEADER_BYTES // 2**20} MiB），被停止了："
                 "返回值里是不是有特别长的字符串，或者特别长的 list？")
_DENSE = "请返回普通的稠密张量"
_SPARSE = (torch.sparse_coo, torch.sparse_csr, torch.sparse_csc, torch.sparse_bsr, torch.sparse_bsc)


class NotPlain(Exception):
    """An output that a report cannot carry (a meta or sparse tensor, a nesting too deep); the message says why,
    to the student."""


class _NoGradingImports:
    """A meta-path finder that refuses the course's grading packages with a clear message."""

    @staticmethod
    def find_spec(name, path=None, target=None):
        if name.partition(".")[0] in GRADING_PACKAGES:
            raise ImportError(f"评分时不能导入 `{name}`：评分程序和参考答案不在你的代码能碰到的地方。"
                              "请只用 torch、math 这些库，和 notebook 里你自己的定义。")
        return None


def block_grading_imports() -> None:
    """Forget the grading modules this process has loaded (the harness keeps its own references) and
    refuse any new import of them."""
    for name in list(sys.modules):
        if name.partition(".")[0] in GRADING_PACKAGES:
            del sys.modules[name]
    sys.meta_path.insert(0, _NoGradingImports)


def plain(value, depth: int = 0):
    """``value`` as data a report carries (``report.from_plain``): tensors as plain ``torch.Tensor``
    (``_plain_tensor``), lists as tuples, numbers and strings as the builtins themselves, unknown objects named
    by type; ``NotPlain`` for what it cannot carry: a tensor without plain values, an int outside int64,
    nesting deeper than ``limits.OUTPUT_DEPTH``."""
    if depth > limits.OUTPUT_DEPTH:
        raise NotPlain(f"返回值嵌套得太深（超过 {limits.OUTPUT_DEPTH} 层 tuple、list 或 dict）：请按题目要求返回。")
    if isinstance(value, torch.Tensor):
        return _plain_tensor(value)
    if isinstance(value, (tuple, list)):
        return tuple(plain(v, depth + 1) for v in value)
    if isinstance(value, dict):
        return {str.__str__(str(k)): plain(v, depth + 1) for k, v in value.items()}
    if value is None or isinstance(value, bool):
        return value
    for kind, as_builtin in ((int, _plain_int), (float, float.__float__), (str, str.__str__)):
        if isinstance(value, kind):  # a subclass too (numpy's float64, an IntEnum): the report carries only
            return as_builtin(value)  # the builtins, and an honest answer would read as a forged report
    return f"{type(value).__module__}.{type(value).__qualname__} 对象"


def _plain_int(value: int) -> int:
    """``value`` as an int itself; ``NotPlain`` outside int64 (``report.INTS``)."""
    number = int.__index__(value)
    if number not in INTS:
        raise NotPlain("返回的整数超出了 int64 的范围（-2⁶³ 到 2⁶³-1）：是不是哪里算错了？")
    return number


def _plain_tensor(t: torch.Tensor) -> torch.Tensor:
    """A copy of ``t``'s values as a plain tensor (``report.is_plain_tensor``): detached, on the CPU,
    contiguous; ``NotPlain`` saying why when it has none (meta, sparse, quantized, ...). A subclass
    (``nn.Parameter``, the student's own) counts as the values it holds: its ``__torch_function__``, and any
    mode's, is not consulted."""
    with torch._C.DisableTorchFunction():
        why = _why_not_plain(t)  # before as_subclass, which a sparse tensor refuses
        if why:
            raise NotPlain(why)
        try:  # a subclass's __torch_dispatch__ decides what these calls do and return
            copy = torch.Tensor.as_subclass(t, torch.Tensor).detach().cpu().clone(memory_format=torch.contiguous_format)
        except RuntimeError as e:  # NotImplementedError too: torch's, not a function the student left unwritten
            raise NotPlain(_no_copy(t, f"（{type(e).__name__}: {str(e)[:200]}）")) from None
    if not is_plain_tensor(copy):
        raise NotPlain(_no_copy(t, ""))
    return copy


def _no_copy(t: torch.Tensor, why: str) -> str:
    """The message for a tensor whose copy holds no plain values; ``why``: what torch said, if anything."""
    return f"返回的张量（{type(t).__name__}）复制不出普通的数值{why}：{_DENSE}。它的 __torch_dispatch__ 改了什么吗？"


def _why_not_plain(t: torch.Tensor) -> str | None:
    """Why a report cannot carry ``t`` (a tensor on any device, of any subclass), for the student; None when it
    can once on the CPU."""
    if t.is_nested:  # first: a nested tensor has no shape to ask for
        return f"返回了嵌套张量（nested tensor）：{_DENSE}。"
    if t.is_meta:
        return f"返回了 meta 张量（没有数值）：{_DENSE}。"
    if t.layout in _SPARSE:
        return f"返回了稀疏张量（{t.layout}）：{_DENSE}，比如用 .to_dense()。"
    if t.layout != torch.strided:
        return f"返回了 layout 为 {t.layout} 的张量：{_DENSE}，比如用 .to_dense()。"
    if t.is_quantized:
        return f"返回了量化张量（{t.dtype}）：请返回普通的浮点张量，比如用 .dequantize()。"
    if t.dtype not in DTYPES.values():
        return f"返回了 dtype 为 {t.dtype} 的张量：评分只收这些 dtype：{'、'.join(DTYPES)}。"
    if not shape_fits(t.shape):
        return (f"返回的张量 shape 是 {list(t.shape)}：超出了评分能收的范围（最多 {limits.OUTPUT_DIMS} 维，"
                f"把长度为 0 的维算作 1 时最多 {limits.OUTPUT_BYTES} 个元素）。")
    return None


# How many of the student's own frames an error's location shows: where it was raised and the calls that led there.
_CALLERS_SHOWN = 2


def _student_frames(exc: BaseException, code: StudentCode) -> list[tuple[str, int, str]]:
    """(cell label, line number, qualified function name) of each frame in the student's cells, innermost last."""
    labels = {cell.label for cell in code.cells}
    return [(f.f_code.co_filename, lineno, getattr(f.f_code, "co_qualname", f.f_code.co_name))
            for f, lineno in traceback.walk_tb(exc.__traceback__) if f.f_code.co_filename in labels]


def _place(frame, code: StudentCode) -> str:
    """One frame the way JupyterLab shows it: the function, its cell's In [n], the line."""
    label, lineno, function = frame
    cell = code.cell(label)
    inside = "" if function == "<module>" else f"`{function}` 里，"
    return f"{inside}{cell.where if cell else label} 第 {lineno} 行：{code.line(label, lineno)}"


def _location(frames: list, code: StudentCode) -> str:
    """Where the error is, and (when it was raised in a helper) which of the student's lines called it: a known
    mistake's pattern may be in the caller (``k.T`` handed to a helper that multiplies)."""
    lines = [f"出错位置：{_place(frames[-1], code)}"]
    lines += [f"调用它的是：{_place(frame, code)}" for frame in reversed(frames[-1 - _CALLERS_SHOWN:-1])]
    return "\n".join(lines)


def _assigned_in(code: StudentCode, name: str) -> str | None:
    """The cell (as shown) whose top-level code assigns ``name``: a demo cell, which grading does not run."""
    for cell in code.cells:
        try:
            tree = ast.parse(cell.source)
        except (SyntaxError, ValueError, RecursionError, MemoryError):
            continue
        for node in tree.body:
            targets = [t for n in ast.walk(node) if isinstance(n, (ast.Assign, ast.AugAssign, ast.AnnAssign, ast.For))
                       for t in ([n.target] if not isinstance(n, ast.Assign) else n.targets)]
            if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and any(
                    isinstance(t, ast.Name) and t.id == name for target in targets for t in ast.walk(target)):
                return cell.where
    return None


def _name_error(exc: NameError, code: StudentCode, where: str) -> ErrorInfo:
    name = getattr(exc, "name", None) or ""
    demo = _assigned_in(code, name) if name else None
    if demo:
        why = (f"`{name}` 是在 {demo} 的演示代码里赋值的。评分时只运行 import、函数和类的定义以及全大写的常量，"
               "不运行演示代码，所以函数里用不到它：把它作为参数传进来，或者在函数里算出来。")
    else:
        why = f"notebook 里没有定义 `{name}`：是不是拼写错了，或者忘了 import？"
    return ErrorInfo(f"运行出错：NameError：`{name}` 没有定义", "\n".join(x for x in (why, where) if x))


def describe_error(exc: BaseException, code: StudentCode, name: str) -> ErrorInfo:
    """A short Chinese summary of what the student's code raised, and where."""
    frames = _student_frames(exc, code)
    where = _location(frames, code) if frames else ""
    if isinstance(exc, NotImplementedError) and not re.search(torch_errors.NO_KERNEL, str(exc)):
        # A function, or a method of a class, is the exercise itself or one it builds on.
        raised_in = frames[-1][2].split(".")[0] if frames else name
        if raised_in in (name, "<module>"):
            return ErrorInfo(NOT_IMPLEMENTED)
        return ErrorInfo(f"{NOT_IMPLEMENTED}：`{name}` 调用的 `{raised_in}` 还没有实现。", where)
    if isinstance(exc, SystemExit):
        return ErrorInfo("代码调用了 exit() / sys.exit()：评分时不能退出进程。", where)
    if isinstance(exc, MemoryError) or "allocate" in str(exc):
        return ErrorInfo("内存不够：代码申请的内存超出了评分的上限。是不是建了一个特别大的张量？", where)
    if isinstance(exc, NameError) and not isinstance(exc, UnboundLocalError):
        return _name_error(exc, code, where)
    return ErrorInfo(torch_errors.summary(exc), where)


def _raised_by_the_grader(exc: BaseException) -> bool:
    """Whether ``exc`` is the grader's own ``GraderProblem``: that very class (not a look-alike or a subclass
    of the student's), raised by a line of the protocols' modules (``protocols.FILES``; not by a ``raise`` in the
    student's cells).

    Why the raising frame and not hiding the class: student code can reach the class anyway (``gc``, or the
    globals of the protocol objects it is handed), and a student who raised it would turn a zero into "not
    graded", regraded on every run. What is left to a determined student (making the protocol's own code
    fail, or writing a forged report to the pipe: the code owns this process) only forfeits the exercise's
    points behind a ⚠ the teacher sees; the grader cannot tell it from a real one, since only the sandbox
    reads the case the way the student's code did.
    """
    frames = list(traceback.walk_tb(exc.__traceback__))
    return type(exc) is GraderProblem and bool(frames) and frames[-1][0].f_code.co_filename in protocols.FILES


def _size(value) -> int:
    if isinstance(value, torch.Tensor):
        return value.numel() * value.element_size()
    if isinstance(value, (tuple, list)):
        return sum(_size(v) for v in value)
    if isinstance(value, dict):
        return sum(_size(v) for v in value.values())
    return len(value) if isinstance(value, str) else 8


def _call_each(call, student, cases: list, code: StudentCode, name: str) -> tuple:
    """One outcome per case, in order, until a case stops the run (an error, or outputs over the cap)."""
    outcomes, size = [], 0
    for case in cases:
        given = protocols.handed_inputs(call.__name__, student, case)
        before = [inplace.copies(value) for _, value in given]
        try:
            got = plain(call(student, case))
        except NotPlain as e:
            outcomes.append(Error(ErrorInfo(str(e))))
            break
        except BaseException as e:  # noqa: BLE001 - anything the student's code raises is reported
            outcomes.append(GraderError(str(e)) if _raised_by_the_grader(e) else Error(describe_error(e, code, name)))
            break
        size += _size(got)
        if size > limits.OUTPUT_BYTES:
            outcomes.append(Error(ErrorInfo(TOO_BIG)))
            break
        outcomes.append(Ok(got, tuple(inplace.changed(given, before))))
    return tuple(outcomes)


def run(request: dict) -> Report:
    """The sandbox's answer to one job: the names the notebook defines, its syntax errors, and either an
    error while defining or the outcomes of the cases."""
    code = student_code([Cell(*cell) for cell in request["cells"]])
    defined, syntax_errors = dict(code.defined), dict(code.syntax_errors)
    name = request["exercise"]
    if name not in code.defined:
        return Report(defined, syntax_errors)
    if request["call"] in protocols.REFUSING_FLASH:  # before any of the student's code, for good
        protocols.watches.refuse_flash_kernels()
    # A module of its own, as Jupyter's ``__main__``: dataclasses and typing find it, and the protocols find the
    # notebook's classes in it (``protocols.neighbour``) however the code under test is decorated.
    module = types.ModuleType(protocols.STUDENT_MODULE)
    module.__builtins__ = builtins
    sys.modules[protocols.STUDENT_MODULE] = module
    try:
        try:
            for compiled in code.compiled:
                exec(compiled, vars(module))
        except BaseException as e:  # noqa: BLE001
            info = describe_error(e, code, name)
            return Report(defined, syntax_errors,
                          error=replace(info, summary="执行 notebook 里的定义时出错，" + info.summary))
        outcomes = _call_each(protocols.PROTOCOLS[request["call"]], vars(module)[name], request["cases"], code, name)
    finally:
        sys.modules.pop(protocols.STUDENT_MODULE, None)
    return Report(defined, syntax_errors, outcomes=outcomes, reaches=code.reaches(name))


def failure(exc: BaseException) -> Report:
    """The report when the harness itself fails on this student's code (a huge output, a broken object)."""
    if isinstance(exc, MemoryError):
        return Report({}, {}, error=ErrorInfo(TOO_BIG))
    return Report({}, {}, error=ErrorInfo(f"评分时出错：{type(exc).__name__}: {str(exc)[:300]}"))


def serialise(report: Report) -> bytes:
    """The bytes the fork server relays to the grader; a report too big to write (``report.TooBig``) is
    replaced by one saying so."""
    try:
        return report.to_bytes()
    except TooBig:
        return Report({}, {}, error=ErrorInfo(TOO_MUCH_TEXT)).to_bytes()
