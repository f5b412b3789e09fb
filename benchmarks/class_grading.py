"""Grading a whole class: the wall time of `course-grade` on a synthetic class (correct, half-done, mistaken,
untouched and a few hostile notebooks), its cost per notebook against a bare `import torch`, the memory
of its whole process tree over the run, a second run over the unchanged class, and `nbgrader autograde`
on a sample of the same notebooks.

Goal: 200 students × every released assignment in at most 10 minutes on 2 cores, memory flat as the
class grows.

Run: python benchmarks/class_grading.py [--students 200] [--jobs 2] [--assignment A ...] [--nbgrader-sample 3]
"""
import argparse
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from autograder.engine.assignments import ASSIGNMENTS  # noqa: E402
from autograder.instructor.release import generate  # noqa: E402
from tests.class_of_students import write_class  # noqa: E402


def _children(pid: int) -> list[int]:
    found = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            found += [int(child) for child in (task / "children").read_text().split()]
        except OSError:
            continue
    return found


def tree_pss(root: int) -> int:
    """Proportional set size of ``root`` and all its descendants, in bytes: shared pages (torch's libraries,
    the fork server's copy-on-write memory) are split between the processes that share them, not counted
    once per process."""
    total, stack = 0, [root]
    while stack:
        pid = stack.pop()
        stack += _children(pid)
        try:
            with open(f"/proc/{pid}/smaps_rollup") as f:
                total += next(int(line.split()[1]) * 1024 for line in f if line.startswith("Pss:"))
        except (OSError, StopIteration):
            continue
    return total


def measured(command, cwd) -> tuple[float, list[tuple[float, int]], str]:
    """Wall time of ``command``, its process tree's memory sampled every two seconds, and its output."""
    start = time.perf_counter()
    process = subprocess.Popen(command, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    samples: list[tuple[float, int]] = []

    def sample():
        while process.poll() is None:
            samples.append((time.perf_counter() - start, tree_pss(process.pid)))
            time.sleep(2.0)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    output, _ = process.communicate()
    elapsed = time.perf_counter() - start
    sampler.join()
    if process.returncode not in (0, 1):  # 1: some notebook met a grader problem; still a finished run
        raise SystemExit(f"{' '.join(map(str, command))} failed:\n{output}")
    return elapsed, samples, output


def at_quarters(samples: list[tuple[float, int]], elapsed: float) -> str:
    points = []
    for share in (0.25, 0.5, 0.75, 1.0):
        before = [m for t, m in samples if t <= share * elapsed]
        points.append(f"{(before[-1] if before else 0) / 2**20:.0f}")
    return " / ".join(points) + " MiB"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--students", type=int, default=200)
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--assignment", nargs="+", metavar="A", help="the assignments (default: every released one)")
    parser.add_argument("--nbgrader-sample", type=int, default=3, metavar="STUDENTS",
                        help="students whose notebooks one `nbgrader autograde` run grades (default: 3)")
    args = parser.parse_args()
    assignments = args.assignment or [a for a in ASSIGNMENTS if (REPO / "release" / a).is_dir()]
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        start = time.perf_counter()
        kinds = write_class(root / "class", args.students, assignments, seed=1)
        made_s = time.perf_counter() - start
        notebooks = len(kinds)
        counts = {k: list(kinds.values()).count(k) for k in sorted(set(kinds.values()))}

        torch_s = statistics.median(measured([sys.executable, "-c", "import torch"], root)[0] for _ in range(5))
        grade = [sys.executable, "-m", "autograder.instructor.classroom.course_grade", root / "class", "--out", root / "out",
                 "--jobs", str(args.jobs)]
        wall_s, samples, _ = measured(grade, REPO)
        again_s, _, again = measured(grade, REPO)

        students = sorted({s for s, _ in kinds})[::max(1, args.students // args.nbgrader_sample)]
        sample = [key for key in sorted(kinds) if key[0] in students[:args.nbgrader_sample]]
        course = root / "course"
        course.mkdir()
        shutil.copy(REPO / "nbgrader_config.py", course)
        generate(course)
        for student, assignment in sample:
            shutil.copytree(root / "class" / student / assignment, course / "submitted" / student / assignment)
        nbgrader_s, nbgrader_samples, _ = measured([sys.executable, "-m", "nbgrader", "autograde", "*", "--create",
                                                    "--force", "--log-level=WARN"], course)

    per_notebook = wall_s * args.jobs / notebooks
    nbgrader_per = nbgrader_s / len(sample)
    peak = max(m for _, m in samples)
    print(f"class: {args.students} students × {len(assignments)} assignments = {notebooks} notebooks "
          f"({', '.join(f'{n} {k}' for k, n in counts.items())}; written in {made_s:.0f} s)")
    print(f"python -c 'import torch'                 {torch_s:7.2f} s")
    print(f"course-grade, {args.jobs} workers, whole class     {wall_s:7.1f} s  = {wall_s / 60:.1f} min "
          f"(goal: at most 10 min on 2 cores)")
    print(f"  per notebook, core-seconds             {per_notebook:7.2f} s  = {per_notebook / torch_s:.2f}× a bare "
          "torch import")
    print(f"  memory of the process tree (PSS)       peak {peak / 2**20:.0f} MiB; at 1/4, 1/2, 3/4, end of the run: "
          f"{at_quarters(samples, wall_s)}")
    print(f"  second run, nothing changed            {again_s:7.1f} s  ({again.splitlines()[0]})")
    print(f"nbgrader autograde, one run over {len(sample)} notebooks of {len(students[:args.nbgrader_sample])} "
          f"students   {nbgrader_s:7.1f} s  = {nbgrader_per:.2f} s per notebook, {nbgrader_per / torch_s:.2f}× a torch "
          f"import; peak {max(m for _, m in nbgrader_samples) / 2**20:.0f} MiB; the class at that rate: "
          f"{nbgrader_per * notebooks / 60:.0f} min (it grades one notebook at a time)")


if __name__ == "__main__":
    main()
