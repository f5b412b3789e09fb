"""The sandbox's report on one job, as typed values: ``harness.run`` builds a ``Report``, ``to_bytes`` writes
its ``to_plain`` form in the format below, and the grader reads it back with ``from_bytes``/``from_plain``, the
one definition of a well-formed report.

The bytes come from the process that ran the student's code, which can write anything to the pipe: reading
them must cost no more than the bytes themselves. So no pickle and no compression, and every size is declared
and checked before anything is allocated::

    MAGIC (8 bytes) | n: the header's length (4 bytes, big-endian, at most limits.HEADER_BYTES)
    | the header (n bytes) | the tensors' buffers (the rest)

The header is ASCII JSON: the ``to_plain`` form, with a JSON object for each dict (str keys), an array tagged
by its first item for each list, tuple and tensor (``["list", item, ...]``, ``["tuple", item, ...]``,
``["tensor", dtype, shape, nbytes]``), and JSON's own values for None, bool, int, float (NaN and ±Infinity as
Python's ``json`` writes them) and str, every string and key valid UTF-8 (``utf8``: a lone surrogate would stop
whatever writes it to a file). A tensor record's dtype is a name in ``DTYPES``, its shape a list of
at most ``limits.OUTPUT_DIMS`` sizes >= 0 that span at most ``limits.OUTPUT_BYTES`` elements (an axis of
length 0 counted as 1), its nbytes numel × the dtype's size. The buffers are the tensors' elements back to
back, in the order of their records, each in row-major order and the machine's byte order (the sandbox runs
on the grader's machine); the records' nbytes add up to exactly their length, at most ``limits.OUTPUT_BYTES``.

``from_plain`` accepts exactly the shapes ``to_plain`` makes and raises ``Malformed`` for anything else, and
every string in a report may be the student's, to be cleaned before it is shown. Nothing here knows an
answer: the harness imports it inside the sandbox.
"""
import json
import math
import struct
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from autograder.engine import limits

TOO_BIG = f"交回的结果太大（超过 {limits.OUTPUT_BYTES // 2**20} MiB），被停止了：返回值里是不是有特别大的张量？"

MAGIC = b"ATTNRPT1"
_PREFIX = struct.Struct(">8sI")  # MAGIC, the header's length
# The dtypes a report carries, by the names its header gives them: plain numbers, which a check can compare.
DTYPES = {str(dtype).removeprefix("torch."): dtype for dtype in (
    torch.float16, torch.bfloat16, torch.float32, torch.float64, torch.bool,
    torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64)}
# The ints a report carries: int64's, which every check (and torch) can compare and print.
INTS = range(-2**63, 2**63)
_SEQUENCES = {"list": list, "tuple": tuple}


class Malformed(ValueError):
    """Data that is not a report the harness could have written (the message says what is wrong with it)."""


class TooBig(ValueError):
    """A report whose header would be over ``limits.HEADER_BYTES`` (very many or very long names and strings)."""


def is_plain_tensor(value) -> bool:
    """Whether ``value`` is a tensor a report carries: a ``torch.Tensor`` itself (no subclass), dense and strided
    on the CPU, of a dtype in ``DTYPES``, of a shape within the caps (``shape_fits``)."""
    return (type(value) is torch.Tensor and not value.is_nested and value.layout == torch.strided
            and value.device.type == "cpu" and value.dtype in DTYPES.values() and shape_fits(value.shape))


