"""How the graders' messages fare on natural mistakes nobody on the team listed (``tests/natural_mistakes``):
grades every entry's whole assignment and prints, per assignment and per kind, how many are caught and how
their messages read: a known mistake named, a clue given (facts about the output, the broken helper named, a
PyTorch error explained), or bare.

Whether a name is the *right* name is a judgement against each entry's ``cause``; this script writes every
message to --out (JSON) for that, and ``tests/natural_mistakes/judged.py`` keeps the judgements. Once they are
judged, --write-names records there the names the messages gave (what ``tests/checks/test_natural_mistakes.py`` holds
them to).

Run: python benchmarks/feedback_naming.py [--only 01 04] [--out messages.json] [--write-names]
"""
import argparse
import collections
import json
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from autograder.engine.grading import grade_cells  # noqa: E402
from autograder.engine.sandbox.client import Sandbox  # noqa: E402
from autograder.engine.student_code import Cell  # noqa: E402
from tests.natural_mistakes import ASSIGNMENTS, KINDS, source  # noqa: E402
from tests.natural_mistakes.reading import names, reading  # noqa: E402

JUDGED = REPO / "tests" / "natural_mistakes" / "judged.py"
NAMES_MARK = "# The names the messages gave when they were judged (benchmarks/feedback_naming.py --write-names)."


def write_names(rows: list[dict]) -> None:
    """Replace the NAMES block at the end of judged.py with the names of these messages."""
    text = JUDGED.read_text(encoding="utf-8")
    kept = text.split(NAMES_MARK)[0].rstrip("\n")
    lines = [f"    {row['id']!r}: {names(row)!r}," for row in rows if names(row)]
    JUDGED.write_text(kept + "\n\n" + NAMES_MARK + "\nNAMES = {\n" + "\n".join(lines) + "\n}\n", encoding="utf-8")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="*", default=[], help="assignment numbers, e.g. 01 04")
    parser.add_argument("--out", type=Path, help="write every entry's verdicts here (JSON)")
    parser.add_argument("--write-names", action="store_true", help=f"record the names given in {JUDGED.name}")
    args = parser.parse_args()
    if args.write_names and args.only:
        parser.error("--write-names records the names of every assignment: leave out --only")
    sandbox, rows, start = Sandbox(), [], time.perf_counter()
    try:
        for module in ASSIGNMENTS:
            if args.only and module.ASSIGNMENT[:2] not in args.only:
                continue
            for entry in module.ENTRIES:
                verdicts = grade_cells(module.ASSIGNMENT, [Cell("代码单元 #1", source(module, entry))], sandbox)
                rows.append({"id": entry.id, "assignment": module.ASSIGNMENT, "kind": entry.kind,
                             "cause": entry.cause, "exercises": list(entry.exercises),
                             "verdicts": [{"exercise": v.exercise, "passed": v.passed, "summary": v.summary,
                                           "details": v.details, "mistake": v.mistake} for v in verdicts]})
    finally:
        sandbox.stop()
    if args.out:
        args.out.write_text(json.dumps(rows, ensure_ascii=False, indent=1))
    if args.write_names:
        write_names(rows)
    table = collections.defaultdict(collections.Counter)
    for row in rows:
        how = reading(row)
        for key in (row["assignment"], row["kind"], "all"):
            table[key][how] += 1
            table[key]["entries"] += 1
    print(f"{len(rows)} natural mistakes graded in {time.perf_counter() - start:.0f} s")
    print(f"{'':22}{'entries':>8}{'missed':>8}{'named':>8}{'clue':>8}{'bare':>8}")
    for key in [*sorted(k for k in table if k[:2].isdigit()), *KINDS, "all"]:
        if key in table:
            c = table[key]
            print(f"{key:22}{c['entries']:8}{c['missed']:8}{c['named']:8}{c['clue']:8}{c['bare']:8}")


if __name__ == "__main__":
    main()
