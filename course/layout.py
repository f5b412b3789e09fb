"""The course's folders, named once. ``nbgrader_config.py``, the grader, the instructor tools and
``course-work`` all read these names from here.

``ROOT`` is the folder that holds ``course/``: the checkout, where ``source/``, ``release/`` and the
student's ``work/`` lie (in a plain install it is site-packages, which holds none of them).
"""
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

SOURCE = "source"  # nbgrader source notebooks (jupytext .py), edited by instructors
RELEASE = "release"  # the student notebooks generated from source/
WORK = "work"  # the student's own copy of release/ (course-work)
DATA = "data"  # what the course ships: the layer-3 stand-in
# In each release/<assignment>/: the public cases its check cells run (course.checking), written by course-release
CHECKS = "checks.pt.xz"
# nbgrader's course folders, relative to the course directory
SUBMITTED = "submitted"
AUTOGRADED = "autograded"
FEEDBACK = "feedback"
