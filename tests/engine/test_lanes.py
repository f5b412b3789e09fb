"""Grading lanes (``autograder/engine/lanes.py``): two sandboxes grading one student's exercises at once, in any
order, give every verdict that one sandbox gives grading them in order, where an exercise fails on a base being
graded in the other lane too. A lane whose sandbox cannot start takes nothing; stopping drops what no lane has
taken, and stopping now kills a run nobody waits for; on two cores the second lane waits to be widened; a run in
one lane cannot stop the other."""
import graphlib
import time

import pytest

from autograder.engine import limits
from autograder.engine.assignments import ASSIGNMENTS, EXERCISES
from autograder.engine.grading import grade_cells, judge
from autograder.engine.lanes import Lanes
from autograder.engine.sandbox.client import Sandbox, SandboxError
from tests.presentations import graded_cells, student_blocks
from tests.sandboxes import started_without
from tests.students import a01, a03, a05

# A wrong base under exercises that build on it (attention and online softmax on masked_softmax, 05's gradient on
# the gate), the same in a layer (03's attention on repeat_kv), and correct code and a stub beside them.
NOTEBOOKS = {
    "01 masked_softmax wrong": (a01, {"masked_softmax": next(m[2] for m in a01.MISTAKES if m[0] == "masked_softmax")}),
    "03 repeat_kv wrong": (a03, {"repeat_kv": next(m[2] for m in a03.MISTAKES if m[0] == "repeat_kv")}),
    "05 gate wrong, gradient a stub": (a05, {
        "apply_output_gate": next(m[2] for m in a05.MISTAKES if m[0] == "apply_output_gate"),
        "gate_gradient": "def gate_gradient(*args, **kwargs):\n    raise NotImplementedError()\n"}),
}


def _cells(module, replace: dict):
    return graded_cells(student_blocks(module.layout(replace)))


def _key(verdict) -> tuple:
    return (verdict.exercise, verdict.points, verdict.summary, verdict.details, verdict.mistake, verdict.grader_problem)


def test_two_lanes_give_the_verdicts_of_one_sandbox_grading_in_order(sandbox):
    notebooks = {name: (module.ASSIGNMENT, _cells(module, replace)) for name, (module, replace) in NOTEBOOKS.items()}
    in_order = {name: [_key(v) for v in grade_cells(assignment, cells, sandbox)]
                for name, (assignment, cells) in notebooks.items()}
    assert any(verdict[4] for verdicts in in_order.values() for verdict in verdicts)  # some mistake is named
    assert any("masked_softmax" in verdict[2] for verdict in in_order["01 masked_softmax wrong"]
               if verdict[0] == "attention")  # an exercise told that its base fails
    second = Sandbox()
    second.hello()  # up before the lanes start, so that both take exercises from the first
    lanes, used = Lanes([sandbox, second], early=True), [sandbox.cpu_used_s, 0.0]
    try:
        # Last exercise first: a base is then often being graded in one lane while the other grades what builds on it.
        futures = {name: {exercise.name: lanes.submit(exercise, cells, name)
                          for exercise in reversed(ASSIGNMENTS[assignment])}
                   for name, (assignment, cells) in notebooks.items()}
        in_lanes = {name: [_key(got[e.name].result(timeout=300)) for e in ASSIGNMENTS[notebooks[name][0]]]
                    for name, got in futures.items()}
    finally:
        lanes.stop()
    assert in_lanes == in_order
    assert sandbox.cpu_used_s > used[0] and second.cpu_used_s > used[1]  # each lane graded some


def test_a_lane_whose_sandbox_cannot_start_takes_nothing_and_the_first_grades_it_all(sandbox):
    cells = _cells(a05, {})
    lanes = Lanes([sandbox, _CannotStart()], early=True)
    try:
        verdicts = [lanes.submit(e, cells, "05").result(timeout=120) for e in ASSIGNMENTS["05_output_gate"]]
    finally:
        lanes.stop()
    assert [(v.exercise, v.passed) for v in verdicts] == [(e.name, True) for e in ASSIGNMENTS["05_output_gate"]]


class _CannotStart(Sandbox):
    """A sandbox whose fork server cannot start, as where a host limit stops its torch import."""

    def start(self) -> None:
        pass

    def hello(self) -> dict:
        raise SandboxError("the sandbox could not start: MemoryError")


