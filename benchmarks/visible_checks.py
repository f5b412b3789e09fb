"""What the notebooks' visible checks (``course.checking``) say on the natural mistakes nobody on the team listed
(``tests/natural_mistakes``), beside what the grader says (the names it gave when judged, ``judged.NAMES``): per
assignment with a checks file, for each (mistake, exercise it breaks), whether the public cases catch it, and
whether the check names the grader's mistake, blames the same broken exercise first, says something else or names
a wrong mistake (``tests/checks/test_visible_checks.py`` holds it to none).

Run: python benchmarks/visible_checks.py
"""
import collections
import sys
import time
import types
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from course import checking, layout  # noqa: E402
from tests.natural_mistakes import ASSIGNMENTS, source  # noqa: E402
from tests.natural_mistakes.judged import NAMES  # noqa: E402

_BASE = "没有通过：用到的 "


def said(failure: checking.Failure) -> str:
    """The check's name for a failure, in the form of ``judged.NAMES``: a mistake, or the broken exercise it blames."""
    if failure.mistake:
        return failure.mistake
    first = failure.message.splitlines()[0]
    return first.removeprefix("没有通过：") if first.startswith(_BASE) else ""


def main() -> int:
    started = time.perf_counter()
    counts = collections.defaultdict(collections.Counter)
    for module in ASSIGNMENTS:
        if not (REPO / layout.RELEASE / module.ASSIGNMENT / layout.CHECKS).is_file():
            continue
        for entry in module.ENTRIES:
            notebook = types.ModuleType("notebook")
            exec(compile(source(module, entry), entry.id, "exec"), vars(notebook))
            for name in entry.exercises:
                if name not in checking._all_checks():
                    continue
                failure = checking.verdict(name, notebook)
                grader = NAMES.get(entry.id, {}).get(name, "")
                tally = counts[module.ASSIGNMENT]
                tally["mistakes"] += 1
                if failure is None:  # the grader's other cases may catch it, or no case (it breaks another exercise)
                    tally["passed the public cases"] += 1
                    print(f"  public cases pass: {entry.id} {name} (grader: {grader or 'no name'})")
                    continue
                mine = said(failure)
                if mine and mine == grader:
                    tally["named as the grader names it"] += 1
                elif failure.mistake and failure.mistake != grader:
                    tally["WRONG name"] += 1
                    print(f"  wrong: {entry.id} {name}: check {mine!r}, grader {grader!r}")
                elif grader:
                    tally["caught, the grader's name not given"] += 1
                else:
                    tally["caught, neither names a mistake"] += 1
    for assignment, tally in counts.items():
        print(f"{assignment}: {tally['mistakes']} (mistake, exercise) pairs")
        for what, n in sorted(tally.items()):
            if what != "mistakes":
                print(f"  {what}: {n}")
    print(f"{time.perf_counter() - started:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
