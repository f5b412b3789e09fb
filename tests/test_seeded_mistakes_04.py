"""The graders of 04 pass on correct student code, fail on the stubs with the one-line message, and name
seeded mistakes written independently of their catalogue."""
import pytest

from autograder.engine.assignments import ASSIGNMENTS
from autograder.engine.judging import NOT_IMPLEMENTED, grade
from autograder.engine.student_code import Cell
from tests import student_code_04 as student

EXERCISES = ASSIGNMENTS["04_rope_mla"]


def _code(source: str):
    return [Cell("代码单元 #1", source)]


def _exercise(name: str):
    return next(e for e in EXERCISES if e.name == name)


@pytest.mark.parametrize("exercise", EXERCISES, ids=[e.name for e in EXERCISES])
def test_correct_student_code_passes(exercise):
    verdict = grade(exercise, _code(student.notebook_code()))
    assert verdict.passed, verdict.message


@pytest.mark.parametrize("exercise", EXERCISES, ids=[e.name for e in EXERCISES])
def test_stub_fails_as_not_implemented(exercise):
    verdict = grade(exercise, _code(student.notebook_code({exercise.name: student.STUBS[exercise.name]})))
    assert not verdict.passed
    assert verdict.message == NOT_IMPLEMENTED


# Mistakes that stop the module before any output: the summary is the error, and the grader names the
# mistake on its own line of the details.
FAILS_TO_RUN = {"每个头各有一个 rope key"}  # kv_a_proj_with_mqa too wide: the contract's weights do not load


@pytest.mark.parametrize("name, named, source", student.MISTAKES, ids=[f"{m[0]}-{m[1]}" for m in student.MISTAKES])
def test_seeded_mistake_is_named(name, named, source):
    verdict = grade(_exercise(name), _code(student.notebook_code({name: source})))
    assert not verdict.passed
    if named in FAILS_TO_RUN:
        assert verdict.summary.startswith("运行出错"), verdict.message
        assert f"看起来是：{named}" in verdict.details, verdict.message
    else:
        assert named in verdict.summary, verdict.message
    assert "用例：" in verdict.message


def test_every_grader_has_a_seeded_mistake():
    assert {name for name, _, _ in student.MISTAKES} == set(student.CORRECT) == set(student.STUBS) \
        == {e.name for e in EXERCISES}
