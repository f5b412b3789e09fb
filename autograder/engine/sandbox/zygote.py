"""The fork server: a process that has imported torch and the harness, and nothing that knows an answer.

The grader starts it once (``python -c``, from an empty folder) and sends it jobs over its stdin. For
each job it forks a child, which puts up the walls (``walls.py``), runs the student's code through the
harness and writes its report to a pipe. The fork server relays the report (at most
``limits.OUTPUT_BYTES``) or says what went wrong, then kills whatever the run left behind. A job's cases come
with the first job that needs them and are kept for the next (``held_cases.py``): a child unpickles its own
and unmaps the rest before its walls go up.

Where namespaces are available the fork server runs as PID 1 of its own PID namespace: the process
the grader started only waits for it, and both die with the grader.

Messages on stdout (see ``wire.py``): ``{"hello": ..., "up": [...], "missing": {...}}`` once, its payload the
policy the walls were put up with (``policy.Policy.to_wire``, as JSON: it can name a thousand paths), then one
answer per job: ``{"kind": "report"}`` with the child's bytes, or ``{"kind": "timeout" | "wall" | "crashed" |
"too_big" | "grader", ...}``, each with the CPU seconds the child used (``cpu_s``) and how far its resident memory
rose above what it held once its walls were up (``grew_bytes``): the peak and the CPU time are the kernel's
accounts of the child (``wait4``), and the starting point is written before any student code runs, so nothing
the student's code does can lower them.
"""
import ctypes
import gc
import json
import os
import pickle
import select
import signal
import sys
import time

from autograder.engine import limits
from autograder.engine.sandbox import wire
from autograder.engine.sandbox.held_cases import Held
from autograder.engine.sandbox.walls import Walls
from course.errors import GraderProblem

_READY = b"W"  # written by the child once its walls are up: anything that fails before it is the grader's
_SETUP_FAILED = b"S"
_HEAD = 9  # the marker and, after _READY, the child's resident bytes then (8 bytes); the sized report follows


def _child(walls: Walls, harness, job: dict, held: Held, write_fd: int) -> None:
    try:
        job = {**job, "cases": held.cases(job["cases"])}  # and no other exercise's, before the walls
        if job.get("peak"):  # a memory budget's run
            _give_freed_blocks_back()
        resident = _resident_bytes()  # read here: the walls may hide /proc
        walls.enter_child(write_fd, job["cpu"])
    except BaseException as e:  # noqa: BLE001 - any failure here is the grader's, reported as such
        os.write(write_fd, _SETUP_FAILED + f"{type(e).__name__}: {e}".encode()[:4000])
        return
    os.write(write_fd, _READY + resident.to_bytes(8, "big"))
    harness.block_grading_imports()
    try:
        data = harness.serialise(harness.run(job))
    except BaseException as e:  # noqa: BLE001 - the harness itself failed on this student's code
        data = harness.serialise(harness.failure(e))
    view = memoryview(len(data).to_bytes(8, "big") + data)  # sized: the report is whole without waiting for EOF
    while view:
        view = view[os.write(write_fd, view):]


def _collect(read_fd: int, timeout_s: float) -> tuple[bytes, str | None]:
    """What the child writes: the marker, then its sized report (complete without waiting for every holder
    of the pipe to close it), or less if it stops before; the second value names why reading stopped early."""
    data, deadline = bytearray(), time.monotonic() + timeout_s
    while not _complete(data):
        left = deadline - time.monotonic()
        if left <= 0:
            return bytes(data), "wall"
        ready, _, _ = select.select([read_fd], [], [], left)
        if not ready:
            continue
        chunk = os.read(read_fd, 1 << 20)
        if not chunk:
            break
        data += chunk
        if len(data) > limits.OUTPUT_BYTES + _HEAD + 8:
            return b"", "too_big"
    return bytes(data), None


def _complete(data: bytes) -> bool:
    """Whether ``data`` holds the marker and a whole sized report."""
    return len(data) >= _HEAD + 8 and len(data) >= _HEAD + 8 + int.from_bytes(data[_HEAD:_HEAD + 8], "big")


def _grew(data: bytes, peak: int) -> int:
    """How far the child's resident memory rose above what it held when its walls were up (0 before that)."""
    if data[:1] != _READY or len(data) < _HEAD:
        return 0
    return max(0, peak - int.from_bytes(data[1:_HEAD], "big"))


def _status(status: int) -> dict:
    if os.WIFSIGNALED(status):
        return {"signal": signal.Signals(os.WTERMSIG(status)).name}
    return {"exit": os.WEXITSTATUS(status)}


