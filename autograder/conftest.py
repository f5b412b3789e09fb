"""pytest plugin for ``pytest autograder/``: which submission to grade, a score table, results.json.

By default it grades the student's working copy ``work/`` when there is one (``course-work`` makes it),
else ``release/``. Assignments a submission does not contain are "未提交", and those whose every exercise is
still the released stub (``course-work`` copies all eight) "未开始": both listed, not counted, unless
``--require-all`` asks for strict totals (a class's submissions).

The sandboxes' fork servers (one per grading lane, ``engine/lanes.py``: two where the machine has two cores)
start as this plugin loads, before the grader imports torch and the references, so that the imports overlap;
on two cores the second starts only once the exercises handed over are worth its start (more than one
assignment, or one that runs a real model).
The first test hands every collected exercise of a submitted assignment to the lanes, and each test waits for
its own verdict. Every collected exercise ends up in the table and in results.json, whatever happens.
"""
from autograder.engine.lanes import Lanes
from autograder.engine.sandbox.client import SandboxError, shared

LANES = Lanes()
LANES.start()

from pathlib import Path  # noqa: E402 - after the fork servers' start, on purpose

import pytest  # noqa: E402

from autograder.engine.assignments import ASSIGNMENTS, RECORDS  # noqa: E402
from autograder.engine.ipynb import NotebookError, read_code_cells  # noqa: E402
from autograder.engine.model import Exercise, grader_problem  # noqa: E402
from autograder.engine.sandbox.harness import NOT_IMPLEMENTED  # noqa: E402
from autograder.engine.sandbox.walls import describe_missing  # noqa: E402
from autograder.engine.submission import SubmissionError, notebooks  # noqa: E402
from autograder.scoreboard import Scoreboard  # noqa: E402
from course import layout  # noqa: E402

BOARD = pytest.StashKey[Scoreboard]()
_config: pytest.Config | None = None
EXPECTED = pytest.StashKey[dict]()


def pytest_addoption(parser):
    group = parser.getgroup("attention course grading")
    group.addoption("--submission", default=None, metavar="PATH",
                    help="a folder laid out like release/, one assignment folder, or one notebook "
                         "(default: work/ when it exists, else release/)")
    group.addoption("--results-json", default=None, metavar="FILE",
                    help="also write Gradescope-style results to FILE")
    group.addoption("--require-all", action="store_true",
                    help="count an assignment missing from the submission as zero instead of leaving it out")


def default_submission() -> Path:
    """The student's working copy when there is one, else the released notebooks."""
    work = layout.ROOT / layout.WORK
    return work if work.is_dir() else layout.ROOT / layout.RELEASE


def pytest_configure(config):
    global _config
    _config = config
    config.stash[BOARD] = Scoreboard()
    config.stash[EXPECTED] = {}


def pytest_collection_modifyitems(items, config):
    """Remember every exercise about to be graded, so that none can drop out of the totals."""
    for item in items:
        spec = getattr(item, "callspec", None)
        module = getattr(item, "module", None)
        if spec and "exercise" in spec.params and hasattr(module, "ASSIGNMENT"):
            config.stash[EXPECTED][item.nodeid] = (module.ASSIGNMENT, spec.params["exercise"])


def pytest_runtest_logreport(report):
    """An exercise of an assignment that was not submitted is skipped: it is not owed a verdict."""
    if report.skipped:
        _config.stash[EXPECTED].pop(report.nodeid, None)