def shape_fits(shape) -> bool:
    """Whether a tensor of ``shape`` (sizes >= 0) is within the caps: at most ``limits.OUTPUT_DIMS`` axes, at
    most ``limits.OUTPUT_BYTES`` elements spanned with each axis of length 0 counted as 1 (so that no stride or
    size of an empty tensor overflows either)."""
    return len(shape) <= limits.OUTPUT_DIMS and math.prod(max(n, 1) for n in shape) <= limits.OUTPUT_BYTES


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
    """A case the grader's own code in the sandbox could not run (``errors.GraderProblem``): not the student's doing."""

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
    # The notebook's definitions that the exercise's uses, directly or not (when it ran): whose checks to
    # consult before blaming the exercise itself.
    reaches: tuple[str, ...] = ()

    def __post_init__(self):
        if self.error is not None and self.outcomes:
            raise ValueError("a report holds an error or outcomes, not both")

    def to_plain(self) -> dict:
        """``{"defined": {...}, "syntax_errors": {...}, "reaches": [str, ...]}`` with ``"error": {"summary", "details"}`` or
        ``"outcomes": [["ok", output, [changed, ...]] | ["error", {...}] | ["grader", what], ...]``."""
        plain = {"defined": dict(self.defined), "syntax_errors": dict(self.syntax_errors),
                 "reaches": list(self.reaches)}
        if self.error is not None:
            plain["error"] = self.error.to_plain()
        else:
            plain["outcomes"] = [outcome.to_plain() for outcome in self.outcomes]
        return plain

    def to_bytes(self) -> bytes:
        """The report in the format of this module's docstring; ``TooBig`` when its header would be over
        ``limits.HEADER_BYTES``. Its tensors are plain (``is_plain_tensor``): ``harness.plain`` made them."""
        tensors = []
        header = json.dumps(_tagged(self.to_plain(), tensors), separators=(",", ":")).encode("ascii")
        if len(header) > limits.HEADER_BYTES:
            raise TooBig(f"the report's header would be {len(header)} bytes")
        return b"".join((_PREFIX.pack(MAGIC, len(header)), header, _buffers(tensors)))


def utf8(text: str) -> str:
    """``text`` as valid UTF-8 can carry it: each lone surrogate (``raise ValueError("\\ud800")``, a file name
    Python could not decode) becomes "?", which every file, terminal and JSON reader takes."""
    try:
        text.encode("utf-8")
        return text
    except UnicodeEncodeError:
        return text.encode("utf-8", "replace").decode("utf-8")


def _tagged(value, tensors: list):
    """``value`` (``to_plain`` data) as the header's JSON data, every string valid UTF-8 (``utf8``); its tensors
    are appended to ``tensors``."""
    if type(value) is dict:
        if not all(type(key) is str for key in value):
            raise TypeError("a report's dicts have str keys")  # json.dumps would turn others into strings
        return {utf8(key): _tagged(v, tensors) for key, v in value.items()}
    if type(value) in (list, tuple):
        return [type(value).__name__, *(_tagged(v, tensors) for v in value)]
    if type(value) is torch.Tensor:
        if not is_plain_tensor(value):
            raise TypeError(f"a report holds plain tensors only, not a {value.layout} {value.dtype} one")
        tensors.append(value)
        return ["tensor", str(value.dtype).removeprefix("torch."), list(value.shape),
                value.numel() * value.element_size()]
    if type(value) is str:
        return utf8(value)
    if value is None or type(value) in (bool, int, float):
        return value
    raise TypeError(f"a report holds no {type(value).__name__}")


def _buffers(tensors: list[torch.Tensor]) -> bytearray:
    """The tensors' elements back to back, each in row-major order and the machine's byte order."""
    sizes = [t.numel() * t.element_size() for t in tensors]
    out, offset = bytearray(sum(sizes)), 0
    for t, size in zip(tensors, sizes):
        if size:  # frombuffer refuses an empty view
            as_bytes = t.resolve_neg().contiguous().view(-1).view(torch.uint8)
            torch.frombuffer(out, dtype=torch.uint8, count=size, offset=offset).copy_(as_bytes)
        offset += size
    return out


