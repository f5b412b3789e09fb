"""The grader's own exception, apart from everything that raises it: the fork server imports this at its start,
before torch, and the call protocols raise it without importing the sandbox's walls."""


class GraderProblem(Exception):
    """The grader, not the student, cannot run the code: the message says what to fix on the machine.

    Raised when a wall cannot go up (``sandbox.walls``), and by the call protocols (``protocols``) when what the
    grader provides for a case cannot be read, e.g. the model files: the harness reports that case as the
    grader's problem (``harness._raised_by_the_grader``). It imports nothing, for the fork server's start."""
