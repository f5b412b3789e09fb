"""The Python API for integrators, ``autograder.grade_notebook`` and ``autograder.grade_code``: the verdicts
every command gives, for a whole notebook file or for one exercise's source text."""
import hashlib
import os
from pathlib import Path

import pytest

import autograder
from autograder.engine.assignments import ASSIGNMENTS
from tests.notebooks import ASSIGNMENT, filled, released_path, source_solutions, write_submission
from tests.students import a01


def test_a_solved_notebook_gets_every_point_and_is_left_as_it_was(tmp_path):
    notebook = write_submission(tmp_path, filled(source_solutions()))
    before = hashlib.sha256(notebook.read_bytes()).hexdigest()
    verdicts = autograder.grade_notebook(notebook)
    assert [v.exercise for v in verdicts] == [e.name for e in ASSIGNMENTS[ASSIGNMENT]]
    assert all(v.passed and not v.grader_problem for v in verdicts), [v.message for v in verdicts if not v.passed]
    assert hashlib.sha256(notebook.read_bytes()).hexdigest() == before


def test_the_released_stubs_are_not_implemented():
    verdicts = autograder.grade_notebook(released_path())
    assert {v.summary for v in verdicts} == {"还没有实现（not yet implemented）"}
    assert sum(v.points for v in verdicts) == 0


def test_grade_code_names_a_known_mistake():
    exercise, named, code = next(m for m in a01.MISTAKES if m[0] == "padding_mask")
    verdict = autograder.grade_code(exercise, a01.source({exercise: code}))
    assert not verdict.passed and named in verdict.message and verdict.mistake


def test_grade_code_passes_correct_code():
    verdict = autograder.grade_code("causal_mask", a01.source({"causal_mask": source_solutions()["causal_mask"]}))
    assert verdict.passed and verdict.points == verdict.max_points


def test_bad_requests_say_what_is_wrong(tmp_path):
    with pytest.raises(KeyError, match="causal_msk"):
        autograder.grade_code("causal_msk", "")
    stray = tmp_path / "homework.ipynb"
    stray.write_text("{}", encoding="utf-8")
    with pytest.raises(autograder.SubmissionError, match="属于哪个作业"):
        autograder.grade_notebook(stray)
    broken = tmp_path / f"{ASSIGNMENT}.ipynb"
    broken.write_text("{", encoding="utf-8")
    assert all("不是合法的 notebook" in v.summary for v in autograder.grade_notebook(broken))


def _odd_paths(tmp_path) -> dict:
    folder = tmp_path / "folder" / f"{ASSIGNMENT}.ipynb"
    folder.mkdir(parents=True)
    fifo = tmp_path / f"fifo-{ASSIGNMENT}.ipynb"
    os.mkfifo(fifo)
    return {"a folder named like a notebook": folder, "a FIFO": fifo, "a device": Path("/dev/zero"),
            "/proc/self/mem, which cannot be read": Path("/proc/self/mem")}


@pytest.mark.skipif(not hasattr(os, "mkfifo") or not os.path.exists("/proc/self/mem"), reason="needs Linux")
def test_whatever_the_path_holds_the_verdicts_say_so_and_nothing_raises(tmp_path):
    for what, path in _odd_paths(tmp_path).items():
        verdicts = autograder.grade_notebook(path, ASSIGNMENT)
        assert len(verdicts) == len(ASSIGNMENTS[ASSIGNMENT]), what
        assert all(v.points == 0 and ("不是普通文件" in v.summary or "无法读取" in v.summary) for v in verdicts), \
            (what, verdicts[0].summary)
    with pytest.raises(autograder.SubmissionError, match="不是 notebook（.ipynb），也不是文件夹"):
        autograder.grade_notebook("/proc/self/mem")
    with pytest.raises(autograder.SubmissionError, match="不存在"):
        autograder.grade_notebook(tmp_path / "nothing here")
