"""What the project's tests share: the real weights the assignments' graders read (their records' ``needs``,
e.g. 07's SmolLM2), fetched once per run into the course's cache with each one's command; nothing happens
when they are there."""
import os
import shlex
import shutil
import subprocess
import sys

import pytest
import torch
from filelock import FileLock

from autograder.engine.assignments import SMOLLM2, needed_weights
from autograder.engine.lanes import LANES_ENV
from autograder.engine.sandbox.client import Sandbox, shared
from course.layout import ROOT as REPO
from tests.sandboxes import started_without


def pytest_configure(config):
    """A worker of a parallel run (pytest -n) computes on one thread, and so does everything it starts (kernels,
    graders, nbgrader): the workers already fill the cores, and torch's thread pools, oversubscribed, collapse
    (the 07 notebook beside a worker grading 07: 27 s on one thread each, 170 s on two). For the same reason a
    `pytest autograder/` it starts grades in one lane, unless the test asks for two."""
    if os.environ.get("PYTEST_XDIST_WORKER"):
        os.environ["OMP_NUM_THREADS"] = "1"
        os.environ.setdefault(LANES_ENV, "1")
        torch.set_num_threads(1)


@pytest.fixture(scope="session", autouse=True)
def _weights_fetched() -> dict:
    """The weights that could not be fetched (offline, no cache) -> why, kept for the tests that need them.
    Fetched before any test starts the grading sandbox, which may read weights only if they exist when it
    starts."""
    failed = {}
    for weights in needed_weights():
        if weights.ready():
            continue
        command = shlex.split(weights.command)
        # The console script of the Python running the tests, not another environment's on PATH.
        command[0] = shutil.which(command[0], path=os.path.dirname(sys.executable)) or command[0]
        try:
            done = subprocess.run(command, capture_output=True, text=True)
            said = (done.stdout + done.stderr).strip()
        except OSError as error:
            said = str(error)
        if not weights.ready():
            failed[weights] = f"`{weights.command}` said: {said[-2000:]}"
    return failed


@pytest.fixture(scope="session")
def smollm2_weights(_weights_fetched):
    """The converted SmolLM2-135M-Instruct folder; the test fails with the reason when it could not be fetched."""
    if SMOLLM2 in _weights_fetched:
        pytest.fail(f"the {SMOLLM2.name} weights could not be fetched: {_weights_fetched[SMOLLM2]}")
    return SMOLLM2.folder()


# Verdict tests grade in this process, on one warm fork server (the one `pytest autograder/` would use),
# instead of starting a cold grader each; only tests of a command run the command (tests/commands.py).
@pytest.fixture(scope="session")
def sandbox() -> Sandbox:
    """The process's sandbox, started and greeted once (after the weights are fetched: autouse goes first)."""
    started = shared()
    started.hello()
    return started


@pytest.fixture(scope="session")
def sandbox_without():
    """Sandboxes with some walls turned off (``sandbox_without("landlock", "seccomp")``), each started once, to
    show that the walls left hold on their own and that grading goes on."""
    started = {}

    def make(*walls: str) -> Sandbox:
        if walls not in started:
            started[walls] = started_without(*walls)
        return started[walls]

    yield make
    for box in started.values():
        box.stop()


@pytest.fixture(scope="session")
def generated_course(tmp_path_factory, worker_id):
    """A course folder where nbgrader generated release/ (and gradebook.db) from source/, once per run (the
    workers of a parallel run share it), as `course-release` does in the checkout. Read it, or copy it before
    writing."""
    # A parallel run's workers each have a base folder inside the run's own: the one they share is above.
    from autograder.instructor.release import generate  # nbgrader and jupytext: for the tests that use them

    base = tmp_path_factory.getbasetemp()
    root = (base if worker_id == "master" else base.parent) / "generated-course"
    done = root.with_name("generated-course.done")
    with FileLock(root.with_name("generated-course.lock")):
        if not done.exists():  # a worker that failed halfway left no mark: generated again, from nothing
            shutil.rmtree(root, ignore_errors=True)
            root.mkdir()
            shutil.copy(REPO / "nbgrader_config.py", root)
            generate(root)
            done.touch()
    return root


@pytest.hookimpl(tryfirst=True)  # before xdist reads the groups (``--dist loadgroup``, what .ci/run runs)
def pytest_collection_modifyitems(config, items):
    """The tests of a file that share a fixture of the file (a module-scoped run of a command, a class) are one
    group, run by one worker, so the fixture is made once; every other test goes to whichever worker is free."""
    for item in items:
        fixtures = getattr(item, "_fixtureinfo", None)
        scopes = {d.scope for defs in (fixtures.name2fixturedefs.values() if fixtures else ()) for d in defs}
        if scopes & {"module", "class", "package"}:
            item.add_marker(pytest.mark.xdist_group(item.module.__name__))
