"""Read the student's code out of a notebook, keeping only what grading needs.

The grader runs a notebook's imports, function and class definitions and ALL_CAPS constants, and
nothing else: demo cells, plots and visible checks are skipped, so a half-done notebook still grades.
Notebooks are only ever opened for reading.
"""
import ast
import difflib
import json
import re
from dataclasses import dataclass, field
from pathlib import Path

_CONSTANT = re.compile(r"^[A-Z][A-Z0-9_]*$")

_KEPT = (ast.Import, ast.ImportFrom, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)


class NotebookError(Exception):
    """The notebook cannot be read; the message says why and what to do."""


@dataclass(frozen=True)
class Cell:
    """One code cell: ``label`` names it for the student (e.g. "代码单元 #3" or "In[7]")."""

    label: str
    source: str


@dataclass
class StudentCode:
    """The graded part of a notebook: compiled definitions, cell by cell, and what went wrong."""

    cells: list[Cell]
    compiled: list = field(default_factory=list)
    defined: dict[str, str] = field(default_factory=dict)  # top-level name -> label of its cell
    syntax_errors: dict[str, str] = field(default_factory=dict)  # label -> message

    def line(self, label: str, lineno: int) -> str:
        """The text of line ``lineno`` of the cell called ``label`` ('' when unknown)."""
        for cell in self.cells:
            if cell.label == label:
                lines = cell.source.splitlines()
                return lines[lineno - 1].strip() if 0 < lineno <= len(lines) else ""
        return ""


def read_code_cells(path: Path) -> list[Cell]:
    """The code cells of the notebook at ``path``, labelled by their position among code cells."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise NotebookError(f"找不到 notebook：{path}。请检查路径。") from None
    except (OSError, UnicodeDecodeError) as e:
        raise NotebookError(f"无法读取 notebook {path}：{e}") from None
    try:
        nb = json.loads(text)
    except json.JSONDecodeError as e:
        raise NotebookError(
            f"{path} 不是合法的 notebook（JSON 在第 {e.lineno} 行第 {e.colno} 列出错：{e.msg}）。"
            "它可能在保存时被截断或被文本编辑器改坏了：请在 JupyterLab 里重新打开并保存，"
            "或从 release/ 重新拷贝一份再把代码填回去。"
        ) from None
    if not isinstance(nb, dict) or not isinstance(nb.get("cells"), list) or nb.get("nbformat") != 4:
        raise NotebookError(f"{path} 不是 nbformat 4 的 notebook（缺少 cells 列表或版本不对）。")
    cells = []
    for cell in nb["cells"]:
        if not isinstance(cell, dict) or cell.get("cell_type") != "code":
            continue
        source = cell.get("source", "")
        source = "".join(source) if isinstance(source, list) else str(source)
        cells.append(Cell(f"代码单元 #{len(cells) + 1}", source))
    return cells


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


def _used_imports(node: ast.stmt, used: set[str]) -> ast.stmt | None:
    """``node`` keeping only the imported names in ``used`` (None when nothing is left)."""
    if not isinstance(node, (ast.Import, ast.ImportFrom)):
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
        kept_by_cell.append((cell.label, [node for node in tree.body if _graded(node)]))
    used = {n.id for _, kept in kept_by_cell for node in kept if not isinstance(node, (ast.Import, ast.ImportFrom))
            for n in ast.walk(node) if isinstance(n, ast.Name)}
    for label, kept in kept_by_cell:
        kept = [n for n in (_used_imports(node, used) for node in kept) if n is not None]
        if not kept:
            continue
        code.compiled.append(compile(ast.Module(body=kept, type_ignores=[]), label, "exec"))
        for node in kept:
            for name in _names(node):
                code.defined[name] = label
    return code


def missing_definition(code: StudentCode, name: str) -> str | None:
    """Why ``name`` cannot be graded (None when the notebook defines it)."""
    if name in code.defined:
        return None
    for cell in code.cells:
        if cell.label in code.syntax_errors and re.search(rf"\b(def|class)\s+{name}\b", cell.source):
            return (f"{cell.label} 有语法错误（{code.syntax_errors[cell.label]}），所以读不到 `{name}` 的定义。"
                    "请先修好语法错误。")
    close = difflib.get_close_matches(name, list(code.defined), n=3, cutoff=0.6)
    hint = f"找到了相近的名字：{', '.join(close)}。" if close else ""
    return (f"在 notebook 里找不到 `{name}` 的定义。{hint}请保留练习里给出的函数名和参数，"
            "评分器按名字调用它（定义要写在代码单元的最外层，不能放在 if 或其他函数里）。")
