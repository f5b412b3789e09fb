"""A verdict never depends on the machine: the student's time is CPU time. A run the machine starves is tried again
and then is the grader's problem, never the student's infinite loop; an infinite loop is the student's however busy
the machine. The load comes from CPU hogs of the tests' own, each bounded in time and killed afterwards."""
import contextlib
import os
import subprocess
import sys
import time

import pytest

from autograder.engine import limits
from autograder.engine.assignments import ASSIGNMENTS, EXERCISES
from autograder.engine.grading import OUT_OF_WALL, grade_cells
from autograder.engine.judging import grade
from autograder.engine.sandbox.client import Sandbox
from autograder.engine.student_code import Cell
from tests.presentations import graded_cells, released_blocks

HOG = "import time\nend = time.monotonic() + {seconds}\nwhile time.monotonic() < end:\n    pass\n"
LOOP = "def attention_scores(q, k):\n    while True:\n        pass\n"
SLEEP = "import time\n\n\ndef attention_scores(q, k):\n    time.sleep(60)\n"
CAN_PIN = hasattr(os, "sched_setaffinity")


@contextlib.contextmanager
def hogs(count: int, cpu: int | None = None, seconds: float = 300):
    """``count`` processes spinning for at most ``seconds``, on the core ``cpu`` alone where given."""
    pin = (lambda: os.sched_setaffinity(0, {cpu})) if cpu is not None else None
    spinning = [subprocess.Popen([sys.executable, "-c", HOG.format(seconds=seconds)], preexec_fn=pin)
                for _ in range(count)]
    try:
        time.sleep(0.5)  # running before the graded code starts
        yield
    finally:
        for hog in spinning:
            hog.kill()
            hog.wait()


@contextlib.contextmanager
def sandbox_on(cpu: int):
    """A fork server, and so every run it forks, on the core ``cpu`` alone (the grader stays where it was)."""
    before = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {cpu})
    try:
        box = Sandbox()
        box.start()
    finally:
        os.sched_setaffinity(0, before)
    try:
        box.hello()
        yield box
    finally:
        box.stop()


def test_a_run_that_does_not_get_the_cpu_is_tried_again_then_is_the_graders_problem(sandbox):
    """Code that sleeps uses no CPU, as code on a starved machine gets none: the wall clock stops it twice, and the
    verdict says the machine was too busy, with the figures, never that the code loops forever."""
    start = time.monotonic()
    verdict = grade(EXERCISES["attention_scores"], [Cell("代码单元 #1", SLEEP)], sandbox, timeout_s=0.5)
    assert time.monotonic() - start >= limits.first_wall_s(0.5) + limits.retry_wall_s(0.5)  # both runs
    assert verdict.grader_problem and verdict.points == 0
    assert "机器太忙" in verdict.summary and "CPU 时间（可以用 0.5 秒）" in verdict.summary, verdict.message
    assert "死循环" not in verdict.message


@pytest.mark.slow  # a run that uses up its CPU time beside hogs
@pytest.mark.skipif(not CAN_PIN, reason="needs sched_setaffinity to share one core with the hogs")
def test_an_infinite_loop_on_a_shared_core_is_still_the_students():
    """Sharing its core with a hog (and whatever else runs there), the loop gets half of it or less: about enough to
    use up 2 s of CPU before the first wall clock (4 s), and enough on the second try (10 s) down to a fifth of the
    core. The verdict is the student's, as on an idle machine."""
    cpu = min(os.sched_getaffinity(0))
    with sandbox_on(cpu) as box, hogs(1, cpu):
        verdict = grade(EXERCISES["attention_scores"], [Cell("代码单元 #1", LOOP)], box, timeout_s=2)
    assert not verdict.grader_problem, verdict.message
    assert verdict.summary.startswith("运行超过 2 秒 CPU 时间，被停止了"), verdict.message


@pytest.mark.slow  # waits out a notebook's wall-clock cap
def test_a_class_notebook_that_takes_too_long_on_the_wall_clock_is_the_graders_problem(sandbox):
    """Under a cap of 1.2 s of CPU, the first exercise sleeps through both its runs (3.2 s and 6 s of wall time),
    using almost none of it: the notebook has taken longer than 5 times its cap, so the exercises left are not
    graded, and not the student's zeros."""
    verdicts = grade_cells("01_attention_basics", [Cell("代码单元 #1", SLEEP)], sandbox, cap_s=1.2)
    assert all(v.grader_problem and v.points == 0 for v in verdicts), [v.message for v in verdicts]
    assert [OUT_OF_WALL[:6] in v.summary for v in verdicts] == [False] + [True] * (len(verdicts) - 1)


@contextlib.contextmanager
def on_core(cpu: int):
    """This process, and what it starts meanwhile, on the core ``cpu`` alone."""
    before = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {cpu})
    try:
        yield
    finally:
        os.sched_setaffinity(0, before)


@pytest.mark.slow
@pytest.mark.skipif(not CAN_PIN, reason="needs sched_setaffinity to share one core with the hogs")
def test_correct_07_and_08_answers_pass_on_a_core_shared_with_two_hogs():
    """The grader, its fork server and every run on one core with two hogs: a third of the core each at most, a
    load of twice the core's worth besides the grading (the other cores stay free for the rest of the suite)."""
    cpu = min(os.sched_getaffinity(0))
    with on_core(cpu), sandbox_on(cpu) as box, hogs(2, cpu):
        for assignment in ("07_real_model", "08_gated_deltanet"):
            cells = graded_cells(released_blocks(assignment), f"{assignment}.ipynb")
            verdicts = grade_cells(assignment, cells, box)
            assert [v.exercise for v in verdicts if not v.passed] == [], [v.message for v in verdicts]
        loop = grade(EXERCISES["attention_scores"], [Cell("代码单元 #1", LOOP)], box, timeout_s=2)
    assert not loop.grader_problem and loop.summary.startswith("运行超过 2 秒 CPU 时间"), loop.message
    assert len(verdicts) == len(ASSIGNMENTS["08_gated_deltanet"])
