"""`pytest autograder/` run on hostile submissions, end to end: the course's files, the score table and
results.json are exactly what honest grading gives, and what a submission holds (links, FIFOs, code no
parser can take) costs only that submission's own points."""
import hashlib
import json
import os
import subprocess
import sys
import time

from autograder.engine.assignments import ASSIGNMENTS
from course.layout import ROOT as REPO
from tests.notebooks import ASSIGNMENT, filled, source_solutions, write_submission


def run_grader(*args, **kwargs):
    return subprocess.run([sys.executable, "-m", "pytest", "autograder/", "-p", "no:cacheprovider", *map(str, args)],
                          cwd=REPO, capture_output=True, text=True, **kwargs)


def course_files() -> dict[str, str]:
    """Digest of every file of the grading code, bytecode caches included."""
    found = {}
    for folder in ("autograder", "solutions", "course", "source"):
        for path in sorted((REPO / folder).rglob("*")):
            if path.is_file():
                found[str(path.relative_to(REPO))] = hashlib.sha256(path.read_bytes()).hexdigest()
    return found


def test_a_hostile_notebook_changes_nothing_but_its_own_score(tmp_path):
    results = tmp_path / "results.json"
    solutions = source_solutions()
    targets = [REPO / "autograder" / "checks" / "__pycache__" / "attention_scores.cpython-311.pyc",
               REPO / "autograder" / "exercise.py", REPO / "solutions" / "attention_basics.py"]
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
        "causal_mask": f'''
import os, time
def causal_mask(q_len, k_len=None):
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
    return torch.ones(q_len, k_len, dtype=torch.bool).tril(k_len - q_len)
''',
        "padding_mask": "def padding_mask(attention_mask):\n    raise NotImplementedError()\n",
    }
    notebook = write_submission(tmp_path, filled({**solutions, **hostile}))
    before = course_files()
    done = run_grader("--submission", notebook.parent, "--results-json", results)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "总分 Total: 10/12" in done.stdout, done.stdout
    time.sleep(4)  # longer than the leftover process would have waited
    written = json.loads(results.read_text(encoding="utf-8"))
    assert written["score"] == 10 and len(written["tests"]) == 5
    assert course_files() == before


def test_files_that_are_not_notebooks_cost_only_their_assignments(tmp_path):
    """A link to another student's notebook, a FIFO and code nested too deep for Python's parser: each is
    refused with a message, quickly, and every exercise stays in the table."""
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
    results = tmp_path / "results.json"
    done = run_grader("--submission", mine, "--results-json", results, timeout=300)
    assert done.returncode == 1
    assert "指向提交文件夹以外的链接" in done.stdout and "不是普通文件" in done.stdout, done.stdout
    written = json.loads(results.read_text(encoding="utf-8"))
    # The FIFO's and the unparsable notebook's assignments were handed in: they are graded, not "未提交".
    handed_in = (ASSIGNMENT, "02_multi_head", "03_gqa_kv_cache")
    by_name = {t["name"]: t for t in written["tests"]}
    assert sorted(by_name) == sorted(f"{a} / {e.name}" for a in handed_in for e in ASSIGNMENTS[a])
    assert all(by_name[f"{ASSIGNMENT} / {e.name}"]["score"] == 0 for e in ASSIGNMENTS[ASSIGNMENT])
    gqa = {e.name: by_name[f"03_gqa_kv_cache / {e.name}"] for e in ASSIGNMENTS["03_gqa_kv_cache"]}
    assert "无法解析" in gqa["repeat_kv"]["output"], gqa["repeat_kv"]
    assert gqa["KVCache"]["score"] == 2 and gqa["kv_cache_bytes"]["score"] == 1  # the other cells still count
    out_of = sum(e.points for a in handed_in for e in ASSIGNMENTS[a])
    assert f"总分 Total: {written['score']}/{out_of}" in done.stdout
