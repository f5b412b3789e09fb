"""The class store keeps a result until something that decides its verdicts changes: shown on a copy of the
course, graded again by ``course-grade`` after edits to the tools (nothing is regraded) and to one check (that
assignment's notebooks are, and no other)."""
import io
import re
import shutil
import subprocess
import sys
import tokenize

import pytest

from course.layout import ROOT as REPO
from tests.notebooks import released_path

# Two assignments, so that an edit to one's check can be seen to leave the other alone.
FIRST, SECOND = "01_attention_basics", "02_multi_head"
_CHINESE = re.compile(r"[\u4e00-\u9fff]")


def _copy_of_the_course(root):
    for part in ("autograder", "solutions", "course", "data"):
        shutil.copytree(REPO / part, root / part, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(REPO / "pyproject.toml", root)
    return root


def _reworded(file):
    """Change the first Chinese text of a string literal in ``file`` (a doctor line, the handout's README ...)."""
    text = file.read_text(encoding="utf-8")
    strings = [t for t in tokenize.generate_tokens(io.StringIO(text).readline)
               if t.type == tokenize.STRING and _CHINESE.search(t.string)]
    assert strings, f"{file} holds no Chinese message to reword"
    lines = text.splitlines(keepends=True)
    row, column = strings[0].start
    at = sum(map(len, lines[:row - 1])) + column + _CHINESE.search(strings[0].string).start()
    file.write_text(text[:at] + "（改过）" + text[at:], encoding="utf-8")


def _grade(course, klass, out) -> str:
    """``course-grade`` run from the copy ``course``; what it said about how many notebooks it graded."""
    done = subprocess.run([sys.executable, "-m", "autograder.instructor.classroom.course_grade", str(klass),
                           "--out", str(out), "--jobs", "1"], cwd=course.parent, capture_output=True, text=True,
                          env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(course), "HOME": str(course.parent)})
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout.splitlines()[0]


@pytest.mark.slow  # real course-grade runs on a copy of the course
def test_only_what_decides_a_verdict_regrades_a_class(tmp_path):
    course = _copy_of_the_course(tmp_path / "course")
    klass = tmp_path / "class"
    for assignment in (FIRST, SECOND):
        (klass / "alice" / assignment).mkdir(parents=True)
        shutil.copy(released_path(assignment), klass / "alice" / assignment)
    out = tmp_path / "graded"
    assert "2 notebooks: 2 graded" in _grade(course, klass, out)

    for tool in ("autograder/instructor/doctor.py", "autograder/instructor/handout.py", "autograder/scoreboard.py",
                 "autograder/instructor/classroom/feedback_pages.py"):
        _reworded(course / tool)
    (course / "course/tools/plotting.py").write_text((course / "course/tools/plotting.py").read_text(
        encoding="utf-8") + "\n# a colour changed\n", encoding="utf-8")
    assert "all unchanged since the last run" in _grade(course, klass, out)

    check = course / "autograder/engine/checks/causal_mask.py"
    check.write_text(check.read_text(encoding="utf-8") + "\n# a case added\n", encoding="utf-8")
    # Only 01's notebook: 02 uses no 01 check. (Were the copy not the grader, nothing would be regraded.)
    said = _grade(course, klass, out)
    assert "2 notebooks: 1 graded" in said and "1 unchanged since the last run" in said, said