class Submission:
    """The notebooks being graded, each read once per run, and their verdicts, from the grading lanes."""

    def __init__(self, path: Path, require_all: bool = False):
        self.path = path
        self.root = path if path.is_dir() else path.parent
        self.found = notebooks(path)
        self.require_all = require_all
        self._cells = {}
        self._verdicts = {}  # (assignment, exercise name) -> the Future of its verdict

    def submitted(self, assignment: str) -> bool:
        """Whether ``assignment`` gets verdicts: it was handed in, or a strict run counts it anyway."""
        return assignment in self.found or self.require_all

    def cells(self, assignment: str):
        if assignment not in self.found:
            if self.require_all:
                return NotebookError(f"{assignment} 未提交：{self.path} 里没有它的 notebook。")
            pytest.skip(f"{assignment} 未提交")
        if assignment not in self._cells:
            notebook = self.found[assignment]
            try:
                self._cells[assignment] = (read_code_cells(notebook, self.root) if isinstance(notebook, Path)
                                           else NotebookError(notebook))
            except NotebookError as e:
                self._cells[assignment] = e
        return self._cells[assignment]

    def not_started(self, assignment: str) -> bool:
        """Whether every exercise of ``assignment`` is still a stub that raises NotImplementedError. Grades them in
        order up to the first that is not (their verdicts are kept for the tests that follow); a strict run
        (``--require-all``) grades and counts every one."""
        if self.require_all:
            return False
        return all(self.verdict(assignment, exercise).summary == NOT_IMPLEMENTED for exercise in ASSIGNMENTS[assignment])

    def hand_over(self, exercises) -> None:
        """Give the lanes every one of ``exercises`` ((assignment, Exercise), in the order they will be asked for) of
        an assignment that gets verdicts, so that they are graded while the tests wait for the first."""
        graded = {assignment for assignment, _ in exercises if self.submitted(assignment)}
        for assignment, exercise in exercises:
            if assignment in graded:
                self._future(assignment, exercise)
        # One assignment of small runs takes about what a second fork server takes to start; a real model's runs
        # (07's SmolLM2), or several assignments, take longer.
        if len(graded) > 1 or any(RECORDS[assignment].needs for assignment in graded):
            LANES.widen()

    def verdict(self, assignment: str, exercise: Exercise):
        """The verdict on ``exercise`` of ``assignment`` (handed to the lanes now, unless it was already)."""
        return self._future(assignment, exercise).result()

    def _future(self, assignment: str, exercise: Exercise):
        key = (assignment, exercise.name)
        if key not in self._verdicts:
            self._verdicts[key] = LANES.submit(exercise, self.cells(assignment), assignment)
        return self._verdicts[key]


@pytest.fixture(scope="session")
def submission(pytestconfig) -> Submission:
    path = Path(pytestconfig.getoption("submission") or default_submission())
    try:
        found = Submission(path, pytestconfig.getoption("require_all"))
    except SubmissionError as e:
        pytest.exit(str(e), returncode=4)
    board = pytestconfig.stash[BOARD]
    board.graded_folder = str(path)
    board.not_submitted = [] if found.require_all else [a for a in ASSIGNMENTS if a not in found.found]
    return found


@pytest.fixture
def grade(submission, pytestconfig):
    """Grade one exercise of one assignment; record the verdict; fail the test with its message."""
    def run(assignment: str, exercise: Exercise) -> None:
        submission.hand_over(pytestconfig.stash[EXPECTED].values())
        if submission.not_started(assignment):
            board = pytestconfig.stash[BOARD]
            if assignment not in board.not_started:
                board.not_started.append(assignment)
            pytest.skip(f"{assignment} 未开始")
        verdict = submission.verdict(assignment, exercise)
        pytestconfig.stash[BOARD].add(assignment, verdict)
        if not verdict.passed:
            pytest.fail(verdict.headline(), pytrace=False)
    return run


def _complete(config) -> Scoreboard:
    """The board with a zero, marked as the grader's problem, for any collected exercise left ungraded."""
    board = config.stash[BOARD]
    for assignment, exercise in config.stash[EXPECTED].values():
        if not any(v.exercise == exercise.name for v in board.verdicts.get(assignment, [])):
            board.add(assignment, grader_problem(exercise, "这一题没有得到评分结果（评分程序中途出错）"))
    return board


def pytest_terminal_summary(terminalreporter, config):
    board = _complete(config)
    if not board.verdicts and not board.not_submitted and not board.not_started:
        return
    terminalreporter.section("评分 Score")
    for line in board.table():
        terminalreporter.write_line(line)
    missing = _missing_walls()
    if missing:
        terminalreporter.write_line("评分沙箱在这台机器上缺少这些防护（sandbox walls missing here）：")
        for line in missing:
            terminalreporter.write_line(f"  - {line}")


def _missing_walls() -> list[str]:
    try:
        return describe_missing(shared().hello()["missing"])
    except SandboxError:
        return []


def pytest_sessionfinish(session):
    path = session.config.getoption("results_json")
    if path:
        _complete(session.config).write_results_json(Path(path))


def pytest_unconfigure(config):
    LANES.stop(now=True)  # every verdict that was waited for is in; a run still going (Ctrl-C, -x) is no one's
    shared().stop()

