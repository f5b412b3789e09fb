"""Which known mistake a wrong answer is, if any: a mistake is named only when it reproduces the student's
outputs on every case where it could be tried, never on the strength of one case where two mistakes happen to
give the same numbers (a 1/4 scale can be 1/√16 and 1/(√8 + √8) at once).

A case where a mistake cannot be reproduced to the case's tolerance does not count against it: the mistake
raises there, it is declared not to define that case's numbers (``Mistake.tried_on``), or its own results in
the case's dtype and in float64 lie more than half the tolerance apart (``SELF_AGREEMENT``). Two ways of
rounding (bfloat16, float16, mistakes about precision) need not agree to the tolerance: there the student's
output must lie within a few tolerances of the mistake's, or far closer to it than to the reference's.

Cost: every mistake is tried on the first wrong case; only those that reproduce it are tried on the others; and
what a mistake gives on a case is worked out once per process (``known_outputs``), for every notebook of a class,
and once per grader version for the assignments that run real models (``output_store``).
"""
from collections.abc import Sequence
from dataclasses import dataclass, replace

import torch

from autograder.engine.known_outputs import known
from autograder.engine.model import Exercise, Mistake
from autograder.engine.output_store import RAISED
from course.compare import compare
from course.protocols import Case

_LOW_PRECISION = (torch.float16, torch.bfloat16)
# A mistake defines a case's numbers where its run in the case's dtype lies within this share of the case's tolerance
# of its float64 run. Half, not all: near the line another CPU's rounding may decide the other way, and there either
# decision names the same mistake for code that makes it (whose own rounding is about the mistake's).
SELF_AGREEMENT = 0.5
CLOSER = 0.25  # in low precision, the student's distance to the mistake, at most this share of that to the reference
NEAR = 4  # ... or at most this many tolerances


def agree(exercise: "Exercise", case: Case, got, wrong, scale: float = 1.0) -> bool:
    """Whether ``got`` (an output as the code returns it) and ``wrong`` (a graded one) agree to the case's tolerance
    (times ``scale``), NaN matching NaN."""
    tol = exercise.tolerance(case.dtype)
    return compare(exercise.graded(got), wrong, case.dtype, replace(tol, atol=tol.atol * scale, rtol=tol.rtol * scale),
                   names=exercise.output_names, equal_nan=True, free=exercise.free_in(case)) is None


def output(exercise: "Exercise", mistake: "Mistake", case: Case, native: bool):
    def run():
        try:
            return exercise.graded(exercise.call(mistake.fn, case.cloned() if native else case.in_float64()))
        except Exception:  # noqa: BLE001 - a mistake may not even run on this case's shapes
            return RAISED
    return known((exercise.name, exercise.call, mistake.fn, native), case, run,
                 stored=(exercise, stored_name(exercise, mistake) + (" in the case's dtype" if native else "")))


def stored_name(exercise: "Exercise", mistake: "Mistake") -> str:
    """What the store of known outputs calls ``mistake``'s outputs: its name, and which of the exercise's
    mistakes of that name it is (one name may cover several ways to write the same mistake)."""
    namesakes = [m for m in exercise.mistakes if m.name == mistake.name]
    which = next(i for i, m in enumerate(namesakes) if m is mistake)
    return f"mistake {mistake.name}" + (f" #{which + 1}" if which else "")


def reproduces(exercise: "Exercise", mistake: "Mistake", case: Case, got) -> bool | None:
    """Whether ``mistake`` gives the student's output ``got`` on ``case``, to the case's tolerance; None when it
    cannot be tried there (it raises on the case's shapes, or it shows as an error rather than an output)."""
    if mistake.error is not None:
        return None
    if mistake.matches is not None:
        return bool(mistake.matches(case, got))
    wrong = output(exercise, mistake, case, mistake.native_dtype)
    return None if wrong is RAISED else agree(exercise, case, got, wrong)


