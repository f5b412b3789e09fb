"""Grading a class in slices on a batch engine (a Slurm job array, a Kubernetes indexed Job): ``--shard I/N``
takes a fixed slice of the students, and ``--merge`` joins the slices' runs into one gradebook, mistakes
table, report and feedback — the same files one run over the whole class writes.

A slice is every N-th student in name order, starting with the I-th (1-based), so slices are disjoint,
cover the class, differ by at most one student, and keep each student's assignments together.
"""
import re
from pathlib import Path

from autograder.files import write_atomically
from autograder.instructor.classroom.graded_class import GradedClass, state_folder
from autograder.instructor.classroom.results_store import ResultStore


class ShardError(Exception):
    """A shard spec or a set of shards that cannot be used; the message says why."""


def parse_shard(text: str) -> tuple[int, int]:
    """``"I/N"`` → (I, N), with 1 ≤ I ≤ N."""
    match = re.fullmatch(r"\s*(\d+)\s*/\s*(\d+)\s*", text)
    if not match or not 1 <= int(match[1]) <= int(match[2]):
        raise ShardError(f"--shard takes I/N with 1 ≤ I ≤ N (e.g. 3/8), not {text!r}")
    return int(match[1]), int(match[2])


def shard_students(students: list[str], shard: tuple[int, int]) -> list[str]:
    index, count = shard
    return sorted(students)[index - 1::count]


def merge(folders: list[Path], out: Path) -> GradedClass:
    """Join the runs of shards 1..N (their ``--out`` folders) into ``out``: their results are copied into
    ``out``'s store and the joined class is saved there; the caller then writes the outputs."""
    if not folders:
        raise ShardError("--merge needs the output folders of the shards")
    if any(Path(f).resolve() == Path(out).resolve() for f in folders):
        raise ShardError("--out must be a new folder, not one of the shards")
    try:
        shards = [(Path(f), GradedClass.load(f)) for f in folders]
    except FileNotFoundError as e:
        raise ShardError(str(e)) from None
    counts = {graded.shard[1] for _, graded in shards}
    indices = sorted(graded.shard[0] for _, graded in shards)
    if len(counts) != 1 or indices != list(range(1, counts.pop() + 1)):
        found = ", ".join(f"{f} ({g.shard[0]}/{g.shard[1]})" for f, g in shards)
        raise ShardError(f"--merge needs every shard 1/N … N/N exactly once; got {found}")
    first = shards[0][1]
    for folder, graded in shards:
        if graded.fingerprint != first.fingerprint:
            raise ShardError(f"{folder} was graded by a different grader (course code, references, weights, torch "
                             "or cap differ): grade every shard with the same installation")
        if graded.only != first.only:
            raise ShardError(f"{folder} was graded with other --assignment options than {shards[0][0]}")
    store = ResultStore(state_folder(out) / "results")
    entries = []
    for folder, graded in shards:
        source = ResultStore(state_folder(folder) / "results")
        for entry in graded.entries:
            if not store.path(entry.key).exists():
                if not source.path(entry.key).exists():
                    raise ShardError(f"{folder} lacks the result of {entry.student}'s {entry.assignment}: "
                                     "was that shard's run interrupted? Run it again, then merge.")
                write_atomically(store.path(entry.key), source.path(entry.key).read_text(encoding="utf-8"))
        entries += graded.entries
    merged = GradedClass(sorted(entries, key=lambda e: (e.student, e.assignment)), first.only, (1, 1),
                         first.fingerprint)
    merged.save(out)
    return merged
