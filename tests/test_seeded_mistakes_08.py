"""The graders of 08 pass on correct student code (more than one way of writing it), fail on the stubs with the
one-line message, and name seeded mistakes written independently of their catalogue."""
from dataclasses import replace
from pathlib import Path

import pytest

from autograder.engine.assignments import ASSIGNMENTS
from autograder.engine.checks import qwen35_gated_deltanet
from autograder.engine.judging import NOT_IMPLEMENTED, grade
from autograder.engine.student_code import Cell
from course.stored_tensors import StoredTensors
from tests import student_code_08 as student

EXERCISES = ASSIGNMENTS["08_gated_deltanet"]


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


@pytest.mark.parametrize("name, how, source", student.OTHER_CORRECT, ids=[f"{m[0]}-{m[1]}" for m in student.OTHER_CORRECT])
def test_other_correct_code_passes(name, how, source):
    verdict = grade(_exercise(name), _code(student.notebook_code({name: source})))
    assert verdict.passed, verdict.message


@pytest.mark.parametrize("name, named, source", student.MISTAKES, ids=[f"{m[0]}-{m[1]}" for m in student.MISTAKES])
def test_seeded_mistake_is_named(name, named, source):
    verdict = grade(_exercise(name), _code(student.notebook_code({name: source})))
    assert not verdict.passed
    assert named in verdict.message, verdict.message
    assert named in verdict.mistake
    assert "用例：" in verdict.message


def test_every_grader_has_a_seeded_mistake():
    assert {name for name, _, _ in student.MISTAKES} == set(student.CORRECT) == set(student.STUBS) \
        == {e.name for e in EXERCISES}


def test_every_named_mistake_has_a_seeded_test():
    seeded = {(name, named) for name, named, _ in student.MISTAKES}
    for exercise in EXERCISES:
        for mistake in exercise.mistakes:
            assert any(name == exercise.name and named in mistake.name for name, named in seeded), mistake.name


def test_the_real_size_layer_is_named_by_file_and_a_file_the_sandbox_cannot_read_is_the_graders_problem(tmp_path):
    """The layer of Qwen3.5's size is not carried into the job: the sandbox reads it from the course's cache. Where
    a job names a file outside what the sandbox may read (here a copy in a temporary folder), the exercise is the
    grader's problem, never the student's mistake."""
    real_size = qwen35_gated_deltanet.cases()[-1]
    stored = real_size.args[1]
    assert isinstance(stored, StoredTensors)
    assert grade(_exercise("Qwen35GatedDeltaNet"), _code(student.notebook_code())).passed
    copy = tmp_path / "layer-0.safetensors"
    copy.write_bytes(Path(stored.entries[0][1]).read_bytes())
    moved = replace(real_size, args=(real_size.args[0], StoredTensors(tuple((name, str(copy), key)
                                                                            for name, _, key in stored.entries)),
                                     real_size.args[2]))
    exercise = replace(_exercise("Qwen35GatedDeltaNet"), cases=lambda: [moved])
    verdict = grade(exercise, _code(student.notebook_code()))
    assert verdict.grader_problem and "缓存" in verdict.message, verdict.message
