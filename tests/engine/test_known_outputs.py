"""The reference's and the mistakes' results are worked out once per process for cases of the same contents, and
never reused for a case whose contents differ, even by one value, one dtype or a tensor the digest cannot see."""
from types import SimpleNamespace

import torch

from autograder.engine import known_outputs
from course.protocols import Case


def _counting():
    calls = []

    def compute():
        calls.append(1)
        return torch.ones(3)
    return calls, compute


def test_a_case_made_anew_with_the_same_contents_is_computed_once():
    calls, compute = _counting()
    for _ in range(3):
        case = Case("同样的用例", (torch.arange(6.0).reshape(2, 3), [torch.tensor([1, 2])]), {"mask": None})
        known_outputs.known("same-contents", case, compute)
    assert len(calls) == 1


def test_any_difference_in_the_contents_computes_again():
    calls, compute = _counting()
    base = torch.arange(6.0)
    for case in (Case("a", (base,)), Case("a", (base + 0.5,)), Case("a", (base.double(),)),
                 Case("a", (base.reshape(2, 3),)), Case("b", (base,)), Case("a", (base,), {"k": 2})):
        known_outputs.known("differences", case, compute)
    assert len(calls) == 6


def test_a_tensor_the_digest_cannot_see_is_never_kept():
    calls, compute = _counting()
    for value in (1.0, 2.0):
        known_outputs.known("hidden", Case("x", (SimpleNamespace(weight=torch.full((2,), value)),)), compute)
    assert len(calls) == 2


def test_what_is_kept_stays_under_the_limit(monkeypatch):
    monkeypatch.setattr(known_outputs, "LIMIT_BYTES", 1000)
    for i in range(10):
        known_outputs.known("limit", Case(f"case {i}", (torch.tensor([i]),)), lambda: torch.zeros(100))  # 400 bytes
    assert known_outputs._kept_bytes <= 1000
    assert sum(1 for key in known_outputs._kept if key[0] == "limit") == 2
