"""The sandbox's report (``autograder.engine.sandbox.report``): what the harness writes is what the grader reads,
and nothing else gets through; a grader problem inside the sandbox is the grader's, regraded on the next run,
and a student cannot claim one by raising it."""
import dataclasses
import io
import json
import os
import struct

import pytest
import torch

from autograder.engine import limits
from autograder.engine.assignments import EXERCISES
from autograder.engine.checks import greedy_generate
from autograder.engine.judging import grade
from autograder.engine.sandbox import harness
from autograder.engine.sandbox.client import Answer, Sandbox
from autograder.engine.sandbox.report import (
    DTYPES,
    MAGIC,
    Error,
    ErrorInfo,
    GraderError,
    Malformed,
    Ok,
    Report,
    TooBig,
    from_bytes,
    from_plain,
    utf8,
)
from autograder.engine.student_code import Cell
from autograder.instructor.classroom.results_store import NotebookResult, ResultStore
from course import smollm2
from course.cache import CACHE_ENV
from course.compare import compare
from course.protocols import Case
from course.stored_tensors import StoredTensors
from course.tolerances import for_dtype
from tests.students import a01, a02, a03, a07

OUTPUT = (torch.arange(6.0).view(2, 3), {"mask": torch.tensor([True, False]), "n": 3, "scale": 0.5},
          ("text", None, False))
REPORTS = {
    "outcomes": Report({"f": "代码单元 #1"}, {"代码单元 #2": "第 1 行：invalid syntax"},
                       outcomes=(Ok(OUTPUT, ("参数 q",)), Ok(torch.zeros(0)), Error(ErrorInfo("运行出错", "第 3 行")))),
    "grader": Report({"f": "代码单元 #1"}, {}, outcomes=(Ok(1), GraderError("读不到模型"))),
    "reaches": Report({"f": "代码单元 #1", "g": "代码单元 #2"}, {}, outcomes=(Ok(1),), reaches=("g",)),
    "error": Report({}, {}, error=ErrorInfo("执行 notebook 里的定义时出错")),
    "not defined": Report({"g": "代码单元 #1"}, {}),
}


def _nested(depth: int, value=()):
    """``value`` inside ``depth`` tuples."""
    for _ in range(depth):
        value = (value,)
    return value


def _same(a, b) -> bool:
    """Equal plain data: tensors by dtype, shape and every bit, floats by repr (NaN, -0.0), tuples and lists
    told apart."""
    if isinstance(a, torch.Tensor):
        return (type(b) is torch.Tensor and (a.dtype, a.shape) == (b.dtype, b.shape)
                and torch.equal(*(t.resolve_neg().reshape(-1).view(torch.uint8) for t in (a, b))))
    if isinstance(a, (tuple, list)):
        return type(a) is type(b) and len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    if isinstance(a, dict):
        return type(b) is dict and list(a) == list(b) and all(_same(a[k], b[k]) for k in a)
    return type(a) is type(b) and repr(a) == repr(b)


@pytest.mark.parametrize("name", REPORTS)
def test_a_report_comes_back_as_it_was_written(name):
    report = REPORTS[name]
    data = report.to_bytes()
    assert data.startswith(MAGIC)  # a JSON header and raw buffers: nothing for the grader to unpickle or inflate
    back = from_bytes(data, cases=3)
    assert _same(back.to_plain(), report.to_plain())
    assert [type(o) for o in back.outcomes] == [type(o) for o in report.outcomes]
    assert (back.defined, back.syntax_errors, back.error, back.reaches) == \
        (report.defined, report.syntax_errors, report.error, report.reaches)


