"""Grading a class in slices on a batch engine (a Slurm job array, a Kubernetes indexed Job): ``--shard I/N``
takes a fixed slice of the students, and ``--merge`` joins the slices' runs into one gradebook, mistakes
table, report and feedback — the same files one run over the whole class writes.

A slice is every N-th student in name order, starting with the I-th (1-based), so slices are disjoint,
cover the class, differ by at most one student, and keep each student's assignments together.
"""
import re
from pathlib import Path

from autograder.instructor.classroom.graded_class import Entry, GradedClass, record_file, state_folder
from autograder.instructor.classroom.names import colliding, collision_message
from autograder.instructor.classroom.results_store import NotebookResult, ResultStore


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
    ``out``'s store and the joined class is saved there; the caller then writes the outputs.

    A shard's folder may have been edited by anyone, so nothing in it is used before it is checked: its record
    (``GradedClass.load``: names safe as folder names and in NFC, keys that name files inside the store,
    assignments of the course), each result (``_result``: a verdict on each exercise of its assignment, with
    points from 0 to the exercise's points in the grader's registry), and the students of all the shards
    together (``_one_shard_per_student``). Anything else is refused with a ShardError naming the file."""
    if not folders:
        raise ShardError("--merge needs the output folders of the shards")
    if any(Path(f).resolve() == Path(out).resolve() for f in folders):
        raise ShardError("--out must be a new folder, not one of the shards")
    try:
        shards = [(Path(f), GradedClass.load(f)) for f in folders]
    except (FileNotFoundError, ValueError) as e:
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
    _one_shard_per_student(shards)
    store = ResultStore(state_folder(out) / "results")
    entries = []
    for folder, graded in shards:
        source = _store_of(folder)
        for entry in graded.entries:
            # What was checked is what is stored: the result as read, written anew.
            store.save(entry.key, _result(folder, source, entry))
        entries += graded.entries
    merged = GradedClass(sorted(entries, key=lambda e: (e.student, e.assignment)), first.only, (1, 1),
                         first.fingerprint)
    merged.save(out)
    return merged


def _one_shard_per_student(shards: list[tuple[Path, GradedClass]]) -> None:
    """Refuse a student in two shards (each student is in exactly one slice) and names in different shards that
    are one student's (``names.identity``), which ``roster`` refuses in one class folder."""
    where: dict[str, Path] = {}
    for folder, graded in shards:
        for student in graded.students:
            if student in where:
                raise ShardError(f"{record_file(folder)}: student {student!r} is also in {record_file(where[student])}; "
                                 "a student is in one shard only")
            where[student] = folder
    clashes = [f"{collision_message(group)} (in {', '.join(str(record_file(where[name])) for name in group)})"
               for group in colliding(where)]
    if clashes:
        raise ShardError("; ".join(clashes))


def _store_of(folder: Path) -> ResultStore:
    """The store of the shard ``folder``, to read its results from."""
    try:
        return ResultStore(state_folder(folder) / "results")
    except OSError as e:  # e.g. a file where its results folder should be
        raise ShardError(f"{folder}: its results cannot be read ({e})") from None


def _result(folder: Path, source: ResultStore, entry: Entry) -> NotebookResult:
    """``entry``'s result in the shard ``folder``'s store, checked (``ResultStore.read``): a verdict on each
    exercise of ``entry``'s assignment."""
    path = source.path(entry.key)
    try:
        result = source.read(entry.key)
    except FileNotFoundError:
        raise ShardError(f"{folder} lacks the result of {entry.student}'s {entry.assignment}: "
                         "was that shard's run interrupted? Run it again, then merge.") from None
    except (OSError, ValueError) as e:
        raise ShardError(f"{path}: not a result course-grade wrote ({e})") from None
    if result.assignment != entry.assignment or not result.complete:
        raise ShardError(f"{path}: not a verdict on each exercise of {entry.student}'s {entry.assignment}, in order")
    return result
