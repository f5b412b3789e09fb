"""Grades 04_rope_mla: the RoPE tables and rotation, the latent cache, multi-head latent attention (plain and
absorbed) and the size of its cache."""
import pytest

from autograder.engine.assignments import ASSIGNMENTS

ASSIGNMENT = "04_rope_mla"


@pytest.mark.parametrize("exercise", ASSIGNMENTS[ASSIGNMENT], ids=lambda e: e.name)
def test_exercise(exercise, grade):
    grade(ASSIGNMENT, exercise)
