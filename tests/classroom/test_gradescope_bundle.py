"""The Gradescope bundle, used as Gradescope uses it: unpacked into ``$AUTOGRADER_ROOT/source/``, the course
installed from it (not editable), ``run_autograder`` run on a submission, and ``results.json`` checked
against Gradescope's specification. The submission attacks the answers, which the bundle ships."""
import json
import os
import platform
import shutil
import stat
import subprocess
import sys
import tempfile
import zipfile
from importlib import metadata
from pathlib import Path

import pytest
import torch
from packaging.markers import Marker
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

from autograder.engine.assignments import ASSIGNMENTS
from autograder.instructor.classroom import gradescope_bundle, gradescope_run
from course.layout import ROOT as REPO
from tests.class_of_students import unwritable
from tests.commands import venv_seeing_this_python
from tests.notebooks import filled, source_solutions

A = "01_attention_basics"
VISIBILITIES = {"visible", "hidden", "after_due_date", "after_published"}


def gradescope_problems(results) -> list[str]:
    """What in ``results`` breaks Gradescope's results.json specification (empty when nothing does)."""
    problems = []
    number = (int, float)
    if not isinstance(results, dict):
        return ["not a JSON object"]
    for key, kind in (("score", number), ("execution_time", number), ("output", str), ("tests", list)):
        if not isinstance(results.get(key), kind) or isinstance(results.get(key), bool):
            problems.append(f"top-level {key!r} is missing or not a {kind}")
    for test in results.get("tests", []):
        for key, kind in (("name", str), ("score", number), ("max_score", number), ("output", str)):
            if not isinstance(test.get(key), kind):
                problems.append(f"test {test.get('name')!r}: {key!r} is missing or not a {kind}")
        if test.get("status") not in ("passed", "failed"):
            problems.append(f"test {test.get('name')!r}: status {test.get('status')!r}")
        if test.get("visibility") not in VISIBILITIES:
            problems.append(f"test {test.get('name')!r}: visibility {test.get('visibility')!r}")
        if isinstance(test.get("score"), number) and not 0 <= test["score"] <= test.get("max_score", 0):
            problems.append(f"test {test.get('name')!r}: score outside 0..max_score")
    if not problems and sum(t["score"] for t in results["tests"]) != results["score"]:
        problems.append("score is not the sum of the tests' scores")
    return problems


@pytest.fixture(scope="module")
def bundle(tmp_path_factory):
    """(the autograder root with the bundle in source/, the folder the course is installed in)."""
    root = tmp_path_factory.mktemp("autograder")
    assert gradescope_bundle.main([A, "-o", str(root / "autograder.zip")]) == 0
    with zipfile.ZipFile(root / "autograder.zip") as archive:
        archive.extractall(root / "source")
    # setup.sh's install, quicker: the course without the dependencies this machine already has, and the
    # virtual environment run_autograder's Python comes from, seeing them (tests/deploy/test_gradescope_setup.py runs
    # the real setup.sh). Not under /tmp: the sandbox gives each run a private /tmp, which would hide a course
    # installed there.
    site = Path(tempfile.mkdtemp(prefix="gradescope-course-", dir="/var/tmp" if os.path.isdir("/var/tmp") else None))
    done = subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation",
                           "--target", str(site), str(root / "source")], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
    venv_seeing_this_python(root / "venv")
    yield root, site
    shutil.rmtree(site)