# Outputs an honest student can return, at the edges of what the format carries.
ODD_OUTPUTS = {
    "every dtype": tuple(torch.arange(-3, 3).to(dtype) for dtype in DTYPES.values()),
    "float edges": (torch.tensor([float("nan"), float("inf"), -float("inf"), -0.0, 5e-324]),
                    float("nan"), -0.0, 1e308, torch.tensor(65504.0, dtype=torch.float16)),
    "empty and 0-d tensors": (torch.zeros(0), torch.zeros(3, 0, 2), torch.tensor(True), torch.ones([1] * 64)),
    "a view of another tensor": (torch.arange(12.0).view(3, 4).T[1:], torch._neg_view(torch.ones(2))),
    "ints at int64's ends": (-2**63, 2**63 - 1, 0, True),
    "strings of every kind": ("", "中文 \x00\x1b[2J", "\U0001f600", "\ufffe"),
    "nested as deep as allowed": _nested(limits.OUTPUT_DEPTH, torch.ones(1)),
}


@pytest.mark.parametrize("name", ODD_OUTPUTS)
def test_odd_outputs_come_back_as_they_were(name):
    report = Report({}, {}, outcomes=(Ok(ODD_OUTPUTS[name]),))
    assert _same(from_bytes(report.to_bytes(), cases=1).outcomes[0].output, ODD_OUTPUTS[name])


def test_text_utf8_cannot_carry_comes_back_with_a_question_mark_wherever_a_report_holds_text():
    """A lone surrogate (``raise ValueError("\\ud800")``, a returned string) would stop every writer downstream
    (the class's results, results.json, feedback pages): the report carries valid UTF-8 only."""
    odd = "名\ud800\udfff"
    report = Report({odd: odd}, {odd: odd}, outcomes=(Ok({odd: (odd, (odd,))}, (odd,)), Error(ErrorInfo(odd, odd))),
                    reaches=(odd,))
    back = from_bytes(report.to_bytes(), cases=2)
    assert _same(back.to_plain(), Report({"名??": "名??"}, {"名??": "名??"}, reaches=("名??",), outcomes=(
        Ok({"名??": ("名??", ("名??",))}, ("名??",)), Error(ErrorInfo("名??", "名??")))).to_plain())
    assert utf8("中文\U0001f600") == "中文\U0001f600"


def test_a_report_holds_an_error_or_outcomes_not_both():
    with pytest.raises(ValueError):
        Report({}, {}, error=ErrorInfo("x"), outcomes=(Ok(1),))


def _forged(change):
    plain = REPORTS["outcomes"].to_plain()
    change(plain)
    return plain


