"""The course's graders, in three rooms:

- ``autograder.engine``: everything that decides a verdict (exercises, checks, the sandbox). It imports
  nothing from the other two rooms.
- this folder itself: what ``pytest autograder/`` runs for a student (``conftest.py``, ``test_0N_*.py``, the
  score table in ``scoreboard``).
- ``autograder.instructor``: release, handout, doctor, the nbgrader adapter and whole-class grading.

For integrators (a web service, another LMS), two functions give the same verdicts as every command::

    from autograder import grade_notebook, grade_code
    verdicts = grade_notebook("work/01_attention_basics/01_attention_basics.ipynb")   # list[Verdict]
    verdict = grade_code("causal_mask", source_text)                                  # Verdict

A ``Verdict`` has ``exercise``, ``points``, ``max_points``, ``passed``, ``summary`` (one line), ``details``,
``message`` (both), ``mistake`` (the known mistake matched, or "") and ``grader_problem`` (True when the
grader, not the student, failed). ``grade_notebook`` raises ``SubmissionError`` when a path's assignment cannot be
told (its name names none, or several). Student code runs in the sandbox, never in the calling process; one fork
server is started on first use and serves the whole process.
"""

__all__ = ["grade_notebook", "grade_code", "Verdict", "SubmissionError"]


def __getattr__(name):
    # Imported on first use: ``import autograder`` (nbgrader loads it for every command) must not import torch.
    if name in ("grade_notebook", "grade_code"):
        from autograder.engine import grading

        return getattr(grading, name)
    if name == "Verdict":
        from autograder.engine.model import Verdict

        return Verdict
    if name == "SubmissionError":
        from autograder.engine.submission import SubmissionError

        return SubmissionError
    raise AttributeError(f"module 'autograder' has no attribute {name!r}")
