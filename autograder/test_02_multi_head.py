"""Grades 02_multi_head: split and merge heads, and multi-head attention with o_proj."""
import pytest

from autograder.engine.assignments import ASSIGNMENTS

ASSIGNMENT = "02_multi_head"


@pytest.mark.parametrize("exercise", ASSIGNMENTS[ASSIGNMENT], ids=lambda e: e.name)
def test_exercise(exercise, grade):
    grade(ASSIGNMENT, exercise)
