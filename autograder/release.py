"""``course-release``: build the source notebooks from their jupytext twins and let nbgrader generate
``release/`` from them; ``course-release --check`` says whether the committed ``release/`` is current.

In ``source/<assignment>/`` the ``.py`` file (jupytext percent format) is what instructors edit. Two tags
mark the graded cells, and points come from the grader registry so they are written in one place:

- ``solution:<exercise>``: the student's cell; ``### BEGIN SOLUTION`` … ``### END SOLUTION`` is removed.
- ``tests:<exercise>``: the grade cell; ``### BEGIN HIDDEN TESTS`` … ``### END HIDDEN TESTS`` is removed.
"""
import argparse
import filecmp
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import jupytext
import nbformat

from autograder.assignments import ASSIGNMENTS, REPO

SCHEMA_VERSION = 3


class ReleaseError(Exception):
    """The source notebook does not match the exercise contract; the message says where."""


def _nbgrader_metadata(kind: str, exercise: str) -> dict:
    points = {e.name: e.points for exercises in ASSIGNMENTS.values() for e in exercises}
    if exercise not in points:
        raise ReleaseError(f"tag {kind}:{exercise} names no exercise the graders know")
    graded = kind == "tests"
    return {
        "grade": graded, "grade_id": f"{kind}_{exercise}", "locked": graded,
        "points": points[exercise] if graded else 0, "schema_version": SCHEMA_VERSION,
        "solution": not graded, "task": False,
    }


def build_source_notebook(py_file: Path, assignment: str) -> nbformat.NotebookNode:
    """The nbgrader source notebook of ``py_file``: nbgrader metadata from the tags, stable cell ids."""
    nb = jupytext.read(py_file)
    nb.metadata.pop("jupytext", None)
    seen = {"solution": [], "tests": []}
    for index, cell in enumerate(nb.cells):
        cell.id = f"cell-{index:02d}"
        tags = cell.metadata.pop("tags", [])
        for tag in tags:
            kind, _, exercise = tag.partition(":")
            if kind not in seen or not exercise:
                raise ReleaseError(f"{py_file.name}, cell {index}: unknown tag {tag!r}")
            cell.metadata["nbgrader"] = _nbgrader_metadata(kind, exercise)
            seen[kind].append(exercise)
    expected = [e.name for e in ASSIGNMENTS[assignment]]
    for kind, names in seen.items():
        if names != expected:
            raise ReleaseError(f"{py_file.name}: {kind} cells are for {names}, the graders expect {expected} in that order")
    return nb


def build_sources(root: Path) -> list[str]:
    """Write ``source/<assignment>/*.ipynb`` under ``root`` from the ``.py`` twins in this repo."""
    built = []
    for assignment in ASSIGNMENTS:
        folder = REPO / "source" / assignment
        py_files = sorted(folder.glob("*.py"))
        if len(py_files) != 1:
            raise ReleaseError(f"{folder} should hold exactly one jupytext .py notebook, found {len(py_files)}")
        target = root / "source" / assignment / py_files[0].with_suffix(".ipynb").name
        target.parent.mkdir(parents=True, exist_ok=True)
        nbformat.write(build_source_notebook(py_files[0], assignment), target)
        built.append(assignment)
    return built


def generate(root: Path) -> None:
    """Run ``nbgrader generate_assignment`` in ``root`` for every assignment."""
    for assignment in build_sources(root):
        done = subprocess.run([sys.executable, "-m", "nbgrader", "generate_assignment", assignment,
                               "--force", "--create", "--log-level=WARN"],
                              cwd=root, capture_output=True, text=True)
        if done.returncode != 0:
            raise ReleaseError(f"nbgrader generate_assignment {assignment} failed:\n{done.stdout}{done.stderr}")


def stale_files() -> list[str]:
    """Files of ``release/`` that differ from a fresh generation (empty when it is current)."""
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        shutil.copy(REPO / "nbgrader_config.py", root)
        generate(root)
        fresh, committed = root / "release", REPO / "release"
        files = {p.relative_to(fresh) for p in fresh.rglob("*") if p.is_file()}
        files |= {p.relative_to(committed) for p in committed.rglob("*") if p.is_file()}
        return [str(Path("release") / f) for f in sorted(files)
                if not ((fresh / f).is_file() and (committed / f).is_file()
                        and filecmp.cmp(fresh / f, committed / f, shallow=False))]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only say whether release/ is current")
    args = parser.parse_args(argv)
    try:
        if args.check:
            stale = stale_files()
            if stale:
                print("release/ is out of date with source/; run `course-release`. Differing files:")
                print("\n".join(f"  {f}" for f in stale))
                return 1
            print("release/ is current.")
            return 0
        generate(REPO)
    except ReleaseError as e:
        print(f"course-release: {e}", file=sys.stderr)
        return 1
    print("release/ regenerated from source/.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
