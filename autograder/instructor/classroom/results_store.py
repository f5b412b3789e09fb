"""The results of a class's grading: one small JSON file per graded notebook, named by a hash of everything
that decides its verdicts — the grader of its assignment (``autograder.engine.provenance``: the engine's core,
the assignment's checks, the references and course modules they use, the weights, torch's version), the cap
per notebook, the assignment and the notebook's bytes.

Content addressing makes the rest simple: a second run finds the results of unchanged notebooks and grades
only the others; an interrupted run loses only the notebooks in flight (each file is written atomically);
shards write the same files, so merging them is a union; two students who hand in the same bytes share
one result. A change to what grades an assignment changes the keys of its notebooks, so nothing stale is
ever reused; a change to anything else (a report, a message of the tools) regrades nothing.
"""
import hashlib
import json
import math
import os
import re
import stat
from dataclasses import asdict, dataclass
from pathlib import Path

from autograder.engine.assignments import ASSIGNMENTS, EXERCISES
from autograder.engine.model import Verdict
from autograder.engine.provenance import fingerprint
from autograder.files import write_atomically

# Far above what a result can hold (its verdicts' texts are capped by the engine), far below what would
# strain memory: a shard's store may hold anything.
RESULT_BYTES = 4 * 2**20
_KEY = re.compile(r"[0-9a-f]{64}")  # what ``notebook_key`` makes: a SHA-256 in hex
_VERDICT_TEXTS = ("summary", "details", "mistake")


@dataclass(frozen=True)
class NotebookResult:
    """The verdicts on one notebook, in the assignment's exercise order, and how long grading it took."""

    assignment: str
    verdicts: tuple[Verdict, ...]
    seconds: float

    @property
    def points(self) -> int:
        return sum(v.points for v in self.verdicts)

    @property
    def max_points(self) -> int:
        return sum(v.max_points for v in self.verdicts)

    @property
    def grader_problem(self) -> bool:
        return any(v.grader_problem for v in self.verdicts)

    def to_json(self) -> str:
        return json.dumps({"assignment": self.assignment, "seconds": round(self.seconds, 3),
                           "verdicts": [asdict(v) for v in self.verdicts]}, ensure_ascii=False, indent=1)

    @classmethod
    def from_json(cls, text: str) -> "NotebookResult":
        """The result ``to_json`` wrote, checked against the grader's own registry, since a shard's store may
        have been edited: the assignment is one of the course's, each verdict is on one of its exercises and
        within that exercise's points (``_verdict``), and ``seconds`` is a finite number ≥ 0. Raises
        ValueError saying what is wrong. (That there is a verdict on every exercise is ``complete``.)"""
        record = json.loads(text)
        if not isinstance(record, dict) or set(record) != {"assignment", "seconds", "verdicts"}:
            raise ValueError("a result holds exactly an assignment, seconds and verdicts")
        assignment, seconds, verdicts = record["assignment"], record["seconds"], record["verdicts"]
        if not isinstance(assignment, str) or assignment not in ASSIGNMENTS:
            raise ValueError(f"{assignment!r} is not an assignment of the course")
        if type(seconds) not in (int, float) or not 0 <= seconds < math.inf:  # json reads NaN and Infinity
            raise ValueError(f"seconds {seconds!r} is not a duration")
        if not isinstance(verdicts, list):
            raise ValueError("its verdicts are not a list")
        return cls(assignment, tuple(_verdict(assignment, v) for v in verdicts), float(seconds))

    @property
    def complete(self) -> bool:
        """Whether it holds a verdict on each exercise of its assignment, in order, as grading gives them (and
        as the gradebook's columns expect them)."""
        return [v.exercise for v in self.verdicts] == [e.name for e in ASSIGNMENTS[self.assignment]]


