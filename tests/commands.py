"""The course's commands as a user types them, for the few tests whose subject is the command itself (its
exit code, its table, its files). Tests of verdicts grade in this process instead (``sandbox`` fixture)."""
import hashlib
import subprocess
import sys

from course.layout import ROOT as REPO


def pytest_autograder(*args, wrap=(), **kwargs) -> subprocess.CompletedProcess:
    """``pytest autograder/ ARGS`` in the checkout (behind the command ``wrap`` when given, e.g. ``unshare``):
    a cold grader of its own, with its interpreter, torch and fork server."""
    return subprocess.run([*wrap, sys.executable, "-m", "pytest", "autograder/", "-p", "no:cacheprovider",
                           *map(str, args)], cwd=REPO, capture_output=True, text=True, **kwargs)


def digest(path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()
