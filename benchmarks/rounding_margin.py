"""How close to its line the diagnosis decides whether a known mistake defines a case's numbers: it counts a case
against a mistake only where the mistake's run in the case's dtype lies within ``diagnosis.SELF_AGREEMENT`` (half)
of the case's tolerance of its float64 run (``diagnosis._consistent``; ``public_cases`` keeps a mistake's output for
the visible checks by the same test). Another CPU rounds float32 and bfloat16 its own way, so a (case, mistake)
whose two runs sit within a factor of ``--factor`` of that line may be decided the other way there.

At half the tolerance a flip matters little for code that makes the mistake: counted, the code's own rounding
(about the size of the mistake's) leaves room to agree with the float64 run to the whole tolerance; not counted,
the case is passed over. At the whole tolerance, where the line was, a counted case could rule out the very mistake
the student made, on one machine and not on another. A flip can still matter where that case alone tells two
mistakes apart. ``--line 1`` measures the old line.

Prints each such (assignment, exercise, case, mistake) with its dtype and this machine's decision, and the count
per assignment. 07's cases need `course-weights smollm2`; the real-size outputs come from the store when it is
filled (``output_store``), else they are computed (minutes).

Run: python benchmarks/rounding_margin.py [--factor 2] [--line SHARE] [ASSIGNMENT ...]
"""
import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from autograder.engine import diagnosis  # noqa: E402
from autograder.engine.assignments import ASSIGNMENTS  # noqa: E402
from autograder.engine.output_store import RAISED  # noqa: E402


def near_the_line(exercise, line: float, factor: float):
    """(case index, case, mistake index, mistake, counted here) for each pair whose runs lie between ``line / factor``
    and ``line × factor`` tolerances apart."""
    for ci, case in enumerate(exercise.made_cases()):
        for mi, mistake in enumerate(exercise.mistakes):
            if mistake.fn is None or mistake.native_dtype or (mistake.tried_on and not mistake.tried_on(case)):
                continue  # the diagnosis never asks these whether their own runs agree
            wide = diagnosis.output(exercise, mistake, case, False)
            native = RAISED if wide is RAISED else diagnosis.output(exercise, mistake, case, True)
            if native is RAISED:
                continue
            if diagnosis.agree(exercise, case, native, wide, line / factor) != \
                    diagnosis.agree(exercise, case, native, wide, line * factor):
                yield ci, case, mi, mistake, diagnosis.agree(exercise, case, native, wide, line)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("assignments", nargs="*", default=list(ASSIGNMENTS), metavar="ASSIGNMENT")
    parser.add_argument("--factor", type=float, default=2.0)
    parser.add_argument("--line", type=float, default=diagnosis.SELF_AGREEMENT, help="the share of the tolerance")
    args = parser.parse_args()
    total = 0
    for assignment in args.assignments:
        start, found = time.perf_counter(), 0
        for exercise in ASSIGNMENTS[assignment]:
            for ci, case, mi, mistake, counted in near_the_line(exercise, args.line, args.factor):
                found += 1
                print(f"  {exercise.name} case {ci} ({'public' if case.public else 'hidden'}, "
                      f"{str(case.dtype).removeprefix('torch.')}) mistake {mi} {mistake.name!r}: "
                      f"{'counted' if counted else 'not counted'} here")
        print(f"{assignment}: {found} within a factor {args.factor:g} of {args.line:g} tolerance "
              f"({time.perf_counter() - start:.0f} s)")
        total += found
    print(f"in all: {total}")


if __name__ == "__main__":
    main()
