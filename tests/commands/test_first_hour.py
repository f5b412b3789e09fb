"""A new student's first hour: a working copy of their own, grading only what they submitted, and messages
that point where JupyterLab does (the doctor that says what the machine lacks: ``test_doctor.py``)."""
import json
import subprocess

from autograder.engine.assignments import ASSIGNMENTS, EXERCISES
from autograder.engine.judging import grade
from autograder.engine.student_code import Cell
from course import layout
from course.layout import ROOT as REPO
from course.tools.workspace import copy_notebooks
from tests.commands import pytest_autograder
from tests.notebooks import ASSIGNMENT, filled, released_path, source_solutions, write_submission
from tests.students import a01


def run(*command, **kwargs):
    return subprocess.run([str(c) for c in command], cwd=REPO, capture_output=True, text=True, **kwargs)


def test_course_work_copies_every_notebook_once_and_never_overwrites(tmp_path):
    done = run("course-work", "--release", released_path().parent.parent, "--work", tmp_path / "work")
    assert done.returncode == 0, done.stderr
    copies = sorted((tmp_path / "work").glob("*/*.ipynb"))
    assert [p.parent.name for p in copies] == sorted(p.parent.name for p in released_path().parent.parent.glob("*/*.ipynb"))
    mine = copies[0]
    mine.write_text("my work", encoding="utf-8")
    copied, kept = copy_notebooks(released_path().parent.parent, tmp_path / "work")
    assert not copied and mine in kept and mine.read_text(encoding="utf-8") == "my work"


def test_grading_a_work_folder_counts_only_what_was_submitted(tmp_path):
    work = tmp_path / "work"
    write_submission(work, filled(source_solutions()))
    results = tmp_path / "results.json"
    done = pytest_autograder("--submission", work, "--results-json", results)
    assert done.returncode == 0, done.stdout
    total = sum(e.points for e in ASSIGNMENTS[ASSIGNMENT])
    assert f"总分 Total: {total}/{total}" in done.stdout and f"评分的文件夹 Graded: {work}" in done.stdout
    others = [a for a in ASSIGNMENTS if a != ASSIGNMENT]
    assert all(f"{a}  未提交" in done.stdout for a in others)
    written = json.loads(results.read_text(encoding="utf-8"))
    assert written["score"] == total and len(written["tests"]) == len(ASSIGNMENTS[ASSIGNMENT])
    assert "未提交" in written["output"]


def test_after_course_work_the_total_counts_only_the_assignments_begun(tmp_path):
    """``course-work`` copies every notebook: one solved, one begun (one exercise written, the rest stubs that
    fail) and the untouched others, which are listed as not started and left out of the total."""
    work = tmp_path / "work"
    copy_notebooks(released_path().parent.parent, work)
    begun = "02_multi_head"
    first = ASSIGNMENTS[begun][0].name
    write_submission(work, filled(source_solutions()))
    write_submission(work, filled({first: source_solutions(begun)[first]}, begun), begun)
    done = pytest_autograder("--submission", work)
    assert done.returncode == 1, done.stdout  # the begun assignment's stubs fail
    untouched = [a for a in ASSIGNMENTS if a not in (ASSIGNMENT, begun)]
    assert all(f"{a}  未开始" in done.stdout for a in untouched), done.stdout
    assert f"{ASSIGNMENT}  未开始" not in done.stdout and f"{begun}  未开始" not in done.stdout
    table = done.stdout.split("评分 Score")[1].splitlines()
    assert len([line for line in table if "✗" in line and "还没有实现" in line]) == len(ASSIGNMENTS[begun]) - 1, table
    got = sum(e.points for e in ASSIGNMENTS[ASSIGNMENT]) + ASSIGNMENTS[begun][0].points
    out_of = sum(e.points for a in (ASSIGNMENT, begun) for e in ASSIGNMENTS[a])
    assert f"总分 Total: {got}/{out_of}（{len(untouched)} 个作业未开始，不计入）" in done.stdout, done.stdout


def test_require_all_counts_what_was_not_submitted_as_zero(tmp_path):
    work = tmp_path / "work"
    write_submission(work, filled(source_solutions()))
    strict = pytest_autograder("--submission", work, "--require-all")
    assert strict.returncode == 1
    others = [a for a in ASSIGNMENTS if a != ASSIGNMENT]
    assert all(f"{a} 未提交：" in strict.stdout for a in others), strict.stdout
    total = sum(e.points for e in ASSIGNMENTS[ASSIGNMENT])
    assert f"总分 Total: {total}/{sum(e.points for e in EXERCISES.values())}" in strict.stdout


def test_without_a_submission_the_grader_takes_the_work_folder_when_there_is_one(tmp_path, monkeypatch):
    """The rule `pytest autograder/` applies when no --submission is given, in a course folder of its own
    (work/ in the checkout would change what every argument-less run grades)."""
    from autograder.conftest import default_submission  # here, not at collection: it starts the sandbox

    monkeypatch.setattr(layout, "ROOT", tmp_path)
    assert default_submission() == tmp_path / layout.RELEASE
    copy_notebooks(released_path().parent.parent, tmp_path / layout.WORK)
    assert default_submission() == tmp_path / layout.WORK


def _message(exercise: str, source: str, shown: str = "In [7]") -> str:
    verdict = grade(EXERCISES[exercise], [Cell("代码单元 #1", "lower = 3", "In [2]"),
                                          Cell("代码单元 #2", a01.source({exercise: source}), shown)])
    assert not verdict.passed
    return verdict.message


def test_an_error_is_located_by_function_and_in_number():
    message = _message("causal_mask", "def causal_mask(q_len, k_len=None):\n    x = 1\n    return x.shape\n")
    assert "出错位置：`causal_mask` 里，In [7] 第" in message and "return x.shape" in message, message


def test_a_demo_variable_inside_a_function_is_explained():
    message = _message("causal_mask", "def causal_mask(q_len, k_len=None):\n"
                                      "    return torch.ones(q_len, k_len or q_len).tril(lower).bool()\n")
    assert "NameError：`lower` 没有定义" in message and "`lower` 是在 In [2] 的演示代码里赋值的" in message, message
    assert "只运行 import、函数和类的定义" in message


def test_k_dot_t_is_named():
    message = _message("attention_scores", "def attention_scores(q, k):\n    return q @ k.T / math.sqrt(q.shape[-1])\n")
    assert "看起来是：用了 k.T" in message, message


def test_attention_names_a_masked_softmax_that_fills_with_a_big_negative_number():
    big_negative = next(code for name, named, code in a01.MISTAKES if named == "用一个很大的负数代替了真正的掩码")
    verdict = grade(EXERCISES["attention"], a01.cells({"masked_softmax": big_negative}))
    assert verdict.mistake == "用的 masked_softmax 在整行被遮住时没有给出全 0", verdict.message

