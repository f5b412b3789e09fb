"""Which notebooks a class handed in, and whose they are: the layouts and file names ``course-grade``
understands. Anything else is refused with a message, before any grading, rather than guessed.

Nothing here runs or parses student code; notebooks are only located (zips are listed, not extracted), by
the rules of ``autograder.engine.submission``, which ``pytest autograder/`` locates notebooks with too.
Reading a notebook's bytes (``read_notebook``) goes through ``autograder.engine.ipynb``'s safe reader.
"""
import re
from dataclasses import dataclass, replace
from pathlib import Path, PurePosixPath

from autograder.engine.assignments import ASSIGNMENTS
from autograder.engine.ipynb import NotebookError, read_bytes
from autograder.engine.submission import assignment_of, assignments_named, choose, notebooks
from autograder.instructor.classroom.names import UnsafeName, colliding, collision_message, student_name
from autograder.instructor.classroom.zipped import read_member, zip_notebooks
from course import layout

LAYOUTS = """\
Class folder layouts:
  one folder per student   <student>/<assignment>/<notebook>.ipynb  (nbgrader's submitted/, or release/ per
                           student); a student folder without assignment folders may hold notebooks or zips
                           named by assignment (Moodle's "one folder per submission" download)
  a flat folder            one .ipynb or .zip per student and assignment, named as below
  the LMS's download zip   the zip itself, as downloaded: read as the flat folder (or folders) it holds
File names (the assignment comes from the name, or from --assignment when it names exactly one):
  Canvas      <name>[_LATE]_<user id>_<file id>_<file>            student <name>_<user id>
  Moodle      <full name>_<id>_assignsubmission_file_<file>       student <full name>_<id>
  Blackboard  <title>_<user>_attempt_<yyyy-mm-dd-hh-mm-ss>_<file> student <user>
  plain       <student>_<assignment>[...] or <assignment>_<student>, e.g. alice_01_attention_basics.ipynb
  plain       <student>.ipynb or <student>.zip (a zip may hold several assignments' notebooks, named as in
              release/)
  In Canvas, Moodle and Blackboard names, <file> is the student's own file name: it must contain an
  assignment's name (01_attention_basics) or start with its number (01_).
Late: Canvas marks a late submission with _LATE (grades.csv's <assignment>/late says yes or no). Moodle's and
  Blackboard's downloads carry no such marker, and nbgrader's submitted/ leaves lateness to nbgrader: there the
  column is left empty."""

_SUFFIXES = (".ipynb", ".zip")
_CANVAS = re.compile(r"^(?P<name>[^_]+)(?P<late>_LATE)?_(?P<user>\d+)_\d+_(?P<file>.+)$")
_MOODLE = re.compile(r"^(?P<student>.+?_\d+)_assignsubmission_[a-z]+_(?P<file>.*)$")
_BLACKBOARD = re.compile(r"^.+?_(?P<student>[^_]+)_attempt_\d{4}(?:-\d{2}){5}(?:_(?P<file>.*))?$")
_MOODLE_FOLDER = re.compile(r"_assignsubmission_[a-z]+_?$")
_SEPARATORS = "_-. "


@dataclass(frozen=True)
class CanvasName:
    """What Canvas's download puts in front of a submitted file's name: the student's name, whether it was late,
    the user id and the file id. ``prefix`` is that part as written: Canvas's "re-upload submissions" routes a
    file named with it back to that student's submission."""

    name: str
    late: bool
    user: str
    prefix: str


def canvas_name(file_name: str) -> CanvasName | None:
    """The Canvas parts of a file name from Canvas's download, None for any other name."""
    match = _CANVAS.match(file_name)
    if not match:
        return None
    prefix = file_name[:match.start("file") - 1]
    return CanvasName(match["name"], bool(match["late"]), match["user"], prefix)


class RosterError(Exception):
    """The class folder cannot be read unambiguously; the message lists every problem and what to do."""


@dataclass(frozen=True)
class Source:
    """Where a notebook is: a file, or one member of a zip file."""

    path: Path
    member: str = ""

    def label(self, root: Path) -> str:
        """The source relative to the class folder, for messages and the roster."""
        try:
            shown = str(self.path.relative_to(root))
        except ValueError:
            shown = str(self.path)
        return f"{shown}:{self.member}" if self.member else shown


@dataclass(frozen=True)
class Handed:
    """One student's notebook for one assignment. ``problem`` (the student's doing, e.g. two notebooks where
    one is expected) makes every exercise of the assignment a zero with that message, as in ``pytest``.
    ``late`` is what the LMS's file name says: True or False where it marks late submissions (Canvas), None
    where it says nothing about it."""

    student: str
    assignment: str
    source: Source | None
    problem: str = ""
    late: bool | None = None


