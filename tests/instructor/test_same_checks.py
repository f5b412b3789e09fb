"""``course-release --check`` on another machine: a checks file made there says the same as the committed one when
only rounding moved (floats by a few ulps, which elements of an overflowing mistake output are infinite and with
which sign, which borderline mistake outputs are kept), and differs when the source did (a label, an integer, a
value beyond rounding, a mistake's message, a case)."""
import copy

import pytest
import torch

from autograder.instructor.same_checks import close, same_checks
from course import checking, layout
from course.layout import ROOT as REPO


@pytest.fixture(scope="module")
def committed() -> dict:
    return checking.load(REPO / layout.RELEASE / "01_attention_basics" / layout.CHECKS)


def _case_with_mistakes(data: dict) -> tuple[str, int]:
    """An exercise and the index of its first public case where the file keeps two mistakes' outputs as tensors."""
    return next((name, index) for name, exercise in data.items() for index, case in enumerate(exercise["cases"])
                if sum(isinstance(out, torch.Tensor) for out in case["mistakes"].values()) >= 2)


def _next_float(t: torch.Tensor) -> torch.Tensor:
    return torch.nextafter(t, torch.full_like(t, float("inf")))


def test_a_file_is_the_same_as_itself_and_as_its_copy(committed):
    assert same_checks(committed, committed) and same_checks(committed, copy.deepcopy(committed))


def test_rounding_of_the_last_bits_is_the_same(committed):
    other = copy.deepcopy(committed)
    case = other["masked_softmax"]["cases"][0]
    case["expected"] = _next_float(case["expected"])
    case["args"] = checking.encoded(tuple(_next_float(a) if a.is_floating_point() else a
                                          for a in checking.decoded(case["args"])))
    assert same_checks(committed, other)


@pytest.mark.parametrize("change", ["label", "expected", "an integer input", "a mistake's message",
                                    "a case fewer", "a mistake's output", "an exercise fewer"])
def test_what_the_source_decides_must_be_equal(committed, change):
    other = copy.deepcopy(committed)
    exercise = other["masked_softmax"]
    case = exercise["cases"][0]
    if change == "label":
        case["label"] += " "
    elif change == "expected":
        case["expected"] = case["expected"] * (1 + 1e-3)  # ten times a float32 case's rtol
    elif change == "an integer input":
        name, index = next((n, i) for n, e in other.items() for i, c in enumerate(e["cases"])
                           if any(not t.is_floating_point() and t.numel()
                                  for t in checking.decoded(c["args"]) if isinstance(t, torch.Tensor)))
        args = list(checking.decoded(other[name]["cases"][index]["args"]))
        at = next(i for i, t in enumerate(args) if isinstance(t, torch.Tensor) and not t.is_floating_point() and t.numel())
        args[at] = args[at].clone()
        args[at].view(-1)[0] += 1
        other[name]["cases"][index]["args"] = checking.encoded(tuple(args))
    elif change == "a mistake's message":
        name, hint, error = exercise["mistakes"][0]
        exercise["mistakes"][0] = (name, hint + "！", error)
    elif change == "a case fewer":
        exercise["cases"].pop()
    elif change == "a mistake's output":
        name, index = _case_with_mistakes(other)
        mistakes = other[name]["cases"][index]["mistakes"]
        which = next(i for i, out in mistakes.items() if isinstance(out, torch.Tensor))
        mistakes[which] = mistakes[which] + 1e-3
    else:
        other.pop("masked_softmax")
    assert not same_checks(committed, other), change


def test_a_mistake_output_kept_on_one_machine_only_is_the_same(committed):
    name, index = _case_with_mistakes(committed)
    other = copy.deepcopy(committed)
    mistakes = other[name]["cases"][index]["mistakes"]
    dropped = next(i for i, out in mistakes.items() if isinstance(out, torch.Tensor))
    del mistakes[dropped]
    other[name]["cases"][index]["claims"] = {0: [dropped]}
    kept = copy.deepcopy(committed)
    kept[name]["cases"][index]["claims"] = {0: []}
    assert same_checks(kept, other)
    kept[name]["cases"][index]["claims"] = {0: [next(i for i in mistakes)]}
    assert not same_checks(kept, other), "a claim on a mistake both files keep must be the same"


def test_overflow_may_land_elsewhere_in_a_mistakes_output_only():
    a = torch.tensor([1.0, float("inf"), float("-inf"), float("nan")])
    elsewhere = torch.tensor([1.0, 2.0, float("nan"), float("inf")])
    assert close(a, torch.tensor([1.0, float("-inf"), float("nan"), float("inf")]))
    assert not close(a, elsewhere) and close(a, elsewhere, overflows=True)
    assert not close(a, torch.tensor([1.5, 2.0, float("nan"), float("inf")]), overflows=True)
    assert not close(a, a.double(), overflows=True)


def test_a_mistake_output_that_overflows_elsewhere_is_the_same_but_not_an_expected_output(committed):
    name, index = _case_with_mistakes(committed)
    other = copy.deepcopy(committed)
    case = other[name]["cases"][index]
    which = next(i for i, out in case["mistakes"].items() if isinstance(out, torch.Tensor) and out.is_floating_point())
    case["mistakes"][which] = case["mistakes"][which].clone()
    case["mistakes"][which].view(-1)[0] = float("inf")
    assert same_checks(committed, other)
    case["expected"] = case["expected"].clone()
    case["expected"].view(-1)[0] = float("inf")
    assert not same_checks(committed, other)
