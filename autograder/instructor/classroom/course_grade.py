"""``course-grade``: grade a whole class in one command.

    course-grade PATH [--assignment A ...] [--jobs N] [--out DIR] [--shard I/N] [--notebook-timeout S]
    course-grade --merge SHARD_OUT [SHARD_OUT ...] --out DIR

PATH is a class folder (see ``roster.LAYOUTS``), or an LMS's download zip as it was downloaded (``download``).
Notebooks are graded in parallel by warm workers, each with its own sandbox, through the same engine as
``pytest autograder/``. Results are kept per notebook in
``DIR/.course-grade/`` under a hash of its content and of the grader, so a second run grades only what
changed, and Ctrl-C loses only the notebooks being graded at that moment. The outputs in DIR —
grades.csv, mistakes.csv, report.html, feedback/<student>/<assignment>.html — are written when every
notebook has a result.
"""
import argparse
import os
import signal
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import replace
from pathlib import Path

from autograder.engine import limits
from autograder.engine.ipynb import NotebookError
from autograder.engine.sandbox.walls import describe_missing
from autograder.instructor.classroom import roster as class_roster
from autograder.instructor.classroom.canvas_return import CSV as CANVAS_CSV
from autograder.instructor.classroom.canvas_return import FEEDBACK as CANVAS_FEEDBACK
from autograder.instructor.classroom.download import DownloadError, is_download, unpacked
from autograder.instructor.classroom.graded_class import Entry, GradedClass, state_folder
from autograder.instructor.classroom.outputs import FEEDBACK, FILES, Written, write_outputs
from autograder.instructor.classroom.progress import Progress, duration
from autograder.instructor.classroom.results_store import (
    NotebookResult,
    ResultStore,
    combined,
    grader_fingerprints,
    notebook_key,
)
from autograder.instructor.classroom.shards import ShardError, merge, parse_shard, shard_students
from autograder.instructor.classroom.workers import Pool, Task

INTERRUPTED = 130  # the shell's code for a run stopped by Ctrl-C