@pytest.mark.slow  # the bundle's real pip install
def test_the_zip_has_gradescope_layout_and_valid_scripts(bundle):
    root, _ = bundle
    with zipfile.ZipFile(root / "autograder.zip") as archive:
        names = archive.namelist()
        modes = {info.filename: info.external_attr >> 16 for info in archive.infolist()}
    for script in ("setup.sh", "run_autograder", gradescope_bundle.INSTALL):
        assert script in names and modes[script] & stat.S_IXUSR, script
        assert subprocess.run(["bash", "-n", str(root / "source" / script)]).returncode == 0
    assert not any("__pycache__" in n or n.endswith(".pyc") for n in names)
    setup = (root / "source" / "setup.sh").read_text(encoding="utf-8")
    install = (root / "source" / gradescope_bundle.INSTALL).read_text(encoding="utf-8")
    assert f'bash "$root/source/{gradescope_bundle.INSTALL}" "$root/source" "$root/venv"' in setup
    assert "download.pytorch.org/whl/cpu" in install and "-e " not in setup + install
    assert "PIP_BREAK_SYSTEM_PACKAGES" not in setup + install and "install --upgrade pip" not in setup + install
    run = (root / "source" / "run_autograder").read_text(encoding="utf-8")
    assert 'exec "$root/venv/bin/python" -m autograder.instructor.classroom.gradescope_run' in run


