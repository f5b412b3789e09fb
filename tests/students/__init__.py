"""Simulated students, one module per assignment: code written independently of ``solutions/`` and of the graders'
mistake catalogue, so that a grader naming a mistake is evidence, not an echo.

Each module ``aNN`` has:

- ``ASSIGNMENT``, the assignment's folder name;
- ``CORRECT``, exercise -> a correct answer, in notebook order (an exercise of an earlier assignment that the
  notebook provides and the student wrote again is there too, graded as its own assignment's: 06's ``rope_cos_sin``);
- ``STUBS``, exercise -> the answer cell as the released notebook has it (``raise NotImplementedError()``);
- ``MISTAKES``, a list of (exercise, what the grader should name -- a fragment of its message --, the code);
- ``OTHER_CORRECT``, a list of (exercise, how it is written, the code): other right ways, which must pass too;
- ``HEADER`` (with 03's ``READY`` and 05's ``BLOCKS``), the imports and what the notebook provides (the earlier
  answers, the student's own standing in);
- ``layout(replace)`` and ``cells(replace)``: the student's notebook with some answers replaced, as the cells of a
  real notebook (``tests/students/notebook.py``: one definition per cell, imports added where they were missed,
  helpers after their callers); ``source(replace)``: the same code as one cell's source.

``ALL`` holds them in the order of the assignments; the seeded-mistake tests (``tests/checks/test_seeded_mistakes.py``) and
the metamorphic tier grade every one.
"""
from tests.students import a01, a02, a03, a04, a05, a06, a07, a08, a09

ALL = (a01, a02, a03, a04, a05, a06, a07, a08, a09)
BY_ASSIGNMENT = {module.ASSIGNMENT: module for module in ALL}

__all__ = ["ALL", "BY_ASSIGNMENT", "a01", "a02", "a03", "a04", "a05", "a06", "a07", "a08", "a09"]
