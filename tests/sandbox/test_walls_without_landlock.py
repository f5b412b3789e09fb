"""Where Landlock is missing and the grader is root (Gradescope's containers): the walls that keep the answers
out then, attacked with Landlock switched off (``ATTENTION_COURSE_SANDBOX_OFF``).

Student code runs as an unprivileged user; each run sees the grading packages empty (with namespaces); the
Gradescope bundle makes its answers root-only; and where a probe run can still read an answer, grading fails
closed: no points, and a message for the instructor.
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from autograder.engine.assignments import ASSIGNMENTS
from autograder.engine.grading import grade_notebook
from autograder.engine.judging import grade
from autograder.engine.sandbox import walls
from autograder.engine.sandbox.client import Sandbox
from autograder.engine.sandbox.walls import PURPOSE
from autograder.instructor import doctor
from course.layout import ROOT as REPO
from tests.classroom.test_gradescope_bundle import A, bundle, gradescope_problems  # noqa: F401 - bundle is a fixture
from tests.notebooks import filled, source_solutions, write_submission
from tests.sandbox.test_hostile_submissions import SCORES, cells_with

pytestmark = [pytest.mark.skipif(not sys.platform.startswith("linux") or os.geteuid() != 0,
                                 reason="needs a grader running as root on Linux")]

READ_THE_REFERENCE = f'''
import os
def attention_scores(q, k):
    assert os.getuid() != 0, "student code runs as root"
    space = {{}}
    exec(open({str(REPO / "solutions" / "attention_basics.py")!r}).read(), space)
    return space["attention_scores"](q, k)
'''


def folder_runs_see(prefix: str) -> Path:
    """A fresh folder outside /tmp, which each run's private tmpfs hides (made root's, 0700, as mkdtemp does)."""
    return Path(tempfile.mkdtemp(prefix=prefix, dir="/var/tmp" if os.path.isdir("/var/tmp") else None))


@pytest.fixture
def sandbox_off(monkeypatch):
    """A fork server started with the given walls switched off, stopped after the test."""
    started = []

    def start(*walls):
        monkeypatch.setenv("ATTENTION_COURSE_SANDBOX_OFF", ",".join(walls))
        started.append(Sandbox())
        started[-1].hello()
        return started[-1]

    yield start
    for sandbox in started:
        sandbox.stop()


def test_without_landlock_student_code_is_unprivileged_and_sees_no_answers(sandbox_off):
    sandbox = sandbox_off("landlock")
    assert {"user", "hidden-answers"} <= set(sandbox.hello()["up"])
    assert "answers" not in sandbox.hello()["missing"]
    verdict = grade(SCORES, cells_with(READ_THE_REFERENCE), sandbox=sandbox, timeout_s=10)
    assert not verdict.passed and not verdict.grader_problem
    assert "FileNotFoundError" in verdict.message, verdict.message  # an empty folder, not the answer


def _the_rest_of_the_checkout() -> list[str]:
    """Files of the checkout that hold answers outside the grading packages: git's history of ``solutions/`` (a
    pack or a loose object), the simulated students' correct code, the instructor's notebook, the README."""
    git = [p for p in sorted((REPO / ".git" / "objects").rglob("*")) if p.is_file()][:1] if (REPO / ".git").is_dir() \
        else []
    return [str(p) for p in [REPO / ".git" / "HEAD", *git, REPO / "tests" / "students" / "a01.py",
                             REPO / "source" / "01_attention_basics" / "01_attention_basics.py", REPO / "README.md"]
            if p.is_file()]


@pytest.mark.parametrize("walls_off", [("landlock",), ("landlock", "user")], ids=["as nobody", "as root"])
def test_without_landlock_a_run_reads_nothing_of_the_checkout_but_the_course(sandbox_off, walls_off):
    """With the namespaces, the checkout is empty in each run but for the ``course`` package (and a venv inside it):
    nothing of git's packs, the tests' correct code or the instructor's notebooks, as nobody or as root."""
    files = _the_rest_of_the_checkout()
    attack = f"""
def attention_scores(q, k):
    opened = []
    for path in {files!r}:
        try:
            with open(path, "rb") as f:
                f.read(1)
            opened.append(path)
        except OSError:
            pass
    raise RuntimeError(f"opened {{opened}}")
"""
    sandbox = sandbox_off(*walls_off)
    assert "hidden-answers" in sandbox.hello()["up"] and "answers" not in sandbox.hello()["missing"]
    verdict = grade(SCORES, cells_with(attack), sandbox=sandbox, timeout_s=10)
    assert len(files) >= 4 and "RuntimeError: opened []" in verdict.message, verdict.message