FORGED = {
    "not a dict": (lambda p: None, [["ok", 1, []]], "not a dict"),
    "an extra key": (lambda p: p.update(points=4), None, "keys"),
    "no syntax_errors": (lambda p: p.pop("syntax_errors"), None, "keys"),
    "an error and outcomes": (lambda p: p.update(error={"summary": "", "details": ""}), None, "keys"),
    "defined maps to a number": (lambda p: p["defined"].update(f=1), None, "defined"),
    "reaches a number": (lambda p: p.update(reaches=[1]), None, "reaches"),
    "reaches in a tuple": (lambda p: p.update(reaches=("g",)), None, "reaches"),
    "a syntax error under a number": (lambda p: p["syntax_errors"].update({1: "x"}), None, "syntax_errors"),
    "outcomes in a tuple": (lambda p: p.update(outcomes=tuple(p["outcomes"])), None, "not a list"),
    "outcomes in a dict": (lambda p: p.update(outcomes={0: ["ok", 1, []]}), None, "not a list"),
    "more outcomes than cases": (lambda p: p.update(outcomes=[["ok", "full marks", []]] * 99), None, "99 outcomes"),
    "an outcome in a tuple": (lambda p: p["outcomes"].__setitem__(0, ("ok", 1, [])), None, "tagged list"),
    "an empty outcome": (lambda p: p["outcomes"].__setitem__(0, []), None, "tagged list"),
    "an unknown tag": (lambda p: p["outcomes"].__setitem__(0, ["passed", 1, []]), None, "unknown tag"),
    "ok without changed": (lambda p: p["outcomes"].__setitem__(0, ["ok", 1]), None, "not 2"),
    "ok with a number among changed": (lambda p: p["outcomes"][0].__setitem__(2, [1]), None, "changed"),
    "ok with changed in a tuple": (lambda p: p["outcomes"][0].__setitem__(2, ("q",)), None, "changed"),
    "an output list": (lambda p: p["outcomes"][0].__setitem__(1, [torch.ones(1)]), None, "output"),
    "an output dict under a number": (lambda p: p["outcomes"][0].__setitem__(1, {1: torch.ones(1)}), None, "output"),
    "an output torch.Size": (lambda p: p["outcomes"][0].__setitem__(1, torch.Size([2])), None, "output"),
    "an output set": (lambda p: p["outcomes"][0].__setitem__(1, {1}), None, "output"),
    "an error with a number as summary": (
        lambda p: p["outcomes"][2].__setitem__(1, {"summary": 1, "details": ""}), None, "outcome 2"),
    "an error without details": (lambda p: p["outcomes"][2].__setitem__(1, {"summary": "x"}), None, "outcome 2"),
    "an error as a string": (lambda p: p["outcomes"][2].__setitem__(1, "运行出错"), None, "outcome 2"),
    "an error with three parts": (lambda p: p["outcomes"][2].append(""), None, "not 1"),
    "a grader problem that is not a string": (lambda p: p["outcomes"].__setitem__(2, ["grader", {"x": 1}]), None,
                                              "not a string"),
    "an outcome after an error": (lambda p: p["outcomes"].__setitem__(1, ["error", {"summary": "", "details": ""}]),
                                  None, "follows"),
    "an output nested too deeply": (lambda p: p["outcomes"][0].__setitem__(1, _nested(100_000)), None, "deeply"),
    "an output one level too deep": (
        lambda p: p["outcomes"][0].__setitem__(1, _nested(limits.OUTPUT_DEPTH + 1)), None, "deeply"),
    "an int beyond int64": (lambda p: p["outcomes"][0].__setitem__(1, 2**63), None, "int64"),
    **{f"an output {kind} tensor": (lambda p, make=make: p["outcomes"][0].__setitem__(1, (make(),)), None, "not plain")
       for kind, make in {
           "meta": lambda: torch.empty(2, 3, device="meta"),
           "sparse": lambda: torch.eye(3).to_sparse(),
           "sparse CSR": lambda: torch.eye(3).to_sparse_csr(),
           "quantized": lambda: torch.quantize_per_tensor(torch.eye(3), 0.1, 0, torch.qint8),
           "nested": lambda: torch.nested.nested_tensor([torch.ones(2), torch.ones(3)]),
           "complex": lambda: torch.ones(2, dtype=torch.complex64),
           "uint32": lambda: torch.ones(2, dtype=torch.uint32),
           "nn.Parameter": lambda: torch.nn.Parameter(torch.ones(2)),
           "65-axis": lambda: torch.ones([1] * 65),
           "empty but wide": lambda: torch.empty(0, limits.OUTPUT_BYTES + 1),
       }.items()},
}


@pytest.mark.parametrize("name", FORGED)
@pytest.mark.filterwarnings("ignore:.*(beta|prototype|deprecated)")  # torch's notes on making those tensors
def test_a_forged_report_is_refused(name):
    change, instead, why = FORGED[name]
    with pytest.raises(Malformed, match=why):
        from_plain(_forged(change) if instead is None else instead, cases=3)


def test_the_error_report_is_checked_too():
    for error in ({"summary": "x", "details": None}, {"summary": "x", "details": "", "points": "4"}, "x"):
        with pytest.raises(Malformed, match="the error"):
            from_plain({"defined": {}, "syntax_errors": {}, "reaches": [], "error": error}, cases=1)


