"""Wall time of grading one fully solved 01 notebook: `pytest autograder/` against `nbgrader autograde`
on the same submission, and against a bare `python -c "import torch"`; and one solved 08 notebook (the Gated
DeltaNet layer on Qwen3.5's real sizes). With --real-model, also one solved 07 notebook
(`pytest autograder/test_07_real_model.py`, the real SmolLM2 model: run `course-weights smollm2` first), against
the same torch import.

Run: python benchmarks/grading_speed.py [--repeats N] [--real-model]
"""
import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from autograder.instructor.release import generate  # noqa: E402
from tests.notebooks import ASSIGNMENT, filled, source_solutions, write_submission  # noqa: E402

REAL_MODEL = "07_real_model"
DELTANET = "08_gated_deltanet"


def wall(command, cwd, env=None) -> float:
    start = time.perf_counter()
    done = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True)
    elapsed = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(map(str, command))} failed:\n{done.stdout}{done.stderr}")
    return elapsed


def median_wall(command, cwd, repeats, env=None) -> float:
    return statistics.median(wall(command, cwd, env) for _ in range(repeats))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--real-model", action="store_true",
                        help=f"also time grading a solved {REAL_MODEL} notebook (needs `course-weights smollm2`)")
    args = parser.parse_args()
    repeats = args.repeats
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        shutil.copy(REPO / "nbgrader_config.py", root)
        generate(root)
        write_submission(root / "submitted" / "student", filled(source_solutions()))

        torch_s = median_wall([sys.executable, "-c", "import torch"], root, repeats)
        grade = [sys.executable, "-m", "pytest", "autograder/", "-q", "-p", "no:cacheprovider",
                 "--submission", root / "submitted" / "student" / ASSIGNMENT]
        pytest_s = median_wall(grade, REPO, repeats)
        no_autoload = {**os.environ, "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}
        pytest_bare_s = median_wall(grade, REPO, repeats, no_autoload)
        autograde = [sys.executable, "-m", "nbgrader", "autograde", ASSIGNMENT, "--create", "--force",
                     "--log-level=WARN"]
        nbgrader_s = median_wall(autograde, root, max(1, repeats // 2))
        deltanet = write_submission(root / "deltanet", filled(source_solutions(DELTANET), DELTANET), DELTANET)
        deltanet_s = median_wall([sys.executable, "-m", "pytest", f"autograder/test_{DELTANET}.py", "-q",
                                  "-p", "no:cacheprovider", "--submission", deltanet], REPO, repeats)
        if args.real_model:
            real = write_submission(root / "real", filled(source_solutions(REAL_MODEL), REAL_MODEL), REAL_MODEL)
            real_s = median_wall([sys.executable, "-m", "pytest", f"autograder/test_{REAL_MODEL}.py", "-q",
                                  "-p", "no:cacheprovider", "--submission", real], REPO, repeats)

    print(f"python -c 'import torch'                      {torch_s:6.2f} s")
    print(f"pytest autograder/ (one solved 01)            {pytest_s:6.2f} s   "
          f"{pytest_s / torch_s:4.2f}x torch import, {pytest_s / nbgrader_s:4.2f}x nbgrader")
    print(f"  same, third-party pytest plugins not loaded {pytest_bare_s:6.2f} s   "
          f"{pytest_bare_s / torch_s:4.2f}x torch import, {pytest_bare_s / nbgrader_s:4.2f}x nbgrader")
    print(f"nbgrader autograde (same submission)          {nbgrader_s:6.2f} s")
    print(f"pytest test_{DELTANET}.py (one solved 08){deltanet_s:8.2f} s   {deltanet_s / torch_s:4.2f}x torch import")
    if args.real_model:
        print(f"pytest test_{REAL_MODEL}.py (one solved 07)  {real_s:6.2f} s   {real_s / torch_s:4.2f}x torch import")
    print("goal: pytest under 2x the torch import (both start torch: the grader and its sandbox's fork server), "
          f"{DELTANET} too" + (f"; {REAL_MODEL} under 3x" if args.real_model else ""))


if __name__ == "__main__":
    main()
