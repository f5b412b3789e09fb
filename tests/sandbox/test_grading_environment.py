"""Machines that are not this one: a host memory limit, a kernel without some walls, a platform without
fork, a grader without root. Grading still works, and what goes wrong is said to be the grader's problem,
not the student's. A limit on the whole grader process, another user, and the notice the command prints
need the command itself; the walls of a sandbox can be turned off in this process."""
import os
import resource
import shutil
import sysconfig
import tempfile
from pathlib import Path

import pytest

from autograder.engine.assignments import ASSIGNMENTS
from autograder.engine.grading import grade_notebook
from autograder.engine.judging import grade
from autograder.engine.sandbox import landlock
from autograder.engine.sandbox.client import Sandbox
from autograder.engine.sandbox.walls import PURPOSE, describe_missing
from course.cache import CACHE_ENV
from course.layout import ROOT as REPO
from tests.commands import pytest_autograder
from tests.notebooks import ASSIGNMENT, filled, source_solutions, write_submission
from tests.sandbox.test_hostile_submissions import SCORES, cells_with
from tests.sandbox.test_walls_without_landlock import folder_runs_see

TOTAL = sum(e.points for e in ASSIGNMENTS[ASSIGNMENT])
# The last wall the sandbox uses needs Landlock's scopes; on an older kernel "every wall" cannot hold.
EVERY_WALL = pytest.mark.skipif(landlock.abi_version() < 6, reason="needs Landlock ABI 6 (Linux 6.12), which the "
                                                                   "sandbox's last wall uses")


@pytest.fixture(scope="module")
def solved(tmp_path_factory):
    return write_submission(tmp_path_factory.mktemp("solved"), filled(source_solutions()))


def run_grader(notebook, memory_limit=None, walls_off="", as_user=None):
    def limit():
        if memory_limit:
            resource.setrlimit(resource.RLIMIT_AS, (memory_limit, memory_limit))

    env = {**os.environ, "ATTENTION_COURSE_SANDBOX_OFF": walls_off}
    if not as_user:
        return pytest_autograder("--submission", notebook.parent, preexec_fn=limit, env=env)
    # As another user: a user namespace whose uid ``as_user`` is this user outside, so the files stay readable.
    return pytest_autograder("--submission", notebook.parent, env=env,
                             wrap=["unshare", "--user", f"--map-user={as_user}", f"--map-group={as_user}"])


@pytest.mark.slow  # a fresh grader under a host limit
def test_a_host_memory_limit_of_3_gib_grades_a_correct_notebook_in_full(solved):
    done = run_grader(solved, memory_limit=3 * 2**30)
    assert done.returncode == 0, done.stdout
    assert f"总分 Total: {TOTAL}/{TOTAL}" in done.stdout


@pytest.mark.slow  # a fresh grader under a host limit
def test_a_host_memory_limit_too_small_for_torch_is_the_graders_problem(solved):
    done = run_grader(solved, memory_limit=int(0.95 * 2**30))
    assert done.returncode == 1
    # The table alone: on CI, pytest's short summary below it repeats each message in full.
    table = done.stdout.split("评分 Score")[1].split("short test summary info")[0]
    exercises = len(ASSIGNMENTS[ASSIGNMENT])
    assert table.count("⚠") == exercises and table.count("评分环境出了问题，不是你的代码的问题") == exercises, done.stdout
    assert "RLIMIT_AS" in done.stdout and "ulimit -v" in done.stdout
    assert "exit()" not in done.stdout


def test_missing_walls_are_named_once_and_grading_still_works(solved):
    done = run_grader(solved, walls_off="landlock,seccomp")
    assert done.returncode == 0, done.stdout
    assert f"总分 Total: {TOTAL}/{TOTAL}" in done.stdout
    assert done.stdout.count("sandbox walls missing") == 1
    for wall in ("landlock", "seccomp"):
        assert done.stdout.count(PURPOSE[wall]) == 1
    assert PURPOSE["namespaces"] not in done.stdout


@pytest.mark.slow  # a fresh interpreter, importing torch, for every exercise
def test_without_fork_each_job_gets_a_fresh_process(solved, monkeypatch):
    """As on Windows: no walls at all, said so, and the grades are the same."""
    monkeypatch.setenv("ATTENTION_COURSE_SANDBOX_OFF", "fork")  # read by each fork server as it starts
    sandbox = Sandbox()
    try:
        verdicts = grade_notebook(solved, sandbox=sandbox)
        missing = "\n".join(describe_missing(sandbox.hello()["missing"]))
    finally:
        sandbox.stop()
    assert all(v.passed for v in verdicts), [v.message for v in verdicts]
    assert all(PURPOSE[wall] in missing for wall in PURPOSE), missing


@EVERY_WALL
def test_a_complete_machine_puts_up_every_wall(sandbox):
    assert sandbox.hello()["missing"] == {}


