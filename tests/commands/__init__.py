"""The course's commands as a user types them, for the few tests whose subject is the command itself (its
exit code, its table, its files). Tests of verdicts grade in this process instead (``sandbox`` fixture)."""
import hashlib
import os
import site
import subprocess
import sys
import venv
from pathlib import Path

from course.layout import ROOT as REPO


def start_pytest_autograder(*args, wrap=(), **kwargs) -> subprocess.Popen:
    """``pytest autograder/ ARGS`` started in the checkout (behind the command ``wrap`` when given, e.g.
    ``unshare``): a cold grader of its own, with its interpreter, torch and fork server. Runs started together
    overlap: on two cores, the four of tests/commands/test_autograder_cli.py take 11 s instead of 15 s."""
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


def venv_seeing_this_python(folder: Path) -> Path:
    """A virtual environment made at ``folder`` (its Python returned) that sees the packages of the Python running
    the tests, as a grading venv sees what was installed in it. Not ``system_site_packages``: that is the *base*
    interpreter's, which lacks torch where the tests run from a venv (the README's set-up). A ``.pth`` file adds
    this environment's site folders with ``site.addsitedir``, so their own ``.pth`` files (editable installs) count."""
    venv.create(folder, symlinks=True)
    python = Path(folder) / ("Scripts/python.exe" if os.name == "nt" else "bin/python")
    purelib = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                             capture_output=True, text=True, check=True).stdout.strip()
    ours = [*site.getsitepackages(), *([site.getusersitepackages()] if site.ENABLE_USER_SITE else [])]
    lines = [f"import site; site.addsitedir({path!r})\n" for path in ours if os.path.isdir(path)]
    Path(purelib, "running-python.pth").write_text("".join(lines), encoding="utf-8")
    return python
