"""The grader's side of the sandbox: start the fork server, send it jobs, get answers back.

One fork server serves a whole grading run (``shared()``); it is started as early as possible so that its
torch import overlaps the grader's own, restarted when it dies, and killed with the grader.
"""
import atexit
import contextlib
import json
import os
import pickle
import select
import signal
import subprocess
import sys
import tempfile
import threading
from dataclasses import dataclass

from autograder.engine import limits
from autograder.engine.sandbox import wire
from autograder.engine.sandbox.held_cases import Sent
from autograder.engine.sandbox.policy import Policy
from autograder.engine.sandbox.walls import PRIVATE_ENV, SCRATCH_ENV

# The fork server imports the very engine this grader runs, even where the course is not pip-installed.
_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
_START = f"import sys; sys.path.insert(0, {_ROOT!r}); from autograder.engine.sandbox.zygote import main; main()"


class SandboxError(Exception):
    """The sandbox itself could not run a job: a problem of the grader or the machine, not the student."""


@dataclass(frozen=True)
class Answer:
    """What became of one job: ``kind`` is report, timeout (the code used up its CPU time), busy (stopped twice by
    the wall clock with CPU time left: the machine's doing), crashed, too_big or grader. ``detail`` holds what the
    fork server said, with the CPU seconds the code used (``cpu_s``) and, for busy, the wall seconds (``wall_s``)."""

    kind: str
    data: bytes = b""
    detail: dict | None = None


