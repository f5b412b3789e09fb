"""Reading a submitted notebook, treating it as hostile: only a regular file inside the submission is
opened (no link out of it, no FIFO, no device), never written, at most ``limits.NOTEBOOK_BYTES``; a
malformed one is a clear ``NotebookError``, never a crash of the grader."""
import json
import os
import stat
from pathlib import Path

from autograder.engine import limits
from autograder.engine.student_code import Cell


class NotebookError(Exception):
    """The notebook cannot be read; the message says why and what to do."""


def _inside(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder.rstrip(os.sep) + os.sep)


def read_bytes(path: Path, root: Path) -> bytes:
    """The bytes of ``path``, a regular file that really lies inside ``root``."""
    real, real_root = os.path.realpath(path), os.path.realpath(root)
    if not _inside(real, real_root):
        raise NotebookError(f"{path} 是指向提交文件夹以外的链接，不予评分：请提交 notebook 文件本身。")
    try:
        fd = os.open(real, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        raise NotebookError(f"找不到 notebook：{path}。请检查路径。") from None
    except OSError as e:
        raise NotebookError(f"无法打开 notebook {path}：{e.strerror}") from None
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode):  # checked on the descriptor: a folder opens too, but cannot be read
        os.close(fd)
        raise NotebookError(f"{path} 不是普通文件（可能是管道、设备或文件夹），不予评分：请提交 notebook 文件本身。")
    with os.fdopen(fd, "rb") as f:
        if info.st_size > limits.NOTEBOOK_BYTES:
            raise NotebookError(f"{path} 有 {info.st_size / 2**20:.1f} MiB，超过了 {limits.NOTEBOOK_BYTES // 2**20} MiB 的上限："
                                "清掉输出（Edit → Clear Outputs of All Cells）再保存。")
        try:
            return f.read(limits.NOTEBOOK_BYTES + 1)
        except OSError as e:  # a "regular" file of /proc or a failing disk
            raise NotebookError(f"无法读取 notebook {path}：{e.strerror}") from None


def code_cells(nb) -> list[Cell]:
    """The code cells of a parsed notebook, labelled by their position among code cells and shown by their
    ``In [n]`` number when the notebook was run, without the instructor's locked test cells (nbgrader grade
    cells), which hold no student code. The cells hold at most ``limits.CODE_BYTES`` in all."""
    if not isinstance(nb, dict) or not isinstance(nb.get("cells"), list) or nb.get("nbformat") != 4:
        raise NotebookError("这不是 nbformat 4 的 notebook（缺少 cells 列表或版本不对）。")
    cells, size, number = [], 0, 0
    for cell in nb["cells"]:
        if not isinstance(cell, dict) or cell.get("cell_type") != "code":
            continue
        number += 1
        source = cell.get("source", "")
        source = "".join(s for s in source if isinstance(s, str)) if isinstance(source, list) else str(source)
        size += len(source.encode(errors="replace"))
        if size > limits.CODE_BYTES:
            raise NotebookError(f"代码单元加起来超过了 {limits.CODE_BYTES // 2**20} MiB 的上限。")
        if _is_test_cell(cell):
            continue
        count = cell.get("execution_count")
        shown = f"In [{count}]" if isinstance(count, int) and not isinstance(count, bool) else f"第 {number} 个代码单元"
        cells.append(Cell(f"代码单元 #{number}", source, shown))
    return cells


def _is_test_cell(cell: dict) -> bool:
    meta = cell.get("metadata")
    nbgrader = meta.get("nbgrader") if isinstance(meta, dict) else None
    return isinstance(nbgrader, dict) and nbgrader.get("grade") is True and not nbgrader.get("solution")


def read_code_cells(path: Path, root: Path | None = None) -> list[Cell]:
    """The code cells of the notebook at ``path`` (which must lie inside ``root``, its folder by default)."""
    path = Path(path)
    return parse_code_cells(read_bytes(path, root if root is not None else path.parent), path)


def parse_code_cells(data: bytes, path) -> list[Cell]:
    """The code cells of a notebook's bytes (read by ``read_bytes``, or taken out of a zip); ``path`` names
    where they came from in messages."""
    try:
        nb = json.loads(data.decode("utf-8"))
    except UnicodeDecodeError:
        raise NotebookError(f"{path} 不是 UTF-8 文本：它可能不是 notebook。") from None
    except json.JSONDecodeError as e:
        raise NotebookError(
            f"{path} 不是合法的 notebook（JSON 在第 {e.lineno} 行第 {e.colno} 列出错：{e.msg}）。"
            "它可能在保存时被截断或被文本编辑器改坏了：请在 JupyterLab 里重新打开并保存，"
            "或从 release/ 重新拷贝一份再把代码填回去。"
        ) from None
    except (RecursionError, MemoryError, ValueError) as e:
        raise NotebookError(f"{path} 不是合法的 notebook（{type(e).__name__}）。") from None
    try:
        return code_cells(nb)
    except NotebookError as e:
        raise NotebookError(f"{path}：{e}") from None
