"""Every verdict on the course's own sets of wrong code, written to a JSON file, so that two versions of the grader
can be compared verdict for verdict: each natural mistake (``tests/natural_mistakes``, the exercises it can change,
in the presentation its id picks) and each seeded mistake, stub and other correct answer of the simulated students
(``tests/students``). A change meant to make grading faster must leave the file as it was.

Run: python benchmarks/verdict_snapshot.py OUT.json [--compare OTHER.json]
(07's entries need the SmolLM2 weights: `course-weights smollm2`.)
"""
import argparse
import json
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from autograder.engine.assignments import EXERCISES  # noqa: E402
from autograder.engine.grading import judge  # noqa: E402
from autograder.engine.sandbox.client import shared  # noqa: E402
from tests import natural_mistakes, students  # noqa: E402
from tests.natural_mistakes import checks  # noqa: E402


def _said(verdict) -> dict:
    return {"points": verdict.points, "summary": verdict.summary, "details": verdict.details,
            "mistake": verdict.mistake, "grader_problem": verdict.grader_problem}


def natural(sandbox) -> dict:
    """entry id -> exercise -> verdict, as ``tests/checks/test_natural_mistakes.py`` grades each entry."""
    return {entry.id: {v.exercise: _said(v) for v in checks.verdicts(module, entry, sandbox)}
            for module, entry in natural_mistakes.all_entries()}


def seeded(sandbox) -> dict:
    """"aNN exercise: what" -> verdict, for every seeded mistake, stub and other correct answer of the students."""
    found = {}
    for module in students.ALL:
        tried = [(name, "stub", module.STUBS[name]) for name in module.CORRECT]
        tried += [(name, f"mistake: {named}", source) for name, named, source in module.MISTAKES]
        tried += [(name, f"correct: {how}", source) for name, how, source in module.OTHER_CORRECT]
        for name, what, source in tried:
            key = f"{module.ASSIGNMENT[:3]} {name}: {what}"
            found[key] = _said(judge(EXERCISES[name], module.cells({name: source}), sandbox, verdicts={}))
    return found


def differences(mine: dict, theirs: dict) -> list[str]:
    lines = []
    for part in ("natural", "seeded"):
        for key in sorted(set(mine[part]) | set(theirs[part])):
            if mine[part].get(key) != theirs[part].get(key):
                lines.append(f"{part} {key}:\n  this:  {mine[part].get(key)}\n  other: {theirs[part].get(key)}")
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--compare", type=Path, help="a snapshot of another version to compare with")
    args = parser.parse_args()
    sandbox = shared()
    start = time.monotonic()
    snapshot = {"natural": natural(sandbox), "seeded": seeded(sandbox)}
    args.out.write_text(json.dumps(snapshot, ensure_ascii=False, indent=1, sort_keys=True), encoding="utf-8")
    count = sum(len(v) for v in snapshot["natural"].values()) + len(snapshot["seeded"])
    print(f"{count} verdicts in {time.monotonic() - start:.0f} s -> {args.out}")
    if args.compare:
        lines = differences(snapshot, json.loads(args.compare.read_text(encoding="utf-8")))
        print("\n".join(lines) or f"the same verdicts as {args.compare}")
        return 1 if lines else 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