@dataclass
class Roster:
    """The class's notebooks, sorted by student then assignment, and the files that were not submissions."""

    root: Path
    handed: list[Handed]
    ignored: list[str]

    @property
    def students(self) -> list[str]:
        return sorted({h.student for h in self.handed})


def find(path: Path, only: list[str] | None = None) -> Roster:
    """The roster of the class folder ``path``, limited to the assignments ``only`` (default: all). Students'
    names are checked (``names.student_name``) and used in NFC; names that are one student's once normalised
    and case-folded (``names.identity``) are refused, naming both."""
    root = Path(path)
    if not root.is_dir():
        raise RosterError(f"{root} is not a folder. Pass the folder that holds the class's submissions.\n{LAYOUTS}")
    unknown = [a for a in only or [] if a not in ASSIGNMENTS]
    if unknown:
        raise RosterError(f"unknown assignment(s) {', '.join(unknown)}; the course has {', '.join(ASSIGNMENTS)}")
    wanted = list(only) if only else list(ASSIGNMENTS)
    default = wanted[0] if only and len(wanted) == 1 else None
    entries = sorted(p for p in root.iterdir() if not p.name.startswith("."))
    folders = [p for p in entries if p.is_dir()]
    files = [p for p in entries if p.is_file() and p.suffix.lower() in _SUFFIXES]
    ignored = [p.name for p in entries if p not in folders and p not in files]
    problems = _layout_problems(root, folders, files)
    if problems:
        raise RosterError("\n".join(problems))
    scan = _Scan(root, default, problems)
    found: dict[tuple[str, str], list[Handed]] = {}
    for folder in folders:
        student = _MOODLE_FOLDER.sub("", folder.name).strip()
        for handed in scan.student_folder(folder, student):
            found.setdefault((handed.student, handed.assignment), []).append(handed)
    for file in files:
        student, assignment, named, late = _parse_name(file.name)
        if not student:
            problems.append(f"{file.name}: the student's name cannot be read from the file name")
            continue
        for handed in scan.file(file, student, assignment or default, named):
            found.setdefault((handed.student, handed.assignment), []).append(replace(handed, late=late))
    handed = _unique(root, {key: found[key] for key in found if key[1] in wanted}, problems)
    # On the names as found: "josé" composed and decomposed are two students to be told apart, not one.
    students = {h.student for h in handed}
    problems += [collision_message(group) for group in colliding(students)] + _unusable_names(students)
    if problems:
        raise RosterError("cannot tell which notebook is whose:\n  " + "\n  ".join(problems) + f"\n{LAYOUTS}")
    handed = [replace(h, student=student_name(h.student)) for h in handed]
    order = {a: i for i, a in enumerate(ASSIGNMENTS)}
    return Roster(root, sorted(handed, key=lambda h: (h.student, order[h.assignment])), ignored)


def student_notebook(folder: Path, assignment: str) -> Handed | None:
    """``assignment``'s notebook in one student's folder (a Gradescope upload), found as in a class's student
    folders; a notebook or zip that names no assignment counts as ``assignment``'s. None when there is none."""
    scan = _Scan(Path(folder), assignment, [])
    found = [h for h in scan.student_folder(Path(folder), "") if h.assignment == assignment]
    if len(found) > 1:
        names = ", ".join(h.source.label(Path(folder)) if h.source else "?" for h in found)
        return Handed("", assignment, None, f"提交里有好几个 {assignment} 的 notebook（{names}），请只上传一个。")
    return found[0] if found else None


def _layout_problems(root: Path, folders: list[Path], files: list[Path]) -> list[str]:
    if not folders and not files:
        return [f"{root} holds no student folders, notebooks or zips.\n{LAYOUTS}"]
    if folders and files:
        return [(f"{root} mixes folders ({folders[0].name}, ...) and loose notebooks or zips ({files[0].name}, ...): "
                 f"use one layout.\n{LAYOUTS}")]
    inner = [f.name for f in folders if f.name in ASSIGNMENTS or f.name in (layout.SUBMITTED, layout.RELEASE, layout.AUTOGRADED)]
    if inner:
        return [(f"{root} holds {', '.join(inner)}/: it looks like one student's folder or a course folder, not "
                 f"a class. Pass the folder whose entries are the students (for nbgrader, submitted/).\n{LAYOUTS}")]
    return []


