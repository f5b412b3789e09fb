"""Grading a whole class: ``course-grade`` (many students at once, on warm workers, with a gradebook, the
class's common mistakes, a report and feedback pages) and ``course-gradescope`` (a Gradescope bundle).
Every verdict comes from the same engine as ``pytest autograder/`` (``autograder.engine.grading``)."""
