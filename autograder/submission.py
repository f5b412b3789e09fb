"""Find the notebook of each assignment in what a student hands in: a folder like ``release/``, one
assignment folder, or one notebook."""
from pathlib import Path

from autograder.assignments import ASSIGNMENTS, assignment_of


class SubmissionError(Exception):
    """The submission path cannot be graded at all; the message says why."""


def _one_notebook(folder: Path, assignment: str) -> Path | str:
    found = sorted(p for p in folder.glob("*.ipynb") if not p.name.startswith("."))
    if len(found) == 1:
        return found[0]
    named = [p for p in found if p.stem == assignment]
    if named:
        return named[0]
    if not found:
        return f"{folder} 里没有 .ipynb 文件。"
    return f"{folder} 里有好几个 notebook（{', '.join(p.name for p in found)}），请只留下要评分的那个，或命名为 {assignment}.ipynb。"


def notebooks(path: Path) -> dict[str, Path | str]:
    """Assignment -> its notebook, or a message saying why there is none."""
    path = Path(path)
    if path.suffix == ".ipynb":
        assignment = assignment_of(path)
        if assignment is None:
            raise SubmissionError(f"看不出 {path.name} 属于哪个作业：文件名或所在文件夹应以作业名开头，"
                                  f"例如 {next(iter(ASSIGNMENTS))}.ipynb。")
        return {assignment: path}
    if not path.is_dir():
        raise SubmissionError(f"找不到 {path}：--submission 要指向一个 notebook 或一个像 release/ 那样的文件夹。")
    if path.name in ASSIGNMENTS:
        return {path.name: _one_notebook(path, path.name)}
    return {name: _one_notebook(path / name, name) if (path / name).is_dir() else f"{path} 里没有 {name}/ 文件夹。"
            for name in ASSIGNMENTS}
