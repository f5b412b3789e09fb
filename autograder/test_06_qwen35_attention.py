"""Grades 06_qwen35_attention: zero-centred RMSNorm, partial RoPE and the Qwen3.5 gated-attention layer."""
import pytest

from autograder.engine.assignments import ASSIGNMENTS

ASSIGNMENT = "06_qwen35_attention"


@pytest.mark.parametrize("exercise", ASSIGNMENTS[ASSIGNMENT], ids=lambda e: e.name)
def test_exercise(exercise, grade):
    grade(ASSIGNMENT, exercise)