def _saved(value) -> bytes:
    buffer = io.BytesIO()
    torch.save(value, buffer)
    return buffer.getvalue()


@pytest.mark.parametrize("data", [b"", b"full marks", _saved(REPORTS["outcomes"].to_plain()),
                                  _saved({"defined": {}, "syntax_errors": {}, "reaches": [], "outcomes": [],
                                          "x": Case("an object torch.load may not build")})],
                         ids=["empty", "text", "a report as torch.save writes it", "an object"])
def test_bytes_that_are_not_a_report_are_refused(data):
    with pytest.raises(Malformed, match="does not start as a report does"):
        from_bytes(data, cases=1)


def _wire(output: str = "null", buffers: bytes = b"", header: str | None = None, length: int | None = None) -> bytes:
    """Report bytes as a forger would write them: the prefix, ``header`` (by default a report whose one ok
    outcome has the output ``output``, in the header's JSON) declared ``length`` bytes long, then ``buffers``."""
    if header is None:
        header = ('{"defined":{},"syntax_errors":{},"reaches":["list"],'
                  f'"outcomes":["list",["list","ok",{output},["list"]]]}}')
    head = header.encode()
    return MAGIC + struct.pack(">I", len(head) if length is None else length) + head + buffers


def _record(dtype: str, shape: list, nbytes) -> str:
    return json.dumps(["tensor", dtype, shape, nbytes])


# Each is refused; whatever a record claims is checked against the caps and against the bytes that follow before
# a tensor is made (a record of 1.5 GiB is 1.5 GiB only in what it says).
FORGED_BYTES = {
    "a 1.5 GiB tensor": (_wire(_record("float32", [3 * 2**27], 3 * 2**29)), "over the caps"),
    "tensors adding up to more than the cap": (
        _wire(json.dumps(["tuple", *[["tensor", "uint8", [2**24], 2**24]] * 5])), "declare 83886080 bytes, over the cap"),
    "a huge shape in a few bytes": (_wire(_record("float32", [2**40, 2**40], 16), bytes(16)), "over the caps"),
    "an empty tensor spanning too much": (_wire(_record("float32", [0, 2**62, 2**62], 0)), "over the caps"),
    "65 axes": (_wire(_record("float32", [1] * 65, 4), bytes(4)), "over the caps"),
    "bytes that are not numel × size": (_wire(_record("float32", [4], 15), bytes(15)), "declares 15 bytes"),
    "bytes as a string": (_wire(_record("float32", [4], "16"), bytes(16)), "declares '16' bytes"),
    "a truncated buffer": (_wire(_record("float32", [2**20], 2**22), bytes(100)), "4194304 bytes and 100 follow"),
    "bytes after the buffers": (_wire(_record("float32", [1], 4), bytes(12)), "4 bytes and 12 follow"),
    "a negative size": (_wire(_record("float32", [-1], -4)), "sizes >= 0"),
    "a size that is a bool": (_wire(_record("float32", [True], 4), bytes(4)), "sizes >= 0"),
    "a size that is a float": (_wire(_record("float32", [1.0], 4), bytes(4)), "sizes >= 0"),
    "a shape that is not a list": (_wire(_record("float32", 1, 4), bytes(4)), "sizes >= 0"),
    "a complex dtype": (_wire(_record("complex64", [1], 8), bytes(8)), "dtype is 'complex64'"),
    "a quantized dtype": (_wire(_record("qint8", [1], 1), bytes(1)), "dtype is 'qint8'"),
    "a dtype that is not a name": (_wire(_record(["float32"], [1], 4), bytes(4)), "dtype is"),
    "a record of four parts": (_wire(json.dumps(["tensor", "float32", [1], 4, 0]), bytes(4)), "4 parts"),
    "a bool tensor holding 2": (_wire(_record("bool", [2], 2), b"\x01\x02"), "bytes other than 0 and 1"),
    "a header longer than the cap": (_wire(length=limits.HEADER_BYTES + 1), "over the cap"),
    "a header longer than the data": (_wire(length=10**5), "fewer follow"),
    "a prefix cut short": (MAGIC + b"\x00", "does not start"),
    "a header that is not JSON": (_wire(header="{"), "not ASCII JSON"),
    "a header that is not ASCII": (_wire('"满分"'), "not ASCII JSON"),
    "an int of too many digits": (_wire("1" * 5000), "not ASCII JSON"),
    "a repeated key": (_wire(header='{"defined":{},"defined":{},"syntax_errors":{},"reaches":["list"],"error":{}}'),
                       "repeats a key"),
    "an array without a tag": (_wire("[1, 2]"), "no tag"),
    "an empty array": (_wire("[]"), "no tag"),
    "an unknown tag": (_wire('["set", 1]'), "unknown tag 'set'"),
    "a header nested too deeply": (_wire('["tuple",' * 100_000 + "]" * 100_000), "nested too deeply"),
    "outcomes tagged as a tuple": (_wire(header='{"defined":{},"syntax_errors":{},"reaches":["list"],'
                                               '"outcomes":["tuple"]}'), "outcomes are not a list"),
    "an output tagged as a list": (_wire('["list", 1]'), "holds a list"),
    "a lone surrogate in a string": (_wire('"\\ud800"'), "not valid UTF-8"),
    "a lone surrogate in a key": (_wire('{"\\udfff": 1}'), "not valid UTF-8"),
}


