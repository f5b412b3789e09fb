"""``course-release``: build the source notebooks from their jupytext twins and let nbgrader generate
``release/`` from them; ``course-release --assignment A ...`` also records A in the class's gradebook;
``course-release --check`` says whether the committed ``release/`` is current.

``release/`` always holds every assignment (it is committed, and handed out or released from there). The
gradebook (``gradebook.db``) holds only the assignments released to the class: those named with
``--assignment`` on this or an earlier run (or generated in the formgrader, which records what it
generates). nbgrader autogrades only an assignment recorded there, with its grade cells, and its gradebook
and ``nbgrader export`` list every recorded assignment, with zeros for work not handed in: an assignment
not yet released has no place there.

In ``source/<assignment>/`` the ``.py`` file (jupytext percent format) is what instructors edit. Four tags
mark the special cells; points come from the grader registry so they are written in one place:

- ``solution:<exercise>``: the student's cell; ``### BEGIN SOLUTION`` … ``### END SOLUTION`` is removed.
- ``tests:<exercise>``: the grade cell; ``### BEGIN HIDDEN TESTS`` … ``### END HIDDEN TESTS`` is removed.
- ``provided:<exercise>`` (one tag per exercise): a read-only cell that the build fills with the
  solutions of exercises of earlier assignments, so a later notebook builds on them without shipping
  them any earlier than their own assignment's release.
- ``answer:<question>``: a markdown cell holding a thinking question's answer between ``### BEGIN SOLUTION``
  and ``### END SOLUTION``; students get a box to write their own answer in. It carries no points (nbgrader
  lists it for optional reading in the formgrader), so no grade depends on it.
"""
import argparse
import filecmp
import functools
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

from autograder.engine.assignments import ASSIGNMENTS, EXERCISES
from course import layout
from course.layout import ROOT as REPO

if TYPE_CHECKING:
    import nbformat

SCHEMA_VERSION = 3
GRADEBOOK = "gradebook.db"  # nbgrader's default database, in the course directory


class ReleaseError(Exception):
    """The source notebook does not match the exercise contract; the message says where."""


_SOLUTION_MARKERS = ("### BEGIN SOLUTION", "### END SOLUTION")


def _owner(exercise: str) -> str | None:
    return next((a for a, exercises in ASSIGNMENTS.items() if any(e.name == exercise for e in exercises)), None)


def source_file(assignment: str) -> Path:
    return REPO / layout.SOURCE / assignment / f"{assignment}.py"


def solution_code(assignment: str) -> dict[str, str]:
    """Exercise -> its solution cell in the source notebook, markers removed: a complete answer."""
    path = source_file(assignment)
    return dict(_solutions_in(path, path.stat().st_mtime_ns))


@functools.cache
def _solutions_in(path: Path, mtime_ns: int) -> tuple[tuple[str, str], ...]:
    """``solution_code`` of the file as it was at ``mtime_ns``, read once: the provided cells of the later
    assignments take 55 earlier answers, and a read each made building the sources 2.5 s instead of 0.6 s."""
    import jupytext  # with nbformat, 3 s of imports that a test of the grader alone should not pay

    solutions = {}
    for cell in jupytext.read(path).cells:
        for tag in cell.metadata.get("tags", []):
            kind, _, exercise = tag.partition(":")
            if kind == "solution":
                lines = [line for line in cell.source.splitlines() if line.strip() not in _SOLUTION_MARKERS]
                solutions[exercise] = "\n".join(lines).strip()
    return tuple(solutions.items())


def _provided(exercises: list[str], assignment: str, index: int, where: str) -> tuple[str, dict]:
    """Source and nbgrader metadata of a read-only cell holding the solutions of ``exercises``."""
    order = list(ASSIGNMENTS)
    parts, owners = [], []
    for exercise in exercises:
        owner = _owner(exercise)
        if owner is None or order.index(owner) >= order.index(assignment):
            raise ReleaseError(f"{where}: provided:{exercise} must name an exercise of an earlier assignment")
        parts.append(solution_code(owner)[exercise])
        owners.append(owner)
    header = (f"# Provided: answers from {', '.join(dict.fromkeys(owners))}. Run this cell; nothing to fill in.\n"
              "# (The grader reads these definitions too: edit them only if you know why.)\n"
              "import math\n\nimport torch\nfrom torch import nn")
    metadata = {"grade": False, "grade_id": f"provided_{index:02d}", "locked": True,
                "schema_version": SCHEMA_VERSION, "solution": False, "task": False}
    return "\n\n\n".join([header, *parts]), metadata


