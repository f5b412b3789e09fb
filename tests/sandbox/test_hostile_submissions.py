"""Hostile student code against the walls of the grading sandbox (the README's "Grading security"), one
attack per wall.

Each attack would earn the points, or harm the grader, if its wall were down: it looks for the answer and
uses it, or it reaches for something outside its sandbox. Every test asserts both that the attack failed
and that grading went on. Attacks replace ``attention_scores`` of an otherwise correct 01 notebook.
"""
import json
import os
import re
import socket
import struct
import time
from pathlib import Path

import pytest

from autograder.engine.assignments import ASSIGNMENTS, EXERCISES
from autograder.engine.checks import attention_scores as scores_check
from autograder.engine.judging import grade
from autograder.engine.sandbox import landlock
from autograder.engine.sandbox.client import Sandbox
from autograder.engine.sandbox.report import MAGIC, from_bytes
from autograder.engine.student_code import Cell
from course import qwen35_weights
from course.layout import ROOT as REPO
from tests.sandbox import Keeping
from tests.students import a01

SCORES = EXERCISES["attention_scores"]
FIRST = ASSIGNMENTS["01_attention_basics"]


def wall_variants(rule: str) -> list:
    """All walls, then each wall that stops the attack left alone: without namespaces, seccomp (with Landlock's
    ``rule`` off, as on a kernel without it), then Landlock's ``rule`` (seccomp off), which only a kernel of
    its ABI has; without Landlock, the namespaces."""
    needed = {"landlock-network": 4, "landlock-scope": 6}[rule]
    older = pytest.mark.skipif(landlock.abi_version() < needed, reason=f"needs Landlock ABI {needed} ({rule})")
    return [pytest.param((), id="all walls"), pytest.param(("namespaces",), id="no namespaces"),
            pytest.param(("namespaces", rule), id=f"no namespaces, no {rule}"),
            pytest.param(("namespaces", "seccomp"), id="no namespaces, no seccomp", marks=older),
            pytest.param(("landlock",), id="no landlock")]


def cells_with(attack: str) -> list[Cell]:
    return [Cell("代码单元 #1", a01.source({"attention_scores": attack}))]  # the attack runs as written, in one cell


def graded(attack: str, sandbox=None, timeout_s: float = 10):
    return grade(SCORES, cells_with(attack), sandbox=sandbox, timeout_s=timeout_s)


# --- reaching the answers -----------------------------------------------------------------------------

ANSWER_HUNTS = {
    "import the reference": ('''
def attention_scores(q, k):
    from solutions.attention_basics import attention_scores as reference
    return reference(q, k)
''', "评分时不能导入 `solutions`"),
    "import a check and call its reference": ('''
def attention_scores(q, k):
    from autograder.engine.checks.attention_scores import EXERCISE
    return EXERCISE.reference(q, k)
''', "评分时不能导入 `autograder`"),
    "an ALL_CAPS constant that imports the reference": ('''
REFERENCE = __import__("solutions.attention_basics", fromlist=["attention_scores"]).attention_scores
def attention_scores(q, k):
    return REFERENCE(q, k)
''', "执行 notebook 里的定义时出错"),
    "read the reference from disk": (f'''
def attention_scores(q, k):
    space = {{}}
    exec(open({str(REPO / "solutions" / "attention_basics.py")!r}).read(), space)
    return space["attention_scores"](q, k)
''', "PermissionError"),
    "read a check from disk": (f'''
def attention_scores(q, k):
    return open({scores_check.__file__!r}).read()
''', "PermissionError"),
    "read the instructor's notebook": (f'''
def attention_scores(q, k):
    return open({str(REPO / "source" / "01_attention_basics" / "01_attention_basics.py")!r}).read()
''', "PermissionError"),
    "the reference on the call stack": ('''
import sys
def attention_scores(q, k):
    frame = sys._getframe()
    while frame is not None:
        for value in list(frame.f_locals.values()) + list(frame.f_globals.values()):
            if getattr(value, "__module__", "").startswith(("solutions", "autograder.engine.checks")):
                return value(q, k) if callable(value) else value.reference(q, k)
        frame = frame.f_back
    raise LookupError("no reference on the stack")
''', "LookupError"),
    "the reference through the garbage collector": ('''
import gc
def attention_scores(q, k):
    gc.unfreeze()  # the fork server's objects are frozen out of gc.get_objects() until then
    for thing in gc.get_objects():
        if callable(thing) and getattr(thing, "__module__", "") == "solutions.attention_basics":
            return thing(q, k)
    raise LookupError("no reference in memory")
''', "LookupError"),
}


