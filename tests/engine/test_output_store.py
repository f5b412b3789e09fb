"""The references' and mistakes' outputs kept on disk (``output_store``): a new process reads them instead of
running the real-size model again, a file that is not what it claims is never believed, and student code can
read none of them behind any set of walls."""
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from autograder.engine import known_outputs, output_store
from autograder.engine.assignments import EXERCISES
from autograder.engine.judging import grade
from autograder.engine.sandbox.client import Sandbox
from course.layout import ROOT as REPO
from course.protocols import Case
from tests import caches
from tests.sandbox.test_hostile_submissions import SCORES, cells_with

LAYER = EXERCISES["Qwen35GatedDeltaNet"]
NAMED = "输出的 RMSNorm 乘的是 (1 + weight)"  # one of the tests' mistakes of the layer, named by its catalogue

# Grades the layer's seeded mistake in a fresh process and prints what it read from and wrote to the store.
_GRADE_IN_A_NEW_PROCESS = f'''
import sys
sys.path.insert(0, {str(REPO)!r})
from autograder.engine import output_store
from autograder.engine.assignments import EXERCISES
from autograder.engine.judging import grade
from tests.students import a08 as student
counts = {{"read": 0, "computed": 0}}
read = output_store.read
def counted(where):
    found = read(where)
    counts["read" if found is not None else "computed"] += 1
    return found
output_store.read = counted
source = next(m[2] for m in student.MISTAKES if m[1] == {NAMED!r})
verdict = grade(EXERCISES["Qwen35GatedDeltaNet"], student.cells({{"Qwen35GatedDeltaNet": source}}))
print(verdict.summary)
print(counts["read"], counts["computed"])
'''


def _grade_in_a_new_process(cache: Path) -> tuple[str, int, int]:
    done = subprocess.run([sys.executable, "-c", _GRADE_IN_A_NEW_PROCESS], capture_output=True, text=True,
                          env={**os.environ, "ATTENTION_COURSE_CACHE": str(cache)}, timeout=600)
    assert done.returncode == 0, done.stderr
    summary, counts = done.stdout.strip().splitlines()[-2:]
    read, computed = map(int, counts.split())
    return summary, read, computed


@pytest.mark.slow
def test_a_new_process_reads_the_outputs_instead_of_computing_them(tmp_path):
    first = _grade_in_a_new_process(tmp_path)
    again = _grade_in_a_new_process(tmp_path)
    assert first[0] == again[0] == f"没有通过：{NAMED}"
    assert first[1] == 0 and first[2] > 0  # an empty store: everything computed
    assert again == (first[0], first[2], 0)  # the same lookups, every one read
    folder = tmp_path / "known-outputs"
    assert folder.stat().st_mode & 0o777 == 0o700


@pytest.fixture
def store(tmp_path, monkeypatch):
    monkeypatch.setenv("ATTENTION_COURSE_CACHE", str(tmp_path))
    return tmp_path / "known-outputs"


def _where(store_case: str = "case"):
    return output_store.key(LAYER, "reference", known_outputs.digest(Case(store_case, (torch.ones(2),))))


def test_a_kept_output_comes_back_as_it_was_written(store):
    where = _where()
    value = (torch.arange(6.0).reshape(2, 3), {"stage": [torch.ones(1)]}, 3)
    output_store.write(where, value)
    back = output_store.read(where)
    assert torch.equal(back[0], value[0]) and torch.equal(back[1]["stage"][0], value[1]["stage"][0]) and back[2] == 3
    output_store.write(where, output_store.RAISED)
    assert output_store.read(where) is output_store.RAISED