def test_an_honest_notebook_gets_full_marks_without_landlock(sandbox_off):
    sandbox = sandbox_off("landlock", "seccomp")
    honest = source_solutions()
    verdicts = [grade(e, cells_with(honest[e.name]), sandbox=sandbox, timeout_s=20)
                for e in ASSIGNMENTS["01_attention_basics"][:1]]
    assert all(v.passed for v in verdicts), [v.message for v in verdicts]


def test_what_torch_imports_on_first_use_is_read_without_landlock(sandbox_off, tmp_path):
    """Building an ``nn.Module`` imports ``torch.utils._device`` on first use: the sandbox user must read the
    Python, wherever root installed it (this machine's may lie in root's home, which nobody may enter)."""
    sandbox = sandbox_off("landlock")
    assignment = "02_multi_head"
    notebook = write_submission(tmp_path, filled(source_solutions(assignment), assignment), assignment)
    verdicts = grade_notebook(notebook, sandbox=sandbox)
    assert all(v.passed for v in verdicts), [v.message for v in verdicts]


@pytest.fixture
def shut_out(monkeypatch):
    """A folder the sandbox user may not enter (0700, root's: as a course cloned into ``mkdir -m 700``), holding
    a module the fork server's Python finds (on PYTHONPATH) and a file beside it: (the folder, the module)."""
    closed = folder_runs_see("shut-out-")
    module = closed / "lib" / "shut_out_helper.py"
    module.parent.mkdir()
    module.write_text("def scores(q, k):\n    return q @ k.transpose(-2, -1) / q.shape[-1] ** 0.5\n")
    (closed / "notes.txt").write_text("not for student code")
    for inside, mode in ((module.parent, 0o755), (module, 0o644), (closed / "notes.txt", 0o644)):
        os.chmod(inside, mode)  # readable by all, whatever the umask: only the folder above shuts the user out
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(closed / "lib"), os.environ.get("PYTHONPATH")])))
    assert os.stat(closed).st_mode & 0o777 == 0o700
    # As it is, the user student code runs as cannot read what lies in there.
    assert "PermissionError" in walls._try_in_child(lambda _: (walls._become(walls._NOBODY), open(module)))
    yield closed, module
    shutil.rmtree(closed)


def test_a_folder_the_sandbox_user_may_not_enter_shows_runs_what_they_read_and_nothing_else(sandbox_off, shut_out):
    """With namespaces, each run sees the folder empty but for the module's folder: student code, unprivileged,
    imports the module, and the file beside it is not there."""
    closed, _ = shut_out
    sandbox = sandbox_off("landlock")
    assert "user" in sandbox.hello()["up"], sandbox.hello()["missing"]
    attack = f'''
import os
def attention_scores(q, k):
    assert os.getuid() != 0, "student code runs as root"
    import shut_out_helper
    try:
        open({str(closed / "notes.txt")!r}).read()
    except FileNotFoundError:
        return shut_out_helper.scores(q, k)
    return "read the rest of the folder"
'''
    verdict = grade(SCORES, cells_with(attack), sandbox=sandbox, timeout_s=10)
    assert verdict.passed, verdict.message


