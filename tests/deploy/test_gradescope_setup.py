"""The Gradescope bundle's real ``setup.sh`` on a PEP 668 system Python: this machine's Debian 12
``/usr/bin/python3`` (externally managed, Python 3.11, with venv and ensurepip), standing in for Gradescope's
Ubuntu images. setup.sh (through ``deploy/install-course.sh``, which the grading image's Dockerfile runs too)
creates a virtual environment of its own in a scratch ``AUTOGRADER_ROOT`` and installs the pinned course into
it; then the course grades from there: ``course-grade`` as the grading image's unprivileged user, and
``run_autograder`` as Gradescope runs it (as root) on a correct, a mistaken and an untouched notebook.
Afterwards the system Python's own folders are exactly as before.

apt-get is a recording stand-in: a real ``apt-get update`` in CI is slow and rewrites the machine's package
lists, and the packages setup.sh names are already installed here, so a real ``install`` would do nothing.
The stand-in refuses an ``install`` before an ``update`` and any package apt does not know or this machine
lacks. torch comes from a PEP 503 index made of the CPU wheel pip finds here, named by
``ATTENTION_COURSE_TORCH_INDEX``, with pip's find-links emptied so that nothing else can supply it.
"""
import csv
import json
import os
import shutil
import stat
import subprocess
import sys
import tempfile
from importlib import metadata
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from autograder.engine.assignments import ASSIGNMENTS
from autograder.engine.sandbox.walls import PURPOSE
from autograder.instructor.classroom import gradescope_bundle
from course import smollm2
from course.cache import cache_dir
from tests.classroom.test_gradescope_bundle import A, gradescope_problems
from tests.notebooks import filled, released, write_submission
from tests.students import a01

SYSTEM_PYTHON = Path("/usr/bin/python3")
MISTAKE = next(m for m in a01.MISTAKES if m[1] == "掩码反了")
POINTS = {e.name: e.points for e in ASSIGNMENTS[A]}
SUBMISSIONS = {"correct": filled(a01.CORRECT), "mistaken": filled({**a01.CORRECT, MISTAKE[0]: MISTAKE[2]}),
               "untouched": released()}
SCORES = {"correct": sum(POINTS.values()), "mistaken": sum(POINTS.values()) - POINTS[MISTAKE[0]], "untouched": 0}
GRADER = 10001  # the grading image's user (deploy/Dockerfile)

APT_GET = """#!/bin/sh
# A stand-in for apt-get that installs nothing: it records each call, refuses `install` before `update`, and
# refuses a package apt does not know or this machine has not installed.
echo "$*" >> "{log}"
case "$1" in
    update) ;;
    install)
        grep -qx update "{log}" || {{ echo "apt-get install before apt-get update" >&2; exit 100; }}
        shift
        for package in "$@"; do
            case "$package" in -*) continue ;; esac
            apt-cache show "$package" > /dev/null 2>&1 || {{ echo "apt knows no $package" >&2; exit 100; }}
            [ "$(dpkg-query -W -f='${{Status}}' "$package" 2>/dev/null)" = "install ok installed" ] \\
                || {{ echo "$package is not installed on this machine" >&2; exit 100; }}
        done ;;
    *) echo "unexpected: apt-get $*" >&2; exit 100 ;;
esac
"""

pytestmark = [
    pytest.mark.slow,  # a real venv with torch and the course's grading dependencies in it
    pytest.mark.skipif(not sys.platform.startswith("linux") or os.geteuid() != 0,
                       reason="Gradescope runs setup.sh and run_autograder as root on Linux"),
    pytest.mark.skipif(not (SYSTEM_PYTHON.exists() and shutil.which("apt-cache") and shutil.which("setpriv")),
                       reason="needs a Debian or Ubuntu /usr/bin/python3, apt-cache and setpriv"),
]


def system_folders() -> list[Path]:
    """The folders on /usr/bin/python3's sys.path (its standard library and dist-packages)."""
    done = subprocess.run([str(SYSTEM_PYTHON), "-B", "-c", "import json, sys; print(json.dumps(sys.path))"],
                          capture_output=True, text=True, check=True, cwd="/")
    return [Path(p) for p in json.loads(done.stdout) if p and os.path.isdir(p)]


def listing(folders: list[Path]) -> dict[str, tuple[int, int, int]]:
    """Every entry under ``folders``: path -> (mode, size, mtime in ns)."""
    found = {}
    for folder in folders:
        for parent, dirs, files in os.walk(folder):
            for name in [".", *dirs, *files]:
                info = os.lstat(os.path.join(parent, name))
                found[os.path.join(parent, name)] = (info.st_mode, info.st_size, info.st_mtime_ns)
    return found


