"""Grades 03_gqa_kv_cache: the KV cache, repeat_kv, grouped-query attention and the size of the cache."""
import pytest

from autograder.engine.assignments import ASSIGNMENTS

ASSIGNMENT = "03_gqa_kv_cache"


@pytest.mark.parametrize("exercise", ASSIGNMENTS[ASSIGNMENT], ids=lambda e: e.name)
def test_exercise(exercise, grade):
    grade(ASSIGNMENT, exercise)
