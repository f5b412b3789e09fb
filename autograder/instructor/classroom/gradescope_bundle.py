"""``course-gradescope ASSIGNMENT -o autograder.zip``: build the bundle Gradescope's "programming assignment"
autograder takes; ``course-gradescope --image DIR``: the build context of the grading image for Kubernetes.

Gradescope unpacks the zip into ``/autograder/source/``, runs ``setup.sh`` once as root to build its image,
then ``run_autograder`` for each submission, with the student's upload in ``/autograder/submission/``; the
results go to ``/autograder/results/results.json``. The bundle holds the installable course (``course``,
``solutions``, ``autograder``, the layer-3 stand-in), ``deploy/install-course.sh``, ``constraints.txt`` and
those two scripts. ``setup.sh`` runs ``install-course.sh``, which installs the course, not editable and
without JupyterLab (grading runs no kernel), with a CPU build of torch, into a virtual environment of its
own, ``/autograder/venv``: Ubuntu 24.04's Python is externally managed (PEP 668), and neither it nor its pip
is touched. ``constraints.txt`` pins what is installed: the course's requirements and theirs, all the way
down, at the versions of the environment that built the bundle (each pin where its release supports the
Python it lands on), and torch at the version the course was tested with. ``run_autograder`` grades with
that environment's Python in the course's sandbox, whose walls keep ``solutions/`` and ``autograder/`` out of
the student's reach, wherever they are installed.
Gradescope runs it as root, often without Landlock: student code then runs as nobody, and ``run_autograder``
first makes the bundle, the upload, the results folder and the installed grading packages readable by root
alone; where the answers can still be read, no exercise is graded and ``results.json`` says why.

Visibility: every exercise's verdict comes from hidden checks (the cases the notebook does not show), so by
default their tests use Gradescope's ``after_due_date``: the verdicts and messages, which describe the hidden
cases, appear when the deadline has passed — as nbgrader's feedback would — and cannot be probed by
resubmitting before it; the notebook's own visible checks give feedback meanwhile. ``--visibility visible``
shows them at once (for practice), ``after_published`` when the grades are published, ``hidden`` never.

The image context (``deploy/Dockerfile`` and the same course, install script and pins, with ``prefetch.sh``
fetching the weights of every assignment) builds, with ``docker build``, the image that
``deploy/kubernetes-course-grade.yaml`` runs; course-gradescope prints the command, with the image's tag.
"""
import argparse
import shlex
import stat
import sys
import zipfile
from importlib import metadata
from pathlib import Path

import torch
from packaging.requirements import Requirement
from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.utils import canonicalize_name
from packaging.version import Version

from autograder.engine.assignments import ASSIGNMENTS, needed_weights
from autograder.instructor.classroom.gradescope_run import WHEN_SHOWN
from course import layout
from course.layout import ROOT as REPO

PACKAGES = ("course", "solutions", "autograder", layout.DATA)
INSTALL = "deploy/install-course.sh"  # the same path in a checkout, a bundle and an image context
DOCKERFILE = "deploy/Dockerfile"
FILES = ("pyproject.toml", "README.md", INSTALL)
CONSTRAINTS = "constraints.txt"
NOTEBOOK_REQUIREMENTS = "course/notebook-requirements.txt"  # what the bundle and the image install without
IMAGE = "attention-course:1"  # the grading image's tag, as deploy/Dockerfile builds it and the Kubernetes Jobs run it
_FIXED_TIME = (1980, 1, 1, 0, 0, 0)  # every entry gets this time, so the same course gives the same zip

SETUP = """#!/usr/bin/env bash
# Run once by Gradescope, as root on its Ubuntu image, while it builds the autograder: install-course.sh
# installs the course from this bundle (not editable), with a CPU build of torch (no GPU there; the default
# CUDA build is several GB), into a virtual environment of its own, $root/venv, whose Python run_autograder
# uses; the system Python and its pip stay as they are. constraints.txt pins what it installs.
# AUTOGRADER_ROOT moves /autograder (for trying the bundle out locally).
set -euo pipefail
root="${{AUTOGRADER_ROOT:-/autograder}}"
bash "$root/source/{install}" "$root/source" "$root/venv"
export PATH="$root/venv/bin:$PATH"
# The course's cache (real weights) where the unprivileged user student code runs as can read it: not in
# root's home, which is closed to others.
export ATTENTION_COURSE_CACHE="$root/cache"
{prefetch}"""

