"""What the Gradescope bundle's ``run_autograder`` runs for each submission: find the assignment's notebook
in the submission folder, grade it with the engine in the sandbox, and write Gradescope's results.json.

Students see the top-level ``output`` at once and each exercise's test with the bundle's visibility
(one of ``WHEN_SHOWN``); the run's stdout (the score table, missing sandbox walls, which
installation graded) is shown to instructors only.
"""
import argparse
import os
import sys
import time
from pathlib import Path

from autograder.engine import limits
from autograder.engine.assignments import ASSIGNMENTS
from autograder.engine.grading import grade_cells, notebook_cells
from autograder.engine.ipynb import NotebookError
from autograder.engine.sandbox.client import SandboxError, shared
from autograder.engine.sandbox.walls import describe_missing
from autograder.instructor.classroom.roster import read_notebook, student_notebook
from autograder.scoreboard import Scoreboard

# Gradescope's visibilities, and what the top-level output tells a student about when each exercise's result
# appears under it.
WHEN_SHOWN = {"visible": "", "after_due_date": "每个练习的结果和说明在截止日期之后显示。",
         "after_published": "每个练习的结果和说明在老师发布成绩之后显示。", "hidden": "每个练习的结果由老师查看。"}


def _notebook(submission: Path, assignment: str) -> tuple[list | NotebookError, str]:
    """The notebook's code cells (or why there are none) and a line for the student about what was graded."""
    handed = student_notebook(submission, assignment)
    if handed is None:
        return NotebookError(f"没有找到 {assignment} 的 notebook。"), (
            f"没有找到 {assignment} 的 notebook：请上传 {assignment}.ipynb（或只含它的 zip）。")
    if handed.source is None:
        return NotebookError(handed.problem), handed.problem
    name = handed.source.label(submission)
    try:
        data = read_notebook(handed.source, submission)
    except NotebookError as e:
        return e, str(e)
    return notebook_cells(data, "", name), f"已评分：{name}（{assignment}）。"


def lock_away(folders: list[Path]) -> None:
    """As root, make ``folders`` and the installed grading packages root-only (mode 0700): where Landlock is
    missing, student code runs as an unprivileged user, which then cannot list, read or write them. The
    sandbox needs none of them (it imports what it runs before the walls go up)."""
    if not hasattr(os, "geteuid") or os.geteuid() != 0:
        return
    import autograder
    import solutions

    for folder in [*folders, *(Path(p) for m in (autograder, solutions) for p in m.__path__)]:
        if folder.is_dir():
            os.chown(folder, 0, 0)
            os.chmod(folder, 0o700)


def _refused(hello: dict) -> str:
    """The sandbox's reason for grading nothing (no wall keeps the answers out or the grading safe), for the
    top-level output."""
    why = hello.get("missing", {}).get("answers")
    return (f"评分环境不安全，本次没有评分（请告诉老师）。The grader refused to grade: {why}"
            if why else "")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("assignment", choices=list(ASSIGNMENTS))
    parser.add_argument("submission", type=Path, help="the folder holding the student's upload")
    parser.add_argument("results", type=Path, help="where results.json goes")
    parser.add_argument("--visibility", default="after_due_date", choices=list(WHEN_SHOWN))
    parser.add_argument("--lock-away", type=Path, action="append", default=[], metavar="DIR",
                        help="as root, make DIR, the submission, the results folder and the installed grading "
                             "packages root-only before grading (run_autograder passes the bundle's folder)")
    args = parser.parse_args(argv)
    if args.lock_away:
        args.results.parent.mkdir(parents=True, exist_ok=True)
        lock_away([*args.lock_away, args.submission, args.results.parent])
    start = time.monotonic()
    import autograder

    print(f"grading {args.assignment} with the course installed at {Path(autograder.__file__).parent.parent}")
    cells, said = _notebook(args.submission, args.assignment)
    board = Scoreboard()
    for verdict in grade_cells(args.assignment, cells, shared(), limits.NOTEBOOK_TIMEOUT_S):
        board.add(args.assignment, verdict)
    try:
        hello = shared().hello()
        missing, refused = describe_missing(hello["missing"]), _refused(hello)
    except SandboxError as e:
        missing, refused = [f"the sandbox could not start: {e}"], ""
    args.results.parent.mkdir(parents=True, exist_ok=True)
    board.write_results_json(args.results, visibility=args.visibility, execution_time=time.monotonic() - start,
                             output=" ".join(x for x in (refused, said, WHEN_SHOWN[args.visibility]) if x))
    print("\n".join(board.table()))
    if missing:
        print("Sandbox walls missing here:\n  - " + "\n  - ".join(missing))
    shared().stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
