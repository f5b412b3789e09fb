"""The sandbox's report on one job, as typed values: ``harness.run`` builds a ``Report``, ``to_bytes`` writes
its ``to_plain`` form with ``torch.save``, and the grader reads it back with ``from_bytes``/``from_plain``, the
one definition of a well-formed report.

The bytes come from the process that ran the student's code, which can write anything to the pipe:
``from_plain`` accepts exactly the shapes ``to_plain`` makes and raises ``Malformed`` for anything else, and
every string in a report may be the student's, to be cleaned before it is shown. Nothing here knows an
answer: the harness imports it inside the sandbox.
"""
import io
from dataclasses import dataclass
from typing import Any

import torch

from autograder.engine import limits

TOO_BIG = f"交回的结果太大（超过 {limits.OUTPUT_BYTES // 2**20} MiB），被停止了：返回值里是不是有特别大的张量？"


class Malformed(ValueError):
    """Data that is not a report the harness could have written (the message says what is wrong with it)."""


@dataclass(frozen=True)
class ErrorInfo:
    """What went wrong, for the student: a one-line ``summary`` and ``details`` (lines, possibly empty)."""

    summary: str
    details: str = ""

    def to_plain(self) -> dict:
        return {"summary": self.summary, "details": self.details}


@dataclass(frozen=True)
class Ok:
    """A case that ran: its ``output`` (``harness.plain`` data: tensors, tuples, dicts with str keys, str,
    bool, int, float, None) and the inputs the call changed in place, named for the student."""

    output: Any
    changed: tuple[str, ...] = ()

    def to_plain(self) -> list:
        return ["ok", self.output, list(self.changed)]


@dataclass(frozen=True)
class Error:
    """A case that stopped the run: the call raised, or the outputs so far are too big."""

    info: ErrorInfo

    def to_plain(self) -> list:
        return ["error", self.info.to_plain()]


@dataclass(frozen=True)
class GraderError:
    """A case the grader's own code in the sandbox could not run (``walls.GraderProblem``): not the student's doing."""

    what: str

    def to_plain(self) -> list:
        return ["grader", self.what]


Outcome = Ok | Error | GraderError


@dataclass(frozen=True)
class Report:
    """The sandbox's answer to one job: the names the notebook defines (name → cell label) and its syntax
    errors (cell label → message), then either ``error`` (running the definitions failed) or the ``outcomes``
    of the cases in order: fewer than the cases when one stopped the run, none when the exercise is not
    defined. Only the last outcome can be an ``Error`` or a ``GraderError``."""

    defined: dict[str, str]
    syntax_errors: dict[str, str]
    error: ErrorInfo | None = None
    outcomes: tuple[Outcome, ...] = ()

    def __post_init__(self):
        if self.error is not None and self.outcomes:
            raise ValueError("a report holds an error or outcomes, not both")

    def to_plain(self) -> dict:
        """``{"defined": {...}, "syntax_errors": {...}}`` with ``"error": {"summary", "details"}`` or
        ``"outcomes": [["ok", output, [changed, ...]] | ["error", {...}] | ["grader", what], ...]``: only what
        ``torch.load(..., weights_only=True)`` reads back."""
        plain = {"defined": dict(self.defined), "syntax_errors": dict(self.syntax_errors)}
        if self.error is not None:
            plain["error"] = self.error.to_plain()
        else:
            plain["outcomes"] = [outcome.to_plain() for outcome in self.outcomes]
        return plain

    def to_bytes(self) -> bytes:
        buffer = io.BytesIO()
        torch.save(self.to_plain(), buffer)
        return buffer.getvalue()


def from_bytes(data: bytes, cases: int) -> Report:
    """The report in ``data`` (what ``Report.to_bytes`` wrote) for a job of ``cases`` cases; ``Malformed``
    when it is anything else."""
    try:
        plain = torch.load(io.BytesIO(data), weights_only=True)
    except Exception as e:  # noqa: BLE001 - whatever the bytes are, they are not a report
        raise Malformed(f"torch.load refused it ({type(e).__name__})") from None
    return from_plain(plain, cases)


def from_plain(value, cases: int) -> Report:
    """The ``Report`` whose ``to_plain`` form ``value`` is, for a job of ``cases`` cases; ``Malformed`` saying
    why when it is not one: another type or set of keys anywhere, a non-string where a string belongs, an
    outcome of another length or tag, more outcomes than cases, anything after an outcome that ends the run."""
    _expect(type(value) is dict, "the report is not a dict")
    _expect(set(value) in ({"defined", "syntax_errors", "error"}, {"defined", "syntax_errors", "outcomes"}),
            f"the report's keys are {sorted(map(str, value))}")
    defined, syntax_errors = _names(value["defined"], "defined"), _names(value["syntax_errors"], "syntax_errors")
    if "error" in value:
        return Report(defined, syntax_errors, error=_info(value["error"], "the error"))
    plain_outcomes = value["outcomes"]
    _expect(type(plain_outcomes) is list, "the outcomes are not a list")
    _expect(len(plain_outcomes) <= cases, f"{len(plain_outcomes)} outcomes for {cases} cases")
    outcomes = tuple(_outcome(o, i) for i, o in enumerate(plain_outcomes))
    _expect(all(isinstance(o, Ok) for o in outcomes[:-1]), "an outcome follows one that ended the run")
    return Report(defined, syntax_errors, outcomes=outcomes)


def _expect(condition: bool, why: str) -> None:
    if not condition:
        raise Malformed(why)


def _names(value, what: str) -> dict[str, str]:
    _expect(type(value) is dict and all(type(k) is str and type(v) is str for k, v in value.items()),
            f"{what} is not a dict of strings")
    return dict(value)


def _info(value, what: str) -> ErrorInfo:
    _expect(type(value) is dict and set(value) == {"summary", "details"}
            and all(type(v) is str for v in value.values()), f"{what} is not {{'summary': str, 'details': str}}")
    return ErrorInfo(value["summary"], value["details"])


def _outcome(value, index: int) -> Outcome:
    where = f"outcome {index}"
    _expect(type(value) is list and value and type(value[0]) is str, f"{where} is not a tagged list")
    tag, rest = value[0], value[1:]
    if tag == "ok":
        _expect(len(rest) == 2, f"{where} (ok) has {len(rest)} parts, not 2")
        output, changed = rest
        _expect(type(changed) is list and all(type(x) is str for x in changed),
                f"{where}: changed is not a list of str")
        try:
            _expect(_is_output(output), f"{where}: the output holds something harness.plain never makes")
        except RecursionError:
            raise Malformed(f"{where}: the output is nested too deeply") from None
        return Ok(output, tuple(changed))
    _expect(tag in ("error", "grader"), f"{where} has the unknown tag {tag[:40]!r}")
    _expect(len(rest) == 1, f"{where} ({tag}) has {len(rest)} parts, not 1")
    if tag == "error":
        return Error(_info(rest[0], where))
    _expect(type(rest[0]) is str, f"{where} (grader) is not a string")
    return GraderError(rest[0])


def _is_output(value) -> bool:
    """Whether ``value`` is data ``harness.plain`` makes (lists come back from it as tuples)."""
    if type(value) is tuple:
        return all(_is_output(v) for v in value)
    if type(value) is dict:
        return all(type(k) is str and _is_output(v) for k, v in value.items())
    return value is None or type(value) in (torch.Tensor, bool, int, float, str)