def _nbgrader_metadata(kind: str, exercise: str) -> dict:
    if exercise not in EXERCISES:
        raise ReleaseError(f"tag {kind}:{exercise} names no exercise the graders know")
    graded = kind == "tests"
    return {
        "grade": graded, "grade_id": f"{kind}_{exercise}", "locked": graded,
        "points": EXERCISES[exercise].points if graded else 0, "schema_version": SCHEMA_VERSION,
        "solution": not graded, "task": False,
    }


def _answer_metadata(cell, question: str, where: str) -> dict:
    if cell.cell_type != "markdown" or not all(marker in cell.source for marker in _SOLUTION_MARKERS):
        raise ReleaseError(f"{where}: answer:{question} must be a markdown cell with the answer between "
                           f"{' and '.join(_SOLUTION_MARKERS)}")
    return {"grade": True, "grade_id": f"answer_{question}", "locked": False, "points": 0,
            "schema_version": SCHEMA_VERSION, "solution": True, "task": False}


def build_source_notebook(py_file: Path, assignment: str) -> "nbformat.NotebookNode":
    """The nbgrader source notebook of ``py_file``: nbgrader metadata from the tags, stable cell ids."""
    import jupytext

    nb = jupytext.read(py_file)
    nb.metadata.pop("jupytext", None)
    seen = {"solution": [], "tests": []}
    for index, cell in enumerate(nb.cells):
        cell.id = f"cell-{index:02d}"
        tags = cell.metadata.pop("tags", [])
        provided = [tag.partition(":")[2] for tag in tags if tag.startswith("provided:")]
        if provided:
            cell.source, cell.metadata["nbgrader"] = _provided(provided, assignment, index, f"{py_file.name}, cell {index}")
        for tag in tags:
            kind, _, exercise = tag.partition(":")
            if kind == "provided":
                continue
            if kind == "answer" and exercise:
                cell.metadata["nbgrader"] = _answer_metadata(cell, exercise, f"{py_file.name}, cell {index}")
                continue
            if kind not in seen or not exercise:
                raise ReleaseError(f"{py_file.name}, cell {index}: unknown tag {tag!r}")
            cell.metadata["nbgrader"] = _nbgrader_metadata(kind, exercise)
            seen[kind].append(exercise)
    expected = [e.name for e in ASSIGNMENTS[assignment]]
    for kind, names in seen.items():
        if names != expected:
            raise ReleaseError(f"{py_file.name}: {kind} cells are for {names}, the graders expect {expected} in that order")
    return nb


def build_sources(root: Path) -> None:
    """Write ``source/<assignment>/*.ipynb`` under ``root`` from the ``.py`` twins in this repo."""
    for assignment in ASSIGNMENTS:
        py_file = source_file(assignment)
        if not py_file.is_file():
            raise ReleaseError(f"{py_file} is missing: each assignment's notebook is source/<assignment>/<assignment>.py")
        target = root / layout.SOURCE / assignment / py_file.with_suffix(".ipynb").name
        target.parent.mkdir(parents=True, exist_ok=True)
        import nbformat

        nbformat.write(build_source_notebook(py_file, assignment), target)


def _gradebook(root: Path):
    """``root``'s nbgrader gradebook, opened (nbgrader is imported only here: it costs a second)."""
    from nbgrader.api import Gradebook

    return Gradebook(f"sqlite:///{root / GRADEBOOK}")


def gradebook_assignments(root: Path) -> list[str]:
    """The assignments ``root``'s gradebook records (none when it has no gradebook yet)."""
    if not (root / GRADEBOOK).is_file():  # opening a Gradebook would create the file
        return []
    with _gradebook(root) as gradebook:
        return sorted(a.name for a in gradebook.assignments)


