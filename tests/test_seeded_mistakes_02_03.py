"""The graders of 02 and 03 pass on correct student code, fail on the stubs with the one-line message,
and name seeded mistakes, including seed 003's discarded ``masked_fill``."""
import pytest

from autograder.engine.assignments import ASSIGNMENTS
from autograder.engine.judging import NOT_IMPLEMENTED, grade
from autograder.engine.student_code import Cell
from tests import student_code_02, student_code_03

STUDENTS = {"02_multi_head": student_code_02, "03_gqa_kv_cache": student_code_03}
EXERCISES = [(student, exercise) for name, student in STUDENTS.items() for exercise in ASSIGNMENTS[name]]
MISTAKES = [(student, *mistake) for student in STUDENTS.values() for mistake in student.MISTAKES]


def _code(source: str):
    return [Cell("代码单元 #1", source)]


def _exercise(name: str):
    return next(e for _, e in EXERCISES if e.name == name)


@pytest.mark.parametrize("student, exercise", EXERCISES, ids=[e.name for _, e in EXERCISES])
def test_correct_student_code_passes(student, exercise):
    verdict = grade(exercise, _code(student.notebook_code()))
    assert verdict.passed, verdict.message


@pytest.mark.parametrize("student, exercise", EXERCISES, ids=[e.name for _, e in EXERCISES])
def test_stub_fails_as_not_implemented(student, exercise):
    verdict = grade(exercise, _code(student.notebook_code({exercise.name: student.STUBS[exercise.name]})))
    assert not verdict.passed
    assert verdict.message == NOT_IMPLEMENTED


@pytest.mark.parametrize("student, name, named, source", MISTAKES, ids=[f"{m[1]}-{m[2]}" for m in MISTAKES])
def test_seeded_mistake_is_named(student, name, named, source):
    verdict = grade(_exercise(name), _code(student.notebook_code({name: source})))
    assert not verdict.passed
    assert named in verdict.summary, verdict.message
    assert "用例：" in verdict.message


@pytest.mark.parametrize("module, dependency", [("MultiHeadAttention", "split_heads"),
                                                ("GroupedQueryAttention", "KVCache"),
                                                ("GroupedQueryAttention", "repeat_kv")])
def test_stub_in_a_dependency_is_named(module, dependency):
    student = next(s for s, e in EXERCISES if e.name == module)
    verdict = grade(_exercise(module), _code(student.notebook_code({dependency: student.STUBS[dependency]})))
    assert not verdict.passed
    assert f"`{dependency}` 还没有实现" in verdict.summary, verdict.message


def test_a_module_without_the_contracts_layers_is_told_which():
    source = student_code_02.CORRECT["MultiHeadAttention"].replace("hidden_size, bias=False)", "hidden_size)")
    code = _code(student_code_02.notebook_code({"MultiHeadAttention": source}))
    verdict = grade(_exercise("MultiHeadAttention"), code)
    assert not verdict.passed
    assert "多了 q_proj.bias" in verdict.summary and "bias=False" in verdict.summary, verdict.message


@pytest.mark.parametrize("student", STUDENTS.values(), ids=STUDENTS)
def test_every_grader_has_a_seeded_mistake(student):
    assert {name for name, _, _ in student.MISTAKES} == set(student.CORRECT) == set(student.STUBS)


def test_attention_flops_has_a_case_that_only_an_int_holds_exactly():
    """The float mistake is told by value, not only by type: some case's count lies beyond 2^53, where a float
    rounds it, and within int64, which the sandbox's report carries."""
    exercise = _exercise("attention_flops")
    counts = [exercise.reference(*case.args) for case in exercise.cases()]
    assert any(float(n) != n for n in counts)
    assert all(type(n) is int and n < 2**63 for n in counts)


def test_attention_flops_rejects_a_float_that_is_far_off():
    source = ("def attention_flops(batch, q_len, k_len, hidden_size, num_heads, num_kv_heads, head_dim):\n"
              "    return 1e20\n")
    verdict = grade(_exercise("attention_flops"), _code(student_code_03.notebook_code({"attention_flops": source})))
    assert not verdict.passed
    assert "期望 144，得到 1e+20" in verdict.message, verdict.message


@pytest.mark.parametrize("args, says", [((1, 5, 4, 64, 8, 2, 8), "k_len 4 < q_len 5"),
                                        ((1, 1, 1, 64, 8, 3, 8), "not a multiple")])
def test_attention_flops_reference_refuses_impossible_sizes(args, says):
    with pytest.raises(ValueError, match=says):
        _exercise("attention_flops").reference(*args)
