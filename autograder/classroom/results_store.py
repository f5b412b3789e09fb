"""The results of a class's grading: one small JSON file per graded notebook, named by a hash of everything
that decides its verdicts — the grader (its code, references and layer-3 weights, torch's version, the cap
per notebook), the assignment and the notebook's bytes.

Content addressing makes the rest simple: a second run finds the results of unchanged notebooks and grades
only the others; an interrupted run loses only the notebooks in flight (each file is written atomically);
shards write the same files, so merging them is a union; two students who hand in the same bytes share
one result. Any change to the grader changes every key, so nothing stale is ever reused.
"""
import hashlib
import importlib.util
import json
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

from autograder.exercise import Verdict
from autograder.report import write_atomically

_HASHED_BYTES = 64 * 2**20
# The class tools (reports, scheduling) do not decide verdicts, so changing them regrades nothing; the cap
# per notebook does.
_CLASS_TOOLS = "autograder/classroom/"
_CAP_CODE = "autograder/classroom/notebook_grading.py"


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
    """The key of one notebook's result: the grader, the assignment, and the bytes graded (or, for a notebook
    that could not be read, the reason, which the verdicts repeat)."""
    digest = hashlib.sha256()
    for part in (fingerprint.encode(), assignment.encode(), b"data" if data is not None else b"problem",
                 data if data is not None else problem.encode()):
        digest.update(len(part).to_bytes(8, "big") + part)
    return digest.hexdigest()


def grader_fingerprint(notebook_timeout_s: float) -> str:
    """A hash of what, besides a notebook, decides its verdicts: the source of the grading engine (with the
    sandbox and the checks), the references and the course helpers, the layer-3 checkpoint the cases use,
    torch's version and the cap per notebook. It does not depend on where the course is installed, so shards
    on different machines agree."""
    from course import weights

    digest = hashlib.sha256(f"torch {torch.__version__}; cap {notebook_timeout_s!r}".encode())
    for package in ("autograder", "solutions", "course"):
        spec = importlib.util.find_spec(package)
        for location in spec.submodule_search_locations or []:
            for file in sorted(Path(location).rglob("*.py")):
                name = f"{package}/{file.relative_to(location).as_posix()}"
                if "__pycache__" not in file.parts and (not name.startswith(_CLASS_TOOLS) or name == _CAP_CODE):
                    digest.update(name.encode() + file.read_bytes())
    try:
        folder = weights.find_checkpoint().folder
        for file in sorted(p for p in folder.iterdir() if p.is_file()):
            size = file.stat().st_size
            # The stand-in (15 MB) by its bytes; a real checkpoint (1.7 GB) by its size and time only.
            digest.update(file.name.encode() + (file.read_bytes() if size <= _HASHED_BYTES else
                                                f"{size} {file.stat().st_mtime_ns}".encode()))
    except weights.CheckpointError as e:
        digest.update(str(e).encode())
    return digest.hexdigest()