@EVERY_WALL
@pytest.mark.skipif(not shutil.which("unshare"), reason="needs util-linux unshare")
def test_a_grader_without_root_puts_up_every_wall(tmp_path):
    """The path most students and instructors take: no root, walls through a user namespace."""
    attack = f"""
import os
def attention_scores(q, k):
    space = {{}}
    exec(open({str(REPO / "solutions" / "attention_basics.py")!r}).read(), space)
    os.fork()
    return space["attention_scores"](q, k)
"""
    notebook = write_submission(tmp_path, filled({**source_solutions(), "attention_scores": attack}))
    done = run_grader(notebook, as_user=1000)
    assert "sandbox walls missing" not in done.stdout, done.stdout
    # attention_scores fails, and with it the two exercises that call it: attention and online_softmax_attention.
    lost = sum(e.points for e in ASSIGNMENTS[ASSIGNMENT]
               if e.name in ("attention_scores", "attention", "online_softmax_attention"))
    assert f"总分 Total: {TOTAL - lost}/{TOTAL}" in done.stdout and "PermissionError" in done.stdout, done.stdout


@pytest.mark.slow  # a fresh grader as another user
def test_without_landlock_a_grader_without_root_lets_student_code_write_nowhere(tmp_path):
    """Where the grader is no root and Landlock is missing, student code runs as the grader: every mount of its
    namespace is read-only but its private folder, so it cannot change a classmate's notebook, the grader's
    outputs, the course or the venv (a .pth file there would run in the grader's next Python, outside every wall)."""
    classmate = write_submission(tmp_path / "class" / "classmate", filled(source_solutions()))
    targets = [classmate, tmp_path / "graded" / "grades.csv", REPO / "planted.py",
               Path(sysconfig.get_paths()["purelib"]) / "planted.pth"]
    (tmp_path / "graded").mkdir()
    targets[1].write_text("student,total\n", encoding="utf-8")
    attack = f"""
def attention_scores(q, k):
    written = []
    for path in {[str(t) for t in targets]!r}:
        try:
            with open(path, "a") as f:
                f.write("# planted\\n")
            written.append(path)
        except OSError as e:
            error = e
    raise error if not written else RuntimeError(f"wrote {{written}}")
"""
    before = {t: t.read_bytes() if t.exists() else None for t in targets}
    notebook = write_submission(tmp_path / "mine", filled({**source_solutions(), "attention_scores": attack}))
    try:
        done = run_grader(notebook, walls_off="landlock", as_user=1000)
        assert {t: t.read_bytes() if t.exists() else None for t in targets} == before
    finally:
        for planted in targets[2:]:
            planted.unlink(missing_ok=True)
    assert "OSError: [Errno 30] Read-only file system" in done.stdout and "运行出错：RuntimeError" not in done.stdout, done.stdout
    lost = sum(e.points for e in ASSIGNMENTS[ASSIGNMENT]
               if e.name in ("attention_scores", "attention", "online_softmax_attention"))
    assert f"总分 Total: {TOTAL - lost}/{TOTAL}" in done.stdout, done.stdout


@pytest.mark.parametrize("walls_off", ["", "landlock"], ids=["all walls", "no landlock"])
def test_a_course_under_tmp_leaves_nothing_in_tmp(monkeypatch, walls_off):
    """Where runs read something under /tmp (a clone there, here the course cache), /tmp stays visible and each
    run writes in a tmpfs on a folder inside it. Every file system is read-only in the fork server's namespace,
    so that folder is the grader's to remove: none is left behind once the sandbox stops (a day of test runs from
    a clone under /tmp had left 141)."""
    cache = Path(tempfile.mkdtemp(prefix="course-cache-", dir="/tmp"))
    (cache / "qwen35").mkdir()
    monkeypatch.setenv(CACHE_ENV, str(cache))
    monkeypatch.setenv("ATTENTION_COURSE_SANDBOX_OFF", walls_off)
    sandbox = Sandbox()
    try:
        written = sandbox.policy().writable
        assert written != "/tmp" and Path(written).is_relative_to("/tmp"), written
        attack = ("def attention_scores(q, k):\n    open('kept.txt', 'w').write('x')\n"
                  "    return q @ k.transpose(-2, -1) / q.shape[-1] ** 0.5\n")
        verdict = grade(SCORES, cells_with(attack), sandbox=sandbox, timeout_s=10)
        assert verdict.passed, verdict.message
    finally:
        sandbox.stop()
        shutil.rmtree(cache)
    assert not Path(written).exists() and not list(Path("/tmp").glob(f"*/{Path(written).name}")), written


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root, to give a folder to another user")
def test_what_runs_need_but_cannot_read_is_the_graders_problem(monkeypatch):
    """A folder on the Python path that student code cannot read (another user's, 0700: root without its
    capabilities may not enter it). Student code importing from it would fail and be blamed for it; instead the
    probe run finds it, and every exercise is the grader's problem, with the folder named."""
    closed = folder_runs_see("not-for-runs-")
    (closed / "helper.py").write_text("def scores(q, k):\n    return q @ k.transpose(-2, -1)\n")
    os.chown(closed / "helper.py", 1000, 1000)
    os.chown(closed, 1000, 1000)
    os.chmod(closed, 0o700)
    monkeypatch.setenv("PYTHONPATH", str(closed))
    sandbox = Sandbox()
    try:
        why = sandbox.hello()["missing"].get("answers", "")
        verdict = grade(SCORES, cells_with(source_solutions()["attention_scores"]), sandbox=sandbox, timeout_s=10)
    finally:
        sandbox.stop()
        shutil.rmtree(closed)
    assert f"what it needs, which would count against it (a run cannot read {closed.resolve()})" in why, why
    assert verdict.grader_problem, verdict.message
