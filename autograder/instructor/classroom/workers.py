"""A pool of warm grading workers: one process per core, each importing torch and the engine once and
keeping one sandbox (a fork server of its own) for every notebook it grades, so that a notebook costs a
fraction of a torch import instead of a new interpreter.

Workers are started with ``spawn``: a fresh interpreter, never a fork of this process (which may hold
threads, and must never share a sandbox). The parent only hands out notebooks and collects verdicts. A
worker that dies, or stays silent far beyond the cap per notebook, is replaced, and that notebook's
verdicts say the grader failed (``grader_problem``) so that the next run grades it again: whatever a
notebook does, it costs at most its own verdicts.
"""
import multiprocessing
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from multiprocessing.connection import Connection, wait

from autograder.engine import limits
from autograder.engine.assignments import ASSIGNMENTS
from autograder.engine.model import Verdict, grader_problem

WORKER_DIED = "评分进程意外退出了，没有交回结果"  # the verdicts of a notebook whose worker died on it


@dataclass(frozen=True)
class Task:
    """One notebook to grade: its bytes (or why there are none) and a name for messages."""

    key: str
    assignment: str
    data: bytes | None
    problem: str
    name: str


def _serve(conn: Connection, cap_s: float, private: tuple[str, ...]) -> None:
    """A worker's life: start a sandbox (that keeps ``private`` from runs), say which walls it has, then grade
    notebooks until told to stop."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is for the parent, which stops the workers itself
    if sys.platform.startswith("linux"):  # and if the parent is killed outright, the workers go with it
        from autograder.engine.sandbox.privileges import set_parent_death_signal

        set_parent_death_signal(signal.SIGKILL)
    from autograder.engine.sandbox.client import Sandbox, SandboxError

    sandbox = Sandbox(private)
    sandbox.start()  # its torch import overlaps this process's own
    import torch

    from autograder.engine.grading import grade_cells, notebook_cells

    torch.set_num_threads(1)  # one core per worker: the pool is the parallelism
    try:
        conn.send(("hello", sandbox.hello()["missing"]))
    except SandboxError as e:
        conn.send(("hello", {"sandbox": str(e)}))
    while True:
        task = conn.recv()
        if task is None:
            break
        start = time.perf_counter()
        verdicts = grade_cells(task.assignment, notebook_cells(task.data, task.problem, task.name), sandbox, cap_s)
        conn.send(("done", task.key, verdicts, time.perf_counter() - start))
    sandbox.stop()


class _Worker:
    def __init__(self, context, cap_s: float, private: tuple[str, ...]):
        self.conn, child = context.Pipe()
        self.process = context.Process(target=_serve, args=(child, cap_s, private), daemon=True,
                                       name="course-grade worker")
        # Started with Ctrl-C ignored, which a new interpreter keeps: a Ctrl-C while it is still importing
        # must not kill it with a traceback (``_serve`` ignores it too, for pools started off the main thread).
        main = threading.current_thread() is threading.main_thread()
        previous = signal.signal(signal.SIGINT, signal.SIG_IGN) if main else None
        try:
            self.process.start()
        finally:
            if main:
                signal.signal(signal.SIGINT, previous)
        child.close()
        self.task: Task | None = None
        self.since = 0.0

    def give(self, task: Task) -> None:
        self.task, self.since = task, time.monotonic()
        self.conn.send(task)

    def kill(self) -> None:
        if self.process.is_alive():
            self.process.kill()  # its sandbox dies with it (the fork server has a parent-death signal)
        self.process.join()
        self.conn.close()


def _failed(task: Task, why: str) -> list[Verdict]:
    return [grader_problem(exercise, why) for exercise in ASSIGNMENTS[task.assignment]]


class Pool:
    """``jobs`` warm workers; ``run`` grades tasks and reports each result through a callback."""

    def __init__(self, jobs: int, cap_s: float, private: tuple[str, ...] = ()):
        self.jobs = max(1, jobs)
        self.cap_s = cap_s
        self.private = private  # folders no run may read: the class's, the outputs
        self.missing_walls: dict[str, str] = {}
        self._context = multiprocessing.get_context("spawn")
        self._workers: list[_Worker] = []

    def run(self, tasks: Iterator[Task], done: Callable[[Task, list[Verdict], float], None]) -> None:
        """Grade every task; ``done(task, verdicts, seconds)`` is called in this process as each finishes."""
        tasks = iter(tasks)
        self._workers = [_Worker(self._context, self.cap_s, self.private) for _ in range(self.jobs)]
        idle, busy, exhausted = list(self._workers), [], False
        while True:
            while idle and not exhausted:
                task = next(tasks, None)
                if task is None:
                    exhausted = True
                    break
                worker = idle.pop()
                try:
                    worker.give(task)
                except OSError:  # it died before taking the task
                    idle.append(self._replace(worker, done, WORKER_DIED))
                    continue
                busy.append(worker)
            if not busy:
                return
            ready = wait([w.conn for w in busy], timeout=1.0)
            for worker in list(busy):
                finished = self._collect(worker, done) if worker.conn in ready else self._check(worker, done)
                if finished is not None:
                    busy.remove(worker)
                    idle.append(finished)

    def _collect(self, worker: _Worker, done) -> "_Worker | None":
        """Read what a worker said; the worker to use next when it finished its task (a new one if it died)."""
        try:
            message = worker.conn.recv()
        except (EOFError, OSError):
            return self._replace(worker, done, WORKER_DIED)
        if message[0] == "hello":
            self.missing_walls.update(message[1])
            return None
        _, _, verdicts, seconds = message
        task, worker.task = worker.task, None
        done(task, verdicts, seconds)
        return worker

    def _check(self, worker: _Worker, done) -> "_Worker | None":
        if not worker.process.is_alive():
            return self._replace(worker, done, WORKER_DIED)
        silent_s = limits.notebook_wall_s(self.cap_s) + limits.WORKER_STUCK_AFTER_S
        if time.monotonic() - worker.since > silent_s:
            return self._replace(worker, done, f"评分进程超过 {silent_s:g} 秒没有回应，被停止了")
        return None

    def _replace(self, worker: _Worker, done, why: str) -> _Worker:
        task = worker.task
        worker.kill()
        done(task, _failed(task, why), time.monotonic() - worker.since)
        fresh = _Worker(self._context, self.cap_s, self.private)
        self._workers[self._workers.index(worker)] = fresh
        return fresh

    def close(self) -> None:
        """Stop every worker: politely when idle, by force when busy (after Ctrl-C)."""
        for worker in self._workers:
            if worker.task is None and worker.process.is_alive():
                try:
                    worker.conn.send(None)
                except OSError:
                    pass
        deadline = time.monotonic() + 10
        for worker in self._workers:
            if worker.task is None:
                worker.process.join(max(0.0, deadline - time.monotonic()))
            worker.kill()
        self._workers = []
