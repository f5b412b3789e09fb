#!/usr/bin/env bash
# A class server for the course on one Debian 12 or Ubuntu 24.04 machine, from nothing. Run it as root in a
# checkout of the course (its committed state is what the class gets):
#
#   sudo deploy/jupyterhub/setup.sh
#
# What it sets up (README, "A class on one server"):
# - the grader account GRADER, with a private copy of the course in ~GRADER/attention-by-hand (a clone of
#   this checkout; the home is mode 700: the gradebook, submissions and solutions live there) and the
#   course's environment in it (.venv: the course with its graders, nbgrader, the formgrader);
# - the students' environment STUDENT_ENV: the course's helpers only (course-handout's package: no graders,
#   no solutions), JupyterLab, nbgrader's student side and JupyterHub, which runs from it;
# - the source notebooks and release/ in the grader's copy (course-release), which the formgrader's Generate reads;
# - the Unix groups STUDENTS and INSTRUCTORS (who may log in), nbgrader's exchange (make-exchange.sh), the
#   Hub's configuration in /etc/jupyterhub, its state in /srv/jupyterhub, the course's commands on the PATH of
#   login shells (/etc/profile.d/attention-course.sh: JupyterLab's terminals are login shells), and a systemd
#   unit, started (on a machine without systemd, the command that starts the Hub is printed instead).
# Run it again after committing a change: it pulls the change into the grader's copy (fast-forward only)
# and reinstalls both environments.
set -euo pipefail

