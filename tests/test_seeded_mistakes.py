"""Each grader passes on correct student code, fails on the stubs, and names seeded mistakes."""
import pytest

from autograder.engine.assignments import ASSIGNMENTS, EXERCISES
from autograder.engine.judging import NOT_IMPLEMENTED, grade
from autograder.engine.student_code import Cell
from tests.student_code import CORRECT_01, MISTAKES_01, notebook_code


def _code(source: str):
    return [Cell("代码单元 #1", source)]


@pytest.mark.parametrize("exercise", ASSIGNMENTS["01_attention_basics"], ids=lambda e: e.name)
def test_correct_student_code_passes(exercise):
    verdict = grade(exercise, _code(notebook_code()))
    assert verdict.passed, verdict.message


@pytest.mark.parametrize("exercise", ASSIGNMENTS["01_attention_basics"], ids=lambda e: e.name)
def test_stub_fails_as_not_implemented(exercise):
    stub = f"def {exercise.name}(*args, **kwargs):\n    raise NotImplementedError()\n"
    verdict = grade(exercise, _code(notebook_code({exercise.name: stub})))
    assert not verdict.passed
    assert verdict.message == NOT_IMPLEMENTED


@pytest.mark.parametrize("name, named, source", MISTAKES_01, ids=lambda x: x if len(x) < 40 else None)
def test_seeded_mistake_is_named(name, named, source):
    verdict = grade(EXERCISES[name], _code(notebook_code({name: source})))
    assert not verdict.passed
    assert named in verdict.message, verdict.message
    assert named in verdict.mistake  # what a class's table of mistakes counts
    assert "用例：" in verdict.message


def test_stub_in_a_dependency_is_named():
    stub = "def masked_softmax(scores, mask=None):\n    raise NotImplementedError()\n"
    verdict = grade(EXERCISES["attention"], _code(notebook_code({"masked_softmax": stub})))
    assert not verdict.passed
    assert "`masked_softmax` 还没有实现" in verdict.summary


def test_every_grader_has_a_seeded_mistake():
    assert {name for name, _, _ in MISTAKES_01} == set(CORRECT_01)
