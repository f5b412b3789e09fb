"""JupyterHub for a class of the course on one server (deploy/jupyterhub/setup.sh installs it).

- Everyone logs in with their Unix account on this server (PAM): the members of the Unix groups STUDENTS
  and INSTRUCTORS. Each gets a JupyterLab of their own, run as that account from the students'
  environment (the Python that runs this Hub), with nbgrader's Assignments tab to fetch and submit and no
  instructor menus (``student/``, this folder's students' Jupyter config).
- The formgrader is a Hub service: one JupyterLab run as the shared Unix account GRADER, in its private
  copy of the course (COURSE_DIR, where ``gradebook.db``, ``submitted/`` and ``source/`` live), from the
  course's own environment (GRADER_PYTHON), at ``/services/attention-course/formgrader``. Only the members
  of INSTRUCTORS may open it. One account holds the gradebook and owns what it collects, so every
  instructor grades the same class and no student file is ever readable by another student.
- nbgrader's exchange is ``/srv/nbgrader/exchange`` (``nbgrader_config.py``, ``make-exchange.sh``).

Run it as root (it starts each server as its user), from the folder that keeps the Hub's state:

    cd /srv/jupyterhub && /opt/attention-course/bin/jupyterhub -f /etc/jupyterhub/jupyterhub_config.py

The accounts, groups and paths below have defaults that setup.sh creates; the environment variables
ATTENTION_COURSE_GRADER, ATTENTION_COURSE_GRADER_PYTHON, ATTENTION_COURSE_STUDENTS and
ATTENTION_COURSE_INSTRUCTORS move them (tests/deploy/test_jupyterhub_class.py does).
"""
import grp
import os
import pwd
import sys
from pathlib import Path

c = get_config()  # noqa: F821 - provided by JupyterHub when it loads this file

HERE = Path(__file__).resolve().parent
SERVICE = "attention-course"  # the formgrader's address: /services/attention-course/
GRADER = os.environ.get("ATTENTION_COURSE_GRADER", "grader-attention")
COURSE_DIR = Path(pwd.getpwnam(GRADER).pw_dir) / "attention-by-hand"
GRADER_PYTHON = os.environ.get("ATTENTION_COURSE_GRADER_PYTHON", str(COURSE_DIR / ".venv" / "bin" / "python"))
STUDENTS = os.environ.get("ATTENTION_COURSE_STUDENTS", "attention-students")
INSTRUCTORS = os.environ.get("ATTENTION_COURSE_INSTRUCTORS", "attention-instructors")


def first_on_path(python: str) -> str:
    """PATH with ``python``'s environment first: a terminal's `python`, `nbgrader`, `course-weights` are its."""
    return f"{Path(python).parent}{os.pathsep}{os.environ['PATH']}"


# Put TLS in front of this port (a reverse proxy), or give the Hub a certificate: c.JupyterHub.ssl_cert / ssl_key.
c.JupyterHub.bind_url = "http://:8000"

c.JupyterHub.authenticator_class = "pam"
c.PAMAuthenticator.allowed_groups = {STUDENTS, INSTRUCTORS}
# The Hub's group "instructors" is the Unix group's members, as the Hub starts (restart it after usermod -aG).
c.JupyterHub.load_groups = {"instructors": {"users": sorted(grp.getgrnam(INSTRUCTORS).gr_mem)}}
c.JupyterHub.load_roles = [{"name": "formgrader", "groups": ["instructors"],
                            "scopes": [f"access:services!service={SERVICE}"]}]

def private_home(spawner) -> None:
    """Before a user's server starts, their home is theirs alone (0700): Debian 12's ``useradd -m`` makes it 0755,
    where every student could read every other's notebooks. (setup.sh also makes new homes 0700.)"""
    home = Path(pwd.getpwnam(spawner.user.name).pw_dir)
    if home.is_dir() and home.stat().st_mode & 0o077:
        home.chmod(0o700)


c.Spawner.pre_spawn_hook = private_home

# Each user's server: this Hub's environment, whose kernels have the course's helpers and none of its graders.
c.Spawner.cmd = [sys.executable, "-m", "jupyterhub.singleuser"]
c.Spawner.default_url = "/lab"
c.Spawner.notebook_dir = "~"
c.Spawner.environment = {"JUPYTER_CONFIG_PATH": str(HERE / "student"), "PATH": first_on_path(sys.executable)}

c.JupyterHub.services = [{
    "name": SERVICE,
    "url": "http://127.0.0.1:9999",
    "command": [GRADER_PYTHON, "-m", "jupyterhub.singleuser", "--ServerApp.default_url=/formgrader"],
    "user": GRADER,
    "cwd": str(COURSE_DIR),  # nbgrader finds nbgrader_config.py and the course's folders here
    "environment": {"PATH": first_on_path(GRADER_PYTHON)},  # its terminal's nbgrader and course-release
    "oauth_no_confirm": True,
    "display": True,  # listed on the instructors' Hub home page, under Services
}]