RUN = """#!/usr/bin/env bash
# Run by Gradescope for each submission: grade {assignment} in /autograder/submission/ with the course's
# sandboxed engine and write /autograder/results/results.json. AUTOGRADER_ROOT moves /autograder (for
# trying the bundle out locally); the Python is that of setup.sh's virtual environment.
set -euo pipefail
root="${{AUTOGRADER_ROOT:-/autograder}}"
cd "$(mktemp -d)"  # nothing importable in the working folder
if [ -z "${{ATTENTION_COURSE_CACHE:-}}" ] && [ -d "$root/cache" ]; then
    export ATTENTION_COURSE_CACHE="$root/cache"  # where setup.sh put the weights
fi
# As root without Landlock, student code runs as an unprivileged user; --lock-away makes the bundle (with
# its solutions/), the upload, the results and the installed grading packages root-only, out of its reach.
exec "$root/venv/bin/python" -m autograder.instructor.classroom.gradescope_run {assignment} "$root/submission" \\
    "$root/results/results.json" --visibility {visibility} --lock-away "$root/source"
"""

PINS = """# Written by course-gradescope: the course's requirements and theirs, all the way down, at the versions
# installed where it ran (Python {python}). A pin holds on the Pythons its release supports (its
# Requires-Python, as a marker); on others pip takes the newest release that fits. torch is the version the
# course was tested with: install-course.sh installs it first, a CPU build, from the PyTorch CPU index.
"""


def _entry(name: str, executable: bool = False) -> zipfile.ZipInfo:
    info = zipfile.ZipInfo(name, date_time=_FIXED_TIME)
    info.external_attr = (stat.S_IFREG | (0o755 if executable else 0o644)) << 16
    info.compress_type = zipfile.ZIP_DEFLATED
    return info


def course_files(repo: Path = REPO) -> list[Path]:
    """The files of the installable course in a checkout, relative to it, without caches."""
    found = [Path(f) for f in FILES]
    for package in PACKAGES:
        found += sorted(p.relative_to(repo) for p in (repo / package).rglob("*")
                        if p.is_file() and "__pycache__" not in p.parts and p.suffix != ".pyc")
    return found


def tested_torch() -> str:
    """The torch version the course is tested with: this environment's, without a local label ("+cpu")."""
    return Version(torch.__version__).public


def _python_marker(requires_python: str | None) -> str:
    """A release's Requires-Python as an environment marker ("" when it names none or cannot be read)."""
    try:
        specifiers = sorted(SpecifierSet(requires_python or ""), key=str)
    except InvalidSpecifier:
        return ""
    return " and ".join(f'python_full_version {s.operator} "{s.version}"' for s in specifiers)


def requirement_closure() -> tuple[dict[str, metadata.Distribution], list[str]]:
    """The installed distributions the course needs, directly or through others, on this machine (markers
    evaluated here, extras followed), by normalised name; and the requirements that are not installed here."""
    course = metadata.packages_distributions()["autograder"][0]
    todo = [(Requirement(text), "") for text in metadata.requires(course) or []]
    found: dict[str, metadata.Distribution] = {}
    missing, seen = set(), set()
    while todo:
        requirement, extra = todo.pop()
        name = canonicalize_name(requirement.name)
        if (requirement.marker and not requirement.marker.evaluate({"extra": extra})) or \
                (name, *sorted(requirement.extras)) in seen:
            continue
        seen.add((name, *sorted(requirement.extras)))
        try:
            found[name] = metadata.distribution(requirement.name)
        except metadata.PackageNotFoundError:
            missing.add(name)
            continue
        todo += [(Requirement(text), wanted) for text in found[name].requires or []
                 for wanted in ("", *requirement.extras)]
    return found, sorted(missing - set(found))


def constraints() -> str:
    """``constraints.txt``: torch at the tested version, then every other distribution of the course's
    requirement closure at its installed version, each for the Pythons its release supports."""
    found, missing = requirement_closure()
    lines = [PINS.format(python=sys.version.split()[0])]
    if missing:
        lines.append(f"# Not installed where this was written, so not pinned: {', '.join(missing)}\n")
    lines.append(f"torch=={tested_torch()}\n")
    for name, distribution in sorted(found.items()):
        if name != "torch":
            marker = _python_marker(distribution.metadata["Requires-Python"])
            lines.append(f"{name}=={Version(distribution.version).public}{'; ' + marker if marker else ''}\n")
    return "".join(lines)


