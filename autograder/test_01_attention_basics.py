"""Grades 01_attention_basics: scores, masks, softmax and the weighted sum."""
import pytest

from autograder.engine.assignments import ASSIGNMENTS

ASSIGNMENT = "01_attention_basics"


@pytest.mark.parametrize("exercise", ASSIGNMENTS[ASSIGNMENT], ids=lambda e: e.name)
def test_exercise(exercise, grade):
    grade(ASSIGNMENT, exercise)
