"""Find the notebook of each assignment in what a student hands in: a folder like ``release/``, one
assignment folder, or one notebook. An assignment with no folder, or no notebook in its folder, was not
submitted: it is left out, not failed."""
from pathlib import Path

from autograder.engine.assignments import ASSIGNMENTS, assignment_of


class SubmissionError(Exception):
    """The submission path cannot be graded at all; the message says why."""


def _one_notebook(folder: Path, assignment: str) -> Path | str | None:
    found = sorted(p for p in folder.glob("*.ipynb") if not p.name.startswith("."))
    if len(found) == 1:
        return found[0]
    named = [p for p in found if p.stem == assignment]
    if named:
        return named[0]
    if not found:
        return None
    return f"{folder} 里有好几个 notebook（{', '.join(p.name for p in found)}），请只留下要评分的那个，或命名为 {assignment}.ipynb。"


def notebooks(path: Path) -> dict[str, Path | str]:
    """Submitted assignment -> its notebook, or a message saying why it cannot be graded."""
    path = Path(path)
    if path.suffix == ".ipynb":
        assignment = assignment_of(path)
        if assignment is None:
            raise SubmissionError(f"看不出 {path.name} 属于哪个作业：文件名或所在文件夹应以作业名开头，"
                                  f"例如 {next(iter(ASSIGNMENTS))}.ipynb。")
        return {assignment: path}
    if not path.is_dir():
        raise SubmissionError(f"找不到 {path}：--submission 要指向一个 notebook 或一个像 release/ 那样的文件夹。")
    folders = {path.name: path} if path.name in ASSIGNMENTS else {
        name: path / name for name in ASSIGNMENTS if (path / name).is_dir()}
    found = {name: _one_notebook(folder, name) for name, folder in folders.items()}
    return {name: notebook for name, notebook in found.items() if notebook is not None}
