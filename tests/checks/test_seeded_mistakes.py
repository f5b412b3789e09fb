"""Each grader passes on correct student code (more than one way of writing it), fails on the released stubs with
the one-line message, and names seeded mistakes written independently of its catalogue: the simulated students of
``tests/students``, every assignment, each graded as the cells of a real multi-cell notebook. 07's graders need the
real model's weights, which the test run fetches once (``tests/conftest.py``); without them, grading says so."""
import ast
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from autograder.engine.assignments import ASSIGNMENTS, EXERCISES, RECORDS
from autograder.engine.checks import qwen35_gated_deltanet, sampling_probs
from autograder.engine.grading import grade_notebook
from autograder.engine.judging import NOT_IMPLEMENTED, grade
from autograder.engine.sandbox import landlock
from autograder.scoreboard import Scoreboard
from course import smollm2
from course.stored_tensors import StoredTensors
from solutions import real_model
from tests import tiers
from tests.notebooks import filled, source_solutions, write_submission
from tests.students import ALL, a01, a02, a03, a08, notebook


def _id(module) -> str:
    return module.ASSIGNMENT[:2]


def _weights(module, request) -> None:
    """The weights the module's graders read (07's SmolLM2): fetched, or the test fails saying why."""
    if RECORDS[module.ASSIGNMENT].needs:
        request.getfixturevalue("smollm2_weights")


ANSWERS = [(m, name) for m in ALL for name in m.CORRECT]
# The other correct ways of writing a real-size exercise, and its seeded mistakes but the first, run in the full run.
OTHERS = [pytest.param(m, *other, marks=tiers.marks(other[0]), id=f"{_id(m)}-{other[0]}-{other[1]}")
          for m in ALL for other in m.OTHER_CORRECT]
MISTAKES = [pytest.param(m, *mistake, marks=tiers.beyond_the_first([mistake[0]], [[e[0]] for e in m.MISTAKES[:i]]),
                         id=f"{_id(m)}-{mistake[0]}-{mistake[1]}")
            for m in ALL for i, mistake in enumerate(m.MISTAKES)]


@pytest.mark.parametrize("module, name", ANSWERS, ids=[f"{_id(m)}-{name}" for m, name in ANSWERS])
def test_correct_student_code_passes(module, name, request):
    _weights(module, request)
    verdict = grade(EXERCISES[name], module.cells())
    assert verdict.passed, verdict.message


@pytest.mark.parametrize("module, name", ANSWERS, ids=[f"{_id(m)}-{name}" for m, name in ANSWERS])
def test_stub_fails_as_not_implemented(module, name, request):
    _weights(module, request)
    verdict = grade(EXERCISES[name], module.cells({name: module.STUBS[name]}))
    assert not verdict.passed
    assert verdict.message == NOT_IMPLEMENTED


@pytest.mark.parametrize("module, name, how, source", OTHERS)
def test_other_correct_code_passes(module, name, how, source, request):
    _weights(module, request)
    verdict = grade(EXERCISES[name], module.cells({name: source}))
    assert verdict.passed, verdict.message


# Mistakes that stop the code before any output: the summary is the error, and the grader names the mistake on
# its own line of the details.
RAISES = {
    ("causal_mask", "还没有 window 参数"),  # the call with window= fails
    ("online_softmax_attention", "一次算出了多于 block_size 个 key 的分数"),  # scores of more keys than a block
    ("MultiHeadLatentAttention", "每个头各有一个 rope key"),  # kv_a_proj_with_mqa too wide: the weights do not load
    ("chunked_gated_delta_rule", "没有按块计算"),  # a state per position: stopped before it is done
    ("Qwen35GatedDeltaNet", "输出 norm 的 weight 没有从 1 开始"),  # a fresh norm of the layer's class is looked at
    ("flash_attention_forward", "没有跳过"),  # stopped at the first tile more than the causal rule leaves
    ("flash_attention_forward", "比一块 [block_q, block_k] 更大"),  # a table of every key at once
    ("flash_attention_backward", "没有跳过"),
    # torch's CPU flash kernel, refused while these exercises are graded (protocols.REFUSING_FLASH)
    ("online_softmax_attention", "用了 torch 自带的 flash attention"),
    ("flash_attention_forward", "用了 torch 自带的 flash attention"),
    ("FlashAttention", "梯度个数"),  # autograd refuses the backward's answer
    ("FlashAttention", "更大的表"),  # its backward stopped at the whole table
}


