"""Grades 09_flash_attention: FlashAttention-2 tile by tile, its forward pass (with the log-sum-exp), its backward
pass (recomputing each tile from the log-sum-exp) and the autograd Function that joins them."""
import pytest

from autograder.engine.assignments import ASSIGNMENTS

ASSIGNMENT = "09_flash_attention"


@pytest.mark.parametrize("exercise", ASSIGNMENTS[ASSIGNMENT], ids=lambda e: e.name)
def test_exercise(exercise, grade):
    grade(ASSIGNMENT, exercise)
