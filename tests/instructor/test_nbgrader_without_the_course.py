"""`nbgrader autograde` where the course's package cannot be imported (run outside the checkout, from another
venv, with the editable install pointing elsewhere). nbgrader logs a config file that raises and goes on with
its defaults, which run every submission in a Jupyter kernel with the instructor's rights: a notebook then does
whatever it likes as the instructor (as root, ``os.kill(-1, SIGKILL)`` ends every process of the machine). The
course's config must refuse to grade instead, saying why, and start no kernel."""
import shutil
import subprocess
import sys

import pytest
from nbgrader.api import Gradebook

from tests.notebooks import filled, source_solutions, write_submission

pytestmark = [pytest.mark.nbgrader, pytest.mark.slow]  # one nbgrader run
FIRST = "01_attention_basics"
STUDENT = "a-student"

# nbgrader's own entry point, with the course's packages made unimportable as on a machine without them.
WITHOUT_THE_COURSE = ("import sys\n"
                      "sys.modules.update(autograder=None, course=None, solutions=None)\n"
                      "from nbgrader.apps.nbgraderapp import main\n"
                      "sys.argv[0] = 'nbgrader'\n"
                      "main()\n")


def test_without_the_course_package_nothing_is_run_and_the_reason_is_given(generated_course, tmp_path):
    root = tmp_path / "course"
    shutil.copytree(generated_course, root)
    ran = tmp_path / "the submission ran"
    # Its code would write a file where it runs, in a kernel or anywhere else.
    answer = f"open({str(ran)!r}, 'w').close()\n" + source_solutions(FIRST)["attention_scores"]
    write_submission(root / "submitted" / STUDENT, filled({**source_solutions(FIRST), "attention_scores": answer}, FIRST),
                     FIRST)
    done = subprocess.run([sys.executable, "-c", WITHOUT_THE_COURSE, "autograde", FIRST, "--create", "--force"],
                          cwd=root, capture_output=True, text=True)
    said = done.stdout + done.stderr
    assert not ran.exists(), said
    assert "Kernel" not in said and "ipykernel" not in said, said
    assert done.returncode != 0, said
    assert "autograder" in said and "pip install -e" in said, said  # what is missing, and what to do
    with Gradebook(f"sqlite:///{root / 'gradebook.db'}") as gradebook:
        # nbgrader records the submission before it reads it; as after any failed autograde, no grade has an
        # autograded score and each waits for a grader: nothing to mistake for a mark.
        grades = gradebook.find_submission_notebook(FIRST, FIRST, STUDENT).grades
        assert grades and all(g.auto_score is None and g.needs_manual_grade for g in grades)