@pytest.mark.parametrize("name", FORGED_BYTES)
def test_forged_bytes_are_refused(name):
    data, why = FORGED_BYTES[name]
    with pytest.raises(Malformed, match=why):
        from_bytes(data, cases=1)


def test_the_bytes_a_forger_writes_are_read_as_the_harness_writes_them():
    """The format is what the module's docstring says: the records and buffers above are the real thing."""
    data = _wire(json.dumps(["tuple", ["tensor", "int16", [2], 4], ["tensor", "bool", [], 1], 0.5, "x"]),
                 struct.pack("=hh", -2, 7) + b"\x01")
    output = from_bytes(data, cases=1).outcomes[0].output
    assert _same(output, (torch.tensor([-2, 7], dtype=torch.int16), torch.tensor(True), 0.5, "x"))


def test_a_report_too_big_to_write_is_replaced_by_one_saying_so():
    """A header over the cap (here a 2 MiB string) is never written, so never refused as forged."""
    report = Report({"f": "代码单元 #1"}, {}, outcomes=(Ok("x" * 2 * 2**20),))
    with pytest.raises(TooBig):
        report.to_bytes()
    back = from_bytes(harness.serialise(report), cases=1)
    assert back.error == ErrorInfo(harness.TOO_MUCH_TEXT)


def _reference_like(dtype: torch.dtype, fill) -> torch.Tensor:
    return torch.full((2, 3), fill, dtype=dtype)


# Outputs that ``from_plain`` accepts, at its edges, against the kinds of reference a check compares with.
ACCEPTED = [*(v for output in ODD_OUTPUTS.values() for v in output), _nested(limits.OUTPUT_DEPTH, torch.ones(1)),
            *(_reference_like(dtype, 1) for dtype in DTYPES.values()),
            _reference_like(torch.float64, float("nan")), _reference_like(torch.int64, -2**63),
            None, "", {}, (), {"a": torch.ones(2, 3)}, (torch.ones(2, 3), {"b": 1}), (torch.ones(2, 3),) * 2]
REFERENCES = [_reference_like(torch.float64, 0.5), _reference_like(torch.int64, 2), _reference_like(torch.bool, True),
              torch.tensor(0.5, dtype=torch.float64), (_reference_like(torch.float64, 1), _reference_like(torch.bool, 0)),
              5, 0.25, None]