def _parse_name(name: str) -> tuple[str, str | None, list[str], bool | None]:
    """(student, assignment or None, assignments the name mentions, late) from a flat folder's file name; late
    is None unless the name is Canvas's, the one LMS that marks late submissions in it."""
    stem = name.rsplit(".", 1)[0]
    for pattern in (_CANVAS, _MOODLE, _BLACKBOARD):
        match = pattern.match(stem)
        if match:
            groups = match.groupdict()
            canvas = pattern is _CANVAS
            student = f"{groups['name']}_{groups['user']}" if canvas else groups["student"]
            named = assignments_named(groups.get("file") or "")
            return student.strip(), named[0] if len(named) == 1 else None, named, bool(groups["late"]) if canvas else None
    # A plain name also holds the student's: only an assignment's full name tells the two apart.
    named = assignments_named(stem, by_number=False)
    if len(named) != 1:
        return stem.strip(), None, named, None
    before, _, after = stem.partition(named[0])
    return (before.strip(_SEPARATORS) or after.strip(_SEPARATORS)), named[0], named, None


@dataclass
class _Scan:
    """What reading a class folder needs at every step: its root, the assignment of files that name none,
    and the problems found so far."""

    root: Path
    default: str | None
    problems: list[str]

    def student_folder(self, folder: Path, student: str) -> list[Handed]:
        """The notebooks in one student's folder: assignment folders as in release/, else loose files."""
        if any((folder / a).is_dir() for a in ASSIGNMENTS):
            return [Handed(student, a, Source(nb)) if isinstance(nb, Path) else Handed(student, a, None, nb)
                    for a, nb in notebooks(folder).items()]
        found = []
        for file in sorted(p for p in folder.iterdir() if p.is_file() and p.suffix.lower() in _SUFFIXES
                           and not p.name.startswith(".")):
            named = assignments_named(file.stem)
            assignment = named[0] if len(named) == 1 else None if named else self.default
            found += self.file(file, student, assignment, named)
        return found

    def file(self, file: Path, student: str, assignment: str | None, named: list[str]) -> list[Handed]:
        """The notebook(s) of one file: a notebook for ``assignment``, or a zip's notebooks."""
        if len(named) > 1:
            self.problems.append(f"{file.name}: names more than one assignment ({', '.join(named)})")
            return []
        if file.suffix.lower() == ".ipynb":
            if assignment is None:
                self.problems.append(f"{file.name}: no assignment in the name; rename it or pass --assignment")
                return []
            return [Handed(student, assignment, Source(file))]
        try:
            members = zip_notebooks(file, self.root)
        except NotebookError as e:
            if assignment is None:
                self.problems.append(f"{file.name}: {e}")
                return []
            return [Handed(student, assignment, None, str(e))]
        if assignment is not None:
            return [_one_member(file, student, assignment, members)]
        by_assignment: dict[str, list[str]] = {}
        for member in members:
            owner = assignment_of(PurePosixPath(member))
            if owner:
                by_assignment.setdefault(owner, []).append(member)
        if not by_assignment:
            self.problems.append(f"{file.name}: no assignment in the name, and no notebook inside is named after "
                                 "one; rename it or pass --assignment")
        return [_one_member(file, student, a, ms) for a, ms in by_assignment.items()]


def _one_member(file: Path, student: str, assignment: str, members: list[str]) -> Handed:
    """The zip member that is ``assignment``'s notebook, or the student's problem when there is none or many."""
    paths = [PurePosixPath(m) for m in members]
    chosen = choose(paths, assignment, file.name)
    if isinstance(chosen, PurePosixPath):
        return Handed(student, assignment, Source(file, members[paths.index(chosen)]))  # the name as zipped
    return Handed(student, assignment, None, chosen or f"{file.name} 里没有 .ipynb 文件。")


def _unique(root: Path, found: dict[tuple[str, str], list[Handed]], problems: list[str]) -> list[Handed]:
    kept = []
    for (student, assignment), handed in sorted(found.items()):
        if len(handed) > 1:
            where = ", ".join(h.source.label(root) if h.source else "?" for h in handed)
            problems.append(f"{student} has {len(handed)} notebooks for {assignment} ({where}); keep one")
        else:
            kept.append(handed[0])
    return kept


def _unusable_names(students: set[str]) -> list[str]:
    """The names that cannot be a feedback folder or a gradebook row (``names.student_name`` says why)."""
    problems = []
    for student in sorted(students):
        try:
            student_name(student)
        except UnsafeName as e:
            problems.append(f"{e}; rename that file or folder")
    return problems


def read_notebook(source: Source, root: Path) -> bytes:
    """The bytes of the notebook at ``source``: a regular file inside ``root``, or a member of a zip that is
    one, at most ``limits.NOTEBOOK_BYTES`` either way."""
    return read_member(source.path, source.member, root) if source.member else read_bytes(source.path, root)