def default_jobs() -> int:
    """The cores this process may use (a batch job's allocation, not the whole machine)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def _shard(text: str) -> tuple[int, int]:
    try:
        return parse_shard(text)
    except ShardError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def _arguments(argv) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="course-grade", description="Grade a whole class: a gradebook, the class's named mistakes, a report "
        "and per-student feedback.", epilog=class_roster.LAYOUTS, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("paths", nargs="+", type=Path, metavar="PATH",
                        help="the class folder, or the LMS's download zip as downloaded (with --merge: the output "
                        "folders of the shards)")
    parser.add_argument("--assignment", nargs="+", action="extend", metavar="A",
                        help="grade only these assignments (default: every assignment found)")
    parser.add_argument("--jobs", type=int, default=default_jobs(), metavar="N",
                        help="workers in parallel, one per core (default: the cores this process may use)")
    parser.add_argument("--out", type=Path, default=Path("course-grades"), metavar="DIR",
                        help="where results and outputs go (default: ./course-grades)")
    parser.add_argument("--shard", type=_shard, default=(1, 1), metavar="I/N",
                        help="grade only slice I of N of the students (1-based)")
    parser.add_argument("--notebook-timeout", type=float, default=limits.NOTEBOOK_TIMEOUT_S, metavar="S",
                        help=f"seconds for all exercises of one notebook (default: {limits.NOTEBOOK_TIMEOUT_S:g})")
    parser.add_argument("--merge", action="store_true", help="join the outputs of shards 1/N … N/N into --out")
    args = parser.parse_args(argv)
    if args.jobs < 1 or args.notebook_timeout <= 0:
        parser.error("--jobs must be at least 1 and --notebook-timeout positive")
    if not args.merge and len(args.paths) != 1:
        parser.error("give one class folder (several folders are for --merge)")
    return args


def _stop_on_sigterm(*_) -> None:
    raise KeyboardInterrupt  # a batch engine's cancel or time limit: stop as Ctrl-C does, state kept


def main(argv=None) -> int:
    args = _arguments(argv)
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _stop_on_sigterm)
    try:
        if args.merge:
            graded = merge(args.paths, args.out)
            written = write_outputs(args.out, graded, [ResultStore(state_folder(args.out) / "results")])
            _summary(args.out, written, f"merged {len(args.paths)} shards")
            return 0
        path = args.paths[0]
        with unpacked(path) if is_download(path) else nullcontext(path) as folder:
            run = ClassRun(args, folder)
            run.plan()
            return run.write() if run.grade() else INTERRUPTED
    except (class_roster.RosterError, ShardError, DownloadError, FileNotFoundError) as e:
        print(f"course-grade: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("\ncourse-grade: stopped.", file=sys.stderr)
        return INTERRUPTED


def _check_folders(path: Path, out: Path) -> None:
    path, out = path.resolve(), out.resolve()
    if out == path or path in out.parents or out in path.parents:
        raise class_roster.RosterError(f"--out {out} must lie outside the class folder {path}, and not contain it")


class ClassRun:
    """One ``course-grade PATH`` run: ``plan`` what to grade, ``grade`` it on warm workers, ``write`` the outputs."""

    def __init__(self, args, folder: Path):
        self.args, self.folder, self.out, self.shard = args, folder, args.out, args.shard
        self.entries: list[Entry] = []  # one per notebook handed in, in the roster's order
        self.groups: dict[str, list[int]] = {}  # key of a notebook still to grade -> its entries (identical notebooks)

    def plan(self) -> None:
        """The shard's notebooks, each one's key, and which of them the store does not hold yet."""
        _check_folders(self.folder, self.out)
        self.roster = class_roster.find(self.folder, self.args.assignment)
        chosen = set(shard_students(self.roster.students, self.shard))
        self.handed = [h for h in self.roster.handed if h.student in chosen]
        self.fingerprints = grader_fingerprints(self.args.notebook_timeout)
        self.store = ResultStore(state_folder(self.out) / "results")
        for h in self.handed:
            _, _, key = self._read(h)
            source = h.source.label(self.roster.root) if h.source else ""
            self.entries.append(Entry(h.student, h.assignment, key, source, h.late))
            if not self.store.done(key):
                self.groups.setdefault(key, []).append(len(self.entries) - 1)
        self.unchanged = len(self.entries) - sum(len(g) for g in self.groups.values())

    def grade(self) -> bool:
        """Grade every group on warm workers, saving each result as it comes; False when stopped by Ctrl-C."""
        self.progress = Progress(len(self.groups))
        self.pool = Pool(min(self.args.jobs, len(self.groups)), self.args.notebook_timeout,
                         private=(str(self.roster.root), str(self.out)))
        self.start = time.monotonic()
        try:
            if self.groups:
                print(f"course-grade: grading {len(self.groups)} notebooks on {self.pool.jobs} workers "
                      f"({self.unchanged} unchanged since the last run)", file=sys.stderr)
                self.pool.run(self._tasks(), self._done)
        except KeyboardInterrupt:
            self.progress.finish()
            print(f"\ncourse-grade: stopped. {self.progress.done} notebooks graded in this run are saved in "
                  f"{state_folder(self.out)}; run the same command again to grade the rest. The outputs in "
                  f"{self.out} are those of the last finished run.", file=sys.stderr)
            return False
        finally:
            self.pool.close()
        self.progress.finish()
        return True

    def write(self) -> int:
        """The run's record and outputs, then the summary; 1 when the grader itself failed on a notebook."""
        graded = GradedClass(self.entries, self.args.assignment, self.shard, combined(self.fingerprints))
        with _outputs_before_ctrl_c():
            graded.save(self.out)
            written = write_outputs(self.out, graded, [self.store])
        _summary(self.out, written, self._what(), self.pool.missing_walls, self.roster.ignored)
        return 1 if any(s.grader_problems for s in written.stats) else 0

    def _read(self, handed: class_roster.Handed) -> tuple[bytes | None, str, str]:
        """A notebook's bytes (or None, and why it cannot be read) and its key in the store."""
        if handed.source is None:
            data, problem = None, handed.problem
        else:
            try:
                data, problem = class_roster.read_notebook(handed.source, self.roster.root), ""
            except NotebookError as e:
                data, problem = None, str(e)
        return data, problem, notebook_key(self.fingerprints[handed.assignment], handed.assignment, data, problem)

    def _tasks(self) -> Iterator[Task]:
        """A task per group, its first notebook read again: one changed since the plan is graded as it is now."""
        pending = list(self.groups.items())
        while pending:
            key, indices = pending.pop(0)
            first = self.handed[indices[0]]
            data, problem, now = self._read(first)
            if now != key:
                pending += self._rekey(key, indices, now)
                if self.store.done(now):
                    self.progress.step()
                    continue
            yield Task(now, first.assignment, data, problem, self.entries[indices[0]].source)

    def _rekey(self, key: str, indices: list[int], now: str) -> list[tuple[str, list[int]]]:
        """The group's first notebook changed since the plan: it takes the key of what is there now, and the
        rest of the group, keeping its own key, is a group still to grade."""
        self.entries[indices[0]] = replace(self.entries[indices[0]], key=now)
        if not indices[1:]:
            return []
        self.progress.total += 1
        return [(key, indices[1:])]

    def _done(self, task: Task, verdicts, seconds: float) -> None:
        self.store.save(task.key, NotebookResult(task.assignment, tuple(verdicts), seconds))
        self.progress.step()

    def _what(self) -> str:
        entries, done = len(self.entries), self.progress.done
        what = (f"{entries} notebooks: {done} graded in {duration(time.monotonic() - self.start)} on "
                f"{self.pool.jobs} workers, {self.unchanged} unchanged since the last run" if self.groups else
                f"{entries} notebooks, all unchanged since the last run")
        return what + (f"; shard {self.shard[0]}/{self.shard[1]}" if self.shard != (1, 1) else "")


