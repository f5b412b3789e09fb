"""``course-grade``: grade a whole class in one command.

    course-grade PATH [--assignment A ...] [--jobs N] [--out DIR] [--shard I/N] [--notebook-timeout S]
    course-grade --merge SHARD_OUT [SHARD_OUT ...] --out DIR

PATH is a class folder (see ``roster.LAYOUTS``). Notebooks are graded in parallel by warm workers, each
with its own sandbox, through the same engine as ``pytest autograder/``. Results are kept per notebook in
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
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path

from autograder.engine import limits
from autograder.engine.ipynb import NotebookError
from autograder.engine.sandbox.walls import describe_missing
from autograder.instructor.classroom import roster as class_roster
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
                        help="the class folder (with --merge: the output folders of the shards)")
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
        return _grade(args)
    except (class_roster.RosterError, ShardError, FileNotFoundError) as e:
        print(f"course-grade: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("\ncourse-grade: stopped.", file=sys.stderr)
        return INTERRUPTED


def _check_folders(path: Path, out: Path) -> None:
    path, out = path.resolve(), out.resolve()
    if out == path or path in out.parents or out in path.parents:
        raise class_roster.RosterError(f"--out {out} must lie outside the class folder {path}, and not contain it")


def _read(handed: class_roster.Handed, root: Path) -> tuple[bytes | None, str]:
    """A notebook's bytes, or (None, why it cannot be read)."""
    if handed.source is None:
        return None, handed.problem
    try:
        return class_roster.read_notebook(handed.source, root), ""
    except NotebookError as e:
        return None, str(e)


def _grade(args) -> int:
    path, out = args.paths[0], args.out
    _check_folders(path, out)
    roster = class_roster.find(path, args.assignment)
    shard = args.shard
    chosen = set(shard_students(roster.students, shard))
    handed = [h for h in roster.handed if h.student in chosen]
    fingerprints = grader_fingerprints(args.notebook_timeout)
    store = ResultStore(state_folder(out) / "results")
    entries: list[Entry] = []
    groups: dict[str, list[int]] = {}  # key of a notebook still to grade -> its entries (identical notebooks)
    for h in handed:
        data, problem = _read(h, roster.root)
        key = notebook_key(fingerprints[h.assignment], h.assignment, data, problem)
        entries.append(Entry(h.student, h.assignment, key, h.source.label(roster.root) if h.source else "", h.late))
        if not store.done(key):
            groups.setdefault(key, []).append(len(entries) - 1)
    unchanged = len(entries) - sum(len(g) for g in groups.values())
    progress = Progress(len(groups))
    pool = Pool(min(args.jobs, len(groups)), args.notebook_timeout)
    start = time.monotonic()

    def tasks():
        pending = list(groups.items())
        while pending:
            key, indices = pending.pop(0)
            first = handed[indices[0]]
            data, problem = _read(first, roster.root)
            now = notebook_key(fingerprints[first.assignment], first.assignment, data, problem)
            if now != key:  # changed since the scan: grade what is there now; the others keep their own key
                entries[indices[0]] = replace(entries[indices[0]], key=now)
                if indices[1:]:
                    pending.append((key, indices[1:]))
                    progress.total += 1
                if store.done(now):
                    progress.step()
                    continue
            yield Task(now, first.assignment, data, problem, entries[indices[0]].source)

    def done(task: Task, verdicts, seconds: float) -> None:
        store.save(task.key, NotebookResult(task.assignment, tuple(verdicts), seconds))
        progress.step()

    try:
        if groups:
            print(f"course-grade: grading {len(groups)} notebooks on {pool.jobs} workers "
                  f"({unchanged} unchanged since the last run)", file=sys.stderr)
            pool.run(tasks(), done)
    except KeyboardInterrupt:
        progress.finish()
        print(f"\ncourse-grade: stopped. {progress.done} notebooks graded in this run are saved in "
              f"{state_folder(out)}; run the same command again to grade the rest. The outputs in {out} are "
              "those of the last finished run.", file=sys.stderr)
        return INTERRUPTED
    finally:
        pool.close()
    progress.finish()
    graded = GradedClass(entries, args.assignment, shard, combined(fingerprints))
    with _outputs_before_ctrl_c():
        graded.save(out)
        written = write_outputs(out, graded, [store])
    what = (f"{len(entries)} notebooks: {progress.done} graded in {duration(time.monotonic() - start)} on "
            f"{pool.jobs} workers, {unchanged} unchanged since the last run" if groups else
            f"{len(entries)} notebooks, all unchanged since the last run")
    _summary(out, written, what + (f"; shard {shard[0]}/{shard[1]}" if shard != (1, 1) else ""),
             pool.missing_walls, roster.ignored)
    return 1 if any(s.grader_problems for s in written.stats) else 0


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
