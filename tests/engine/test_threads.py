"""Grading from several threads at once, as the README allows (each thread with a sandbox of its own): every verdict
is the one a lone thread gives, and no grading step leaves anything changed behind it (a reference module's names,
torch's thread count). The call protocols record through hooks, profile functions and per-call objects of their own
thread, never through a module's globals."""
import functools
import threading

import pytest
import torch

import solutions.qwen35_attention
from autograder.engine.assignments import ASSIGNMENTS, EXERCISES
from autograder.engine.grading import grade_cells, judge
from autograder.engine.sandbox.client import Sandbox
from course import llama, protocols
from tests.notebooks import source_solutions
from tests.presentations import graded_cells, released_blocks

ROUNDS = 6


def _in_threads(work, args: tuple = (0, 1)) -> list:
    """``work(arg)`` for each of ``args``, each in a thread of its own, started together: what each returned, in
    order (what one raised is raised here)."""
    results, start = [None] * len(args), threading.Barrier(len(args))

    def run(i):
        start.wait()
        try:
            results[i] = work(args[i])
        except Exception as e:  # noqa: BLE001 - raised again in the test's own thread
            results[i] = e
    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(args))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    raised = [result for result in results if isinstance(result, Exception)]
    if raised:
        raise raised[0]
    return results


def _points(assignment: str, cells, sandbox) -> list[tuple[str, int]]:
    return [(v.exercise, v.points) for v in grade_cells(assignment, cells, sandbox)]


def test_layer_stages_are_recorded_in_their_own_thread_and_the_reference_module_is_left_as_it_was():
    """``call_layer`` on the reference, many times in two threads: each gets the stages of its own run only (as
    many as one run alone records), and the module's functions are still its own."""
    exercise = EXERCISES["Qwen35Attention"]
    case = exercise.cases()[0]
    names = dict(vars(solutions.qwen35_attention))
    alone = protocols.call_layer(exercise.reference, case)
    for _ in range(ROUNDS):
        for out, stages in _in_threads(lambda _: protocols.call_layer(exercise.reference, case)):
            # The same numbers up to rounding (a matrix product's last bits may follow its buffers' alignment).
            assert torch.allclose(out, alone[0], rtol=1e-5, atol=1e-6)
            assert {key: len(value) for key, value in stages.items()} == {key: len(v) for key, v in alone[1].items()}
            assert all(torch.allclose(a, b, rtol=1e-5, atol=1e-6) for key in stages
                       for a, b in zip(stages[key], alone[1][key]))
    assert dict(vars(solutions.qwen35_attention)) == names


def test_modules_built_in_another_thread_keep_their_parameters():
    """``parameters_on_meta`` (the reference's layers are built inside it) acts in its own thread only: a module
    built meanwhile elsewhere gets real parameters."""
    inside, outside = threading.Event(), threading.Event()

    def build(i):
        if i == 0:
            with llama.parameters_on_meta():
                inside.set()
                outside.wait(10)
                return torch.nn.Linear(2, 2).weight.is_meta
        inside.wait(10)
        try:
            return torch.nn.Linear(2, 2).weight.is_meta
        finally:
            outside.set()
    assert _in_threads(build) == [True, False]


@pytest.mark.slow  # two whole classes of notebooks, graded twice
def test_notebooks_graded_in_two_threads_at_once_get_the_verdicts_of_one_thread():
    """06 (the layer's stages), 07 (greedy and sampled generation through one cached model, torch's global
    generator) and 04 (modules built on meta), each thread with its own sandbox, several times over."""
    boxes = [Sandbox(), Sandbox()]
    threads_before = torch.get_num_threads()
    try:
        for assignment in ("06_qwen35_attention", "07_real_model", "04_rope_mla"):
            work = functools.partial(_points, assignment, graded_cells(released_blocks(assignment)))
            alone = work(boxes[0])
            assert [points for _, points in alone] == [e.points for e in ASSIGNMENTS[assignment]], alone
            for _ in range(2):
                assert _in_threads(work, boxes) == [alone, alone]
        wrong = functools.partial(judge, EXERCISES["Qwen35Attention"],
                                  graded_cells(released_blocks("06_qwen35_attention", {"Qwen35Attention": _HALF_SPLIT})))
        named = wrong(boxes[0])
        assert named.mistake, named.message
        for got in _in_threads(wrong, boxes):
            assert (got.points, got.mistake, got.details) == (named.points, named.mistake, named.details)
    finally:
        for box in boxes:
            box.stop()
    assert torch.get_num_threads() == threads_before


# Qwen3.5's query and gate taken as the first and second half of the whole projection, not per head.
_HALF_SPLIT = source_solutions("06_qwen35_attention")["Qwen35Attention"].replace(
    "query, gate = split_query_gate(self.q_proj(x), self.num_heads, self.head_dim)",
    "query, gate = (half.unflatten(-1, (self.num_heads, self.head_dim)) for half in self.q_proj(x).chunk(2, dim=-1))")