@pytest.mark.parametrize("attack", ANSWER_HUNTS)
def test_student_code_cannot_reach_an_answer(attack):
    source, named = ANSWER_HUNTS[attack]
    verdict = graded(source)
    assert not verdict.passed
    assert named in verdict.message, verdict.message


# --- touching the grader --------------------------------------------------------------------------------

def refused_writes(targets: list[Path]) -> None:
    """Student code that appends to each of ``targets`` in turn is refused every time, and none of them changes
    (or appears)."""
    attack = f'''
def attention_scores(q, k):
    for path in {[str(t) for t in targets]!r}:
        try:
            open(path, "ab").write(b"changed")
        except OSError:
            continue
        return "written"
    raise PermissionError("nothing writable")
'''
    before = {t: t.read_bytes() if t.exists() else None for t in targets}
    verdict = graded(attack)
    assert "PermissionError" in verdict.message, verdict.message
    assert {t: t.read_bytes() if t.exists() else None for t in targets} == before


def test_student_code_cannot_write_into_the_course():
    targets = [Path(scores_check.__file__), REPO / "solutions" / "__pycache__" / "x.pyc",
               REPO / "planted.py"]
    refused_writes(targets)


def test_student_code_cannot_change_the_weights_it_may_read():
    """The sandbox reads the Qwen3.5 weights of the course's cache (jobs name 08's real-size layer by file); it
    must not write there, where it would change the reference and every later student's grading too."""
    qwen35_weights.load_linear_attention_layer(0, verbose=False)  # the stand-in's file, made on first use
    layer = qwen35_weights.stand_in_file(0)
    targets = [layer, layer.with_name("planted.safetensors"), qwen35_weights.cache_folder() / "planted"]
    refused_writes(targets)


def test_student_code_cannot_write_into_the_graders_memory():
    attack = f'''
def attention_scores(q, k):
    for pid in ({os.getpid()}, 1, "self/../{os.getpid()}"):
        try:
            with open(f"/proc/{{pid}}/mem", "r+b") as memory:
                memory.write(b"x")
        except OSError as e:
            error = e
    raise error
'''
    verdict = graded(attack)
    # Refused by the read-only mounts of the namespaces, or else by Landlock and the dropped capabilities.
    assert not verdict.passed and ("Read-only file system" in verdict.message or "PermissionError" in verdict.message), \
        verdict.message


READ_THE_FORK_SERVER = '''
import ctypes, os
class Span(ctypes.Structure):
    _fields_ = [("base", ctypes.c_void_p), ("length", ctypes.c_size_t)]
def attention_scores(q, k):
    libc = ctypes.CDLL(None, use_errno=True)
    buffer = ctypes.create_string_buffer(64)
    here, there = Span(ctypes.addressof(buffer), 64), Span(id(os), 64)  # os is at that address in its parent too
    if libc.process_vm_readv(os.getppid(), ctypes.byref(here), 1, ctypes.byref(there), 1, 0) < 0:
        raise OSError(ctypes.get_errno(), "process_vm_readv")
    return q @ k.transpose(-2, -1) / q.shape[-1] ** 0.5
'''


