"""``course-gradescope ASSIGNMENT -o autograder.zip``: build the bundle Gradescope's "programming assignment"
autograder takes.

Gradescope unpacks the zip into ``/autograder/source/``, runs ``setup.sh`` once as root to build its image,
then ``run_autograder`` for each submission, with the student's upload in ``/autograder/submission/``; the
results go to ``/autograder/results/results.json``. The bundle holds the installable course (``course``,
``solutions``, ``autograder``, the layer-3 stand-in) and those two scripts. ``setup.sh`` installs it, not
editable, with a CPU build of torch; ``run_autograder`` grades in the course's sandbox, whose walls keep
``solutions/`` and ``autograder/`` out of the student's reach, wherever they are installed. Gradescope runs
it as root, often without Landlock: student code then runs as nobody, and ``run_autograder`` first makes the
bundle, the upload, the results folder and the installed grading packages readable by root alone; where the
answers can still be read, no exercise is graded and ``results.json`` says why.

Visibility: every exercise's verdict comes from hidden checks (the cases the notebook does not show), so by
default their tests use Gradescope's ``after_due_date``: the verdicts and messages, which describe the hidden
cases, appear when the deadline has passed — as nbgrader's feedback would — and cannot be probed by
resubmitting before it; the notebook's own visible checks give feedback meanwhile. ``--visibility visible``
shows them at once (for practice), ``after_published`` when the grades are published, ``hidden`` never.
"""
import argparse
import shlex
import stat
import sys
import zipfile
from pathlib import Path

import torch

from autograder.engine.assignments import ASSIGNMENTS, needed_weights
from autograder.instructor.classroom.gradescope_run import WHEN_SHOWN
from course.layout import ROOT as REPO

PACKAGES = ("course", "solutions", "autograder", "data")
FILES = ("pyproject.toml", "README.md")
_FIXED_TIME = (1980, 1, 1, 0, 0, 0)  # every entry gets this time, so the same course gives the same zip

SETUP = """#!/usr/bin/env bash
# Run once by Gradescope, as root on its Ubuntu image, while it builds the autograder: installs Python, a
# CPU build of torch (no GPU there; the default CUDA build is several GB) and the course from this bundle,
# not editable, so that nothing is imported from /autograder/source at grading time.
set -euo pipefail
apt-get install -y --no-install-recommends python3 python3-pip python3-venv libseccomp2
# Ubuntu 24.04 marks its Python as externally managed; this image exists only to grade, so install into it
# (older pips ignore the variable).
export PIP_BREAK_SYSTEM_PACKAGES=1
python3 -m pip install --upgrade pip
python3 -m pip install "torch=={torch}" --index-url https://download.pytorch.org/whl/cpu
python3 -m pip install /autograder/source
# The course's cache (real weights) where the unprivileged user student code runs as can read it: not in
# root's home, which is closed to others.
export ATTENTION_COURSE_CACHE=/autograder/cache
{prefetch}"""

RUN = """#!/usr/bin/env bash
# Run by Gradescope for each submission: grade {assignment} in /autograder/submission/ with the course's
# sandboxed engine and write /autograder/results/results.json. AUTOGRADER_ROOT moves /autograder (for
# trying the bundle out locally); the Python used is the first python3 (or python) on PATH.
set -euo pipefail
root="${{AUTOGRADER_ROOT:-/autograder}}"
python="$(command -v python3 || command -v python)"
cd "$(mktemp -d)"  # nothing importable in the working folder
if [ -z "${{ATTENTION_COURSE_CACHE:-}}" ] && [ -d "$root/cache" ]; then
    export ATTENTION_COURSE_CACHE="$root/cache"  # where setup.sh put the weights
fi
# As root without Landlock, student code runs as an unprivileged user; --lock-away makes the bundle (with
# its solutions/), the upload, the results and the installed grading packages root-only, out of its reach.
exec "$python" -m autograder.instructor.classroom.gradescope_run {assignment} "$root/submission" \\
    "$root/results/results.json" --visibility {visibility} --lock-away "$root/source"
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


def build(assignment: str, target: Path, visibility: str = "after_due_date", repo: Path = REPO) -> None:
    missing = [f for f in (*FILES, *PACKAGES) if not (repo / f).exists()]
    if missing:
        raise FileNotFoundError(f"{repo} is not a checkout of the course (no {', '.join(missing)}): run "
                                "course-gradescope from the course's repository")
    version = torch.__version__.split("+")[0]  # the version the course is tested with, without "+cpu"
    with zipfile.ZipFile(target, "w") as bundle:
        # The real weights the graders read from the course's cache are fetched while Gradescope builds the
        # image, which has internet (grading runs may not).
        prefetch = "".join(f"{weights.command}\n" for weights in needed_weights([assignment]))
        bundle.writestr(_entry("setup.sh", True), SETUP.format(torch=version, prefetch=prefetch))
        bundle.writestr(_entry("run_autograder", True),
                        RUN.format(assignment=shlex.quote(assignment), visibility=shlex.quote(visibility)))
        for file in course_files(repo):
            bundle.writestr(_entry(file.as_posix()), (repo / file).read_bytes())


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="course-gradescope",
                                     description="Build the autograder bundle of a Gradescope programming assignment.",
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog="\n".join(__doc__.splitlines()[2:]).replace("``", ""))
    parser.add_argument("assignment", choices=list(ASSIGNMENTS))
    parser.add_argument("-o", "--output", type=Path, default=Path("autograder.zip"), metavar="ZIP")
    parser.add_argument("--visibility", choices=list(WHEN_SHOWN), default="after_due_date",
                        help="when students see each exercise's verdict (default: after_due_date)")
    args = parser.parse_args(argv)
    try:
        build(args.assignment, args.output, args.visibility)
    except (FileNotFoundError, OSError) as e:
        print(f"course-gradescope: {e}", file=sys.stderr)
        return 1
    print(f"Wrote {args.output}: upload it as the autograder of a Gradescope programming assignment for "
          f"{args.assignment}; students upload {args.assignment}.ipynb.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