def from_bytes(data: bytes, cases: int) -> Report:
    """The report in ``data`` (what ``Report.to_bytes`` wrote) for a job of ``cases`` cases; ``Malformed``
    when it is anything else. Every tensor record is checked, and the bytes they declare against the cap and
    the bytes there are, before the first tensor is made: a forged header costs nothing to refuse."""
    header, buffers = _split(data)
    records = []
    try:
        _untagged(header, records.append)  # checks each record and collects it; makes no tensor
        declared = sum(nbytes for _, _, nbytes in records)
        _expect(declared <= limits.OUTPUT_BYTES, f"the tensors declare {declared} bytes, over the cap")
        _expect(declared == len(buffers), f"the tensors declare {declared} bytes and {len(buffers)} follow")
        tensors = iter(_tensors(records, buffers))
        plain = _untagged(header, lambda record: next(tensors))
    except RecursionError:
        raise Malformed("the header is nested too deeply") from None
    return from_plain(plain, cases)


def _split(data: bytes) -> tuple[Any, memoryview]:
    """The header of ``data``, parsed, and the buffers after it."""
    _expect(len(data) >= _PREFIX.size and data[:len(MAGIC)] == MAGIC, "it does not start as a report does")
    _, length = _PREFIX.unpack_from(data)
    _expect(length <= limits.HEADER_BYTES, f"its header is {length} bytes, over the cap")
    _expect(_PREFIX.size + length <= len(data), f"its header is {length} bytes, and fewer follow")
    view = memoryview(data)
    try:
        header = json.loads(str(view[_PREFIX.size:_PREFIX.size + length], "ascii"), object_pairs_hook=_object)
    except Malformed:
        raise
    except RecursionError:
        raise Malformed("the header is nested too deeply") from None
    except ValueError as e:  # UnicodeDecodeError, JSONDecodeError, an int of too many digits
        raise Malformed(f"the header is not ASCII JSON ({type(e).__name__})") from None
    return header, view[_PREFIX.size + length:]


def _object(pairs: list) -> dict:
    """A JSON object as a dict; one that repeats a key, or whose key is not valid UTF-8, is not what ``to_bytes``
    writes."""
    value = dict(pairs)
    _expect(len(value) == len(pairs), "a JSON object in the header repeats a key")
    _expect(all(_valid(key) for key in value), "a key in the header is not valid UTF-8")
    return value


def _valid(text: str) -> bool:
    return utf8(text) is text


def _untagged(value, tensor: Callable):
    """The ``to_plain`` data that the header's JSON ``value`` stands for; each tensor record, checked
    (``_record``), is handed to ``tensor`` and stands for what it returns."""
    if type(value) is dict:
        return {key: _untagged(v, tensor) for key, v in value.items()}
    if type(value) is str:
        _expect(_valid(value), "a string in the header is not valid UTF-8 (a lone surrogate)")
        return value
    if type(value) is not list:
        return value  # JSON's null, true and false, numbers
    _expect(bool(value) and type(value[0]) is str, "an array in the header has no tag")
    tag, items = value[0], value[1:]
    if tag in _SEQUENCES:
        return _SEQUENCES[tag](_untagged(v, tensor) for v in items)
    _expect(tag == "tensor", f"an array in the header has the unknown tag {tag[:40]!r}")
    return tensor(_record(items))


def _record(items: list) -> tuple[torch.dtype, tuple[int, ...], int]:
    """A tensor record's ``(dtype, shape, nbytes)``, checked against the caps and against each other."""
    _expect(len(items) == 3, f"a tensor record has {len(items)} parts, not 3")
    name, shape, nbytes = items
    _expect(type(name) is str and name in DTYPES, f"a tensor record's dtype is {name!r:.40}")
    _expect(type(shape) is list and all(type(n) is int and n >= 0 for n in shape),
            "a tensor record's shape is not a list of sizes >= 0")
    _expect(shape_fits(shape), f"a tensor record's shape {shape!r:.80} is over the caps")
    dtype = DTYPES[name]
    _expect(type(nbytes) is int and nbytes == math.prod(shape) * dtype.itemsize,
            f"a tensor record of shape {shape} and dtype {name} declares {nbytes!r:.40} bytes")
    return dtype, tuple(shape), nbytes


