"""Grading one student's exercises in two sandboxes at once, for ``pytest autograder/``: where the machine has the
cores, 07's greedy decoding (two seconds of real-model runs) no longer holds up the six exercises after it, and a
whole course's notebooks are graded two exercises at a time.

Each lane is a thread with a fork server of its own; they take exercises from one queue, in the order given. A
verdict is a function of the exercise and the code alone, whichever lane gives it and whatever it graded before:
an exercise consults the ones it builds on (``Exercise.uses``, which form no cycle) only when it fails, and each
lane keeps the verdicts it has given in dictionaries of its own, so a dependency may be graded twice, never
differently. Only for grading without a CPU cap per notebook: under a cap (``course-grade``, Gradescope), what
is left for an exercise depends on what ran before it, so those grade one exercise after another.
"""
import contextlib
import os
import queue
import threading
from concurrent.futures import Future
from typing import TYPE_CHECKING

from autograder.engine.sandbox.client import Sandbox, shared

if TYPE_CHECKING:
    from autograder.engine.model import Exercise, Verdict

# Two lanes: a third would only add a fork server's start, since 07's greedy decoding alone sets the critical path.
MOST_LANES = 2
# From this many cores the second fork server starts with the first, as the plugin loads: its torch import then
# overlaps the grader's own on a core of its own. On two cores three torch imports at once cost more than the
# second lane saves, and started as the exercises are handed over it pays off only where they hold seconds of
# runs (paired runs, wall time against one lane: a solved 07 0.86x, all nine solved 0.86x, 01 alone 1.11x), so
# it starts once ``widen`` is told so (``pytest autograder/``: more than one assignment, or a real model's).
CORES_TO_START_EARLY = 3
_DONE = None
# Set to 1 or 2, the number of lanes whatever the cores, all started with the first (a grader that shares its
# machine, a test of two lanes).
LANES_ENV = "ATTENTION_COURSE_LANES"


def cores() -> int:
    """The cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def _asked() -> int | None:
    """The number of lanes ``LANES_ENV`` asks for (None when it is unset)."""
    said = os.environ.get(LANES_ENV, "").strip()
    if not said:
        return None
    if not (said.isdigit() and 1 <= int(said) <= MOST_LANES):
        raise ValueError(f"{LANES_ENV}={said!r}: give a whole number from 1 to {MOST_LANES}, or leave it unset")
    return int(said)


def lane_count() -> int:
    """The lanes worth running here: two where this process may use two cores, else one; or as many as
    ``LANES_ENV`` says (1 to ``MOST_LANES``)."""
    asked = _asked()
    return min(MOST_LANES, cores()) if asked is None else asked


def start_early() -> bool:
    """Whether every lane starts with the first: where there are ``CORES_TO_START_EARLY`` cores, or where
    ``LANES_ENV`` asks for more than one lane."""
    asked = _asked()
    return cores() >= CORES_TO_START_EARLY if asked is None else asked > 1


class Lanes:
    """Threads that grade the exercises handed to ``submit``, one per sandbox of ``sandboxes``: by default the
    process's shared one, and another where the machine has the cores (``lane_count``). Where ``start_early``
    (or ``early``) says so, every lane starts with the first, at ``start`` or the first ``submit``; otherwise the
    first lane alone does, and the others once ``widen`` says the work is worth their start."""

    def __init__(self, sandboxes: "list[Sandbox] | None" = None, early: bool | None = None):
        self._sandboxes = sandboxes or [shared(), *(Sandbox() for _ in range(lane_count() - 1))]
        self._early = start_early() if early is None else early
        self._queue: queue.Queue = queue.Queue()
        self._threads: list[threading.Thread] = []  # one per lane opened so far, the first lanes first
        self._greeted: list[threading.Event] = []  # set once that lane's sandbox has answered, or failed to
        self._first_ok = False  # whether the first lane's sandbox answered (read once its lane is greeted)

    def start(self) -> None:
        """Start the fork servers of the lanes that start with the first, without waiting for them."""
        for sandbox in self._sandboxes if self._early else self._sandboxes[:1]:
            sandbox.start()

    def submit(self, exercise: "Exercise", cells, notebook: str) -> "Future[Verdict]":
        """The verdict on ``exercise`` for ``cells``, the code of the notebook ``notebook`` (verdicts are kept per
        notebook), once a lane has graded it."""
        self._open(len(self._sandboxes) if self._early else 1)
        future: Future = Future()
        self._queue.put((exercise, cells, notebook, future))
        return future

    def widen(self) -> None:
        """Open every lane: the work handed over is long enough to pay for a fork server's start."""
        self._open(len(self._sandboxes))

    def _open(self, lanes: int) -> None:
        """Open the first ``lanes`` lanes: start the fork servers not started yet (their torch import overlaps the
        open lanes' work) and a thread for each."""
        for lane in range(len(self._threads), lanes):
            self._sandboxes[lane].start()
            self._greeted.append(threading.Event())
            self._threads.append(threading.Thread(target=self._lane, args=(lane,), daemon=True, name=f"lane-{lane}"))
            self._threads[-1].start()

    def _lane(self, lane: int) -> None:
        # Here, not above: ``pytest autograder/`` starts the fork servers before it imports torch, which these do.
        from autograder.engine.grading import judge
        from autograder.engine.model import grader_problem

        sandbox = self._sandboxes[lane]
        up = self._up(lane)
        self._greeted[lane].set()
        if not up:
            return
        given: dict[str, dict] = {}  # notebook -> the verdicts this lane has given on its code
        while True:
            job = self._queue.get()
            if job is _DONE:
                return
            exercise, cells, notebook, future = job
            if not future.set_running_or_notify_cancel():
                continue
            try:
                future.set_result(judge(exercise, cells, sandbox, verdicts=given.setdefault(notebook, {})))
            except BaseException as e:  # noqa: BLE001 - judge gives a verdict for its own failures; this is a last net
                future.set_result(grader_problem(exercise, f"{type(e).__name__}: {e}"))

    def _up(self, lane: int) -> bool:
        """Whether this lane takes exercises: the first always does (where its sandbox cannot start, each exercise
        is the grader's problem, as without lanes); another only once its own sandbox and the first one are up, so
        that no verdict depends on which lane took the exercise. Waiting for its own sandbox before taking
        anything keeps a lane still starting from holding up what it took."""
        try:
            self._sandboxes[lane].hello()
            up = True
        except Exception:  # noqa: BLE001 - the first lane's judge says why; another lane just stays out
            up = False
        if lane == 0:
            self._first_ok = up
            return True
        self._greeted[0].wait()
        return up and self._first_ok

    def stop(self, now: bool = False) -> None:
        """End the lanes and the fork servers of all but the first (the process's shared one stops at exit):
        exercises not yet taken are dropped, and a fork server still starting is closed rather than waited for.
        An exercise being graded is finished first, unless ``now`` (the process is ending: Ctrl-C, ``-x``), when
        every lane's fork server is closed, the first's too, and what they ran is nobody's verdict."""
        with contextlib.suppress(queue.Empty):
            while True:
                job = self._queue.get_nowait()
                if job is not _DONE:
                    job[-1].cancel()
        for _ in self._threads:
            self._queue.put(_DONE)
        for lane, greeted in enumerate(self._greeted):
            if now or lane and not greeted.is_set():
                self._sandboxes[lane].close()
        for thread in self._threads:
            thread.join()
        for sandbox in self._sandboxes[1:]:
            sandbox.stop()
        self._threads, self._greeted = [], []