class Sandbox:
    """A fork server and the pipes to it. Not thread-safe: one job at a time. ``private``: folders of this grading
    run that no run may read (a class's notebooks, the grader's outputs), kept out as the answers are."""

    def __init__(self, private: tuple[str, ...] = ()):
        self._private = tuple(os.path.abspath(folder) for folder in private)
        self._process: subprocess.Popen | None = None
        self._stderr = None
        self._folder = None
        self._hello: dict | None = None
        self._policy: Policy | None = None
        self._jobs = 0
        self._sent = Sent()  # the cases this fork server keeps
        self._lock = threading.Lock()
        self._closed = False  # by ``close``: no fork server is started again
        self.cpu_used_s = 0.0

    def start(self) -> None:
        """Start the fork server without waiting for it (its first answer is awaited by the first job)."""
        if self._closed:
            raise SandboxError("the sandbox was closed: grading is over")
        if self._process is not None and self._process.poll() is None:
            return
        self._stderr = tempfile.TemporaryFile()
        # An empty folder to start in, so that nothing there can shadow a module; also where the fork server makes
        # what it cannot remove itself (SCRATCH_ENV). It must outlive the fork server.
        self._folder = tempfile.TemporaryDirectory(prefix="attention-course-")
        env = {**os.environ, PRIVATE_ENV: os.pathsep.join(self._private), SCRATCH_ENV: self._folder.name}
        self._process = subprocess.Popen([sys.executable, "-c", _START], stdin=subprocess.PIPE, env=env,
                                         stdout=subprocess.PIPE, stderr=self._stderr, cwd=self._folder.name,
                                         start_new_session=True)  # a Ctrl-C in the terminal is ours alone
        self._hello = None
        self._sent = Sent()
        for pipe in (self._process.stdin, self._process.stdout):
            _widen(pipe.fileno())

    def hello(self) -> dict:
        """The fork server's greeting: which walls are up and which are missing (and why)."""
        if self._hello is None:
            self.start()
            header, payload = self._read(limits.STARTUP_TIMEOUT_S, "starting")
            if not header.get("hello"):
                self.stop()
                raise SandboxError(f"the sandbox could not start: {header.get('message', '')}")
            self._hello, self._policy = header, Policy.from_wire(json.loads(payload))
        return self._hello

    def policy(self) -> Policy:
        """What runs may do, as the fork server put its walls up (sent with its greeting)."""
        self.hello()
        return self._policy

    def run(self, job: dict, cpu_s: float) -> Answer:
        """Run ``job`` (see ``harness.run``) in a fresh walled child that may use ``cpu_s`` seconds of CPU time.

        The wall clock only guards against code that does not get (or does not use) the CPU: a run stopped by it
        with CPU time left is run again under ``limits.retry_wall_s``, and stopped again it is answered ``busy``, so
        that a busy machine never passes for the student's infinite loop. Restarts the fork server once if it
        died. ``cpu_used_s`` adds up the CPU time of every run. ``job["cases"]`` crosses to the fork server once
        (``held_cases``): pass the same object for the same cases."""
        with self._lock:
            answer = self._run_restarting(job, cpu_s, limits.first_wall_s(cpu_s))
            if answer.kind == "wall":
                answer = self._run_restarting(job, cpu_s, limits.retry_wall_s(cpu_s))
                if answer.kind == "wall":
                    answer = Answer("busy", detail={**answer.detail, "wall_s": limits.retry_wall_s(cpu_s)})
            return answer

    def _run_restarting(self, job: dict, cpu_s: float, wall_s: float) -> Answer:
        for attempt in (1, 2):
            try:
                return self._run_once(job, cpu_s, wall_s)
            except SandboxError:
                self.stop()
                if attempt == 2:
                    raise

    def _run_once(self, job: dict, cpu_s: float, wall_s: float) -> Answer:
        self.hello()
        self._jobs += 1
        held, cases = self._sent.plan(job["cases"])
        payload = pickle.dumps({**job, "cases": None, "cpu": cpu_s, "timeout": wall_s}, protocol=pickle.HIGHEST_PROTOCOL)
        try:
            wire.write_message(self._process.stdin.fileno(), {"job": self._jobs, **held}, payload + cases)
        except OSError as e:
            raise SandboxError(f"the sandbox stopped taking jobs ({e})") from None
        header, data = self._read(wall_s + limits.ANSWER_GRACE_S, "running a job")
        if header.get("job") != self._jobs:
            raise SandboxError("the sandbox answered out of turn")
        if header.get("last"):  # a server without fork takes one job: the next job starts a new one
            self.stop()
        self.cpu_used_s += header.get("cpu_s") or 0.0
        return Answer(header["kind"], data, header)

    def _read(self, timeout_s: float, doing: str) -> tuple[dict, bytes]:
        fd = self._process.stdout.fileno()
        ready, _, _ = select.select([fd], [], [], timeout_s)
        if not ready:
            self.stop()
            raise SandboxError(f"the sandbox did not answer within {timeout_s:g} s while {doing}")
        try:
            return wire.read_message(fd, max_payload=limits.OUTPUT_BYTES + limits.HEADER_BYTES)
        except (EOFError, ValueError, OSError) as e:
            raise SandboxError(f"the sandbox ended while {doing} ({e}){self._stderr_tail()}") from None

    def _stderr_tail(self) -> str:
        if self._process is not None:
            try:
                self._process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass
        if self._stderr is None:
            return ""
        self._stderr.seek(0)
        tail = self._stderr.read().decode(errors="replace").strip()[-1500:]
        return f":\n{tail}" if tail else ""

    def close(self) -> None:
        """Kill the fork server's processes and start no other, from any thread: one waiting on this sandbox (for
        its greeting or a job) gets a ``SandboxError``, and so does any later job. ``stop`` tidies up once that
        thread is done. For a sandbox no longer wanted while it starts or runs a job nobody will read."""
        self._closed = True
        process = self._process
        if process is not None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(process.pid, signal.SIGKILL)

    def stop(self) -> None:
        """End the fork server: its input closes, so it tidies up and exits; whatever is left is killed."""
        process, self._process, self._hello = self._process, None, None
        if process is None:
            return
        for pipe in (process.stdin, process.stdout):
            try:
                pipe.close()
            except OSError:
                pass
        try:
            process.wait(timeout=limits.STOP_GRACE_S)
        except subprocess.TimeoutExpired:
            pass
        try:
            os.killpg(process.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError, AttributeError):
            process.kill()
        process.wait()
        if self._folder is not None:
            self._folder.cleanup()
            self._folder = None


def _widen(fd: int) -> None:
    """A pipe of 1 MiB instead of 64 KiB where Linux allows it: a job of real-size weights (tens of MB) then crosses
    in a sixteenth of the round trips between writer and reader."""
    with contextlib.suppress(ImportError, AttributeError, OSError):  # not Linux; or over /proc/sys/fs/pipe-max-size
        import fcntl

        fcntl.fcntl(fd, fcntl.F_SETPIPE_SZ, 1 << 20)


_shared: Sandbox | None = None


def shared() -> Sandbox:
    """The sandbox of this grading run, started on first use and stopped at exit."""
    global _shared
    if _shared is None:
        _shared = Sandbox()
        atexit.register(_shared.stop)
    return _shared
