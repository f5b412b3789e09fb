"""What the notebooks' visible checks may know (``course.checking``): for each exercise, its public cases'
inputs, the reference's output on each and each named mistake's output where it defines one, computed here as
the grader computes them for its diagnosis, and nothing of the hidden cases, the references or the checks' code.
``course-release`` writes them into ``release/<assignment>/checks.pt.xz``."""
import io
import lzma

import torch

from autograder.engine import diagnosis
from autograder.engine.assignments import ASSIGNMENTS
from autograder.engine.judging import reference_result
from autograder.engine.model import Exercise
from autograder.engine.output_store import RAISED
from course import checking
from course.output_rules import RULES
from course.protocols import map_tensors


def exercise_data(exercise: Exercise) -> dict | None:
    """The visible check's data of ``exercise`` (None when it has no public case)."""
    made = exercise.made_cases()
    public = [case for case in made if case.public]
    if not public:
        return None
    verify = exercise.verify
    if verify is not None and RULES.get(verify.__name__) is not verify:
        raise ValueError(f"{exercise.name}: a visible check must apply its verify too: put it in course/output_rules.py")
    return {
        "call": exercise.call.__name__, "definition": exercise.definition, "stages": bool(exercise.stages),
        "output_names": exercise.output_names, "verify": verify.__name__ if verify else None,
        "works_in_float32": exercise.works_in_float32, "hidden": len(made) - len(public), "uses": exercise.uses,
        "mistakes": [(m.name, m.hint, m.error) for m in exercise.mistakes],
        "cases": [_case_data(exercise, case) for case in public],
    }


def _case_data(exercise: Exercise, case) -> dict:
    expected = exercise.graded(reference_result(exercise, case))
    tolerance = exercise.tolerance(case.dtype)
    mistakes = _mistakes_on(exercise, case, expected)
    return {"label": case.label, "args": checking.encoded(case.args), "kwargs": checking.encoded(case.kwargs),
            "expected": expected,
            "free": exercise.free_in(case), "tolerance": (tolerance.atol, tolerance.rtol),
            "mistakes": mistakes, "claims": _claims_on(exercise, case, expected, mistakes)}


# A mistake's output larger than this is not kept (that case then neither names nor rules out the mistake): the
# file stays small where a public case is large, and other cases still tell the mistakes apart.
KEPT_ELEMENTS = 8192


def _mistakes_on(exercise: Exercise, case, expected) -> dict[int, object]:
    """Mistake index -> what it gives on ``case``, for the mistakes given as code: ``checking.RAISES`` where it
    raises; its output where it defines the case's numbers (inside its ``tried_on``, and its run in float64 within
    ``diagnosis.SELF_AGREEMENT`` of its run in the case's dtype), as ``diagnosis`` requires before it counts a case
    against a mistake.
    An output that is the reference's is written ``checking.SAME``; float64 ones are kept in float32, which is far
    inside every tolerance: the file ships with the notebooks and stays small."""
    found = {}
    for index, mistake in enumerate(exercise.mistakes):
        if mistake.fn is None:
            continue
        wrong = diagnosis.output(exercise, mistake, case, mistake.native_dtype)
        if wrong is RAISED:
            found[index] = checking.RAISES
            continue
        if mistake.tried_on is not None and not mistake.tried_on(case):
            continue
        native = wrong if mistake.native_dtype else diagnosis.output(exercise, mistake, case, True)
        if native is not RAISED and diagnosis.agree(exercise, case, native, wrong, diagnosis.SELF_AGREEMENT):
            if diagnosis.agree(exercise, case, wrong, expected):
                found[index] = checking.SAME
            elif _elements(wrong) <= KEPT_ELEMENTS:
                found[index] = map_tensors(wrong, _smaller)
    return found


def _claims_on(exercise: Exercise, case, expected, mistakes: dict) -> dict[int, list[int]]:
    """Mistake index of each ``matches`` mistake (a test of the output, code the file does not ship) -> the
    mistakes given as code whose stored output on ``case`` it accepts. Where one of those fits a student's output,
    the grader, which names the first mistake in its list that fits, may name the test's mistake instead."""
    claims = {}
    for index, mistake in enumerate(exercise.mistakes):
        if mistake.matches is None:
            continue
        claims[index] = [other for other, wrong in mistakes.items()
                         if not checking.is_raises(wrong)
                         and mistake.matches(case, expected if checking.is_same(wrong) else wrong)]
    return claims


def _elements(value) -> int:
    sizes = []
    map_tensors(value, lambda t: sizes.append(t.numel()))
    return sum(sizes)


def _smaller(t: torch.Tensor) -> torch.Tensor:
    return t.float() if t.dtype == torch.float64 else t


def assignment_data(assignment: str) -> dict | None:
    """The checks file's contents for ``assignment`` (None when none of its exercises has a public case)."""
    exercises = {e.name: data for e in ASSIGNMENTS[assignment] for data in [exercise_data(e)] if data is not None}
    return {"format": checking.FORMAT, "exercises": exercises} if exercises else None


def file_bytes(data: dict) -> bytes:
    """A checks file: ``data`` saved by torch, compressed with xz (to about 40 %; it is mostly float data)."""
    buffer = io.BytesIO()
    torch.save(data, buffer)
    return lzma.compress(buffer.getvalue(), preset=9)