@pytest.mark.parametrize("float_dtype", [torch.float32, torch.bfloat16])
def test_compare_judges_everything_a_report_carries_without_raising(float_dtype):
    """What a report carries is the student's answer: wrong, never a crash of the grader (a grader problem)."""
    from_plain(_forged(lambda p: p["outcomes"].__setitem__(slice(None), [["ok", got, []] for got in ACCEPTED])),
               cases=len(ACCEPTED))
    free = torch.tensor([[True], [False]])
    for want in REFERENCES:
        for got in ACCEPTED:
            mismatch = compare(got, want, float_dtype, for_dtype(float_dtype),
                               free=free if isinstance(want, torch.Tensor) and want.dim() == 2 else None)
            assert mismatch is None or mismatch.text, (got, want)


# Outputs a report cannot carry, each failed in the sandbox with a message saying why (not "not yet
# implemented", not a forged report, not a grader problem).
UNCARRIED = {
    "a meta tensor": ("torch.empty(q.shape[:-1] + k.shape[-2:-1], dtype=q.dtype, device='meta')", "meta 张量（没有数值）"),
    "a sparse tensor": ("(q @ k.transpose(-2, -1)).to_sparse()", "稀疏张量（torch.sparse_coo）"),
    "a sparse CSR tensor": ("torch.eye(3).to_sparse_csr()", "稀疏张量（torch.sparse_csr）"),
    "an mkldnn tensor": ("torch.eye(3).to_mkldnn()", "layout 为 torch._mkldnn"),
    "a quantized tensor": ("torch.quantize_per_tensor((q @ k.transpose(-2, -1)).float(), 0.1, 0, torch.qint8)",
                           "量化张量（torch.qint8）"),
    "a nested tensor": ("torch.nested.nested_tensor([q[0], q[0][:1]])", "嵌套张量"),
    "a complex tensor": ("(q @ k.transpose(-2, -1)).to(torch.complex64)", "dtype 为 torch.complex64"),
    "a broadcast view of 2⁴⁰ elements": ("torch.zeros(()).expand(2**20, 2**20)", "超出了评分能收的范围"),
    "an int beyond int64": ("2**70", "超出了 int64 的范围"),
    "a tuple nested too deeply": ("(" * (limits.OUTPUT_DEPTH + 1) + "q" + ",)" * (limits.OUTPUT_DEPTH + 1), "嵌套得太深"),
    "a subclass whose copies are hollow": ("Hollow(q)", "请返回普通的稠密张量"),
}
HOLLOW = '''
class Hollow(torch.Tensor):
    @staticmethod
    def __new__(cls, like):
        return torch.Tensor._make_wrapper_subclass(cls, like.shape, dtype=like.dtype)

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        return torch.empty(2, device="meta")
'''


def _returning(expression: str) -> list[Cell]:
    scores = f"{HOLLOW}\ndef attention_scores(q, k):\n    return {expression}\n"
    return a01.cells({"attention_scores": scores})


@pytest.mark.parametrize("what", UNCARRIED)
def test_an_output_a_report_cannot_carry_fails_with_a_message(what):
    expression, said = UNCARRIED[what]
    if "mkldnn" in expression and not torch.backends.mkldnn.is_available():
        pytest.skip("this torch has no mkldnn")
    verdict = grade(EXERCISES["attention_scores"], _returning(expression))
    assert not verdict.passed and not verdict.grader_problem, verdict.message
    assert said in verdict.summary and "格式不对" not in verdict.message, verdict.message


TORCH_SUBCLASSES = {
    "nn.Parameter": "torch.nn.Parameter(q @ k.transpose(-2, -1) / math.sqrt(q.size(-1)))",
    "a subclass whose __torch_function__ refuses everything": "Refusing.wrap(q @ k.transpose(-2, -1) / math.sqrt(q.size(-1)))",
}
REFUSING = '''
class Refusing(torch.Tensor):
    @staticmethod
    def wrap(t):
        return t.as_subclass(Refusing)

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        if func is not torch.Tensor.as_subclass:
            raise RuntimeError("no copies of me")
        return super().__torch_function__(func, types, args, kwargs or {})
'''