def _wait(pid: int, options: int = 0) -> tuple[int, int, float, int]:
    """``wait4``: (pid, or 0 while it runs with WNOHANG; status; the CPU seconds it used; its peak resident bytes)."""
    finished, status, usage = os.wait4(pid, options)
    return finished, status, usage.ru_utime + usage.ru_stime, _peak_bytes(usage.ru_maxrss)


def _peak_bytes(maxrss: int) -> int:
    """``ru_maxrss`` in bytes: the kernel gives kilobytes on Linux, bytes on macOS."""
    return maxrss if sys.platform == "darwin" else maxrss * 1024


_M_MMAP_THRESHOLD = -3  # glibc's mallopt parameter
_MMAP_THRESHOLD_BYTES = 128 * 1024  # glibc's starting value


def _give_freed_blocks_back() -> None:
    """Make malloc in this process map each large block on its own and unmap it once freed (glibc's mmap threshold
    fixed at its starting value, no longer raised by what is freed), so that the peak resident memory of a memory
    budget's run is what the code held at once. Otherwise glibc serves large blocks from its heap after the first
    one is freed, small tensors kept between them fragment it, and code that holds one block of scores at a time
    can still rise by a block per step (700 MiB where 30 were held). It costs page faults: a third of a second on
    online softmax's long case. Nothing changes where the C library is not glibc."""
    try:
        ctypes.CDLL(None).mallopt(_M_MMAP_THRESHOLD, _MMAP_THRESHOLD_BYTES)
    except (OSError, AttributeError):
        pass


def _resident_bytes() -> int:
    """This process's resident memory now (where /proc cannot tell, its peak so far)."""
    try:
        return int(open("/proc/self/statm").read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        import resource

        return _peak_bytes(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)


def _wait_briefly(pid: int, seconds: float) -> tuple[int, int, float, int]:
    """``_wait`` that gives a process which closed its output a moment to finish exiting."""
    deadline = time.monotonic() + seconds
    while True:
        finished, status, cpu, peak = _wait(pid, os.WNOHANG)
        if finished or time.monotonic() >= deadline:
            return finished, status, cpu, peak
        time.sleep(0.002)


def run_job(walls: Walls, harness, job: dict, held: Held) -> tuple[dict, bytes]:
    """Fork a walled child for ``job`` (``held`` finds its cases) and return the answer for the grader; none where
    the probe run could read an answer or change what grading relies on (``walls.refusal``: fail closed, the
    grader reports every exercise as its own problem, with the reason).

    The child may use ``job["cpu"]`` seconds of CPU time (``RLIMIT_CPU``) within ``job["timeout"]`` seconds of
    wall time. Every answer says how much CPU it used (``cpu_s``); one that used up its CPU time is a
    ``timeout``, one stopped by the wall clock before that is ``wall`` (the grader decides what that means); and how
    much its resident memory rose once its walls were up (``grew_bytes``)."""
    if walls.refusal:
        return {"kind": "grader", "message": walls.refusal}, b""
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read_fd)
        try:
            _child(walls, harness, job, held, write_fd)
        finally:
            os._exit(0)
    os.close(write_fd)
    try:
        data, stopped = _collect(read_fd, job["timeout"])
    finally:
        os.close(read_fd)
    finished, status, cpu, peak = _wait_briefly(pid, 0.0 if stopped else 0.5)
    if not finished:  # out of time, or still running after closing its output
        os.kill(pid, signal.SIGKILL)
        _, status, cpu, peak = _wait(pid)
    walls.clean_up_after_run(pid)
    answer, report = _answer(data, stopped, finished, status, cpu >= job["cpu"])
    return {**answer, "cpu_s": round(cpu, 3), "grew_bytes": _grew(data, peak)}, report


def _answer(data: bytes, stopped: str | None, finished: int, status: int, used_up: bool) -> tuple[dict, bytes]:
    """The answer for what the child wrote (``data``), why reading it stopped early (``stopped``), whether the
    child had ended by itself (``finished``), how it ended (``status``) and whether it used up its CPU time."""
    if data[:1] == _SETUP_FAILED:
        return {"kind": "grader", "message": data[1:].decode(errors="replace")}, b""
    if stopped == "too_big":
        return {"kind": "too_big"}, b""
    if data[:1] != _READY:
        return {"kind": "grader", "message": f"the sandbox ended before its walls were up ({_status(status)})"}, b""
    # SIGXCPU at the soft CPU limit; SIGKILL at the hard one, for code that ignores SIGXCPU.
    if used_up and (stopped == "wall" or finished and _status(status).get("signal") in ("SIGXCPU", "SIGKILL")):
        return {"kind": "timeout"}, b""
    if stopped == "wall":
        return {"kind": "wall"}, b""
    if not _complete(data):
        return {"kind": "crashed", "left_running": not finished, **_status(status)}, b""
    return {"kind": "report"}, data[_HEAD + 8:_HEAD + 8 + int.from_bytes(data[_HEAD:_HEAD + 8], "big")]


