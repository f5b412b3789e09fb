"""``EngineVerdicts``: the preprocessor that takes the place of nbgrader's ``Execute`` in
``nbgrader autograde`` (see ``nbgrader_config.py``).

nbgrader would run each submission in a Jupyter kernel with the instructor's rights, next to the
gradebook and the other students' files. Instead, no kernel starts: the course's engine grades the
submitted notebook's code in its sandbox, and each hidden-test cell receives the verdict as its output —
a line of text when the exercise passes, an error (message only, no code) when it fails — from which
nbgrader's ``SaveAutoGrades`` scores it as usual. Demo cells are not run, so the autograded notebook
shows no outputs besides the verdicts.
"""
from nbconvert.preprocessors import Preprocessor
from nbformat.v4 import new_output
from traitlets import Bool

_TEST_PREFIX = "tests_"


def verdict_output(verdict):
    """A grade cell's output: nbgrader gives full points unless it holds an error."""
    if verdict.passed:
        return new_output("stream", name="stdout", text=f"✓ {verdict.exercise}：通过（{verdict.points}/{verdict.max_points} 分）\n")
    message = verdict.headline()
    return new_output("error", ename="GradingFailure", evalue=message, traceback=[f"GradingFailure: {message}"])


class EngineVerdicts(Preprocessor):
    """Grade every exercise of the notebook in the sandbox and write the verdicts into its grade cells."""

    enabled = Bool(True)  # nbconvert's preprocessors are off unless enabled
    _warned = False

    def preprocess(self, nb, resources):
        # Imported here: nbgrader loads this file's module for every command, and these import torch.
        from autograder.engine.assignments import EXERCISES
        from autograder.engine.grading import judge
        from autograder.engine.ipynb import NotebookError, code_cells

        self._warn_once_about_missing_walls()
        try:
            cells = code_cells(nb)
        except NotebookError as e:
            cells = e
        given = {}
        for cell in nb.cells:
            grade_id = cell.get("metadata", {}).get("nbgrader", {}).get("grade_id", "")
            if cell.get("cell_type") != "code" or not grade_id.startswith(_TEST_PREFIX):
                continue
            exercise = EXERCISES.get(grade_id.removeprefix(_TEST_PREFIX))
            if exercise is None:
                continue
            cell.outputs = [verdict_output(judge(exercise, cells, verdicts=given))]
            cell.execution_count = None
        return nb, resources

    def _warn_once_about_missing_walls(self) -> None:
        from autograder.engine.sandbox.client import SandboxError, shared
        from autograder.engine.sandbox.walls import describe_missing

        if EngineVerdicts._warned:
            return
        EngineVerdicts._warned = True
        try:
            missing = describe_missing(shared().hello()["missing"])
        except SandboxError as e:
            self.log.error("The grading sandbox cannot start: %s", e)
            return
        if missing:
            self.log.warning("The grading sandbox lacks these walls on this machine:\n  %s", "\n  ".join(missing))