def torch_index(folder: Path) -> Path:
    """A PEP 503 index holding the CPU wheel of the tested torch, from wherever pip finds it here."""
    wheels = folder / "wheels"
    wanted = f"torch=={gradescope_bundle.tested_torch()}+cpu"
    done = subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", wanted, "-d", str(wheels)],
                          capture_output=True, text=True)
    assert done.returncode == 0, f"pip cannot find {wanted} here (set PIP_FIND_LINKS or an index that has it):\n" \
                                 + done.stderr
    (folder / "index" / "torch").mkdir(parents=True)
    links = "".join(f'<a href="{w.as_uri()}">{w.name}</a>\n' for w in wheels.glob("torch-*.whl"))
    (folder / "index" / "torch" / "index.html").write_text(f"<html><body>\n{links}</body></html>\n", encoding="utf-8")
    return folder / "index"


def run(command: list[str], env: dict[str, str], **kwargs) -> subprocess.CompletedProcess:
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600, **kwargs)
    assert done.returncode == 0, done.stdout[-5000:] + done.stderr[-5000:]
    return done


@pytest.fixture(scope="module")
def gradescope():
    """setup.sh, then course-grade as the image's user and run_autograder on each submission, all in one
    scratch AUTOGRADER_ROOT (outside /tmp, which the sandbox makes private); a dict of what they left."""
    before = listing(system_folders())
    root = Path(tempfile.mkdtemp(prefix="gradescope-setup-", dir="/var/tmp"))
    root.chmod(0o755)  # as /autograder is; mkdtemp makes its folder root-only
    scratch = Path(tempfile.mkdtemp(prefix="gradescope-scratch-"))
    try:
        assert gradescope_bundle.main([A, "-o", str(root / "autograder.zip")]) == 0
        shutil.unpack_archive(root / "autograder.zip", root / "source")
        (scratch / "bin").mkdir()
        (scratch / "no-links").mkdir()
        (scratch / "bin" / "apt-get").write_text(APT_GET.format(log=scratch / "apt.log"), encoding="utf-8")
        (scratch / "bin" / "apt-get").chmod(0o755)
        plain = {k: v for k, v in os.environ.items()
                 if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV", "PIP_BREAK_SYSTEM_PACKAGES",
                              "PYTHONDONTWRITEBYTECODE")}  # Python writes bytecode where it may, as on Gradescope
        plain.update(PATH="/usr/bin:/bin")  # python3 is /usr/bin/python3
        setup = run(["bash", str(root / "source" / "setup.sh")],
                    {**plain, "PATH": f"{scratch / 'bin'}:/usr/bin:/bin", "AUTOGRADER_ROOT": str(root),
                     "ATTENTION_COURSE_TORCH_INDEX": torch_index(scratch).as_uri(),
                     "PIP_FIND_LINKS": str(scratch / "no-links")})
        venv_python = root / "venv" / "bin" / "python"
        installed = json.loads(run([str(venv_python), "-c", "import json, platform, importlib.metadata as m; print("
                                    "json.dumps([platform.python_version(), {d.metadata['Name']: d.version "
                                    "for d in m.distributions()}]))"], plain).stdout)

        # The grading image's user grades a class from the venv (before run_autograder makes the grading
        # packages root-only), with no namespaces: what a pod gets under the RuntimeDefault seccomp profile.
        home, out = root / "grader-home", root / "grader-home" / "graded"
        home.mkdir()
        os.chown(home, GRADER, GRADER)
        for student, notebook in SUBMISSIONS.items():
            write_submission(root / "class" / student, notebook, A)
        graded = run(["setpriv", f"--reuid={GRADER}", f"--regid={GRADER}", "--clear-groups",
                      str(root / "venv" / "bin" / "course-grade"), str(root / "class"), "--out", str(out), "--jobs", "1"],
                     # the image's cache (deploy/Dockerfile sets one the user can read), not this run's
                     {**plain, "HOME": str(home), "ATTENTION_COURSE_SANDBOX_OFF": "namespaces",
                      "ATTENTION_COURSE_CACHE": str(root / "cache")}, cwd=home)
        with open(out / "grades.csv", encoding="utf-8-sig", newline="") as f:
            class_grades = {row["student"]: float(row[A]) for row in csv.DictReader(f)}

        results = {}
        for kind, notebook in SUBMISSIONS.items():
            shutil.rmtree(root / "submission", ignore_errors=True)
            (root / "submission").mkdir()
            (root / "submission" / f"{A}.ipynb").write_text(json.dumps(notebook), encoding="utf-8")
            done = run(["bash", str(root / "source" / "run_autograder")], {**plain, "AUTOGRADER_ROOT": str(root)})
            results[kind] = (done.stdout, json.loads((root / "results" / "results.json").read_text(encoding="utf-8")))
        site = Path(run([str(venv_python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                        plain).stdout.strip())
        yield {"root": root, "setup": setup, "apt": (scratch / "apt.log").read_text(encoding="utf-8").splitlines(),
               "installed": installed, "graded": graded, "class_grades": class_grades, "results": results,
               "site": site, "plain": plain, "before": before}
    finally:
        shutil.rmtree(root, ignore_errors=True)
        shutil.rmtree(scratch, ignore_errors=True)


def test_the_system_python_is_externally_managed_and_setup_sh_needs_no_override(gradescope):
    stdlib = subprocess.run([str(SYSTEM_PYTHON), "-B", "-c", "import sysconfig; print(sysconfig.get_path('stdlib'))"],
                            capture_output=True, text=True, check=True).stdout.strip()
    assert (Path(stdlib) / "EXTERNALLY-MANAGED").is_file()  # PEP 668: pip install into it is refused
    assert "PIP_BREAK_SYSTEM_PACKAGES" not in gradescope["plain"]
    config = (gradescope["root"] / "venv" / "pyvenv.cfg").read_text(encoding="utf-8")
    assert "home = /usr/bin\n" in config  # the venv is /usr/bin/python3's, not this test's Python


def test_apt_get_update_comes_before_install(gradescope):
    assert gradescope["apt"][0] == "update"
    assert gradescope["apt"][1].startswith("install -y ") and len(gradescope["apt"]) == 2


def test_the_venv_holds_the_pinned_course_and_the_cpu_torch(gradescope):
    python, versions = gradescope["installed"]
    installed = {canonicalize_name(name): version for name, version in versions.items()}
    assert installed["torch"] == f"{gradescope_bundle.tested_torch()}+cpu"
    assert "jupyterlab" not in installed and "ipykernel" not in installed  # grading runs no kernel
    pins = [Requirement(line) for line in (gradescope["root"] / "source" / gradescope_bundle.CONSTRAINTS)
            .read_text(encoding="utf-8").splitlines() if line and not line.startswith("#")]
    applied = [pin for pin in pins if pin.marker is None or pin.marker.evaluate({"python_full_version": python})]
    assert len(applied) > 100 and len(applied) < len(pins)  # some releases here need a newer Python than 3.11.2
    for pin in applied:
        name = canonicalize_name(pin.name)
        if name in installed:
            assert pin.specifier.contains(installed[name], prereleases=True), (name, installed[name])
    course = metadata.PathDistribution(next((gradescope["site"]).glob("attention_by_hand-*.dist-info")))
    assert course.read_text("direct_url.json") is None or '"editable": true' not in course.read_text("direct_url.json")


def test_course_grade_runs_as_the_images_unprivileged_user(gradescope):
    """Without namespaces only Landlock keeps the answers from student code; where the kernel has no Landlock
    either, nothing may be graded."""
    stdout = gradescope["graded"].stdout
    assert PURPOSE["namespaces"] in stdout  # listed among the missing walls, as a pod would list them
    if PURPOSE["landlock"] in stdout:
        assert set(gradescope["class_grades"].values()) == {0} and PURPOSE["answers"] in stdout
    else:
        assert gradescope["class_grades"] == SCORES


@pytest.mark.parametrize("kind", SUBMISSIONS)
def test_run_autograder_grades_from_the_venv(gradescope, kind):
    stdout, report = gradescope["results"][kind]
    assert f"installed at {gradescope['site']}" in stdout
    assert gradescope_problems(report) == []
    assert report["score"] == SCORES[kind]
    by_name = {t["name"].split(" / ")[1]: t for t in report["tests"]}
    if kind == "mistaken":
        assert by_name[MISTAKE[0]]["status"] == "failed" and MISTAKE[1] in by_name[MISTAKE[0]]["output"]
        assert all(t["status"] == "passed" for name, t in by_name.items() if name != MISTAKE[0])


def test_lock_away_finds_the_grading_packages_in_the_venv(gradescope):
    for package, mode in (("autograder", 0o700), ("solutions", 0o700), ("course", 0o755)):
        assert stat.S_IMODE((gradescope["site"] / package).stat().st_mode) == mode, package


def test_the_venvs_course_weights_fetches_or_finds_the_weights(gradescope):
    """setup.sh's prefetch lines, as a bundle of 07 has them, with the venv first on PATH as setup.sh puts it;
    the weights already in this machine's cache, so that nothing is downloaded."""
    if not smollm2.is_ready(smollm2.model_folder()):
        pytest.skip("SmolLM2 is not in this machine's course cache (course-weights smollm2)")
    script = f'export PATH="{gradescope["root"] / "venv" / "bin"}:$PATH"\n' + gradescope_bundle._prefetch(["07_real_model"])
    done = run(["bash", "-c", "set -eu\n" + script], {**gradescope["plain"], "ATTENTION_COURSE_CACHE": str(cache_dir())})
    assert "is ready in" in done.stdout + done.stderr


def test_the_system_pythons_folders_are_unchanged(gradescope):
    after = listing(system_folders())
    changed = sorted(p for p in set(gradescope["before"]) | set(after) if gradescope["before"].get(p) != after.get(p))
    assert changed == [], changed[:20]



def test_the_listing_sees_a_file_added_or_touched(tmp_path):
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "mod.py").write_text("x = 1\n", encoding="utf-8")
    before = listing([tmp_path])
    os.utime(tmp_path / "pkg" / "mod.py", ns=(0, 0))
    assert listing([tmp_path]) != before
    before = listing([tmp_path])
    (tmp_path / "pkg" / "__pycache__").mkdir()
    assert listing([tmp_path]) != before
