"""The graders of 05 and 06 pass on correct student code, fail on the stubs and name seeded mistakes."""
import pytest

from autograder.engine.checks import (
    apply_output_gate,
    apply_partial_rope,
    gate_gradient,
    qwen35_attention,
    rope_cos_sin,
    split_query_gate,
    zero_centered_rms_norm,
)
from autograder.engine.judging import NOT_IMPLEMENTED, grade
from autograder.engine.student_code import Cell
from tests.student_code_gate_qwen35 import CORRECT, MISTAKES, notebook_code

EXERCISES = {m.EXERCISE.name: m.EXERCISE for m in (split_query_gate, apply_output_gate, gate_gradient,
                                                  zero_centered_rms_norm, rope_cos_sin, apply_partial_rope,
                                                  qwen35_attention)}


def _code(source: str):
    return [Cell("代码单元 #1", source)]


@pytest.mark.parametrize("name", CORRECT)
def test_correct_student_code_passes(name):
    verdict = grade(EXERCISES[name], _code(notebook_code()))
    assert verdict.passed, verdict.message


@pytest.mark.parametrize("name", CORRECT)
def test_stub_fails_as_not_implemented(name):
    kind = "class" if name[0].isupper() else "def"
    stub = (f"class {name}(nn.Module):\n    def __init__(self, *args, **kwargs):\n        super().__init__()\n"
            "        raise NotImplementedError()\n" if kind == "class" else
            f"def {name}(*args, **kwargs):\n    raise NotImplementedError()\n")
    verdict = grade(EXERCISES[name], _code(notebook_code({name: stub})))
    assert verdict.message == NOT_IMPLEMENTED


@pytest.mark.parametrize("name, named, source", MISTAKES, ids=[f"{m[0]}-{m[1]}" for m in MISTAKES])
def test_seeded_mistake_is_named(name, named, source):
    verdict = grade(EXERCISES[name], _code(notebook_code({name: source})))
    assert not verdict.passed
    assert named in verdict.message, verdict.message


def test_every_grader_has_a_seeded_mistake():
    assert {name for name, _, _ in MISTAKES} == set(CORRECT)
