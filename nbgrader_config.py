"""nbgrader settings for the course. Run nbgrader from the repository root."""
from nbconvert.preprocessors import CSSHTMLHeaderPreprocessor
from nbgrader.preprocessors import ClearHiddenTests, GetGrades

c = get_config()  # noqa: F821 - provided by nbgrader when it loads this file

c.CourseDirectory.course_id = "attention-by-hand"
c.CourseDirectory.source_directory = "source"
c.CourseDirectory.release_directory = "release"
c.CourseDirectory.submitted_directory = "submitted"
c.CourseDirectory.autograded_directory = "autograded"
c.CourseDirectory.feedback_directory = "feedback"

c.ClearSolutions.code_stub = {"python": "# 在这里写你的代码\nraise NotImplementedError()"}

# Each hidden-test cell grades in a fresh interpreter with its own time limit (autograder/limits.py),
# so a cell needs at most that plus interpreter start-up; the rest of a notebook runs in seconds.
c.Execute.timeout = 120

# Autograded notebooks get their hidden tests back; feedback must not show them to students.
c.GenerateFeedback.preprocessors = [GetGrades, ClearHiddenTests, CSSHTMLHeaderPreprocessor]

# source/<assignment>/*.py are the jupytext twins of the source notebooks, not files for students.
c.CourseDirectory.ignore = [".ipynb_checkpoints", "*.pyc", "__pycache__", "feedback", ".*", "*.py"]
