"""Hostile submissions graded whole, as every channel grades them (``grade_notebook`` on this process's
sandbox): the course's files and the results written are exactly what honest grading gives, and what a
submission holds (links, FIFOs, code no parser can take) costs only that submission's own points."""
import hashlib
import json
import os
import time
from importlib.util import cache_from_source
from pathlib import Path

import autograder.engine.checks.attention_scores
import autograder.engine.judging
from autograder.engine.assignments import ASSIGNMENTS
from autograder.engine.grading import grade_notebook
from autograder.engine.submission import notebooks
from autograder.scoreboard import Scoreboard
from course.layout import ROOT as REPO
from tests.notebooks import ASSIGNMENT, filled, source_solutions, write_submission


def course_files() -> dict[Path, str]:
    """Digest of every file of the grading code, bytecode caches included."""
    return {path: hashlib.sha256(path.read_bytes()).hexdigest()
            for folder in ("autograder", "solutions", "course", "source")
            for path in sorted((REPO / folder).rglob("*")) if path.is_file()}


def test_a_hostile_notebook_changes_nothing_but_its_own_score(tmp_path, sandbox):
    results = tmp_path / "results.json"
    check, engine = autograder.engine.checks.attention_scores.__file__, autograder.engine.judging.__file__
    targets = [check, cache_from_source(check), engine, REPO / "solutions" / "attention_basics.py"]
    hostile = {
        # Correct answers, each after an attack: the points are earned, the attacks must change nothing.
        "attention_scores": f'''
import os
def attention_scores(q, k):
    for path in {[str(t) for t in targets]!r}:
        try:
            with open(path, "r+b") as f:
                f.write(b"passes everything")
        except OSError:
            pass
    return q @ k.transpose(-2, -1) / q.shape[-1] ** 0.5
''',
        # A process left behind to overwrite results.json once grading has written it.
        "causal_mask": f'''
import os, time
def causal_mask(q_len, k_len=None, window=None):
    try:
        if os.fork() == 0:
            os.setsid()
            time.sleep(3)
            with open({str(results)!r}, "w") as f:
                f.write('{{"score": 50, "tests": []}}')
            os._exit(0)
    except OSError:
        pass
    for pid in (-1, os.getppid()):
        try:
            os.kill(pid, 9)
        except OSError:
            pass
    k_len = k_len or q_len
    seen = torch.ones(q_len, k_len, dtype=torch.bool).tril(k_len - q_len)
    return seen if window is None else seen & ~torch.ones(q_len, k_len, dtype=torch.bool).tril(k_len - q_len - window)
''',
        "padding_mask": "def padding_mask(attention_mask):\n    raise NotImplementedError()\n",
    }
    notebook = write_submission(tmp_path, filled({**source_solutions(), **hostile}))
    before = course_files()
    board = Scoreboard()
    for verdict in grade_notebook(notebook, sandbox=sandbox):
        board.add(ASSIGNMENT, verdict)
    board.write_results_json(results)
    full = sum(e.points for e in ASSIGNMENTS[ASSIGNMENT])
    lost = next(e.points for e in ASSIGNMENTS[ASSIGNMENT] if e.name == "padding_mask")
    assert board.total() == (full - lost, full), board.table()
    time.sleep(4)  # longer than the leftover process would have waited
    written = json.loads(results.read_text(encoding="utf-8"))
    assert written["score"] == full - lost and len(written["tests"]) == len(ASSIGNMENTS[ASSIGNMENT])
    after = course_files()
    # New bytecode caches may be this process's own (a module imported for the first time); any file that
    # was there must be unchanged, and nothing else may appear.
    assert {path: after.get(path) for path in before} == before
    assert not [path for path in after.keys() - before.keys() if "__pycache__" not in path.parts]


def test_files_that_are_not_notebooks_cost_only_their_assignments(tmp_path, sandbox):
    """A link to another student's notebook, a FIFO and code nested too deep for Python's parser: each is
    refused with a message, and every exercise keeps its verdict."""
    other = write_submission(tmp_path / "other-student", filled(source_solutions()))
    mine = tmp_path / "mine"
    (mine / ASSIGNMENT).mkdir(parents=True)
    (mine / ASSIGNMENT / f"{ASSIGNMENT}.ipynb").symlink_to(other)
    (mine / "02_multi_head").mkdir()
    os.mkfifo(mine / "02_multi_head" / "02_multi_head.ipynb")
    nested = "X = " + "(" * 50 + "-" * 100_000 + "1" + ")" * 50 + "\n"
    solutions = source_solutions("03_gqa_kv_cache")
    write_submission(mine, filled({**solutions, "repeat_kv": nested + solutions["repeat_kv"]}, "03_gqa_kv_cache"),
                     "03_gqa_kv_cache")
    found = notebooks(mine)
    # The FIFO's and the unparsable notebook's assignments were handed in: they are graded, not "未提交".
    assert sorted(found) == [ASSIGNMENT, "02_multi_head", "03_gqa_kv_cache"]
    verdicts = {a: {v.exercise: v for v in grade_notebook(path, a, sandbox=sandbox)} for a, path in found.items()}
    assert {a: list(v) for a, v in verdicts.items()} == {a: [e.name for e in ASSIGNMENTS[a]] for a in found}
    assert all("指向提交文件夹以外的链接" in v.message and v.points == 0 for v in verdicts[ASSIGNMENT].values())
    assert all("不是普通文件" in v.message and v.points == 0 for v in verdicts["02_multi_head"].values())
    gqa = verdicts["03_gqa_kv_cache"]
    assert "无法解析" in gqa["repeat_kv"].message, gqa["repeat_kv"].message
    assert gqa["KVCache"].points == 2 and gqa["kv_cache_bytes"].points == 1  # the other cells still count
