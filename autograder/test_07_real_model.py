"""Grades 07_real_model: Llama's attention on random and real SmolLM2 weights, greedy and sampled generation through
the student's KV cache in the real model, the sampling distribution and the repetition penalties."""
import pytest

from autograder.engine.assignments import ASSIGNMENTS

ASSIGNMENT = "07_real_model"


@pytest.mark.parametrize("exercise", ASSIGNMENTS[ASSIGNMENT], ids=lambda e: e.name)
def test_exercise(exercise, grade):
    grade(ASSIGNMENT, exercise)
