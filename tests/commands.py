"""The course's commands as a user types them, for the few tests whose subject is the command itself (its
exit code, its table, its files). Tests of verdicts grade in this process instead (``sandbox`` fixture)."""
import hashlib
import subprocess
import sys

from course.layout import ROOT as REPO


def start_pytest_autograder(*args, wrap=(), **kwargs) -> subprocess.Popen:
    """``pytest autograder/ ARGS`` started in the checkout (behind the command ``wrap`` when given, e.g.
    ``unshare``): a cold grader of its own, with its interpreter, torch and fork server. Runs started together
    overlap: on two cores, the four of tests/test_autograder_cli.py take 11 s instead of 15 s."""
    return subprocess.Popen([*wrap, sys.executable, "-m", "pytest", "autograder/", "-p", "no:cacheprovider",
                             *map(str, args)], cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            **kwargs)


def finished(run: subprocess.Popen) -> subprocess.CompletedProcess:
    stdout, stderr = run.communicate()
    return subprocess.CompletedProcess(run.args, run.returncode, stdout, stderr)


def pytest_autograder(*args, **kwargs) -> subprocess.CompletedProcess:
    """``pytest autograder/ ARGS``, started and waited for (see ``start_pytest_autograder``)."""
    return finished(start_pytest_autograder(*args, **kwargs))


def digest(path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()