GRADER=${ATTENTION_COURSE_GRADER:-grader-attention}
STUDENTS=${ATTENTION_COURSE_STUDENTS:-attention-students}
INSTRUCTORS=${ATTENTION_COURSE_INSTRUCTORS:-attention-instructors}
STUDENT_ENV=/opt/attention-course
# The versions tests/deploy/test_jupyterhub_class.py runs; torch's CPU build (the README's), as the server has no GPU.
TORCH=torch==2.13.0
TORCH_INDEX=${ATTENTION_COURSE_TORCH_INDEX:-https://download.pytorch.org/whl/cpu}  # or a mirror of it
PINS=(jupyterhub==6.1.1 nbgrader==0.9.6 jupyterlab==4.6.6)
# The system's Python (apt's, below) for both environments: every account must be able to run it, which a
# Python in root's home (pyenv, say) is not.
PYTHON=/usr/bin/python3
HERE=$(cd "$(dirname "$0")" && pwd)
CHECKOUT=$(cd "$HERE/../.." && pwd)

[ "$(id -u)" = 0 ] || { echo "setup.sh: run it as root (sudo)" >&2; exit 1; }

export DEBIAN_FRONTEND=noninteractive
apt-get update
packages=(python3 python3-venv git)
# Debian's nodejs and npm, unless node is there already (NodeSource's nodejs brings its own npm and conflicts
# with Debian's).
command -v node >/dev/null || packages+=(nodejs)
command -v npm >/dev/null || packages+=(npm)
apt-get install -y "${packages[@]}"
npm install -g "$(bash "$HERE/proxy-for-node.sh")"  # the proxy's version depends on Node's

# Homes that `useradd -m` makes from now on are their owner's alone (Debian 12 makes them 0755); the Hub makes an
# older one 0700 when its owner's server starts (jupyterhub_config.py's private_home).
if grep -qE '^[[:space:]]*HOME_MODE' /etc/login.defs; then
    sed -i -E 's/^[[:space:]]*HOME_MODE.*/HOME_MODE\t0700/' /etc/login.defs
else
    printf 'HOME_MODE\t0700\n' >> /etc/login.defs
fi
grep -qE '^HOME_MODE[[:space:]]+0700$' /etc/login.defs || { echo "setup.sh: could not set HOME_MODE 0700 in /etc/login.defs" >&2; exit 1; }

getent group "$STUDENTS" >/dev/null || groupadd "$STUDENTS"
getent group "$INSTRUCTORS" >/dev/null || groupadd "$INSTRUCTORS"
# A system account without a password: no one logs in as it; the Hub runs the formgrader as it.
id "$GRADER" >/dev/null 2>&1 || useradd --system --create-home --shell /bin/bash "$GRADER"
GRADER_HOME=$(getent passwd "$GRADER" | cut -d: -f6)
chmod 700 "$GRADER_HOME"
COURSE_DIR=$GRADER_HOME/attention-by-hand
as_grader() { (cd "$GRADER_HOME" && runuser -u "$GRADER" -- env HOME="$GRADER_HOME" "$@"); }

if [ -d "$COURSE_DIR/.git" ]; then
    git -c safe.directory="$COURSE_DIR" -C "$COURSE_DIR" pull --ff-only "$CHECKOUT"
else
    git clone --no-hardlinks "$CHECKOUT" "$COURSE_DIR"
fi
chown -R "$GRADER:" "$COURSE_DIR"
as_grader "$PYTHON" -m venv "$COURSE_DIR/.venv"
as_grader "$COURSE_DIR/.venv/bin/python" -m pip install "$TORCH" --extra-index-url "$TORCH_INDEX"
as_grader "$COURSE_DIR/.venv/bin/python" -m pip install -e "$COURSE_DIR[instructor]" "${PINS[@]}"
# source/*/*.ipynb are built from their jupytext twins, not committed: the formgrader's Generate reads them.
as_grader "$COURSE_DIR/.venv/bin/course-release"

"$PYTHON" -m venv "$STUDENT_ENV"
"$STUDENT_ENV/bin/python" -m pip install "$TORCH" --extra-index-url "$TORCH_INDEX"
handout=$GRADER_HOME/handout  # the package is the same whichever assignment is named
rm -rf "$handout"
as_grader "$COURSE_DIR/.venv/bin/course-handout" "$handout" --assignment 01_attention_basics
"$STUDENT_ENV/bin/python" -m pip install "$handout" "${PINS[@]}"
rm -rf "$handout"

bash "$HERE/make-exchange.sh" "$GRADER"

install -d -m 755 /etc/jupyterhub /etc/jupyterhub/student /etc/jupyterhub/student/labconfig
install -m 644 "$HERE/jupyterhub_config.py" /etc/jupyterhub/
install -m 644 "$HERE/student/nbgrader_config.py" "$HERE/student/jupyter_server_config.json" /etc/jupyterhub/student/
install -m 644 "$HERE/student/labconfig/page_config.json" /etc/jupyterhub/student/labconfig/
printf 'ATTENTION_COURSE_GRADER=%s\nATTENTION_COURSE_STUDENTS=%s\nATTENTION_COURSE_INSTRUCTORS=%s\n' \
    "$GRADER" "$STUDENTS" "$INSTRUCTORS" > /etc/jupyterhub/attention-course.env
install -d -m 700 /srv/jupyterhub
bash "$HERE/login-path.sh" "$STUDENT_ENV" "$GRADER" "$COURSE_DIR/.venv"
install -D -m 644 "$HERE/attention-jupyterhub.service" /etc/systemd/system/attention-jupyterhub.service
if [ -d /run/systemd/system ]; then
    systemctl daemon-reload
    systemctl enable attention-jupyterhub
    systemctl restart attention-jupyterhub
else
    echo "This machine does not run systemd (a container?), so the unit is installed but not started. Start the Hub"
    echo "as root, as the unit would (and again after a reboot), with:"
    echo "  cd /srv/jupyterhub && env \$(cat /etc/jupyterhub/attention-course.env) \\"
    echo "      $STUDENT_ENV/bin/jupyterhub -f /etc/jupyterhub/jupyterhub_config.py"
fi
echo "JupyterHub is at http://$(hostname -f):8000 (put TLS in front of it). Next: README, \"A class on one server\"."
