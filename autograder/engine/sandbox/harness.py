"""What runs inside the sandbox, behind the walls: compile the student's definitions, call them on each
case with the exercise's call protocol, and hand back plain data (tensors, numbers, strings, lists and
dicts) for the grader to compare. Nothing here knows an expected output.
"""
import ast
import builtins
import io
import sys
import traceback

import torch

from autograder.engine import limits, protocols
from autograder.engine.student_code import Cell, StudentCode, student_code

NOT_IMPLEMENTED = "还没有实现（not yet implemented）"
TOO_BIG = f"交回的结果太大（超过 {limits.OUTPUT_BYTES // 2**20} MiB），被停止了：返回值里是不是有特别大的张量？"
GRADING_PACKAGES = ("autograder", "solutions")


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


def plain(value):
    """``value`` with tensors detached into plain ``torch.Tensor`` and unknown objects named by type."""
    if isinstance(value, torch.Tensor):
        return value.detach().cpu().as_subclass(torch.Tensor).clone()
    if isinstance(value, (tuple, list)):
        return tuple(plain(v) for v in value)
    if isinstance(value, dict):
        return {str(k): plain(v) for k, v in value.items()}
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return f"{type(value).__module__}.{type(value).__qualname__} 对象"


def _student_frame(exc: BaseException, code: StudentCode):
    """(cell label, line number, qualified function name) of the innermost frame in the student's cells."""
    labels = {cell.label for cell in code.cells}
    frames = [(f.f_code, lineno) for f, lineno in traceback.walk_tb(exc.__traceback__)
              if f.f_code.co_filename in labels]
    if not frames:
        return None
    function, lineno = frames[-1]
    return function.co_filename, lineno, getattr(function, "co_qualname", function.co_name)


def _location(frame, code: StudentCode) -> str:
    """Where the error is, the way JupyterLab shows it: the function, its cell's In [n], the line."""
    label, lineno, function = frame
    cell = code.cell(label)
    inside = "" if function == "<module>" else f"`{function}` 里，"
    return f"出错位置：{inside}{cell.where if cell else label} 第 {lineno} 行：{code.line(label, lineno)}"


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


def _name_error(exc: NameError, code: StudentCode, where: str) -> dict:
    name = getattr(exc, "name", None) or ""
    demo = _assigned_in(code, name) if name else None
    if demo:
        why = (f"`{name}` 是在 {demo} 的演示代码里赋值的。评分时只运行 import、函数和类的定义以及全大写的常量，"
               "不运行演示代码，所以函数里用不到它：把它作为参数传进来，或者在函数里算出来。")
    else:
        why = f"notebook 里没有定义 `{name}`：是不是拼写错了，或者忘了 import？"
    return {"summary": f"运行出错：NameError：`{name}` 没有定义", "details": "\n".join(x for x in (why, where) if x)}


def describe_error(exc: BaseException, code: StudentCode, name: str) -> dict:
    """A short Chinese summary of what the student's code raised, and where."""
    frame = _student_frame(exc, code)
    where = _location(frame, code) if frame else ""
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
    if isinstance(exc, NameError) and not isinstance(exc, UnboundLocalError):
        return _name_error(exc, code, where)
    text = str(exc).strip().splitlines()
    first = text[0][:300] if text else ""
    return {"summary": f"运行出错：{type(exc).__name__}: {first}", "details": where}


def _same(a: torch.Tensor, b: torch.Tensor) -> bool:
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    equal = a == b
    if a.is_floating_point():
        equal |= a.isnan() & b.isnan()
    return bool(equal.all())


def _changed_inputs(before, after, where: str) -> list[str]:
    """Which input tensors the call changed in place, named for the student."""
    if isinstance(before, torch.Tensor):
        return [] if isinstance(after, torch.Tensor) and _same(before, after) else [where]
    if isinstance(before, (tuple, list)):
        return [name for i, (b, a) in enumerate(zip(before, after))
                for name in _changed_inputs(b, a, f"{where}第 {i + 1} 项" if where else f"第 {i + 1} 个参数")]
    if isinstance(before, dict):
        return [name for key in before
                for name in _changed_inputs(before[key], after.get(key), f"{where}{key}" if where else f"参数 {key}")]
    return []


def _size(value) -> int:
    if isinstance(value, torch.Tensor):
        return value.numel() * value.element_size()
    if isinstance(value, (tuple, list)):
        return sum(_size(v) for v in value)
    if isinstance(value, dict):
        return sum(_size(v) for v in value.values())
    return len(value) if isinstance(value, str) else 8


def _call_each(call, student, cases: list, code: StudentCode, name: str) -> list:
    outcomes, size = [], 0
    for case in cases:
        pristine = protocols.map_tensors((case.args, case.kwargs), lambda t: t.clone())
        try:
            got = plain(call(student, case))
        except BaseException as e:  # noqa: BLE001 - anything the student's code raises is reported
            outcomes.append(["error", describe_error(e, code, name)])
            break
        size += _size(got)
        if size > limits.OUTPUT_BYTES:
            outcomes.append(["error", {"summary": TOO_BIG, "details": ""}])
            break
        changed = _changed_inputs(pristine[0], case.args, "") + _changed_inputs(pristine[1], case.kwargs, "")
        outcomes.append(["ok", got, changed])
    return outcomes


def run(request: dict) -> dict:
    """The sandbox's answer to one job: the names the notebook defines, its syntax errors, and either an
    error while defining or one outcome per case (``["ok", output, changed inputs]`` or ``["error", info]``)."""
    code = student_code([Cell(*cell) for cell in request["cells"]])
    report = {"defined": dict(code.defined), "syntax_errors": dict(code.syntax_errors)}
    name = request["exercise"]
    if name not in code.defined:
        return report
    namespace = {"__name__": "__student__", "__builtins__": builtins}
    try:
        for compiled in code.compiled:
            exec(compiled, namespace)
    except BaseException as e:  # noqa: BLE001
        report["error"] = describe_error(e, code, name)
        report["error"]["summary"] = "执行 notebook 里的定义时出错，" + report["error"]["summary"]
        return report
    report["outcomes"] = _call_each(protocols.PROTOCOLS[request["call"]], namespace[name], request["cases"], code, name)
    return report


def failure(exc: BaseException) -> dict:
    """The report when the harness itself fails on this student's code (a huge output, a broken object)."""
    if isinstance(exc, MemoryError):
        return {"defined": {}, "syntax_errors": {}, "error": {"summary": TOO_BIG, "details": ""}}
    return {"defined": {}, "syntax_errors": {},
            "error": {"summary": f"评分时出错：{type(exc).__name__}: {str(exc)[:300]}", "details": ""}}


def serialise(report: dict) -> bytes:
    buffer = io.BytesIO()
    torch.save(report, buffer)
    return buffer.getvalue()
