"""The sandbox's report (``autograder.engine.sandbox.report``): what the harness writes is what the grader reads,
and nothing else gets through; a grader problem inside the sandbox is the grader's, regraded on the next run,
and a student cannot claim one by raising it."""
import dataclasses
import io
import json
import os

import pytest
import torch

from autograder.engine.assignments import EXERCISES
from autograder.engine.checks import greedy_generate
from autograder.engine.exercise import grade
from autograder.engine.protocols import Case
from autograder.engine.sandbox.client import Answer, Sandbox
from autograder.engine.sandbox.report import (
    Error,
    ErrorInfo,
    GraderError,
    Malformed,
    Ok,
    Report,
    from_bytes,
    from_plain,
)
from autograder.engine.student_code import Cell
from autograder.instructor.classroom.results_store import NotebookResult, ResultStore
from course import smollm2
from course.cache import CACHE_ENV
from tests import student_code, student_code_03, student_code_07

OUTPUT = (torch.arange(6.0).view(2, 3), {"mask": torch.tensor([True, False]), "n": 3, "scale": 0.5},
          ("text", None, False))
REPORTS = {
    "outcomes": Report({"f": "代码单元 #1"}, {"代码单元 #2": "第 1 行：invalid syntax"},
                       outcomes=(Ok(OUTPUT, ("参数 q",)), Ok(torch.zeros(0)), Error(ErrorInfo("运行出错", "第 3 行")))),
    "grader": Report({"f": "代码单元 #1"}, {}, outcomes=(Ok(1), GraderError("读不到模型"))),
    "error": Report({}, {}, error=ErrorInfo("执行 notebook 里的定义时出错")),
    "not defined": Report({"g": "代码单元 #1"}, {}),
}


def _same(a, b) -> bool:
    """Equal plain data, tensors compared by dtype and value, tuples and lists told apart."""
    if isinstance(a, torch.Tensor):
        return type(b) is torch.Tensor and a.dtype == b.dtype and torch.equal(a, b)
    if isinstance(a, (tuple, list)):
        return type(a) is type(b) and len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    if isinstance(a, dict):
        return type(b) is dict and a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    return type(a) is type(b) and a == b


@pytest.mark.parametrize("name", REPORTS)
def test_a_report_comes_back_as_it_was_written(name):
    report = REPORTS[name]
    plain = torch.load(io.BytesIO(report.to_bytes()), weights_only=True)  # what the grader is willing to unpickle
    assert _same(plain, report.to_plain())
    back = from_bytes(report.to_bytes(), cases=3)
    assert _same(back.to_plain(), report.to_plain())
    assert [type(o) for o in back.outcomes] == [type(o) for o in report.outcomes]
    assert (back.defined, back.syntax_errors, back.error) == (report.defined, report.syntax_errors, report.error)


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
}


def _nested(depth: int):
    value = ()
    for _ in range(depth):
        value = (value,)
    return value


@pytest.mark.parametrize("name", FORGED)
def test_a_forged_report_is_refused(name):
    change, instead, why = FORGED[name]
    with pytest.raises(Malformed, match=why):
        from_plain(_forged(change) if instead is None else instead, cases=3)


def test_the_error_report_is_checked_too():
    for error in ({"summary": "x", "details": None}, {"summary": "x", "details": "", "points": "4"}, "x"):
        with pytest.raises(Malformed, match="the error"):
            from_plain({"defined": {}, "syntax_errors": {}, "error": error}, cases=1)


def _saved(value) -> bytes:
    buffer = io.BytesIO()
    torch.save(value, buffer)
    return buffer.getvalue()


@pytest.mark.parametrize("data", [b"", b"full marks", _saved({"defined": {}, "syntax_errors": {}, "outcomes": [],
                                                               "x": Case("an object torch.load may not build")})],
                         ids=["empty", "text", "an object"])
def test_bytes_that_are_not_a_report_are_refused(data):
    with pytest.raises(Malformed, match="torch.load"):
        from_bytes(data, cases=1)


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


def _cells(source: str) -> list[Cell]:
    return [Cell("代码单元 #1", source)]


def test_unreadable_model_files_are_the_graders_problem_and_are_graded_again(broken_model, tmp_path):
    sandbox, exercise = broken_model
    verdict = grade(exercise, _cells(student_code_07.notebook_code()), sandbox=sandbox)
    assert verdict.grader_problem and not verdict.passed, verdict.message
    assert "评分环境出了问题，不是你的代码的问题" in verdict.summary and "读不到" in verdict.summary, verdict.message
    store = ResultStore(tmp_path)
    store.save("broken", NotebookResult("07_real_model", (verdict,), 1.0))
    store.save("wrong", NotebookResult("07_real_model", (dataclasses.replace(verdict, grader_problem=False),), 1.0))
    assert not store.done("broken") and store.done("wrong")


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
GraderProblem.__module__ = "autograder.engine.sandbox.walls"

def greedy_generate(model, input_ids, max_new_tokens, attention_mask=None):
    raise GraderProblem("读不到模型的权重")
''',
}


@pytest.mark.parametrize("how", STUDENT_RAISES)
def test_a_student_who_raises_a_grader_problem_just_fails(broken_model, how):
    sandbox, exercise = broken_model
    verdict = grade(exercise, _cells(student_code_07.notebook_code({"greedy_generate": STUDENT_RAISES[how]})),
                    sandbox=sandbox)
    assert not verdict.grader_problem and not verdict.passed, verdict.message
    assert verdict.summary.startswith("运行出错：GraderProblem"), verdict.message


def test_a_student_who_raises_it_outside_the_model_just_fails():
    """The class found in memory, raised from an exercise that builds no model."""
    attack = '''
import gc
def attention_scores(q, k):
    found = [c for c in gc.get_objects() if isinstance(c, type) and c.__name__ == "GraderProblem"]
    raise found[0]("评分环境出了问题")
'''
    verdict = grade(EXERCISES["attention_scores"], _cells(student_code.notebook_code({"attention_scores": attack})))
    assert not verdict.grader_problem and verdict.summary.startswith("运行出错：GraderProblem"), verdict.message


class _Answering:
    """A stand-in sandbox that hands back the given report."""

    def __init__(self, report: Report):
        self.report = report

    def run(self, job, timeout_s):
        return Answer("report", self.report.to_bytes())


def test_a_grader_problems_message_is_cleaned():
    report = Report({"attention_scores": "代码单元 #1"}, {}, outcomes=(GraderError("读不到\x1b[2J模型" + "!" * 10**5),))
    verdict = grade(EXERCISES["attention_scores"], _cells(student_code.notebook_code()), sandbox=_Answering(report))
    assert verdict.grader_problem and "读不到[2J模型" in verdict.summary and "\x1b" not in verdict.summary
    assert len(verdict.summary) < 3000


SUBCLASSED = {
    "an int subclass": ("kv_cache_bytes", student_code_03, '''
class Bytes(int):
    pass

def kv_cache_bytes(batch, seq_len, num_layers, num_kv_heads, head_dim, bytes_per_elem):
    return Bytes(2 * num_kv_heads * head_dim * bytes_per_elem * num_layers * seq_len * batch)
'''),
    "a dict key whose str() is a str subclass": ("kv_cache_bytes", student_code_03, '''
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
    verdict = grade(EXERCISES[name], _cells(module.notebook_code({name: source})))
    assert verdict.passed or verdict.summary.startswith("没有通过："), verdict.message
    assert verdict.passed == (how == "an int subclass"), verdict.message
