"""nbgrader settings for the course. Run nbgrader from the repository root, with the course installed."""
from nbconvert.preprocessors import ClearMetadataPreprocessor, CSSHTMLHeaderPreprocessor, Preprocessor
from nbgrader.preprocessors import (
    AssignLatePenalties,
    CheckCellMetadata,
    ClearHiddenTests,
    ClearOutput,
    DeduplicateIds,
    GetGrades,
    IgnorePattern,
    LimitOutput,
    OverwriteCells,
    OverwriteKernelspec,
    SaveAutoGrades,
)

c = get_config()  # noqa: F821 - provided by nbgrader when it loads this file

try:
    from autograder.instructor.nbgrader_cells import ReleasedCells
    from autograder.instructor.nbgrader_verdicts import EngineVerdicts
    from course import layout
except ImportError as error:
    # nbgrader logs a config file that raises and goes on with its defaults, which run each submission in a Jupyter
    # kernel with the instructor's rights. So this file loads without the course too, and then nothing is graded.
    NOT_GRADED = (f"not graded: the course's Python package cannot be imported ({error}). Install it from the "
                  "course's checkout (python -m pip install -e .) and run nbgrader there.")

    class CourseNotInstalled(Preprocessor):
        """Stands for each of the course's preprocessors: every notebook fails with ``NOT_GRADED``, and nbgrader's
        kernel-running Execute is never among them."""

        def __call__(self, nb, resources):  # nbconvert's own __call__ skips a preprocessor not enabled by config
            raise RuntimeError(NOT_GRADED)

    ReleasedCells = EngineVerdicts = CourseNotInstalled
    layout = None

c.CourseDirectory.course_id = "attention-by-hand"
# nbgrader's exchange (release, fetch, submit, collect, feedback between Unix accounts on one server): a folder
# every account can write, with the sticky bit (deploy/jupyterhub/make-exchange.sh). Without it the formgrader
# marks every assignment "draft" and offers no Release or Collect. Students' side: deploy/jupyterhub/student/.
c.Exchange.root = "/srv/nbgrader/exchange"
if layout:  # else nbgrader's own folder names, which are the same; only autograde needs the course
    c.CourseDirectory.source_directory = layout.SOURCE
    c.CourseDirectory.release_directory = layout.RELEASE
    c.CourseDirectory.submitted_directory = layout.SUBMITTED
    c.CourseDirectory.autograded_directory = layout.AUTOGRADED
    c.CourseDirectory.feedback_directory = layout.FEEDBACK

c.ClearSolutions.code_stub = {"python": "# 在这里写你的代码\nraise NotImplementedError()"}
# What students see in place of a thinking question's answer (``answer:`` cells, see autograder/instructor/release.py).
c.ClearSolutions.text_stub = "（在这里写下你的想法。参考答案在老师那里，不计分。）"

# A student's notebook metadata (a pasted test cell, a renamed grade_id, changed points, a deleted cell) must
# neither stop the class nor raise a grade: ReleasedCells first rebuilds it from the released cells.
c.Autograde.sanitize_preprocessors = [ReleasedCells, ClearOutput, DeduplicateIds, OverwriteKernelspec,
                                      OverwriteCells, CheckCellMetadata]

# No kernel runs a submission: EngineVerdicts takes the place of nbgrader's Execute and writes the course
# engine's verdicts (the same as `pytest autograder/`) into the grade cells, from which SaveAutoGrades scores.
c.Autograde.autograde_preprocessors = [EngineVerdicts, IgnorePattern, ClearMetadataPreprocessor, LimitOutput,
                                       SaveAutoGrades, AssignLatePenalties, CheckCellMetadata]

# Autograded notebooks get their hidden tests back; feedback must not show them to students.
c.GenerateFeedback.preprocessors = [GetGrades, ClearHiddenTests, CSSHTMLHeaderPreprocessor]

# source/<assignment>/*.py are the jupytext twins of the source notebooks, not files for students.
c.CourseDirectory.ignore = [".ipynb_checkpoints", "*.pyc", "__pycache__", "feedback", ".*", "*.py"]