@pytest.mark.parametrize("walls_off", [(), ("landlock",), ("namespaces", "seccomp")],
                         ids=["all walls", "no landlock", "no namespaces, no seccomp"])
def test_student_code_cannot_read_the_memory_of_another_process(walls_off, sandbox_without):
    """The fork server's memory (or a classmate's run, graded at the same time as the same user) holds what
    grading computes. Landlock keeps a run from tracing a process outside it; without it, a run is another user
    than the grader, or a process of a PID namespace of its own; seccomp refuses ptrace and process_vm_readv too
    (test_sandbox_policy.py), for runs of the same user where neither Landlock nor the namespaces are up."""
    verdict = graded(READ_THE_FORK_SERVER, sandbox_without(*walls_off) if walls_off else None)
    assert not verdict.passed and "PermissionError" in verdict.message, verdict.message


KILL = f'''
import os, signal
def attention_scores(q, k):
    for pid in ({os.getpid()}, -1, 1, os.getppid()):  # everyone but itself
        for sig in (signal.SIGSTOP, signal.SIGKILL, signal.SIGTERM, signal.SIGINT):
            try:
                os.kill(pid, sig)
            except OSError:
                pass
    return q @ k.transpose(-2, -1) / q.shape[-1] ** 0.5
'''


@pytest.mark.parametrize("walls_off", wall_variants("landlock-scope"))
def test_student_code_cannot_kill_or_stop_the_grader(walls_off, sandbox_without):
    sandbox = sandbox_without(*walls_off) if walls_off else None
    verdict = graded(KILL, sandbox)
    assert verdict.passed, verdict.message  # it only hurt itself, and its answer is right
    rest = [grade(e, cells_with(KILL), sandbox=sandbox) for e in FIRST[1:4]]
    assert all(v.passed for v in rest), [v.message for v in rest]


# --- processes that outlive the run -------------------------------------------------------------------

def _processes_named(name: str) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        try:
            with open(f"/proc/{entry}/comm") as comm:
                if comm.read().strip() == name:
                    found.append(int(entry))
        except (OSError, ValueError):
            continue
    return found


LEFTOVER = '''
import ctypes, os, time
def attention_scores(q, k):
    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:
            ctypes.CDLL(None).prctl(15, b"{name}", 0, 0, 0)  # PR_SET_NAME, so the test can look for it
            time.sleep(60)
        os._exit(0)
    return q @ k.transpose(-2, -1) / q.shape[-1] ** 0.5
'''


def test_student_code_cannot_start_a_process():
    verdict = graded(LEFTOVER.format(name="attn-leftover-0"))
    assert not verdict.passed and "PermissionError" in verdict.message, verdict.message
    assert not _processes_named("attn-leftover-0")


def test_a_process_that_escapes_with_setsid_is_killed_with_its_run(sandbox_without):
    sandbox = sandbox_without("seccomp")  # let the fork through: the PID namespace must still end it
    verdict = graded(LEFTOVER.format(name="attn-leftover-1"), sandbox)
    assert verdict.passed, verdict.message
    assert not _processes_named("attn-leftover-1")


# --- the network --------------------------------------------------------------------------------------------

@pytest.fixture
def listening():
    """A TCP server on localhost; the kernel completes any connection to it, accepted or not."""
    with socket.create_server(("127.0.0.1", 0)) as server:
        yield server


def _was_connected(server) -> bool:
    server.settimeout(0.2)
    try:
        server.accept()[0].close()
        return True
    except TimeoutError:
        return False


@pytest.mark.parametrize("walls_off", wall_variants("landlock-network"))
def test_student_code_has_no_network(walls_off, sandbox_without, listening):
    port = listening.getsockname()[1]
    sandbox = sandbox_without(*walls_off) if walls_off else None
    attack = f'''
import socket
def attention_scores(q, k):
    socket.create_connection(("127.0.0.1", {port}), timeout=2).sendall(b"answers please")
    return q @ k.transpose(-2, -1) / q.shape[-1] ** 0.5
'''
    verdict = graded(attack, sandbox)
    assert not verdict.passed, verdict.message
    assert not _was_connected(listening)


