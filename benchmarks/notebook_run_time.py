"""Wall time of running solved source notebooks top to bottom in a real Jupyter kernel, as a student's "Run All"
does, and their slowest cells. With --hogs N, as many busy-looping processes run beside the kernel (a machine
the student shares with other work).

Run: python benchmarks/notebook_run_time.py [--hogs N] [ASSIGNMENT ...]   (default: 07_real_model 08_gated_deltanet;
07 needs `course-weights smollm2`, 08 the Qwen3.5 layers: `course-weights qwen35`)
"""
import argparse
import multiprocessing
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from nbclient import NotebookClient  # noqa: E402

from autograder.instructor.release import build_source_notebook, source_file  # noqa: E402


def _spin() -> None:
    while True:
        pass


def cell_seconds(cell) -> float:
    """How long the kernel took on ``cell``, from the timings nbclient records in its metadata."""
    timing = cell.metadata.get("execution", {})
    began, ended = (datetime.fromisoformat(timing[key].rstrip("Z")) for key in ("iopub.execute_input", "shell.execute_reply"))
    return (ended - began).total_seconds()


def run(assignment: str, slowest: int) -> None:
    nb = build_source_notebook(source_file(assignment), assignment)
    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as folder:
        NotebookClient(nb, timeout=900, kernel_name="python3", record_timing=True,
                       resources={"metadata": {"path": folder}}).execute()
    print(f"{assignment}: {time.perf_counter() - start:.1f} s top to bottom")
    timed = sorted(((cell_seconds(c), i, c.source.splitlines()[0]) for i, c in enumerate(nb.cells)
                    if c.cell_type == "code" and c.source), reverse=True)
    for seconds, index, first_line in timed[:slowest]:
        print(f"  {seconds:6.1f} s  cell {index}: {first_line[:90]}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("assignments", nargs="*", default=["07_real_model", "08_gated_deltanet"])
    parser.add_argument("--hogs", type=int, default=0, help="busy-looping processes beside the kernel")
    parser.add_argument("--slowest", type=int, default=5, help="how many of the slowest cells to list")
    args = parser.parse_args()
    hogs = [multiprocessing.Process(target=_spin, daemon=True) for _ in range(args.hogs)]
    for hog in hogs:
        hog.start()
    try:
        for assignment in args.assignments:
            run(assignment, args.slowest)
    finally:
        for hog in hogs:
            hog.terminate()


if __name__ == "__main__":
    main()