def test_stopping_drops_what_no_lane_has_taken_and_leaves_no_fork_server(sandbox):
    cells = _cells(a01, {})
    second = Sandbox()
    lanes = Lanes([sandbox, second], early=True)
    futures = [lanes.submit(e, cells, "01") for e in ASSIGNMENTS["01_attention_basics"] * 3]
    lanes.stop()
    assert any(f.cancelled() for f in futures)
    assert all(f.cancelled() or f.result().exercise for f in futures)
    assert second._process is None  # stopped, whether it had started or was still starting


def test_stopping_now_ends_a_run_in_progress_at_once():
    """What ``pytest autograder/`` does as it ends (Ctrl-C, ``-x``): a run nobody waits for any more, here a loop
    that would hold its lane until its CPU time is up (20 s), is killed, and no fork server is started again."""
    cells = _cells(a01, {"attention_scores": "def attention_scores(q, k):\n    while True:\n        pass\n"})
    boxes = [Sandbox(), Sandbox()]
    lanes = Lanes(boxes, early=True)
    loop = lanes.submit(EXERCISES["attention_scores"], cells, "01")
    deadline = time.monotonic() + 60
    while not loop.running() and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(1)  # the loop is running in its child
    started = time.monotonic()
    lanes.stop(now=True)
    assert time.monotonic() - started < limits.EXERCISE_TIMEOUT_S / 2
    assert loop.result(timeout=0).grader_problem
    assert all(box._process is None or box._process.poll() is not None for box in boxes)
    boxes[0].stop()


def test_the_exercises_an_exercise_builds_on_form_no_cycle():
    """What lets a lane grade an exercise's bases again on its own: a verdict then never depends on which exercise
    was graded first (a base that led back to the exercise being graded would not be consulted)."""
    graph = {name: [base for base in exercise.uses if base in EXERCISES] for name, exercise in EXERCISES.items()}
    assert all(base in EXERCISES for exercise in EXERCISES.values() for base in exercise.uses), "a base not in the course"
    tuple(graphlib.TopologicalSorter(graph).static_order())  # raises CycleError on a cycle


def test_on_two_cores_the_second_lane_starts_only_when_widened(sandbox):
    """Where the second fork server would start with the first on too few cores, it waits for ``widen`` (more than
    one assignment handed over) and grades from then on."""
    cells, second = _cells(a05, {}), Sandbox()
    lanes = Lanes([sandbox, second], early=False)
    try:
        lanes.start()
        first = lanes.submit(EXERCISES["split_query_gate"], cells, "05").result(timeout=120)
        assert first.passed and second._process is None
        lanes.widen()
        assert second._process is not None
        assert all(lanes.submit(e, cells, "05").result(timeout=120).passed for e in ASSIGNMENTS["05_output_gate"])
    finally:
        lanes.stop()


# Each run tries to stop or kill every process it can name: the other lane's fork server and run among them.
_KILL_EVERYONE = '''
import os, signal
def attention_scores(q, k):
    try:
        seen = [int(e) for e in os.listdir("/proc") if e.isdigit()]
    except OSError:  # Landlock hides /proc
        seen = []
    for pid in [-1, 1, os.getppid(), *seen]:
        if pid != os.getpid():
            for sig in (signal.SIGSTOP, signal.SIGKILL):
                try:
                    os.kill(pid, sig)
                except OSError:
                    pass
    return q @ k.transpose(-2, -1) / q.shape[-1] ** 0.5
'''


@pytest.mark.slow  # four fork servers started for it
@pytest.mark.parametrize("walls_off", [(), ("namespaces",)], ids=["all walls", "no namespaces"])
def test_a_run_in_one_lane_cannot_stop_the_other_lane(walls_off, sandbox):
    """Both lanes grade the same student's code at once; where a run could see the other lane's processes (no
    namespaces), seccomp and Landlock still keep its signals in, and every verdict is the one of one sandbox."""
    cells = graded_cells(student_blocks(a01.layout({"attention_scores": _KILL_EVERYONE})))
    boxes = [started_without(*walls_off), started_without(*walls_off)]
    lanes = Lanes(boxes, early=True)
    try:
        in_lanes = [_key(f.result(timeout=300)) for f in
                    [lanes.submit(e, cells, "01") for e in ASSIGNMENTS["01_attention_basics"] * 2]]
        assert all(judge(EXERCISES["causal_mask"], cells, box).passed for box in boxes)  # both still grade
    finally:
        lanes.stop()  # and the second sandbox
        boxes[0].stop()
    in_order = [_key(v) for v in grade_cells("01_attention_basics", cells, sandbox)]
    assert in_lanes == in_order * 2 and all(verdict[1] for verdict in in_order)