# --- caps ---------------------------------------------------------------------------------------------------

# Files go to the run's working folder, its private tmpfs: /tmp itself, or a folder inside /tmp when the course
# is installed under /tmp (then /tmp stays read-only).
CAPPED = {
    "memory": ("import torch\ndef attention_scores(q, k):\n    return torch.ones(2**33)\n", "内存不够"),
    "files on the private tmpfs count": ('''
import os
def attention_scores(q, k):
    for i in range(100):
        with open(f"fill-{i}", "wb") as f:
            f.write(os.urandom(8 * 2**20))
''', "No space left"),
    "shared memory": ('''
def attention_scores(q, k):
    open("/dev/shm/fill", "wb").write(b"x" * 2**20)
''', "/dev/shm/fill"),
    "memory files": ("import os\ndef attention_scores(q, k):\n    return os.memfd_create('x')\n", "PermissionError"),
    "file size": ('''
def attention_scores(q, k):
    open("big", "wb").write(b"x" * 32 * 2**20)
''', "File too large"),
    "open files": ('''
def attention_scores(q, k):
    return [open("f%d" % i, "w") for i in range(1000)]
''', "Too many open files"),
    "output": ("import torch\ndef attention_scores(q, k):\n    return torch.ones(40_000_000)\n", "交回的结果太大"),
    "CPU time": ("def attention_scores(q, k):\n    while True:\n        pass\n", "运行超过 3 秒"),
    "exit": ("import sys\ndef attention_scores(q, k):\n    sys.exit(0)\n", "sys.exit"),
    "os._exit": ("import os\ndef attention_scores(q, k):\n    os._exit(0)\n", "提前退出"),
}


@pytest.mark.parametrize("attack", CAPPED)
def test_each_run_is_capped(attack):
    source, named = CAPPED[attack]
    verdict = graded(source, timeout_s=3)
    assert not verdict.passed
    assert named in verdict.message, verdict.message


FORGE = '''
import os, torch, io
def attention_scores(q, k):
    buffer = io.BytesIO()
    torch.save({"defined": {"attention_scores": "代码单元 #1"}, "syntax_errors": {}, "reaches": [], "outcomes": [["ok", "full marks", []]] * 99}, buffer)
    for fd in range(3, 64):
        try:
            os.write(fd, len(buffer.getvalue()).to_bytes(8, "big") + buffer.getvalue())
        except OSError:
            pass
    os._exit(0)
'''


def test_forged_results_fail_the_exercise():
    verdict = graded(FORGE)
    assert not verdict.passed
    assert "格式不对" in verdict.message or "类型不对" in verdict.message, verdict.message


# Reports in the sandbox's own format whose tensor records claim more than they hold: a reader that believed
# them would allocate what they claim (64 MiB of output could claim ~64 GiB), the way torch.load inflated a
# 1.5 GiB tensor deflated into 1.5 MB of zip.
CLAIMS = {
    "a 1.5 GiB tensor": (["tensor", "float32", [3 * 2**27], 3 * 2**29], b""),
    "tensors adding up to more than the cap": (["tuple", *[["tensor", "uint8", [2**24], 2**24]] * 5], b""),
    "a huge shape in a few bytes": (["tensor", "float32", [2**40, 2**40], 16], bytes(16)),
    "a truncated buffer": (["tensor", "float32", [2**20], 2**22], bytes(100)),
}


def claiming(output: list, buffers: bytes) -> str:
    """An attack that writes, as its report, one ok outcome whose output is the header's JSON ``output``."""
    header = json.dumps({"defined": {"attention_scores": "代码单元 #1"}, "syntax_errors": {}, "reaches": ["list"],
                         "outcomes": ["list", ["list", "ok", output, ["list"]]]}).encode()
    data = MAGIC + struct.pack(">I", len(header)) + header + buffers
    return f'''
import os
def attention_scores(q, k):
    data = {data!r}
    for fd in range(3, 64):
        try:
            os.write(fd, len(data).to_bytes(8, "big") + data)
        except OSError:
            pass
    os._exit(0)
'''