@pytest.mark.parametrize("module, name, named, source", MISTAKES)
def test_seeded_mistake_is_named(module, name, named, source, request):
    _weights(module, request)
    verdict = grade(EXERCISES[name], module.cells({name: source}))
    assert not verdict.passed
    if (name, named) in RAISES:
        assert verdict.summary.startswith("运行出错"), verdict.message
        assert f"看起来是：{verdict.mistake}" in verdict.details, verdict.message
    else:
        assert named in verdict.summary, verdict.message
    assert named in verdict.mistake, verdict.message  # what a class's table of mistakes counts
    assert "用例：" in verdict.message


# Exercises of earlier assignments that a notebook provides and its student wrote again, graded as their own.
WRITTEN_AGAIN = {"06_qwen35_attention": ["rope_cos_sin"]}


@pytest.mark.parametrize("module", ALL, ids=_id)
def test_every_grader_has_a_seeded_mistake(module):
    own = [e.name for e in ASSIGNMENTS[module.ASSIGNMENT]]
    assert {name for name, _, _ in module.MISTAKES} == set(module.CORRECT) == set(module.STUBS)
    assert sorted(module.CORRECT) == sorted(own + WRITTEN_AGAIN.get(module.ASSIGNMENT, []))
    assert [name for name in module.CORRECT if name in own] == own  # in notebook order
    assert all(name in EXERCISES for name in module.CORRECT)
    assert all(name in module.CORRECT for name, _, _ in module.OTHER_CORRECT)


@pytest.mark.parametrize("module", ALL, ids=_id)
def test_every_students_notebook_is_written_as_notebooks_are(module):
    """One definition per answer cell, some import in a cell below the first that uses it, an answer's helpers after
    the definition that calls them; and the cells, run from the top, define every answer, as the one cell does."""
    pieces = module.layout()
    assert pieces[0].role == "imports" and len(pieces) > len(module.CORRECT)
    for piece in pieces:
        if piece.role == "answer":
            assert len([n for n in ast.parse(piece.source).body if isinstance(n, ast.ClassDef | ast.FunctionDef)]) == 1
    late = [i for i, p in enumerate(pieces) if p.role == "given" and p.source.startswith(("import ", "from "))]
    assert late and all(i > 1 for i in late)
    space, one = {}, {}
    for cell in module.cells():
        exec(compile(cell.source, cell.label, "exec"), space)
    exec(compile(module.source(), "one cell", "exec"), one)
    assert {k for k in space if not k.startswith("__")} == {k for k in one if not k.startswith("__")}


def test_helpers_come_after_their_callers():
    pieces = [p.source for p in notebook.layout(a08.HEADER, a08.CORRECT)]
    first = {name: next(i for i, s in enumerate(pieces) if f"class {name}(" in s)
             for name in ("Qwen35GatedDeltaNet", "GatedNorm")}
    assert first["Qwen35GatedDeltaNet"] < first["GatedNorm"]


# --- 01 -------------------------------------------------------------------------------------------------------

def test_stub_in_a_dependency_is_named():
    verdict = grade(EXERCISES["attention"], a01.cells({"masked_softmax": a01.STUBS["masked_softmax"]}))
    assert not verdict.passed
    assert "`masked_softmax` 还没有实现" in verdict.summary


# --- 02 and 03 ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("module, name, dependency", [(a02, "MultiHeadAttention", "split_heads"),
                                                      (a03, "GroupedQueryAttention", "KVCache"),
                                                      (a03, "GroupedQueryAttention", "repeat_kv")])
def test_stub_in_a_dependency_of_a_module_is_named(module, name, dependency):
    verdict = grade(EXERCISES[name], module.cells({dependency: module.STUBS[dependency]}))
    assert not verdict.passed
    assert f"`{dependency}` 还没有实现" in verdict.summary, verdict.message


