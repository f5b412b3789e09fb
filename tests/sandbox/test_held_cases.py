"""The cases a fork server keeps between jobs (``autograder/engine/sandbox/held_cases.py``): sent once, let go of
within the budget, and never within reach of another exercise's code."""
import pytest
import torch

from autograder.engine import limits
from autograder.engine.sandbox.client import Sandbox
from autograder.engine.sandbox.held_cases import Sent
from autograder.engine.sandbox.report import from_bytes
from course.protocols import Case


def test_cases_go_with_their_first_job_only():
    sent, cases = Sent(), (Case("a", (torch.zeros(4),)),)
    first, data = sent.plan(cases)
    again, nothing = sent.plan(cases)
    assert data and first["cases_bytes"] == len(data) and first["keep"]
    assert again == {"cases": first["cases"]} and nothing == b""
    other, _ = sent.plan((Case("a", (torch.zeros(4),)),))  # equal, but another object: sent anew
    assert other["cases"] != first["cases"]


def test_the_least_recently_used_cases_are_let_go_within_the_budget(monkeypatch):
    sent = Sent()
    made = [(Case(str(i), (torch.zeros(1000),)),) for i in range(3)]
    size = len(sent.plan(made[0])[1])
    monkeypatch.setattr(limits, "HELD_CASES_BYTES", 2 * size + size // 2)
    sent.plan(made[1])
    sent.plan(made[0])  # used again: made[1] is now the oldest
    header, _ = sent.plan(made[2])
    assert len(header["forget"]) == 1 and sent.plan(made[0])[1] == b"" and sent.plan(made[1])[1] != b""


def test_cases_larger_than_the_budget_go_every_time(monkeypatch):
    monkeypatch.setattr(limits, "HELD_CASES_BYTES", 100)
    sent, cases = Sent(), (Case("big", (torch.zeros(1000),)),)
    for _ in range(2):
        header, data = sent.plan(cases)
        assert data and not header["keep"]


# Looks for the first 16 bytes of each marker (found only where its first 8 bytes are followed by its other 8, so
# that the needles themselves, two objects of 8 bytes each, never match), in two ways: among every Python object it
# can reach (the fork server's frozen ones too: tensors, bytes, open memory maps), and through every readable
# mapping of its process that no file backs (heap, stack, anonymous and shared maps), where /proc/self/maps may be
# read (Landlock forbids it). Returns (found among objects, found in memory or None) for each marker.
SPY = '''
import ctypes, gc, mmap, torch

def _hits(data, first, second):
    i = data.find(first)
    while i >= 0:
        if data[i + 8:i + 16] == second:
            return True
        i = data.find(first, i + 1)
    return False

def _in_objects(first, second):
    gc.unfreeze()
    for obj in gc.get_objects():
        if isinstance(obj, torch.Tensor) and obj.layout == torch.strided and obj.device.type == "cpu":
            data = obj.detach().contiguous().reshape(-1).view(torch.uint8).numpy().tobytes()
        elif isinstance(obj, mmap.mmap) and not obj.closed:
            data = obj[:]
        elif isinstance(obj, (bytes, bytearray)) and len(obj) >= 16:
            data = bytes(obj)
        else:
            continue
        if _hits(data, first, second):
            return True
    return False

def _in_memory(first, second):
    try:
        with open("/proc/self/maps") as maps:
            regions = [line.split() for line in maps]
    except OSError:
        return None
    for fields in regions:
        start, end = (int(v, 16) for v in fields[0].split("-"))
        path = fields[5] if len(fields) > 5 else ""
        if fields[1][0] != "r" or path.startswith("[v") or (path.startswith("/")
                                                          and not path.startswith(("/dev/zero", "/memfd:"))):
            continue
        for at in range(start, end, 1 << 24):
            if _hits(ctypes.string_at(at, min(end, at + (1 << 24) + 16) - at), first, second):
                return True
    return False

def look(x, marks):
    found = []
    for first, second in marks:
        first, second = bytes.fromhex(first), bytes.fromhex(second)
        found.append((_in_objects(first, second), _in_memory(first, second)))
    return found
'''


def _marker(seed: int) -> tuple[torch.Tensor, tuple[str, str]]:
    """64 KiB of random float64s, and the two halves of its first 16 bytes in hex."""
    t = torch.randn(8192, dtype=torch.float64, generator=torch.Generator().manual_seed(seed))
    raw = t[:2].numpy().tobytes()
    return t, (raw[:8].hex(), raw[8:].hex())


@pytest.mark.parametrize("walls", [(), ("landlock",)], ids=["all walls", "no landlock"])
def test_code_under_test_finds_its_own_cases_in_memory_but_not_another_jobs(walls, sandbox_without):
    """An earlier job's cases stay with the fork server, not in the memory of a later job's code: a spy that
    looks through every object it can reach, and without Landlock through all its memory, finds the marker of its
    own cases (so the search works) and not the other's."""
    box = sandbox_without(*walls) if walls else Sandbox()
    mine, mine_mark = _marker(1)
    other, other_mark = _marker(2)
    try:
        box.run({"exercise": "keep", "call": "call_function", "cells": [("代码单元 #1", "def keep(x):\n    return 0")],
                 "cases": (Case("kept", (other,)),)}, cpu_s=10)
        answer = box.run({"exercise": "look", "call": "call_function", "cells": [("代码单元 #1", SPY)],
                          "cases": (Case("spy", (mine, [mine_mark, other_mark])),)}, cpu_s=20)
    finally:
        if not walls:
            box.stop()
    assert answer.kind == "report", answer
    (mine_objects, mine_memory), (other_objects, other_memory) = from_bytes(answer.data, cases=1).outcomes[0].output
    assert mine_objects and not other_objects
    if "landlock" in walls:
        assert mine_memory and not other_memory
    else:  # Landlock keeps /proc/self/maps from the code
        assert mine_memory is None and other_memory is None
