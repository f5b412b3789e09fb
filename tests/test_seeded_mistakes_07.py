"""The graders of 07 pass on correct student code (more than one way of writing it), fail on the stubs with the
one-line message, and name seeded mistakes written independently of their catalogue. They need the real
model's weights, which the test run fetches once (``tests/conftest.py``); without them, grading says so."""
import pytest
import torch

from autograder.engine.assignments import ASSIGNMENTS
from autograder.engine.checks import sampling_probs
from autograder.engine.grading import grade_notebook
from autograder.engine.judging import NOT_IMPLEMENTED, grade
from autograder.engine.sandbox import landlock
from autograder.engine.student_code import Cell
from autograder.scoreboard import Scoreboard
from course import smollm2
from solutions import real_model
from tests import student_code as student_01
from tests import student_code_07 as student
from tests.notebooks import filled, source_solutions, write_submission

EXERCISES = ASSIGNMENTS["07_real_model"]


def _code(source: str):
    return [Cell("代码单元 #1", source)]


def _exercise(name: str):
    return next(e for e in EXERCISES if e.name == name)


@pytest.mark.parametrize("exercise", EXERCISES, ids=[e.name for e in EXERCISES])
def test_correct_student_code_passes(exercise, smollm2_weights):
    verdict = grade(exercise, _code(student.notebook_code()))
    assert verdict.passed, verdict.message


@pytest.mark.parametrize("exercise", EXERCISES, ids=[e.name for e in EXERCISES])
def test_stub_fails_as_not_implemented(exercise, smollm2_weights):
    verdict = grade(exercise, _code(student.notebook_code({exercise.name: student.STUBS[exercise.name]})))
    assert not verdict.passed
    assert verdict.message == NOT_IMPLEMENTED


@pytest.mark.parametrize("name, how, source", student.OTHER_CORRECT, ids=[f"{m[0]}-{m[1]}" for m in student.OTHER_CORRECT])
def test_other_correct_code_passes(name, how, source, smollm2_weights):
    verdict = grade(_exercise(name), _code(student.notebook_code({name: source})))
    assert verdict.passed, verdict.message


@pytest.mark.parametrize("name, named, source", student.MISTAKES, ids=[f"{m[0]}-{m[1]}" for m in student.MISTAKES])
def test_seeded_mistake_is_named(name, named, source, smollm2_weights):
    verdict = grade(_exercise(name), _code(student.notebook_code({name: source})))
    assert not verdict.passed
    assert named in verdict.summary, verdict.message
    assert "用例：" in verdict.message


def test_every_grader_has_a_seeded_mistake():
    assert {name for name, _, _ in student.MISTAKES} == set(student.CORRECT) == set(student.STUBS) \
        == {e.name for e in EXERCISES}


# The exercises of 07 whose cases run the real model; sampling_probs is graded on logits of its own.
READS_THE_MODEL = {"LlamaAttention", "greedy_generate", "sample_generate"}


def test_without_the_weights_07_is_the_graders_problem_and_the_rest_grades(tmp_path, monkeypatch, sandbox):
    """No weights in the cache (and none to fetch): 07's graders that run the model say how to get them, marked
    as the grader's problem (⚠), never as the student's mistake; the rest of 07, and another assignment graded
    alongside, grade as usual."""
    monkeypatch.setenv("ATTENTION_COURSE_CACHE", str(tmp_path / "empty-cache"))  # where the graders look
    board = Scoreboard()
    for assignment in ("01_attention_basics", "07_real_model"):
        notebook = write_submission(tmp_path / "class", filled(source_solutions(assignment), assignment), assignment)
        for verdict in grade_notebook(notebook, sandbox=sandbox):
            board.add(assignment, verdict)
    for verdict in board.verdicts["07_real_model"]:
        if verdict.exercise not in READS_THE_MODEL:
            assert verdict.passed, verdict
            continue
        assert verdict.points == 0 and verdict.grader_problem and "评分环境出了问题" in verdict.message, verdict
        assert "course-weights smollm2" in verdict.message
    assert all(v.passed for v in board.verdicts["01_attention_basics"])
    table = "\n".join(board.table())
    assert table.count("⚠") == len(READS_THE_MODEL) and "Traceback" not in table


@pytest.mark.skipif(landlock.abi_version() < 1, reason="needs Landlock: without it the sandbox reads every file")
def test_the_sandbox_may_read_the_converted_model_and_nothing_else_of_the_cache(smollm2_weights):
    """Graders of 07 load the model where it is, so the sandbox may read that folder; the rest of the course's
    cache (the folder above it) stays closed. The probe earns the points only when both
    hold (with Landlock; without it, everything is readable and the probe says so by failing)."""
    granted, closed = smollm2_weights / "config.json", [smollm2.home()]
    probe = f'''
def attention_scores(q, k):
    import os
    def readable(path):
        try:
            os.listdir(path) if os.path.isdir(path) else open(path, "rb").read(1)
            return True
        except OSError:
            return False
    ok = readable({str(granted)!r}) and not any(readable(p) for p in {[str(p) for p in closed]!r})
    return (q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])) if ok else q.sum() * 0
'''
    scores = next(e for e in ASSIGNMENTS["01_attention_basics"] if e.name == "attention_scores")
    verdict = grade(scores, _code(student_01.notebook_code({"attention_scores": probe})))
    assert verdict.passed, verdict.message


def test_no_sampling_case_has_a_boundary_that_rounding_could_move():
    """``sampling_probs`` leaves ties undefined, so no case may have one at its top-k or top-p boundary, nor a
    boundary so close to a probability that the case's own dtype could move it: the reference keeps the same
    tokens in that dtype as in float64, the k-th and (k+1)-th probabilities differ by more than 0.1%, and the
    mass before each token is at least 4e-4 away from p (0.04 in bfloat16)."""
    for case in sampling_probs.cases():
        (logits,), options = case.in_float64().args, case.kwargs
        kept = real_model.sampling_probs(*case.args, **options) != 0
        assert torch.equal(kept, real_model.sampling_probs(logits, **options) != 0), case.label
        probs, top_k, top_p = torch.softmax(logits / options["temperature"], dim=-1), options["top_k"], options["top_p"]
        if top_k is not None and top_k < probs.shape[-1]:
            pair = probs.topk(top_k + 1, dim=-1).values[:, -2:]
            assert ((pair[:, 0] - pair[:, 1]) / pair[:, 0]).min() > 1e-3, case.label
            probs = real_model.sampling_probs(logits, options["temperature"], top_k)
        if top_p is not None and top_p < 1:
            ranked = probs.sort(dim=-1, descending=True).values
            margin = (ranked.cumsum(dim=-1) - ranked - top_p).abs().min()
            assert margin >= (0.04 if case.dtype == torch.bfloat16 else 4e-4), case.label


def test_the_hand_case_is_what_its_labels_say():
    hand = sampling_probs.HAND
    assert torch.allclose(torch.softmax(hand[0], dim=-1), torch.tensor([0.563, 0.207, 0.126, 0.076, 0.028]), atol=5e-4)
    assert (real_model.sampling_probs(hand, top_p=0.6) > 0).sum(dim=-1).tolist() == [2, 1, 1]
    assert (real_model.sampling_probs(hand, top_k=2) > 0).sum(dim=-1).tolist() == [2, 2, 2]


def test_sampling_probs_refuses_bad_options():
    logits = torch.zeros(1, 4)
    for bad in ({"temperature": 0.0}, {"top_k": 0}, {"top_p": 0.0}, {"top_p": 1.5}):
        with pytest.raises(ValueError):
            real_model.sampling_probs(logits, **bad)
