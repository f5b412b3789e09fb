"""The student's code, keeping only what grading needs: a notebook's imports, function and class
definitions and ALL_CAPS constants, and nothing else. Demo cells, plots and visible checks are skipped,
so a half-done notebook still grades.

Parsing and compiling happen inside the sandbox (``harness.run``): whatever a notebook holds, it cannot
crash the grader's own process.
"""
import ast
import difflib
import re
from dataclasses import dataclass, field

_CONSTANT = re.compile(r"^[A-Z][A-Z0-9_]*$")

_KEPT = (ast.Import, ast.ImportFrom, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)


@dataclass(frozen=True)
class Cell:
    """One code cell: ``label`` identifies it (unique, e.g. "代码单元 #3"); ``shown`` is how the student finds it
    in JupyterLab ("In [7]" when the notebook was run, else its position), ``label`` when empty."""

    label: str
    source: str
    shown: str = ""

    @property
    def where(self) -> str:
        return self.shown or self.label


@dataclass
class StudentCode:
    """The graded part of a notebook: compiled definitions, cell by cell, and what went wrong."""

    cells: list[Cell]
    compiled: list = field(default_factory=list)
    defined: dict[str, str] = field(default_factory=dict)  # top-level name -> label of its cell
    refers: dict[str, set[str]] = field(default_factory=dict)  # top-level definition -> the names its body uses
    syntax_errors: dict[str, str] = field(default_factory=dict)  # label -> message

    def reaches(self, name: str) -> tuple[str, ...]:
        """The notebook's other top-level definitions that ``name`` uses, directly or through one another."""
        seen, todo = {name}, [name]
        while todo:
            for used in sorted(self.refers.get(todo.pop(), ())):
                if used in self.defined and used not in seen:
                    seen.add(used)
                    todo.append(used)
        return tuple(sorted(seen - {name}))

    def cell(self, label: str) -> Cell | None:
        return next((cell for cell in self.cells if cell.label == label), None)

    def line(self, label: str, lineno: int) -> str:
        """The text of line ``lineno`` of the cell called ``label`` ('' when unknown)."""
        cell = self.cell(label)
        lines = cell.source.splitlines() if cell else []
        return lines[lineno - 1].strip() if 0 < lineno <= len(lines) else ""


def _without_magics(source: str) -> str | None:
    """Source with IPython magics and shell lines blanked (line numbers kept); None for a cell magic."""
    if source.lstrip().startswith("%%"):
        return None
    lines = source.splitlines()
    return "\n".join("" if line.lstrip().startswith(("%", "!")) else line for line in lines)


def _graded(node: ast.stmt) -> bool:
    if isinstance(node, _KEPT):
        return True
    if isinstance(node, (ast.Assign, ast.AnnAssign)):
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        return all(isinstance(t, ast.Name) and _CONSTANT.match(t.id) for t in targets)
    return False


def _names(node: ast.stmt) -> list[str]:
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return [node.name]
    if isinstance(node, (ast.Import, ast.ImportFrom)):
        return [(a.asname or a.name).split(".")[0] for a in node.names]
    targets = node.targets if isinstance(node, ast.Assign) else [node.target]
    return [t.id for t in targets]


def _names_read(node: ast.AST) -> set[str]:
    """Every ``Name`` in ``node``'s tree (what ``ast.walk`` finds, without its generators: a notebook's
    definitions are walked in every run)."""
    found, todo = set(), [node]
    while todo:
        here = todo.pop()
        if type(here) is ast.Name:
            found.add(here.id)
        for name in here._fields:
            value = getattr(here, name, None)
            if type(value) is list:
                todo.extend(item for item in value if isinstance(item, ast.AST))
            elif isinstance(value, ast.AST):
                todo.append(value)
    return found


def _used_imports(node: ast.stmt, used: set[str]) -> ast.stmt | None:
    """``node`` keeping only the imported names in ``used`` (None when nothing is left). A ``__future__`` import
    is kept whole: it changes how the rest of its cell compiles (``annotations`` defers every annotation)."""
    if not isinstance(node, (ast.Import, ast.ImportFrom)) or isinstance(node, ast.ImportFrom) and node.module == "__future__":
        return node
    node.names = [a for a in node.names if a.name == "*" or (a.asname or a.name).split(".")[0] in used]
    return node if node.names else None


def student_code(cells: list[Cell]) -> StudentCode:
    """Compile the graded statements of ``cells``; a cell with a syntax error is skipped and noted.

    Imports that no graded definition uses (``matplotlib.pyplot`` for the plots) are dropped: they
    cannot change a verdict and would cost every sandboxed run their import time.
    """
    code = StudentCode(cells)
    kept_by_cell = []
    for cell in cells:
        source = _without_magics(cell.source)
        if source is None:
            continue
        try:
            tree = ast.parse(source, filename=cell.label)
        except SyntaxError as e:
            code.syntax_errors[cell.label] = f"第 {e.lineno} 行：{e.msg}"
            continue
        except (RecursionError, MemoryError, ValueError, OverflowError) as e:
            code.syntax_errors[cell.label] = f"Python 无法解析这个单元（{type(e).__name__}：嵌套太深或太大？）"
            continue
        kept_by_cell.append((cell.label, [node for node in tree.body if _graded(node)]))
    reads = {id(node): _names_read(node) for _, kept in kept_by_cell for node in kept
             if not isinstance(node, (ast.Import, ast.ImportFrom))}
    used = set().union(*reads.values())
    for label, kept in kept_by_cell:
        kept = [n for n in (_used_imports(node, used) for node in kept) if n is not None]
        if not kept:
            continue
        try:
            code.compiled.append(compile(ast.Module(body=kept, type_ignores=[]), label, "exec"))
        except (SyntaxError, RecursionError, MemoryError, ValueError, OverflowError) as e:
            code.syntax_errors[label] = f"Python 无法编译这个单元（{type(e).__name__}：{str(e)[:200]}）"
            continue
        for node in kept:
            for name in _names(node):
                code.defined[name] = label
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                # A name defined again (a notebook's ``class M(M)`` that adds a method) keeps what it used before.
                code.refers.setdefault(node.name, set()).update(reads[id(node)] - {node.name})
    return code


def missing_definition(code: StudentCode, name: str) -> str | None:
    """Why ``name`` cannot be graded (None when the notebook defines it)."""
    if name in code.defined:
        return None
    for cell in code.cells:
        if cell.label in code.syntax_errors and re.search(rf"\b(def|class)\s+{name}\b", cell.source):
            return (f"{cell.where} 有语法错误（{code.syntax_errors[cell.label]}），所以读不到 `{name}` 的定义。"
                    "请先修好语法错误。")
    close = difflib.get_close_matches(name, list(code.defined), n=3, cutoff=0.6)
    hint = f"找到了相近的名字：{', '.join(close)}。" if close else ""
    return (f"在 notebook 里找不到 `{name}` 的定义。{hint}请保留练习里给出的函数名和参数，"
            "评分器按名字调用它（定义要写在代码单元的最外层，不能放在 if 或其他函数里）。")
