"""The record of one ``course-grade`` run, ``<out>/.course-grade/class.json``: which student handed in which
assignment, the key of its result in the store and whether the LMS marked it late, the shard, the grader's
fingerprint. The outputs are built from it and the store alone, which is what lets shards be merged into
exactly one run's outputs.
"""
import json
from dataclasses import dataclass
from itertools import groupby
from pathlib import Path

from autograder.engine.assignments import ASSIGNMENTS
from autograder.files import write_atomically
from autograder.instructor.classroom.names import colliding, collision_message, student_name
from autograder.instructor.classroom.results_store import NotebookResult, ResultStore, checked_key, read_state_file

STATE = ".course-grade"
CLASS_BYTES = 256 * 2**20  # the record of 100,000 notebooks holds about 20 MiB


def state_folder(out: Path) -> Path:
    return Path(out) / STATE


def record_file(out: Path) -> Path:
    """The run's record, ``class.json``."""
    return state_folder(out) / "class.json"


@dataclass(frozen=True)
class Entry:
    student: str
    assignment: str
    key: str
    source: str  # where the notebook was, relative to the class folder
    late: bool | None  # as the LMS's file name says (``roster.Handed.late``); None where it says nothing


@dataclass
class GradedClass:
    """A graded class, or one shard of it (``shard`` = (index, count), 1-based)."""

    entries: list[Entry]
    only: list[str] | None  # the --assignment filter, None for all
    shard: tuple[int, int]
    fingerprint: str

    @property
    def students(self) -> list[str]:
        return sorted({e.student for e in self.entries})

    @property
    def assignments(self) -> list[str]:
        """The gradebook's assignments: those asked for, else those anyone handed in, in course order."""
        present = self.only or {e.assignment for e in self.entries}
        return [a for a in ASSIGNMENTS if a in present]

    def by_student(self, stores: list[ResultStore]):
        """(student, {assignment: result}, {assignment: late}) for each student in order, loading one student's
        results at a time."""
        ordered = sorted(self.entries, key=lambda e: (e.student, e.assignment))
        for student, entries in groupby(ordered, key=lambda e: e.student):
            entries = list(entries)
            yield student, {e.assignment: _load(stores, e) for e in entries}, {e.assignment: e.late for e in entries}

    def save(self, out: Path) -> None:
        record = {"shard": list(self.shard), "fingerprint": self.fingerprint, "only": self.only,
                  "entries": [[e.student, e.assignment, e.key, e.source, e.late] for e in self.entries]}
        write_atomically(record_file(out), json.dumps(record, ensure_ascii=False, indent=0))

    @classmethod
    def load(cls, out: Path) -> "GradedClass":
        """The run recorded in ``out``, checked, since a shard's folder may have been edited (``_checked``).
        Raises FileNotFoundError when there is no record, ValueError naming the file when it holds anything
        course-grade does not write."""
        path = record_file(out)
        try:
            text = read_state_file(path, CLASS_BYTES)
        except OSError as e:
            raise FileNotFoundError(f"{out} holds no finished course-grade run ({path}: {type(e).__name__})") from None
        try:
            return _checked(json.loads(text))
        except ValueError as e:
            raise ValueError(f"{path}: {e}") from None


def _checked(record: object) -> GradedClass:
    """A class.json record as a GradedClass, refused (ValueError) unless course-grade could have written it:
    ``shard`` is [I, N] with 1 ≤ I ≤ N, ``only`` none or the course's assignments, each entry checked by
    ``_entry``, no student twice for one assignment, and no two names that are one student's (``names``)."""
    if not isinstance(record, dict) or set(record) != {"shard", "fingerprint", "only", "entries"}:
        raise ValueError("a class record holds exactly shard, fingerprint, only and entries")
    shard, only, entries = record["shard"], record["only"], record["entries"]
    if not (isinstance(shard, list) and len(shard) == 2 and all(type(n) is int for n in shard)
            and 1 <= shard[0] <= shard[1]):
        raise ValueError(f"shard {shard!r} is not [I, N] with 1 ≤ I ≤ N")
    if only is not None and not (isinstance(only, list) and only and all(_is_assignment(a) for a in only)):
        raise ValueError(f"--assignment {only!r} does not name assignments of the course")
    if not isinstance(record["fingerprint"], str) or not isinstance(entries, list):
        raise ValueError("the fingerprint is not text, or the entries not a list")
    checked = [_entry(i, raw, only) for i, raw in enumerate(entries)]
    clashes = colliding({raw[0] for raw in entries})  # on the names as written: NFC and NFD are two here
    if clashes:
        raise ValueError("; ".join(map(collision_message, clashes)))
    seen = set()
    for entry in checked:
        if (entry.student, entry.assignment) in seen:
            raise ValueError(f"{entry.student!r} has two entries for {entry.assignment}")
        seen.add((entry.student, entry.assignment))
    return GradedClass(checked, only, (shard[0], shard[1]), record["fingerprint"])


def _entry(index: int, raw: object, only: list[str] | None) -> Entry:
    """Entry ``index`` of class.json, checked: [student, assignment, key, source, late], the student's name one
    that is safe as a folder name (``names.student_name``; NFC from here on), the assignment one of the course's
    (and of ``only``), the key one the store makes (``checked_key``), the source text, late true, false or null."""
    if not (isinstance(raw, list) and len(raw) == 5):
        raise ValueError(f"entry {index} is not [student, assignment, key, source, late]")
    student, assignment, key, source, late = raw
    if not _is_assignment(assignment) or (only is not None and assignment not in only):
        raise ValueError(f"entry {index}: {assignment!r} is not an assignment of the course that this run graded")
    if not isinstance(source, str):
        raise ValueError(f"entry {index}: the source {source!r} is not text")
    if late is not None and not isinstance(late, bool):
        raise ValueError(f"entry {index}: late {late!r} is not true, false or null")
    try:
        return Entry(student_name(student), assignment, checked_key(key), source, late)
    except ValueError as e:
        raise ValueError(f"entry {index}: {e}") from None


def _is_assignment(name: object) -> bool:
    return isinstance(name, str) and name in ASSIGNMENTS


def _load(stores: list[ResultStore], entry: Entry) -> NotebookResult:
    for store in stores:
        result = store.load(entry.key)
        if result is not None:
            return result
    raise FileNotFoundError(f"the result of {entry.student}'s {entry.assignment} ({entry.key}) is missing from "
                            f"{', '.join(str(s.folder) for s in stores)}")