def generate(root: Path, released: Iterable[str] = tuple(ASSIGNMENTS), kept: Path | None = None) -> list[str]:
    """Build ``source/*.ipynb`` and ``release/`` in ``root`` for every assignment (one nbgrader run), and
    leave ``root``'s gradebook recording the assignments it recorded before and ``released``, each with
    its current grade cells, and no other; returns them. (The default, everything released, is a course
    at the end of its term: the tests' and the benchmarks'.) A checks file that needs weights this machine
    lacks is the one in ``kept`` (default: ``root``'s ``release/``)."""
    released = list(released)
    unknown = [a for a in released if a not in ASSIGNMENTS]
    if unknown:
        raise ReleaseError(f"no assignment called {', '.join(unknown)}; the assignments are: {', '.join(ASSIGNMENTS)}")
    build_sources(root)
    checks = checks_files(kept or root / layout.RELEASE)  # before nbgrader replaces release/: a failure leaves it
    recorded = set(gradebook_assignments(root)) | set(released)
    # nbgrader records every assignment it generates, or none with --no-db; it takes one pattern, not a list.
    done = subprocess.run([sys.executable, "-m", "nbgrader", "generate_assignment", "*", "--force",
                           "--create" if recorded else "--no-db", "--log-level=WARN"],
                          cwd=root, capture_output=True, text=True)
    if done.returncode != 0:
        raise ReleaseError(f"nbgrader generate_assignment failed:\n{done.stdout}{done.stderr}")
    if recorded:
        with _gradebook(root) as gradebook:
            for assignment in set(ASSIGNMENTS) - recorded:  # recorded by this run alone: it has no submissions
                gradebook.remove_assignment(assignment)
    for assignment, data in checks.items():
        (root / layout.RELEASE / assignment / layout.CHECKS).write_bytes(data)
    return gradebook_assignments(root)


def checks_files(kept: Path) -> dict[str, bytes]:
    """Assignment -> its ``release/<assignment>/checks.pt.xz``, for each assignment with public cases: what its
    notebook's visible checks run (``autograder.engine.public_cases``). Where the cases need weights this
    machine lacks (07's are made with the real model's layer), the file is ``kept``'s, said on stderr: an
    instructor releasing 01 needs no model, and the file in git was made from the same pinned weights."""
    from autograder.engine import public_cases
    from course.smollm2 import WeightsMissing

    found = {}
    for assignment in ASSIGNMENTS:
        try:
            data = public_cases.assignment_data(assignment)
        except WeightsMissing as e:
            old = kept / assignment / layout.CHECKS
            if not old.is_file():
                raise ReleaseError(f"the public cases of {assignment}'s visible checks need the model's weights, "
                                   f"and there is no {old} to keep: {e}") from None
            print(f"course-release: {assignment}'s visible checks are kept as they were ({old}), not made again: {e}",
                  file=sys.stderr)
            found[assignment] = old.read_bytes()
            continue
        if data is not None:
            found[assignment] = public_cases.file_bytes(data)
    return found


def differing_files(root: Path) -> list[str]:
    """Files of ``release/`` that differ from ``root``'s, a course folder ``generate`` has run in."""
    fresh, committed = root / layout.RELEASE, REPO / layout.RELEASE
    files = {p.relative_to(fresh) for p in fresh.rglob("*") if p.is_file()}
    files |= {p.relative_to(committed) for p in committed.rglob("*") if p.is_file()}
    return [str(Path(layout.RELEASE) / f) for f in sorted(files)
            if not ((fresh / f).is_file() and (committed / f).is_file() and _same(fresh / f, committed / f))]


def _same(fresh: Path, committed: Path) -> bool:
    """Whether two generated files say the same: byte for byte, or, for a checks file, the same data up to what
    another machine's rounding moves (``same_checks``)."""
    if filecmp.cmp(fresh, committed, shallow=False):
        return True
    from autograder.instructor.same_checks import same_checks
    from course import checking

    if fresh.name != layout.CHECKS:
        return False
    try:
        return same_checks(checking.load(fresh), checking.load(committed))
    except checking.CheckFailed:  # the committed one is of another format, or unreadable
        return False


def stale_files() -> list[str]:
    """Files of ``release/`` that differ from a fresh generation (empty when it is current)."""
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        shutil.copy(REPO / "nbgrader_config.py", root)
        generate(root, released=(), kept=REPO / layout.RELEASE)
        return differing_files(root)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--assignment", nargs="+", default=[], metavar="A",
                        help="also record these assignments in the gradebook: they are released to the class")
    parser.add_argument("--check", action="store_true", help="only say whether release/ is current")
    args = parser.parse_args(argv)
    if args.check and args.assignment:
        parser.error("--check changes nothing: run it without --assignment")
    try:
        if args.check:
            stale = stale_files()
            if stale:
                print("release/ is out of date with source/; run `course-release`. Differing files:")
                print("\n".join(f"  {f}" for f in stale))
                return 1
            print("release/ is current.")
            return 0
        recorded = generate(REPO, released=args.assignment)
    except ReleaseError as e:
        print(f"course-release: {e}", file=sys.stderr)
        return 1
    print("release/ regenerated from source/.")
    if recorded:
        print(f"The gradebook ({GRADEBOOK}) records: {', '.join(recorded)}.")
    else:
        print(f"The gradebook ({GRADEBOOK}) records no assignment yet: `course-release --assignment A` "
              "records the ones you release, before nbgrader can autograde them.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