def test_without_namespaces_the_user_wall_names_the_folder_it_may_not_enter(sandbox_off, shut_out):
    """Nothing can let the sandbox user into the folder: student code would fail to import what lies there, which
    the student would be blamed for. So runs stay root, the user wall is missing with the folder and the fix, and
    (the answers readable by root) grading fails closed; ``course-doctor`` says the same."""
    closed, module = shut_out
    sandbox = sandbox_off("landlock", "namespaces")
    why = sandbox.hello()["missing"].get("user", "")
    command = why.split("`")[1] if why.count("`") == 2 else ""
    assert f"{closed}: {module.parent}" in why and command.startswith("chmod o+x ") and str(closed) in command.split()
    assert "ATTENTION_COURSE_SANDBOX_USER" in why and "runs as root" in why, why
    verdict = grade(SCORES, cells_with(READ_THE_REFERENCE), sandbox=sandbox, timeout_s=10)
    assert verdict.grader_problem and "cannot keep the answers out" in verdict.message, verdict.message
    finding = doctor.check_sandbox()
    assert f"{PURPOSE['user']} — {why}" in finding.what, finding


@pytest.mark.parametrize("walls_off", [("landlock", "namespaces"), ("landlock", "namespaces", "user")],
                         ids=["answers readable by nobody", "no unprivileged user"])
def test_grading_fails_closed_where_a_run_can_read_the_answers(sandbox_off, walls_off):
    """The checkout's answers are world-readable: with neither Landlock nor the mount namespace, a run
    (as nobody, or as root) reads them, so no exercise is graded and the reason is named."""
    sandbox = sandbox_off(*walls_off)
    assert "answers" in sandbox.hello()["missing"]
    verdict = grade(SCORES, cells_with(READ_THE_REFERENCE), sandbox=sandbox, timeout_s=10)
    assert not verdict.passed and verdict.grader_problem
    assert "cannot keep the answers out" in verdict.message, verdict.message


