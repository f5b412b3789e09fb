"""The instructor's tools, built on the engine (which never imports them): ``course-release``
(``release``), ``course-handout`` (``handout``), ``course-doctor`` (``doctor``), nbgrader's adapter
(``nbgrader_verdicts``), ``grade()`` for the hidden-test cells of the source notebooks (``hidden_cells``), and
grading whole classes (``classroom/``: ``course-grade`` and Gradescope)."""