@pytest.mark.slow  # the bundle's real pip install, then its run_autograder
def test_run_autograder_writes_gradescope_results(bundle):
    root, site = bundle
    solutions = root / "source" / "solutions" / "attention_basics.py"
    installed = site / "solutions" / "attention_basics.py"
    results = root / "results" / "results.json"
    attack = f'''
FORGED = []
try:
    FORGED.append(open({str(results)!r}, "w").write('{{"score": 100, "tests": []}}'))
except OSError:
    pass


def padding_mask(attention_mask):
    space = {{}}
    for path in {[str(solutions), str(installed)]!r}:
        try:
            exec(open(path).read(), space)
        except OSError:
            pass
    return space["padding_mask"](attention_mask)
'''
    (root / "submission").mkdir()
    notebook = filled({**source_solutions(A), "padding_mask": attack})
    (root / "submission" / f"{A}.ipynb").write_text(json.dumps(notebook), encoding="utf-8")
    env = {**os.environ, "AUTOGRADER_ROOT": str(root), "PYTHONPATH": str(site),
           "PATH": os.path.dirname(sys.executable) + os.pathsep + os.environ["PATH"]}
    done = subprocess.run(["bash", str(root / "source" / "run_autograder")], env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"installed at {site}" in done.stdout  # graded by the installed copy, not this checkout
    report = json.loads(results.read_text(encoding="utf-8"))
    assert gradescope_problems(report) == []
    assert report["score"] == sum(e.points for e in ASSIGNMENTS[A]) - 2
    by_name = {t["name"]: t for t in report["tests"]}
    assert by_name[f"{A} / padding_mask"]["status"] == "failed"
    assert "KeyError" in by_name[f"{A} / padding_mask"]["output"]  # neither copy of the reference could be read
    assert {t["visibility"] for t in report["tests"]} == {"after_due_date"}
    assert "截止日期之后" in report["output"]


def test_a_missing_notebook_still_gives_valid_results(tmp_path, capsys):
    (tmp_path / "submission").mkdir()
    (tmp_path / "submission" / "notes.txt").write_text("oops", encoding="utf-8")
    results = tmp_path / "results" / "results.json"
    assert gradescope_run.main([A, str(tmp_path / "submission"), str(results), "--visibility", "visible"]) == 0
    report = json.loads(results.read_text(encoding="utf-8"))
    assert gradescope_problems(report) == []
    assert report["score"] == 0 and f"请上传 {A}.ipynb" in report["output"]
    assert {t["visibility"] for t in report["tests"]} == {"visible"}


def test_text_no_file_can_hold_gives_valid_results(tmp_path):
    """A message with lone surrogates in it is written into results.json with "?" in their place."""
    (tmp_path / "submission").mkdir()
    (tmp_path / "submission" / f"{A}.ipynb").write_text(json.dumps(unwritable(A)), encoding="utf-8")
    results = tmp_path / "results" / "results.json"
    assert gradescope_run.main([A, str(tmp_path / "submission"), str(results)]) == 0
    report = json.loads(results.read_text(encoding="utf-8"))
    assert gradescope_problems(report) == []
    points = {e.name: e.points for e in ASSIGNMENTS[A]}
    assert report["score"] == sum(points.values()) - points["padding_mask"]
    assert "ValueError: ??" in {t["name"]: t for t in report["tests"]}[f"{A} / padding_mask"]["output"]


def test_the_checks_of_results_can_fail():
    assert gradescope_problems({"score": 1, "tests": [{"name": "x", "score": 2, "max_score": 1}]})


def test_the_pins_are_this_environments_versions_of_the_course_closure():
    pins = {}
    for line in gradescope_bundle.constraints().splitlines():
        if line and not line.startswith("#"):
            requirement = Requirement(line)
            pins[canonicalize_name(requirement.name)] = (str(requirement.specifier), requirement.marker)
    assert pins["torch"] == (f"=={Version(torch.__version__).public}", None)  # the tested torch, everywhere
    for name in ("numpy", "safetensors", "tokenizers", "pytest", "jupyterlab", "typing-extensions", "jinja2"):
        assert pins[name][0] == f"=={Version(metadata.version(name)).public}", name  # direct and transitive
    assert "nbgrader" not in pins and "attention-by-hand" not in pins  # an extra, and the course itself
    # A pin holds on the Pythons its release supports; those installed here support this one.
    here = {"python_full_version": platform.python_version()}
    assert all(marker is None or marker.evaluate(here) for _, marker in pins.values())
    assert any(marker is not None for _, marker in pins.values())


@pytest.mark.parametrize(("requires", "inside", "outside"), [(">=3.11.5", "3.12.0", "3.11.2"),
                                                             ("!=3.0.*,>=2.7", "3.11.2", "3.0.1")])
def test_requires_python_becomes_a_marker_that_can_fail(requires, inside, outside):
    marker = Marker(gradescope_bundle._python_marker(requires))
    assert marker.evaluate({"python_full_version": inside}) and not marker.evaluate({"python_full_version": outside})


def test_a_bundle_fetches_its_weights_with_the_venvs_course_weights():
    lines = gradescope_bundle.SETUP.format(install=gradescope_bundle.INSTALL,
                                           prefetch=gradescope_bundle._prefetch(["07_real_model"])).splitlines()
    fetch = lines.index("course-weights smollm2")
    assert lines.index('export PATH="$root/venv/bin:$PATH"') < fetch
    assert lines.index('export ATTENTION_COURSE_CACHE="$root/cache"') < fetch


def test_course_gradescope_wants_an_assignment_or_an_image(tmp_path, capsys):
    with pytest.raises(SystemExit):
        gradescope_bundle.main([])
    with pytest.raises(SystemExit):
        gradescope_bundle.main([A, "--image", str(tmp_path / "image")])
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "old").write_text("x", encoding="utf-8")
    assert gradescope_bundle.main(["--image", str(tmp_path / "full")]) == 1
    assert "not empty" in capsys.readouterr().err


def test_the_bundle_goes_into_a_folder_that_is_not_there_yet(tmp_path):
    target = tmp_path / "out" / "gradescope" / "autograder.zip"
    assert gradescope_bundle.main([A, "-o", str(target)]) == 0
    assert {"setup.sh", "run_autograder"} <= set(zipfile.ZipFile(target).namelist())


def test_the_grading_install_leaves_jupyterlab_out_and_a_pyproject_that_hides_it_is_refused():
    text = (REPO / "pyproject.toml").read_text(encoding="utf-8")
    graded = gradescope_bundle.grading_pyproject(text)
    assert 'dependencies = {file = ["course/requirements.txt", "autograder/requirements.txt"]}' in graded.splitlines()
    assert "jupyterlab" in (REPO / gradescope_bundle.NOTEBOOK_REQUIREMENTS).read_text(encoding="utf-8")
    with pytest.raises(ValueError, match="JupyterLab"):
        gradescope_bundle.grading_pyproject(graded)