def _tensors(records: list, buffers: memoryview) -> list[torch.Tensor]:
    """The records' tensors, each made from a copy of exactly its bytes of ``buffers`` (which hold them all)."""
    tensors, offset = [], 0
    for dtype, shape, nbytes in records:
        raw = (torch.frombuffer(bytearray(buffers[offset:offset + nbytes]), dtype=torch.uint8) if nbytes
               else torch.empty(0, dtype=torch.uint8))  # frombuffer refuses an empty buffer
        # Any other byte in a bool tensor would be a value torch has no meaning for.
        _expect(dtype != torch.bool or not bool((raw > 1).any()), "a bool tensor holds bytes other than 0 and 1")
        tensors.append(raw.view(dtype).view(shape))
        offset += nbytes
    return tensors


def from_plain(value, cases: int) -> Report:
    """The ``Report`` whose ``to_plain`` form ``value`` is, for a job of ``cases`` cases; ``Malformed`` saying
    why when it is not one: another type or set of keys anywhere, a non-string where a string belongs, an
    outcome of another length or tag, more outcomes than cases, anything after an outcome that ends the run."""
    _expect(type(value) is dict, "the report is not a dict")
    _expect(set(value) in ({"defined", "syntax_errors", "reaches", "error"},
                           {"defined", "syntax_errors", "reaches", "outcomes"}),
            f"the report's keys are {sorted(map(str, value))}")
    defined, syntax_errors = _names(value["defined"], "defined"), _names(value["syntax_errors"], "syntax_errors")
    reaches = value["reaches"]
    _expect(type(reaches) is list and all(type(x) is str for x in reaches), "reaches is not a list of str")
    if "error" in value:
        return Report(defined, syntax_errors, error=_info(value["error"], "the error"), reaches=tuple(reaches))
    plain_outcomes = value["outcomes"]
    _expect(type(plain_outcomes) is list, "the outcomes are not a list")
    _expect(len(plain_outcomes) <= cases, f"{len(plain_outcomes)} outcomes for {cases} cases")
    outcomes = tuple(_outcome(o, i) for i, o in enumerate(plain_outcomes))
    _expect(all(isinstance(o, Ok) for o in outcomes[:-1]), "an outcome follows one that ended the run")
    return Report(defined, syntax_errors, outcomes=outcomes, reaches=tuple(reaches))


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
        problem = _output_problem(output)
        _expect(problem is None, f"{where}: {problem}")
        return Ok(output, tuple(changed))
    _expect(tag in ("error", "grader"), f"{where} has the unknown tag {tag[:40]!r}")
    _expect(len(rest) == 1, f"{where} ({tag}) has {len(rest)} parts, not 1")
    if tag == "error":
        return Error(_info(rest[0], where))
    _expect(type(rest[0]) is str, f"{where} (grader) is not a string")
    return GraderError(rest[0])


def _output_problem(value, depth: int = 0) -> str | None:
    """What in ``value`` ``harness.plain`` never makes (None when nothing is): lists, which it makes tuples,
    tensors that are not plain (``is_plain_tensor``), ints outside ``INTS``, other types, nesting deeper than
    ``limits.OUTPUT_DEPTH``."""
    if depth > limits.OUTPUT_DEPTH:
        return "the output is nested too deeply"
    if type(value) is tuple:
        parts = value
    elif type(value) is dict:
        if not all(type(key) is str for key in value):
            return "the output holds a dict with a key that is not a str"
        parts = value.values()
    elif isinstance(value, torch.Tensor):
        return None if is_plain_tensor(value) else "the output holds a tensor that is not plain"
    elif type(value) is int:
        return None if value in INTS else "the output holds an int outside int64"
    elif value is None or type(value) in (bool, float, str):
        return None
    else:
        return f"the output holds a {type(value).__name__}, which harness.plain never makes"
    for part in parts:
        problem = _output_problem(part, depth + 1)
        if problem:
            return problem
    return None