@pytest.mark.slow  # the bundle's real pip install, then its run_autograder
def test_the_gradescope_bundle_keeps_its_answers_from_nobody_without_landlock(bundle):  # noqa: F811
    """As Gradescope runs it (root, here without Landlock): the submission cannot read either copy of the
    reference nor write the results, and the rest of its notebook is graded."""
    root, site = bundle
    os.chmod(site, 0o755)  # a real site-packages is readable by everyone; mkdtemp made this one root-only
    results = root / "results" / "results.json"
    attack = f'''
FORGED = []
try:
    FORGED.append(open({str(results)!r}, "w").write('{{"score": 100, "tests": []}}'))
except OSError:
    pass


def padding_mask(attention_mask):
    import os
    assert os.getuid() != 0, "student code runs as root"
    space = {{}}
    for path in {[str(root / "source" / "solutions" / "attention_basics.py"),
                  str(site / "solutions" / "attention_basics.py")]!r}:
        try:
            exec(open(path).read(), space)
        except OSError:
            pass
    for folder in {[str(root / "source"), str(root / "submission"), str(root / "results")]!r}:
        try:
            open(os.path.join(folder, "planted"), "w").write("x")
        except OSError:
            continue
        return "planted"
    return space["padding_mask"](attention_mask)
'''
    (root / "submission").mkdir(exist_ok=True)
    notebook = filled({**source_solutions(A), "padding_mask": attack})
    (root / "submission" / f"{A}.ipynb").write_text(json.dumps(notebook), encoding="utf-8")
    env = {**os.environ, "AUTOGRADER_ROOT": str(root), "PYTHONPATH": str(site),
           "ATTENTION_COURSE_SANDBOX_OFF": "landlock",
           "PATH": os.path.dirname(sys.executable) + os.pathsep + os.environ["PATH"]}
    done = subprocess.run(["bash", str(root / "source" / "run_autograder")], env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
    report = json.loads(results.read_text(encoding="utf-8"))
    assert gradescope_problems(report) == []
    by_name = {t["name"]: t for t in report["tests"]}
    assert by_name[f"{A} / padding_mask"]["status"] == "failed"
    assert "KeyError" in by_name[f"{A} / padding_mask"]["output"], by_name[f"{A} / padding_mask"]["output"]
    assert report["score"] == sum(e.points for e in ASSIGNMENTS[A]) - 2
    assert not any((root / folder / "planted").exists() for folder in ("source", "submission", "results"))
    assert PURPOSE["landlock"] in done.stdout and PURPOSE["answers"] not in done.stdout


@pytest.mark.slow  # the bundle's real pip install, then its run_autograder
def test_the_gradescope_bundle_fails_closed_when_nothing_keeps_the_answers_out(bundle):  # noqa: F811
    """Landlock off, and no unprivileged user: the run could read the answers, so nothing is graded and
    results.json's top-level output says why."""
    root, site = bundle
    (root / "submission").mkdir(exist_ok=True)
    (root / "submission" / f"{A}.ipynb").write_text(json.dumps(filled(source_solutions(A))), encoding="utf-8")
    env = {**os.environ, "AUTOGRADER_ROOT": str(root), "PYTHONPATH": str(site),
           "ATTENTION_COURSE_SANDBOX_OFF": "landlock,namespaces,user",
           "PATH": os.path.dirname(sys.executable) + os.pathsep + os.environ["PATH"]}
    done = subprocess.run(["bash", str(root / "source" / "run_autograder")], env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
    report = json.loads((root / "results" / "results.json").read_text(encoding="utf-8"))
    assert gradescope_problems(report) == []
    assert report["score"] == 0
    assert "cannot keep the answers out" in report["output"], report["output"]
    assert PURPOSE["answers"] in done.stdout


@pytest.fixture
def open_class():
    """A class folder everyone may write to (as a shared folder of a lab can be), with a classmate's notebook in
    it: (the class folder, the notebook)."""
    folder = folder_runs_see("open-class-")
    notebook = write_submission(folder / "classmate", filled(source_solutions()))
    for path, mode in ((folder, 0o777), (notebook.parent, 0o777), (notebook, 0o666)):
        os.chmod(path, mode)
    yield folder.resolve(), notebook
    shutil.rmtree(folder)


@pytest.mark.parametrize("walls_off", [("landlock",), ("landlock", "namespaces")], ids=["no landlock", "neither"])
def test_a_run_never_changes_a_classmates_notebook_in_a_class_folder_open_to_all(monkeypatch, open_class, walls_off):
    """Without Landlock a run as nobody may still write where everyone may. With namespaces its file systems are
    read-only and the class folder is hidden: grading goes on and the notebook is untouched. Without them nothing
    stops the write, so the probe run finds it and grading fails closed, naming the folder."""
    folder, notebook = open_class
    before = notebook.read_bytes()
    attack = f'''
def attention_scores(q, k):
    with open({str(notebook)!r}, "w") as f:
        f.write("{{}}")
    return q @ k.transpose(-2, -1) / q.shape[-1] ** 0.5
'''
    monkeypatch.setenv("ATTENTION_COURSE_SANDBOX_OFF", ",".join(walls_off))
    sandbox = Sandbox(private=(str(folder),))
    try:
        why = sandbox.hello()["missing"].get("answers", "")
        verdict = grade(SCORES, cells_with(attack), sandbox=sandbox, timeout_s=10)
    finally:
        sandbox.stop()
    assert notebook.read_bytes() == before
    if "namespaces" in walls_off:
        assert f"changing what grading relies on (a run can write to {folder})" in why, why
        assert verdict.grader_problem and "cannot grade safely here" in verdict.message, verdict.message
    else:
        assert why == "" and not verdict.passed and "FileNotFoundError" in verdict.message, verdict.message
