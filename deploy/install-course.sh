#!/usr/bin/env bash
# Install the course into a virtual environment of its own, as root on Debian or Ubuntu: what the Gradescope
# bundle's setup.sh and the Kubernetes image (deploy/Dockerfile) both run.
#
#   install-course.sh COURSE VENV
#
# COURSE is an unpacked Gradescope bundle or image context (course-gradescope writes both): the course's
# packages with pyproject.toml, and constraints.txt, the versions of the environment that wrote it. The
# system Python is only used to create VENV: a PEP 668 one (Ubuntu 24.04, Debian 12) and its pip are left
# as they are. torch is the version in constraints.txt, a CPU build from $ATTENTION_COURSE_TORCH_INDEX (a
# PEP 503 index; default the PyTorch CPU index); everything else comes from pip's usual index, pinned by
# constraints.txt, and the course is installed not editable.
set -euo pipefail
course="${1:?usage: install-course.sh COURSE VENV}"
venv="${2:?usage: install-course.sh COURSE VENV}"
export DEBIAN_FRONTEND=noninteractive
apt-get update
# python3-venv brings ensurepip (Debian and Ubuntu leave it out of python3); libseccomp2 is the sandbox's
# syscall filter; ca-certificates lets course-weights fetch over HTTPS.
apt-get install -y --no-install-recommends python3 python3-venv libseccomp2 ca-certificates
python3 -m venv "$venv"
pip=("$venv/bin/python" -m pip --disable-pip-version-check)
torch="$(grep -m1 -x 'torch==[^;[:space:]]*' "$course/constraints.txt")" \
    || { echo "install-course.sh: $course/constraints.txt pins no torch==VERSION" >&2; exit 1; }
index="${ATTENTION_COURSE_TORCH_INDEX:-https://download.pytorch.org/whl/cpu}"
# Without its dependencies: those come pinned from the usual index with the course, below.
"${pip[@]}" install --no-deps "$torch" --index-url "$index"
"${pip[@]}" install --constraint "$course/constraints.txt" "$course"
