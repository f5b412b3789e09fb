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
from dataclasses import asdict, dataclass
from pathlib import Path

from autograder.engine.assignments import ASSIGNMENTS
from autograder.engine.exercise import Verdict
from autograder.engine.provenance import fingerprint
from autograder.files import write_atomically


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
        record = json.loads(text)
        return cls(record["assignment"], tuple(Verdict(**v) for v in record["verdicts"]), float(record["seconds"]))


class ResultStore:
    """``folder/<key>.json`` for each graded notebook."""

    def __init__(self, folder: Path):
        self.folder = Path(folder)
        self.folder.mkdir(parents=True, exist_ok=True)

    def path(self, key: str) -> Path:
        return self.folder / f"{key}.json"

    def load(self, key: str) -> NotebookResult | None:
        """The stored result, or None when there is none (or it cannot be read: it is then graded again)."""
        try:
            return NotebookResult.from_json(self.path(key).read_text(encoding="utf-8"))
        except (OSError, ValueError, KeyError, TypeError):
            return None

    def save(self, key: str, result: NotebookResult) -> None:
        write_atomically(self.path(key), result.to_json())

    def done(self, key: str) -> bool:
        """Whether ``key`` was graded and needs no new grading: a grader problem is always graded again."""
        result = self.load(key)
        return result is not None and not result.grader_problem


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