def test_a_module_without_the_contracts_layers_is_told_which():
    source = a02.CORRECT["MultiHeadAttention"].replace("hidden_size, bias=False)", "hidden_size)")
    verdict = grade(EXERCISES["MultiHeadAttention"], a02.cells({"MultiHeadAttention": source}))
    assert not verdict.passed
    assert "多了 q_proj.bias" in verdict.summary and "bias=False" in verdict.summary, verdict.message


def test_attention_flops_has_a_case_that_only_an_int_holds_exactly():
    """The float mistake is told by value, not only by type: some case's count lies beyond 2^53, where a float
    rounds it, and within int64, which the sandbox's report carries."""
    exercise = EXERCISES["attention_flops"]
    counts = [exercise.reference(*case.args) for case in exercise.cases()]
    assert any(float(n) != n for n in counts)
    assert all(type(n) is int and n < 2**63 for n in counts)


def test_attention_flops_rejects_a_float_that_is_far_off():
    source = ("def attention_flops(batch, q_len, k_len, hidden_size, num_heads, num_kv_heads, head_dim):\n"
              "    return 1e20\n")
    verdict = grade(EXERCISES["attention_flops"], a03.cells({"attention_flops": source}))
    assert not verdict.passed
    assert "期望 144，得到 1e+20" in verdict.message, verdict.message


@pytest.mark.parametrize("args, says", [((1, 5, 4, 64, 8, 2, 8), "k_len 4 < q_len 5"),
                                        ((1, 1, 1, 64, 8, 3, 8), "not a multiple")])
def test_attention_flops_reference_refuses_impossible_sizes(args, says):
    with pytest.raises(ValueError, match=says):
        EXERCISES["attention_flops"].reference(*args)


# --- 07 -------------------------------------------------------------------------------------------------------

# The exercises of 07 whose cases run the real model; sampling_probs is graded on logits of its own.
READS_THE_MODEL = {"LlamaAttention", "greedy_generate", "sample_generate"}


def test_without_the_weights_07_is_the_graders_problem_and_the_rest_grades(tmp_path, monkeypatch, sandbox):
    """No weights in the cache (and none to fetch): 07's graders that run the model say how to get them, marked
    as the grader's problem (⚠), never as the student's mistake; the rest of 07, and another assignment graded
    alongside, grade as usual."""
    monkeypatch.setenv("ATTENTION_COURSE_CACHE", str(tmp_path / "empty-cache"))  # where the graders look
    board = Scoreboard()
    for assignment in ("01_attention_basics", "07_real_model"):
        notebook_path = write_submission(tmp_path / "class", filled(source_solutions(assignment), assignment), assignment)
        for verdict in grade_notebook(notebook_path, sandbox=sandbox):
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
    verdict = grade(EXERCISES["attention_scores"], a01.cells({"attention_scores": probe}))
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


# --- 08 -------------------------------------------------------------------------------------------------------

def test_every_named_mistake_of_08_has_a_seeded_test():
    seeded = {(name, named) for name, named, _ in a08.MISTAKES}
    for exercise in ASSIGNMENTS["08_gated_deltanet"]:
        for mistake in exercise.mistakes:
            assert any(name == exercise.name and named in mistake.name for name, named in seeded), mistake.name


def test_the_real_size_layer_is_named_by_file_and_a_file_the_sandbox_cannot_read_is_the_graders_problem(tmp_path):
    """The layer of Qwen3.5's size is not carried into the job: the sandbox reads it from the course's cache. Where
    a job names a file outside what the sandbox may read (here a copy in a temporary folder), the exercise is the
    grader's problem, never the student's mistake."""
    layer = EXERCISES["Qwen35GatedDeltaNet"]
    real_size = qwen35_gated_deltanet.cases()[-1]
    stored = real_size.args[1]
    assert isinstance(stored, StoredTensors)
    assert grade(layer, a08.cells()).passed
    copy = tmp_path / "layer-0.safetensors"
    copy.write_bytes(Path(stored.entries[0][1]).read_bytes())
    moved = replace(real_size, args=(real_size.args[0], StoredTensors(tuple((name, str(copy), key)
                                                                            for name, _, key in stored.entries)),
                                     real_size.args[2]))
    verdict = grade(replace(layer, cases=lambda: [moved]), a08.cells())
    assert verdict.grader_problem and "缓存" in verdict.message, verdict.message
