"""Grades 05_output_gate: the per-head query/gate split, the sigmoid output gate and its gradient."""
import pytest

from autograder.engine.assignments import ASSIGNMENTS

ASSIGNMENT = "05_output_gate"


@pytest.mark.parametrize("exercise", ASSIGNMENTS[ASSIGNMENT], ids=lambda e: e.name)
def test_exercise(exercise, grade):
    grade(ASSIGNMENT, exercise)