@dataclass(frozen=True)
class Diagnosis:
    """``named``: the known mistake the student's code is. ``fits_until_raised``: when none is, but a mistake
    given as code reproduces every case that ran and the code then raised where that mistake would not, that
    mistake (a fact about the cases that ran, never a name)."""

    named: "Mistake | None" = None
    fits_until_raised: "Mistake | None" = None


def diagnose(exercise: "Exercise", cases: Sequence[Case], outputs: Sequence, expected: Sequence,
             right: Sequence[bool], first_wrong: int) -> Diagnosis:
    """The first known mistake that reproduces ``outputs[first_wrong]`` and agrees with every other output it can
    be tried on: the wrong ones, and the right ones too for a mistake given as code (a mistake that would have
    made a right output wrong is not the student's). ``outputs``, ``expected`` (the reference's results) and
    ``right`` cover the cases that returned; when the student's code raised on the case after them, a mistake
    given as code must raise there too, or it only fits the cases that ran."""
    raised_on = cases[len(outputs)] if len(outputs) < len(cases) else None
    fits = None
    for mistake in exercise.mistakes:
        if not reproduces(exercise, mistake, cases[first_wrong], outputs[first_wrong]):
            continue
        if not all(_consistent(exercise, mistake, cases[i], outputs[i], expected[i], right[i])
                   for i in range(len(outputs)) if i != first_wrong):
            continue
        if raised_on is not None and mistake.fn is not None and \
                output(exercise, mistake, raised_on, mistake.native_dtype) is not RAISED:
            fits = fits or mistake
            continue
        return Diagnosis(named=mistake)
    return Diagnosis(fits_until_raised=fits)


def _consistent(exercise: "Exercise", mistake: "Mistake", case: Case, got, expected, is_right: bool) -> bool:
    if mistake.matches is not None:  # a test of wrong outputs: a right one rules it out only where the mistake
        if is_right:                 # cannot come out right (its tried_on)
            return mistake.tried_on is None or not mistake.tried_on(case)
        return bool(mistake.matches(case, got))
    if mistake.error is not None or (mistake.tried_on is not None and not mistake.tried_on(case)):
        return True  # an error pattern, or a mistake that does not define this case
    wrong = output(exercise, mistake, case, mistake.native_dtype)
    if wrong is RAISED or agree(exercise, case, got, wrong):
        return True
    native = wrong if mistake.native_dtype else output(exercise, mistake, case, True)
    if native is RAISED:
        return True
    if not mistake.native_dtype and not agree(exercise, case, native, wrong, SELF_AGREEMENT):
        return True  # the mistake's own result depends on rounding here: this case cannot tell
    if is_right or not (mistake.native_dtype or case.dtype in _LOW_PRECISION):
        return False
    tol = exercise.tolerance(case.dtype)
    apart = _distance(got, native)
    return apart <= NEAR * (tol.atol + tol.rtol * _magnitude(expected)) or \
        apart <= CLOSER * _distance(got, exercise.graded(expected))


def _magnitude(value) -> float:
    """The largest finite absolute value among an output's float tensors."""
    if isinstance(value, (tuple, list)):
        return max((_magnitude(v) for v in value), default=0.0)
    if isinstance(value, torch.Tensor) and value.is_floating_point() and value.numel():
        return float(value.double().nan_to_num(0.0, 0.0, 0.0).abs().max())
    return 0.0


def _distance(a, b) -> float:
    """The largest absolute difference between two outputs of the same structure (inf when they differ in it)."""
    if isinstance(b, (tuple, list)):
        if not isinstance(a, (tuple, list)) or len(a) != len(b):
            return float("inf")
        return max((_distance(x, y) for x, y in zip(a, b)), default=0.0)
    if not (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)):
        return 0.0 if not isinstance(a, torch.Tensor) and not isinstance(b, torch.Tensor) and a == b else float("inf")
    if a.shape != b.shape:
        return float("inf")
    if not a.is_floating_point():
        return float((a != b).any())
    return float((a.double().nan_to_num(0.0, 1e300, -1e300) - b.double().nan_to_num(0.0, 1e300, -1e300))
                 .abs().max()) if a.numel() else 0.0
