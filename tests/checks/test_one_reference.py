"""One reference per exercise: the course states each reference twice, in ``solutions/`` (what the grader compares
with) and in the source notebook's solution cell (what the instructor's notebook runs and what a solved notebook
shows), and these tests hold the two to one behaviour. On every case the grader runs, the budget's included, the
notebook's solution, given the case in float64 as the reference is, returns what the reference returns: the same
types, shapes and dtypes, equal integers, and floats within a tenth of the grader's tolerance for the case — so that
a difference the grader would forgive is still caught unless it is rounding (the contract keeps some tables in
float32, e.g. RoPE's angles, whose last bits two correct formulas round differently: about 3e-6 on a cosine at
angle 299, where the grader allows 1e-4)."""
import contextlib
import functools
import sys
import types

import pytest
import torch

from autograder.engine.assignments import ASSIGNMENTS, EXERCISES
from autograder.engine.judging import reference_result
from autograder.engine.student_code import student_code
from course import protocols
from tests import tiers
from tests.presentations import graded_cells, released_blocks

TIGHTER = 10  # than the grader's tolerance for the case's dtype
ASSIGNMENT_OF = {exercise.name: assignment for assignment, exercises in ASSIGNMENTS.items() for exercise in exercises}


@functools.cache
def _solved(assignment: str) -> types.ModuleType:
    """The graded definitions of the released notebook with the source notebook's solutions, run as the sandbox
    runs them (imports, definitions and constants only), in a module of their own."""
    code = student_code(graded_cells(released_blocks(assignment), f"{assignment}.ipynb"))
    assert not code.syntax_errors, code.syntax_errors
    module = types.ModuleType(protocols.STUDENT_MODULE)
    with _as_the_notebook(module):
        for compiled in code.compiled:
            exec(compiled, vars(module))
    return module


@contextlib.contextmanager
def _as_the_notebook(module):
    """``module`` where the call protocols look for the notebook's classes (``protocols.neighbour``)."""
    sys.modules[protocols.STUDENT_MODULE] = module
    try:
        yield
    finally:
        sys.modules.pop(protocols.STUDENT_MODULE, None)


@pytest.mark.parametrize("exercise", [pytest.param(e, marks=tiers.marks(e.name), id=e.name) for e in EXERCISES.values()])
def test_the_notebooks_solution_gives_the_references_output_on_every_case(exercise, request):
    if ASSIGNMENT_OF[exercise.name] == "07_real_model":
        request.getfixturevalue("smollm2_weights")
    module = _solved(ASSIGNMENT_OF[exercise.name])
    solution = getattr(module, exercise.definition)
    for case in (*exercise.made_cases(), *exercise.made_budget_cases()):
        with _as_the_notebook(module), protocols.watches.flash_kernels_refused(exercise.call.__name__):
            got = exercise.call(solution, case.in_float64())
        tolerance = exercise.tolerance(case.dtype)
        differs = _difference(got, reference_result(exercise, case), tolerance.atol / TIGHTER, tolerance.rtol / TIGHTER)
        assert differs is None, f"{case.label}: {differs}"


def _difference(got, want, atol: float, rtol: float, where: str = "the output") -> str | None:
    """Where ``got`` is not what the reference returned (``want``), or None."""
    if isinstance(want, types.SimpleNamespace):
        got, want = (vars(got) if isinstance(got, types.SimpleNamespace) else got), vars(want)
    if isinstance(want, dict):
        if not isinstance(got, dict) or got.keys() != want.keys():
            return f"{where}: {type(got).__name__}, not a dict of {sorted(want)}"
        return next((d for key in want if (d := _difference(got[key], want[key], atol, rtol, f"{where}[{key!r}]"))), None)
    if isinstance(want, (tuple, list)):
        if not isinstance(got, (tuple, list)) or len(got) != len(want):
            return f"{where}: {type(got).__name__}, not {len(want)} values"
        return next((d for i, (g, w) in enumerate(zip(got, want)) if (d := _difference(g, w, atol, rtol, f"{where}[{i}]"))),
                    None)
    if not isinstance(want, torch.Tensor):
        return None if got == want else f"{where}: {got!r}, not {want!r}"
    if not isinstance(got, torch.Tensor) or (got.shape, got.dtype) != (want.shape, want.dtype):
        said = f"{list(got.shape)} {got.dtype}" if isinstance(got, torch.Tensor) else type(got).__name__
        return f"{where}: {said}, not {list(want.shape)} {want.dtype}"
    if not want.is_floating_point():
        return None if torch.equal(got, want) else f"{where}: not equal"
    if torch.allclose(got.double(), want.double(), rtol=rtol, atol=atol, equal_nan=True):
        return None
    return f"{where}: {float((got.double() - want.double()).abs().max()):.3g} apart (atol {atol:g}, rtol {rtol:g})"

