"""Grades 08_gated_deltanet: linear attention (parallel and recurrent), the delta rule and its gated and chunked
forms, the depthwise causal conv and Qwen3.5's Gated DeltaNet layer."""
import pytest

from autograder.engine.assignments import ASSIGNMENTS

ASSIGNMENT = "08_gated_deltanet"


@pytest.mark.parametrize("exercise", ASSIGNMENTS[ASSIGNMENT], ids=lambda e: e.name)
def test_exercise(exercise, grade):
    grade(ASSIGNMENT, exercise)
