"""pytest plugin for ``pytest autograder/``: which submission to grade, a score table, results.json."""
from pathlib import Path

import pytest

from autograder import exercise as grading
from autograder.assignments import RELEASE
from autograder.notebook_source import NotebookError, read_code_cells, student_code
from autograder.report import Scoreboard
from autograder.submission import SubmissionError, notebooks

BOARD = pytest.StashKey[Scoreboard]()


def pytest_addoption(parser):
    group = parser.getgroup("attention course grading")
    group.addoption("--submission", default=None, metavar="PATH",
                    help="a folder laid out like release/, one assignment folder, or one notebook (default: release/)")
    group.addoption("--results-json", default=None, metavar="FILE",
                    help="also write Gradescope-style results to FILE")


def pytest_configure(config):
    config.stash[BOARD] = Scoreboard()


class Submission:
    """The notebooks being graded, each read and compiled once per run."""

    def __init__(self, path: Path):
        self.path = path
        self.found = notebooks(path)
        self._code = {}

    def code(self, assignment: str):
        if assignment not in self.found:
            pytest.skip(f"{assignment} 不在这次提交里")
        if assignment not in self._code:
            notebook = self.found[assignment]
            try:
                self._code[assignment] = (student_code(read_code_cells(notebook)) if isinstance(notebook, Path)
                                          else NotebookError(notebook))
            except NotebookError as e:
                self._code[assignment] = e
        return self._code[assignment]


@pytest.fixture(scope="session")
def submission(pytestconfig) -> Submission:
    path = Path(pytestconfig.getoption("submission") or RELEASE)
    try:
        return Submission(path)
    except SubmissionError as e:
        pytest.exit(str(e), returncode=4)


@pytest.fixture
def grade(submission, pytestconfig):
    """Grade one exercise of one assignment; record the verdict; fail the test with its message."""
    def run(assignment: str, exercise: grading.Exercise) -> None:
        code = submission.code(assignment)
        if isinstance(code, NotebookError):
            verdict = grading.Verdict(exercise.name, 0, exercise.points, str(code))
        else:
            verdict = grading.grade(exercise, code)
        pytestconfig.stash[BOARD].add(assignment, verdict)
        if not verdict.passed:
            pytest.fail(f"{exercise.name}（0/{exercise.points} 分）：{verdict.message}", pytrace=False)
    return run


def pytest_terminal_summary(terminalreporter, config):
    board = config.stash[BOARD]
    if not board.verdicts:
        return
    terminalreporter.section("评分 Score")
    for line in board.table():
        terminalreporter.write_line(line)


def pytest_sessionfinish(session):
    path = session.config.getoption("results_json")
    if path:
        session.config.stash[BOARD].write_results_json(Path(path))