@pytest.mark.parametrize("how", TORCH_SUBCLASSES)
def test_a_tensor_subclass_is_graded_as_the_values_it_holds(how):
    scores = f"{REFUSING}\ndef attention_scores(q, k):\n    return {TORCH_SUBCLASSES[how]}\n"
    verdict = grade(EXERCISES["attention_scores"], a01.cells({"attention_scores": scores}))
    assert verdict.passed, verdict.message


# --- grader problems raised inside the sandbox -------------------------------------------------------------

TINY_CONFIG = {"hidden_size": 8, "intermediate_size": 16, "num_hidden_layers": 1, "num_attention_heads": 2,
               "num_key_value_heads": 1, "head_dim": 4, "rope_theta": 10000.0, "rms_norm_eps": 1e-5,
               "vocab_size": 32, "bos_token_id": 1, "eos_token_id": 2}


@pytest.fixture(scope="module")
def broken_model(tmp_path_factory):
    """A sandbox whose cache holds a model folder it may read, with a config but no weights file (as when the
    weights are gone, or unreadable), and greedy_generate's exercise with one case on that folder."""
    cache = tmp_path_factory.mktemp("cache")
    old = os.environ.get(CACHE_ENV)
    os.environ[CACHE_ENV] = str(cache)
    try:
        folder = smollm2.model_folder()
        folder.mkdir(parents=True)
        (folder / "config.json").write_text(json.dumps(TINY_CONFIG), encoding="utf-8")
        sandbox = Sandbox()
        sandbox.hello()  # the fork server grants the model folder that exists when it starts
    finally:
        if old is None:
            del os.environ[CACHE_ENV]
        else:
            os.environ[CACHE_ENV] = old
    case = Case("没有权重文件的模型", (str(folder), torch.tensor([[3, 5, 7]]), 2, None))
    yield sandbox, dataclasses.replace(greedy_generate.EXERCISE, cases=lambda: [case])
    sandbox.stop()


def test_unreadable_model_files_are_the_graders_problem_and_are_graded_again(broken_model, tmp_path):
    sandbox, exercise = broken_model
    verdict = grade(exercise, a07.cells(), sandbox=sandbox)
    assert verdict.grader_problem and not verdict.passed, verdict.message
    assert "评分环境出了问题，不是你的代码的问题" in verdict.summary and "读不到" in verdict.summary, verdict.message
    store = ResultStore(tmp_path)
    store.save("broken", NotebookResult("07_real_model", (verdict,), 1.0))
    store.save("wrong", NotebookResult("07_real_model", (dataclasses.replace(verdict, grader_problem=False),), 1.0))
    assert not store.done("broken") and store.done("wrong")


def test_unreadable_stored_weights_are_the_graders_problem_too():
    """The protocols are a package: a ``GraderProblem`` that another of its modules raises (a module built from
    stored weights the sandbox cannot read, ``protocols.case.build``) is vouched for as the model's is."""
    exercise = EXERCISES["MultiHeadAttention"]
    case = exercise.cases()[0]
    init, weights, x = case.args
    unreadable = StoredTensors(tuple((name, "/nonexistent/attention-course/weights.safetensors", name) for name in weights))
    broken = dataclasses.replace(case, args=(init, unreadable, x))
    verdict = grade(dataclasses.replace(exercise, cases=lambda: [broken]), a02.cells())
    assert verdict.grader_problem and not verdict.passed, verdict.message
    assert "读不到课程缓存里的权重" in verdict.summary, verdict.message