@contextmanager
def _outputs_before_ctrl_c():
    """Hold a Ctrl-C until the outputs are all written, so that they always belong to one finished run."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    pressed = []
    previous = signal.signal(signal.SIGINT, lambda *_: pressed.append(True))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
    if pressed:
        raise KeyboardInterrupt


def _summary(out: Path, written: Written, what: str, missing_walls=None, ignored=()) -> None:
    print(f"course-grade: {written.students} students, {what}")
    width = max((len(s.assignment) for s in written.stats), default=10) + 2
    print(f"  {'assignment':<{width}}handed in  mean        full marks  most common named mistake")
    for stats in written.stats:
        mean = f"{sum(stats.scores) / len(stats.scores):.1f}/{stats.max_points}" if stats.scores else "–"
        top = stats.top_mistakes()
        common = f"{top[0][0][0]}: {top[0][0][1]} ({top[0][1]})" if top else "–"
        print(f"  {stats.assignment:<{width}}{len(stats.scores):>4}/{written.students:<5} {mean:<11} "
              f"{100 * stats.full_marks():>5.0f}%      {common}")
    print(f"Wrote {', '.join(FILES)} and {written.pages} pages in {FEEDBACK}/ to {out}")
    if written.canvas:
        print(f"For Canvas: {CANVAS_CSV} (Grades → Import; name each assignment's column as in Canvas first) and "
              f"{CANVAS_FEEDBACK}/<assignment>.zip (the assignment's Re-Upload Submissions)")
    problems = sorted({p for s in written.stats for p in s.grader_problems})
    if problems:
        print(f"⚠ The grader itself failed on notebooks of {len(problems)} students ({', '.join(problems[:10])}"
              f"{', …' if len(problems) > 10 else ''}): run the same command again to regrade them.")
    if missing_walls:
        print("Sandbox walls missing on this machine:")
        for line in describe_missing(missing_walls):
            print(f"  - {line}")
    if ignored:
        print(f"Ignored {len(ignored)} files that are neither notebooks nor zips: {', '.join(ignored[:5])}"
              f"{', …' if len(ignored) > 5 else ''}")


if __name__ == "__main__":
    sys.exit(main())