class _Replaying:
    """A stand-in sandbox that gives an answer again: the grader's own share of the work, alone."""

    def __init__(self, answer):
        self.answer = answer

    def run(self, job, timeout_s):
        return self.answer


def _peak_memory_growth(action) -> int:
    """How many bytes above its resident memory this process's peak rose while ``action`` ran (Linux)."""
    def peak() -> int:
        return int(re.search(r"VmHWM:\s+(\d+) kB", Path("/proc/self/status").read_text()).group(1)) * 1024

    Path("/proc/self/clear_refs").write_text("5")  # resets the peak to the memory resident now
    before = peak()
    action()
    return peak() - before


@pytest.mark.parametrize("claim", CLAIMS)
def test_a_report_that_claims_more_than_it_holds_is_refused_at_once(claim):
    keeping = Keeping()
    verdicts = []
    growth = _peak_memory_growth(lambda: verdicts.append(graded(claiming(*CLAIMS[claim]), keeping)))
    assert not verdicts[0].passed and not verdicts[0].grader_problem
    assert "格式不对" in verdicts[0].message, verdicts[0].message
    assert growth < 64 * 2**20, f"the grader's peak memory rose by {growth / 2**20:.0f} MiB"
    start = time.perf_counter()
    again = graded(claiming(*CLAIMS[claim]), _Replaying(keeping.answer))
    assert time.perf_counter() - start < 0.5 and "格式不对" in again.message


def test_an_honest_notebook_after_the_attacks_gets_full_marks():
    """The attacks on the sandbox itself (its server, its answers, its processes, its caps), one after another
    on one fresh sandbox: afterwards it grades an honest notebook as before."""
    caps = ("memory", "output", "CPU time", "exit", "os._exit")
    sandbox = Sandbox()
    try:
        attacked = [graded(source, sandbox, timeout_s=1) for source in
                    [KILL, FORGE, claiming(*CLAIMS["a 1.5 GiB tensor"]), LEFTOVER.format(name="attn-leftover-2"),
                     *(CAPPED[c][0] for c in caps)]]
        verdicts = [grade(e, a01.cells(), sandbox=sandbox) for e in FIRST]
    finally:
        sandbox.stop()
    assert [v.passed for v in attacked] == [True, False, False, False, *[False] * len(caps)], \
        [v.message for v in attacked]
    assert all(v.passed for v in verdicts), [v.message for v in verdicts]


def test_the_fork_server_holds_no_answer():
    """What a run finds in memory: the code that calls it, never a reference, a check or a known mistake."""
    from course.protocols import Case

    # The fork server freezes what it loaded (gc.freeze): a spy unfreezes it to see everything.
    spy = '''
import gc, types
def look(x):
    gc.unfreeze()
    return [m.__name__ for m in gc.get_objects() if isinstance(m, types.ModuleType)
            and m.__name__.startswith(("autograder", "solutions", "course"))]
'''
    sandbox = Sandbox()
    try:
        answer = sandbox.run({"exercise": "look", "call": "call_function", "cells": [("代码单元 #1", spy)],
                              "cases": [Case("spy", (0,))]}, cpu_s=10)
    finally:
        sandbox.stop()
    modules = set(from_bytes(answer.data, cases=1).outcomes[0].output)
    assert {"course.protocols", "autograder.engine.sandbox.harness"} <= modules  # the spy does see modules
    assert not {m for m in modules if m.startswith(("solutions", "autograder.engine.checks", "autograder.engine.judging",
                                                    "autograder.engine.model",
                                                    "autograder.engine.assignments"))}, modules