STUDENT_RAISES = {
    "the grader's class, reached through the model it is handed": '''
def greedy_generate(model, input_ids, max_new_tokens, attention_mask=None):
    raise type(model).__init__.__globals__["GraderProblem"]("读不到模型的权重")
''',
    "a subclass of the grader's class": '''
def greedy_generate(model, input_ids, max_new_tokens, attention_mask=None):
    class GraderProblem(type(model).__init__.__globals__["GraderProblem"]):
        pass
    raise GraderProblem("读不到模型的权重")
''',
    "a look-alike with the same name and module": '''
class GraderProblem(Exception):
    pass
GraderProblem.__module__ = "course.errors"

def greedy_generate(model, input_ids, max_new_tokens, attention_mask=None):
    raise GraderProblem("读不到模型的权重")
''',
}


@pytest.mark.parametrize("how", STUDENT_RAISES)
def test_a_student_who_raises_a_grader_problem_just_fails(broken_model, how):
    sandbox, exercise = broken_model
    verdict = grade(exercise, a07.cells({"greedy_generate": STUDENT_RAISES[how]}),
                    sandbox=sandbox)
    assert not verdict.grader_problem and not verdict.passed, verdict.message
    assert verdict.summary.startswith("运行出错：GraderProblem"), verdict.message


def test_a_student_who_raises_it_outside_the_model_just_fails():
    """The class found in memory, raised from an exercise that builds no model."""
    attack = '''
import gc
def attention_scores(q, k):
    gc.unfreeze()  # what the fork server loaded is frozen out of gc.get_objects() until then
    found = [c for c in gc.get_objects() if isinstance(c, type) and c.__name__ == "GraderProblem"]
    raise found[0]("评分环境出了问题")
'''
    verdict = grade(EXERCISES["attention_scores"], a01.cells({"attention_scores": attack}))
    assert not verdict.grader_problem and verdict.summary.startswith("运行出错：GraderProblem"), verdict.message


class _Answering:
    """A stand-in sandbox that hands back the given report."""

    def __init__(self, report: Report):
        self.report = report

    def run(self, job, timeout_s):
        return Answer("report", self.report.to_bytes())


def test_a_grader_problems_message_is_cleaned():
    report = Report({"attention_scores": "代码单元 #1"}, {}, outcomes=(GraderError("读不到\x1b[2J模型" + "!" * 10**5),))
    verdict = grade(EXERCISES["attention_scores"], a01.cells(), sandbox=_Answering(report))
    assert verdict.grader_problem and "读不到[2J模型" in verdict.summary and "\x1b" not in verdict.summary
    assert len(verdict.summary) < 3000


SUBCLASSED = {
    "an int subclass": ("kv_cache_bytes", a03, '''
class Bytes(int):
    pass

def kv_cache_bytes(batch, seq_len, num_layers, num_kv_heads, head_dim, bytes_per_elem):
    return Bytes(2 * num_kv_heads * head_dim * bytes_per_elem * num_layers * seq_len * batch)
'''),
    "a dict key whose str() is a str subclass": ("kv_cache_bytes", a03, '''
class Name(str):
    pass

class Key:
    def __str__(self):
        return Name("bytes")

def kv_cache_bytes(batch, seq_len, num_layers, num_kv_heads, head_dim, bytes_per_elem):
    return {Key(): 2 * num_kv_heads * head_dim * bytes_per_elem * num_layers * seq_len * batch}
'''),
}


@pytest.mark.parametrize("how", SUBCLASSED)
def test_builtin_subclasses_in_an_output_are_made_plain_and_graded(how):
    """What ``torch.load(weights_only=True)`` would refuse is made plain in the sandbox: the int is graded as
    the int it is, the dict as a dict (and judged wrong on its output), neither as a forged report nor as a
    report the sandbox could not write."""
    name, module, source = SUBCLASSED[how]
    verdict = grade(EXERCISES[name], module.cells({name: source}))
    assert verdict.passed or verdict.summary.startswith("没有通过："), verdict.message
    assert verdict.passed == (how == "an int subclass"), verdict.message
