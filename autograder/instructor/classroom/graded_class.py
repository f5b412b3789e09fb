"""The record of one ``course-grade`` run, ``<out>/.course-grade/class.json``: which student handed in which
assignment and the key of its result in the store, the shard, the grader's fingerprint. The outputs are
built from it and the store alone, which is what lets shards be merged into exactly one run's outputs.
"""
import json
from dataclasses import dataclass
from itertools import groupby
from pathlib import Path

from autograder.engine.assignments import ASSIGNMENTS
from autograder.files import write_atomically
from autograder.instructor.classroom.results_store import NotebookResult, ResultStore

STATE = ".course-grade"


def state_folder(out: Path) -> Path:
    return Path(out) / STATE


@dataclass(frozen=True)
class Entry:
    student: str
    assignment: str
    key: str
    source: str  # where the notebook was, relative to the class folder


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
        """(student, {assignment: result}) for each student in order, loading one student's results at a time."""
        ordered = sorted(self.entries, key=lambda e: (e.student, e.assignment))
        for student, entries in groupby(ordered, key=lambda e: e.student):
            yield student, {e.assignment: _load(stores, e) for e in entries}

    def save(self, out: Path) -> None:
        record = {"shard": list(self.shard), "fingerprint": self.fingerprint, "only": self.only,
                  "entries": [[e.student, e.assignment, e.key, e.source] for e in self.entries]}
        write_atomically(state_folder(out) / "class.json", json.dumps(record, ensure_ascii=False, indent=0))

    @classmethod
    def load(cls, out: Path) -> "GradedClass":
        path = state_folder(out) / "class.json"
        try:
            record = json.loads(path.read_text(encoding="utf-8"))
            return cls([Entry(*e) for e in record["entries"]], record["only"], tuple(record["shard"]),
                       record["fingerprint"])
        except (OSError, ValueError, KeyError, TypeError) as e:
            raise FileNotFoundError(f"{out} holds no finished course-grade run ({path}: {type(e).__name__})") from None


def _load(stores: list[ResultStore], entry: Entry) -> NotebookResult:
    for store in stores:
        result = store.load(entry.key)
        if result is not None:
            return result
    raise FileNotFoundError(f"the result of {entry.student}'s {entry.assignment} ({entry.key}) is missing from "
                            f"{', '.join(str(s.folder) for s in stores)}")