def _verdict(assignment: str, record: object) -> Verdict:
    """A stored verdict, checked: on an exercise of ``assignment``, its points a whole number from 0 to that
    exercise's points in the registry (``EXERCISES[name].points``), ``max_points`` those points, its texts text
    and ``grader_problem`` true or false."""
    name = record.get("exercise") if isinstance(record, dict) else None
    if name not in [e.name for e in ASSIGNMENTS[assignment]]:
        raise ValueError(f"a verdict is not on an exercise of {assignment} ({name!r})")
    points, max_points, most = record.get("points"), record.get("max_points"), EXERCISES[name].points
    # type(...) is int, not isinstance: json's true and false are bools, which are ints to Python.
    if type(points) is not int or not 0 <= points <= most:
        raise ValueError(f"{name}: {points!r} points is not a whole number from 0 to {most}")
    if type(max_points) is not int or max_points != most:
        raise ValueError(f"{name}: max_points {max_points!r} is not its {most} points")
    if not all(isinstance(record.get(text, ""), str) for text in _VERDICT_TEXTS) or \
            type(record.get("grader_problem", False)) is not bool:
        raise ValueError(f"{name}: a text of the verdict is not text, or grader_problem not true/false")
    try:
        return Verdict(**record)
    except TypeError as e:  # a key that Verdict does not have
        raise ValueError(f"{name}: {e}") from None


def read_state_file(path: Path, limit: int) -> str:
    """The UTF-8 text of one of course-grade's own files: a regular file (a pipe or a device would block or
    never end) of at most ``limit`` bytes. Raises OSError when it cannot be opened, ValueError otherwise."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    with os.fdopen(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
            raise ValueError("not a regular file (a pipe, a device or a folder)")
        data = f.read(limit + 1)
    if len(data) > limit:
        raise ValueError(f"larger than {limit // 2**20} MiB")
    return data.decode("utf-8")


class ResultStore:
    """``folder/<key>.json`` for each graded notebook."""

    def __init__(self, folder: Path):
        self.folder = Path(folder)
        self.folder.mkdir(parents=True, exist_ok=True)

    def path(self, key: str) -> Path:
        return self.folder / f"{key}.json"

    def read(self, key: str) -> NotebookResult:
        """The stored result, checked (``NotebookResult.from_json``). Raises OSError when there is none, ValueError
        when the file is not a result course-grade wrote."""
        return NotebookResult.from_json(read_state_file(self.path(key), RESULT_BYTES))

    def load(self, key: str) -> NotebookResult | None:
        """The stored result, or None when there is none (or it cannot be read: it is then graded again)."""
        try:
            return self.read(key)
        except (OSError, ValueError):
            return None

    def save(self, key: str, result: NotebookResult) -> None:
        write_atomically(self.path(key), result.to_json())

    def done(self, key: str) -> bool:
        """Whether ``key`` was graded and needs no new grading: a grader problem is always graded again."""
        result = self.load(key)
        return result is not None and not result.grader_problem


def checked_key(key: object) -> str:
    """``key`` when it is one ``notebook_key`` makes (64 lowercase hex digits), so that ``ResultStore.path``
    names a file inside the store and nowhere else; raises ValueError otherwise."""
    if not isinstance(key, str) or not _KEY.fullmatch(key):
        raise ValueError(f"{key!r} is not the key of a result (64 hex digits)")
    return key


def notebook_key(fingerprint: str, assignment: str, data: bytes | None, problem: str) -> str:
    """The key of one notebook's result: the assignment's grader fingerprint, the assignment, and the bytes
    graded (or, for a notebook that could not be read, the reason, which the verdicts repeat)."""
    digest = hashlib.sha256()
    for part in (fingerprint.encode(), assignment.encode(), b"data" if data is not None else b"problem",
                 data if data is not None else problem.encode()):
        digest.update(len(part).to_bytes(8, "big") + part)
    return digest.hexdigest()


def grader_fingerprints(notebook_timeout_s: float) -> dict[str, str]:
    """Per assignment, a hash of what besides a notebook decides its verdicts: the engine's
    ``provenance.fingerprint(assignment)`` and the cap per notebook."""
    return {assignment: hashlib.sha256(f"{fingerprint(assignment)}; cap {notebook_timeout_s!r}".encode()).hexdigest()
            for assignment in ASSIGNMENTS}


def combined(fingerprints: dict[str, str]) -> str:
    """One hash of every assignment's fingerprint: shards graded by the same grader agree on it."""
    return hashlib.sha256(json.dumps(sorted(fingerprints.items())).encode()).hexdigest()