def _hello(walls: Walls, answers: int) -> None:
    """Say which walls are up and which are missing, with the policy they make (the message's payload)."""
    policy = walls.policy()
    wire.write_message(answers, {"hello": True, "up": list(policy.up), "missing": policy.missing_walls},
                       json.dumps(policy.to_wire(), ensure_ascii=False).encode())


def _serve(walls: Walls, harness, requests: int, answers: int) -> None:
    held = Held()
    while True:
        try:
            header, payload = wire.read_job(requests, max_payload=limits.JOB_BYTES)
        except EOFError:
            return
        payload, cases = held.take(header, payload)
        job = {**pickle.loads(payload), "cases": cases}  # from the grader, which started this process
        try:
            answer, data = run_job(walls, harness, job, held)
        finally:
            held.done(cases)
        wire.write_message(answers, {**answer, "job": header.get("job")}, data)


def _serve_one_inline(harness, requests: int, answers: int) -> None:
    """Without fork, one job runs in this very process, which then exits: the grader starts a fresh one."""
    try:
        header, payload = wire.read_job(requests, max_payload=limits.JOB_BYTES)
    except EOFError:
        return
    held = Held()
    payload, cases = held.take(header, payload)
    job = {**pickle.loads(payload), "cases": held.cases(cases)}
    try:
        data = harness.serialise(harness.run(job))
    except BaseException as e:  # noqa: BLE001
        data = harness.serialise(harness.failure(e))
    wire.write_message(answers, {"kind": "report", "job": header.get("job"), "last": True}, data)


def _warm_up(torch) -> None:
    """Run the kinds of kernels student code uses once, in every dtype, so that torch's lazy set-up (CPU
    feature detection reads /proc and /sys) happens here, before the walls, rather than in each child."""
    for dtype in (torch.float32, torch.float64, torch.float16, torch.bfloat16):
        a = torch.randn(4, 8).to(dtype)
        layer = torch.nn.Linear(8, 8, bias=False).to(dtype)
        (torch.softmax(a @ a.T / 2, dim=-1) @ layer(a)).float().sum().item()
        torch.rsqrt(a.float().pow(2).mean(-1)).to(dtype).sigmoid()


def _start_harness():
    """Import torch and the harness (never before the namespaces: a user namespace needs a single thread)."""
    import torch

    # Notebooks 07-09 import FlopCounterMode for their demonstrations, and the graded cells keep the import: it
    # pulls in triton where that is installed, a tenth of a second that every child paid again.
    import torch.utils.flop_counter  # noqa: F401

    from autograder.engine.sandbox import harness

    torch.set_num_threads(1)
    _warm_up(torch)
    # Every child inherits torch's hundreds of thousands of objects: frozen, a child's garbage collections skip
    # them instead of walking them all (and copying every page they sit on) once its own code allocates.
    gc.freeze()
    return harness


def main() -> None:
    if "" in sys.path:
        sys.path.remove("")  # started from an empty folder; never let a later import look there
    requests, answers = sys.stdin.fileno(), os.dup(sys.stdout.fileno())
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())  # stray prints must not corrupt the answers
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the grader's to handle
    walls = Walls()
    if not walls.can_fork():
        harness = _start_harness()
        _hello(walls, answers)
        _serve_one_inline(harness, requests, answers)
        return
    if sys.platform.startswith("linux"):
        from autograder.engine.sandbox import privileges

        privileges.set_parent_death_signal(signal.SIGKILL)
        if walls.enter_namespaces():
            server = os.fork()  # PID 1 of the new namespaces
            if server:
                _, status = os.waitpid(server, 0)
                os._exit(os.waitstatus_to_exitcode(status) & 0xFF)
            privileges.set_parent_death_signal(signal.SIGKILL)
    harness = _start_harness()
    try:
        walls.prepare()
    except (OSError, GraderProblem) as e:
        wire.write_message(answers, {"hello": False, "message": f"{type(e).__name__}: {e}"})
        return
    _hello(walls, answers)
    try:
        _serve(walls, harness, requests, answers)
    finally:
        walls.close()
    os._exit(0)  # all is tidied up: skip the interpreter's teardown of torch, which the grader would wait for


if __name__ == "__main__":
    main()
