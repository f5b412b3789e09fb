"""Machines that are not this one: a host memory limit, a kernel without some walls, a platform without
fork. Grading still works, and what goes wrong is said to be the grader's problem, not the student's."""
import os
import resource
import shutil
import subprocess
import sys

import pytest

from course.layout import ROOT as REPO
from autograder.engine.sandbox.walls import PURPOSE
from tests.notebooks import filled, source_solutions, write_submission


@pytest.fixture(scope="module")
def solved(tmp_path_factory):
    return write_submission(tmp_path_factory.mktemp("solved"), filled(source_solutions())).parent


def run_grader(submission, memory_limit=None, walls_off="", as_user=None):
    def limit():
        if memory_limit:
            resource.setrlimit(resource.RLIMIT_AS, (memory_limit, memory_limit))

    env = {**os.environ, "ATTENTION_COURSE_SANDBOX_OFF": walls_off}
    # As another user: a user namespace whose uid ``as_user`` is this user outside, so the files stay readable.
    user = ["unshare", "--user", f"--map-user={as_user}", f"--map-group={as_user}"] if as_user else []
    return subprocess.run([*user, sys.executable, "-m", "pytest", "autograder/", "-p", "no:cacheprovider",
                           "--submission", submission], cwd=REPO, capture_output=True, text=True,
                          preexec_fn=limit, env=env)


def test_a_host_memory_limit_of_3_gib_grades_a_correct_notebook_in_full(solved):
    done = run_grader(solved, memory_limit=3 * 2**30)
    assert done.returncode == 0, done.stdout
    assert "总分 Total: 12/12" in done.stdout


def test_a_host_memory_limit_too_small_for_torch_is_the_graders_problem(solved):
    done = run_grader(solved, memory_limit=int(0.95 * 2**30))
    assert done.returncode == 1
    # The table alone: on CI, pytest's short summary below it repeats each message in full.
    table = done.stdout.split("评分 Score")[1].split("short test summary info")[0]
    assert table.count("⚠") == 5 and table.count("评分环境出了问题，不是你的代码的问题") == 5, done.stdout
    assert "RLIMIT_AS" in done.stdout and "ulimit -v" in done.stdout
    assert "exit()" not in done.stdout


def test_missing_walls_are_named_once_and_grading_still_works(solved):
    done = run_grader(solved, walls_off="landlock,seccomp")
    assert done.returncode == 0, done.stdout
    assert "总分 Total: 12/12" in done.stdout
    assert done.stdout.count("sandbox walls missing") == 1
    for wall in ("landlock", "seccomp"):
        assert done.stdout.count(PURPOSE[wall]) == 1
    assert PURPOSE["namespaces"] not in done.stdout


def test_without_fork_each_job_gets_a_fresh_process(solved):
    """As on Windows: no walls at all, said so, and the grades are the same."""
    done = run_grader(solved, walls_off="fork")
    assert done.returncode == 0, done.stdout
    assert "总分 Total: 12/12" in done.stdout
    assert all(PURPOSE[wall] in done.stdout for wall in PURPOSE)


def test_a_complete_machine_prints_no_notice(solved):
    done = run_grader(solved)
    assert done.returncode == 0 and "sandbox walls missing" not in done.stdout, done.stdout


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
    submission = write_submission(tmp_path, filled({**source_solutions(), "attention_scores": attack})).parent
    done = run_grader(submission, as_user=1000)
    assert "sandbox walls missing" not in done.stdout, done.stdout
    assert "总分 Total: 7/12" in done.stdout and "PermissionError" in done.stdout, done.stdout