def _checked(repo: Path) -> None:
    missing = [f for f in (*FILES, *PACKAGES) if not (repo / f).exists()]
    if missing:
        raise FileNotFoundError(f"{repo} is not a checkout of the course (no {', '.join(missing)}): run "
                                "course-gradescope from the course's repository")


def grading_pyproject(text: str) -> str:
    """The course's pyproject.toml without the notebooks' requirements (JupyterLab and its kernel, about 95
    distributions): grading runs no kernel."""
    listed = f'"{NOTEBOOK_REQUIREMENTS}", '
    if text.count(listed) != 1:
        raise ValueError(f"pyproject.toml does not list {NOTEBOOK_REQUIREMENTS} once among the files of its "
                         "dependencies, so the grading install cannot leave JupyterLab out")
    return text.replace(listed, "")


def _installable(repo: Path) -> dict[str, tuple[bytes, bool]]:
    """What a bundle and an image context share: name -> (bytes, executable)."""
    files = {file.as_posix(): ((repo / file).read_bytes(), file.as_posix() == INSTALL) for file in course_files(repo)}
    files["pyproject.toml"] = (grading_pyproject(files["pyproject.toml"][0].decode()).encode(), False)
    files[CONSTRAINTS] = (constraints().encode(), False)
    return files


def _prefetch(assignments=None) -> str:
    """The commands that fetch the real weights the graders of ``assignments`` (default: all) read from the
    course's cache: run while the image is built, which has internet (grading runs may not)."""
    return "".join(f"{weights.command}\n" for weights in needed_weights(assignments))


def build(assignment: str, target: Path, visibility: str = "after_due_date", repo: Path = REPO) -> None:
    _checked(repo)
    files = {"setup.sh": (SETUP.format(install=INSTALL, prefetch=_prefetch([assignment])).encode(), True),
             "run_autograder": (RUN.format(assignment=shlex.quote(assignment),
                                           visibility=shlex.quote(visibility)).encode(), True),
             **_installable(repo)}
    target.parent.mkdir(parents=True, exist_ok=True)  # -o out/autograder.zip makes out/, as --image makes its folder
    with zipfile.ZipFile(target, "w") as bundle:
        for name, (data, executable) in files.items():
            bundle.writestr(_entry(name, executable), data)


def build_image_context(target: Path, repo: Path = REPO) -> None:
    """Write the build context of the grading image into ``target`` (new or empty): ``Dockerfile``, the
    installable course with ``install-course.sh`` and ``constraints.txt``, and ``prefetch.sh``."""
    _checked(repo)
    if target.exists() and any(target.iterdir()):
        raise FileExistsError(f"{target} is not empty: give --image a new folder")
    files = {"Dockerfile": ((repo / DOCKERFILE).read_bytes(), False),
             "prefetch.sh": (("set -eu\n" + _prefetch()).encode(), True), **_installable(repo)}
    for name, (data, executable) in files.items():
        path = target / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        path.chmod(0o755 if executable else 0o644)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="course-gradescope",
                                     description="Build the autograder bundle of a Gradescope programming "
                                                 "assignment, or the grading image's build context.",
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog="\n".join(__doc__.splitlines()[2:]).replace("``", ""))
    parser.add_argument("assignment", nargs="?", choices=list(ASSIGNMENTS))
    parser.add_argument("-o", "--output", type=Path, default=Path("autograder.zip"), metavar="ZIP")
    parser.add_argument("--visibility", choices=list(WHEN_SHOWN), default="after_due_date",
                        help="when students see each exercise's verdict (default: after_due_date)")
    parser.add_argument("--image", type=Path, metavar="DIR",
                        help="instead, write the grading image's build context (all assignments) into DIR")
    args = parser.parse_args(argv)
    if (args.assignment is None) == (args.image is None):
        parser.error("name an assignment (a Gradescope bundle) or --image DIR (the grading image), not both")
    try:
        if args.image:
            build_image_context(args.image)
        else:
            build(args.assignment, args.output, args.visibility)
    except (OSError, ValueError) as e:  # FileNotFoundError, FileExistsError among them; a changed pyproject.toml
        print(f"course-gradescope: {e}", file=sys.stderr)
        return 1
    if args.image:
        print(f"Wrote the grading image's build context to {args.image}: docker build -t {IMAGE} {args.image}")
    else:
        print(f"Wrote {args.output}: upload it as the autograder of a Gradescope programming assignment for "
              f"{args.assignment}; students upload {args.assignment}.ipynb.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
