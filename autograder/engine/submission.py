"""Finding a student's notebooks, the same way in every channel: which assignment a name gives
(``assignments_named``, ``assignment_of``), which of several notebooks is an assignment's (``choose``), and
the notebook of each assignment in what ``pytest autograder/`` is pointed at (``notebooks``): a folder like
``release/``, one assignment folder, or one notebook. The class roster (``course-grade``, Gradescope) reads LMS
downloads and zips with the same rules. An assignment with no folder, or no notebook in its folder, was not
submitted: it is left out, not failed."""
from pathlib import Path, PurePath

from autograder.engine.assignments import ASSIGNMENTS


class SubmissionError(Exception):
    """The submission path cannot be graded at all; the message says why."""


def assignments_named(name: str, by_number: bool = True) -> list[str]:
    """The assignments a file or folder name gives: each one whose full name it contains
    (``alice_01_attention_basics-final``), else, ``by_number``, the one whose number starts it (``01_mine``).
    More than one means the name is ambiguous."""
    full = [a for a in ASSIGNMENTS if a in name]
    if full or not by_number:
        return full
    return [a for a in ASSIGNMENTS if name.startswith(_number(a))]


def _number(assignment: str) -> str:
    return assignment.split("_", 1)[0] + "_"  # "01_"


def assignment_of(path: PurePath) -> str | None:
    """The assignment of the notebook at ``path``: the one its file name gives, else that of its folder when
    the folder is named exactly after one (as in ``release/``); None when neither tells."""
    named = assignments_named(path.stem)
    if named:
        return named[0] if len(named) == 1 else None
    return path.parent.name if path.parent.name in ASSIGNMENTS else None


def choose(candidates: list[PurePath], assignment: str, where: str) -> PurePath | str | None:
    """Which of the notebooks ``candidates`` (paths relative to ``where``, a folder or a zip) is
    ``assignment``'s: the only one, else the one named after it (or in a folder named after it). None when
    there is none; when it cannot be told, the message for the student."""
    if len(candidates) == 1:
        return candidates[0]
    named = [c for c in candidates if c.stem == assignment or c.parent.name == assignment]
    if len(named) == 1:
        return named[0]
    if not candidates:
        return None
    return (f"{where} 里有好几个 notebook（{', '.join(map(str, candidates))}），请只留下要评分的那个，"
            f"或命名为 {assignment}.ipynb。")


def _in_folder(folder: Path, assignment: str) -> Path | str | None:
    found = sorted(PurePath(p.name) for p in folder.glob("*.ipynb") if not p.name.startswith("."))
    chosen = choose(found, assignment, str(folder))
    return folder / chosen if isinstance(chosen, PurePath) else chosen


def notebooks(path: Path) -> dict[str, Path | str]:
    """Submitted assignment -> its notebook, or a message saying why it cannot be graded."""
    path = Path(path)
    if path.suffix == ".ipynb":
        assignment = assignment_of(path)
        if assignment is None:
            first = next(iter(ASSIGNMENTS))
            raise SubmissionError(f"看不出 {path.name} 属于哪个作业：文件名要含有作业名（例如 {first}.ipynb）或以"
                                  f"作业编号开头（例如 {_number(first)}mine.ipynb），或者放在以作业名命名的文件夹里。")
        return {assignment: path}
    if not path.is_dir():
        what = "不是 notebook（.ipynb），也不是文件夹" if path.exists() else "不存在"
        raise SubmissionError(f"{path} {what}：--submission 要指向一个 notebook 或一个像 release/ 那样的文件夹。")
    folders = {path.name: path} if path.name in ASSIGNMENTS else {
        name: path / name for name in ASSIGNMENTS if (path / name).is_dir()}
    found = {name: _in_folder(folder, name) for name, folder in folders.items()}
    return {name: notebook for name, notebook in found.items() if notebook is not None}