@pytest.mark.parametrize("damage", ["one byte changed", "cut short", "another key's file", "not a torch file"])
def test_a_file_that_is_not_what_it_claims_is_not_believed(store, damage):
    where, other = _where("case"), _where("another case")
    output_store.write(where, torch.ones(3))
    output_store.write(other, torch.zeros(3))
    path = where[0]
    data = path.read_bytes()
    if damage == "one byte changed":
        path.write_bytes(data[:-40] + bytes([data[-40] ^ 1]) + data[-39:])
    elif damage == "cut short":
        path.write_bytes(data[:len(data) // 2])
    elif damage == "another key's file":
        path.write_bytes(other[0].read_bytes())
    else:
        path.write_bytes(b"x" * 64)
    assert output_store.read(where) is None


def test_only_the_registered_exercises_of_the_real_model_assignments_are_kept(store):
    found = known_outputs.digest(Case("case", (torch.ones(2),)))
    assert output_store.key(LAYER, "reference", found) is not None
    assert output_store.key(replace(LAYER, mistakes=()), "reference", found) is None  # a test's own exercise
    assert output_store.key(SCORES, "reference", found) is None  # 01: cheaper to compute than to read
    assert output_store.key(LAYER, "reference", None) is None  # a case the digest cannot see


def test_a_value_torch_cannot_load_safely_is_not_kept(store):
    where = _where()
    output_store.write(where, object())
    assert not where[0].exists()


def test_the_folders_of_older_graders_are_dropped(store):
    base = output_store.folder() / "08_gated_deltanet"
    for age, name in enumerate(["oldest", "older", "old"]):
        (base / name).mkdir(parents=True)
        os.utime(base / name, (age, age))
    output_store._fingerprint_folder.cache_clear()
    _where()
    assert output_store.FINGERPRINTS_KEPT == 3
    assert sorted(p.name for p in base.iterdir() if p.name in ("oldest", "older", "old")) == ["old", "older"]
    assert len(list(base.iterdir())) == 3  # the newest two, and the one in use


READ_THE_STORE = '''
import os
def attention_scores(q, k):
    folder = {folder!r}
    for root, _, files in os.walk(folder, onerror=lambda error: (_ for _ in ()).throw(error)):
        for name in files:
            return open(os.path.join(root, name), "rb").read()
    raise LookupError("the store looks empty")
'''


@pytest.mark.parametrize("walls_off", [(), ("landlock",), ("landlock", "user")],
                         ids=["all walls", "no landlock", "no landlock, runs as root"])
def test_student_code_cannot_read_the_outputs_kept_on_disk(sandbox_without, walls_off):
    if walls_off and (sys.platform != "linux" or os.geteuid() != 0):
        pytest.skip("the walls without Landlock are those of a grader running as root on Linux")
    box = sandbox_without(*walls_off)
    folder = output_store.folder()
    assert any(folder.iterdir())
    verdict = grade(SCORES, cells_with(READ_THE_STORE.format(folder=str(folder))), sandbox=box, timeout_s=10)
    assert not verdict.passed and not verdict.grader_problem, verdict.message
    # Unreadable, empty, or not there at all (in a folder the sandbox user may not enter, which runs see emptied).
    assert any(e in verdict.message for e in ("PermissionError", "LookupError", "FileNotFoundError")), verdict.message


@pytest.mark.parametrize("walls_off", [(), ("landlock",)], ids=["all walls", "no landlock"])
def test_a_course_cache_under_tmp_is_hidden_too(tmp_path, monkeypatch, walls_off):
    """The private /tmp of the runs hides a cache under the host's /tmp: the store must be found (and made) before
    it is mounted, or the fork server would make a store inside its own /tmp, and its probe would read that."""
    if walls_off and (sys.platform != "linux" or os.geteuid() != 0):
        pytest.skip("the walls without Landlock are those of a grader running as root on Linux")
    cache = caches.without_outputs(tmp_path / "cache")
    monkeypatch.setenv("ATTENTION_COURSE_CACHE", str(cache))
    monkeypatch.setenv("ATTENTION_COURSE_SANDBOX_OFF", ",".join(walls_off))
    box = Sandbox()
    try:
        assert "answers" not in box.hello()["missing"], box.hello()["missing"]
        assert (cache / "known-outputs" / "ABOUT.txt").is_file()  # on the host, where the grader writes
        verdict = grade(SCORES, cells_with(READ_THE_STORE.format(folder=str(cache / "known-outputs"))), sandbox=box,
                        timeout_s=10)
    finally:
        box.stop()
    assert not verdict.passed and not verdict.grader_problem, verdict.message
    assert any(error in verdict.message for error in ("PermissionError", "LookupError", "FileNotFoundError")), \
        verdict.message


def test_a_cache_that_cannot_be_written_keeps_nothing_and_grading_goes_on(tmp_path, monkeypatch):
    blocked = tmp_path / "a file"
    blocked.write_text("not a folder")
    monkeypatch.setenv("ATTENTION_COURSE_CACHE", str(blocked / "cache"))
    case = Case("case", (torch.ones(2),))
    assert output_store.key(LAYER, "reference", known_outputs.digest(case)) is None
    assert known_outputs.known("unwritable", case, lambda: 7, stored=(LAYER, "reference")) == 7


def test_every_known_mistake_is_stored_under_a_name_of_its_own():
    """Several ways to write one mistake share its name (online softmax's running max from 0, 08's exclusive γ):
    each is kept apart, or one would be judged by the other's outputs."""
    from autograder.engine.diagnosis import stored_name
    for exercise in EXERCISES.values():
        names = [stored_name(exercise, m) for m in exercise.mistakes if m.fn is not None]
        assert len(names) == len(set(names)), (exercise.name, names)
    chunked = EXERCISES["chunked_gated_delta_rule"]
    assert len({m.name for m in chunked.mistakes if "不含自己的累积和" in m.name}) == 1
