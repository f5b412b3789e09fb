"""Wall time of grading one fully solved 01 notebook: `pytest autograder/` against `nbgrader autograde`
on the same submission, and against a bare `python -c "import torch"`; one solved 08 notebook (the Gated
DeltaNet layer on Qwen3.5's real sizes), and one 08 notebook with one named mistake in that layer. With
--real-model, also one solved 07 notebook and one with a named mistake in greedy_generate
(`pytest autograder/test_07_real_model.py`, the real SmolLM2 model: run `course-weights smollm2` first), also
in each number of grading lanes (``autograder/engine/lanes.py``; the default follows the cores).

Each notebook with a mistake is graded twice: with an empty store of known outputs (the first process after the
grader changed: every reference and mistake is run on the real-size model) and with the store the first run
filled (every later process: ``autograder/engine/output_store.py``).

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

from autograder.engine.lanes import LANES_ENV, MOST_LANES, cores, lane_count, start_early  # noqa: E402
from autograder.instructor.release import generate  # noqa: E402
from course.cache import CACHE_ENV  # noqa: E402
from tests import caches  # noqa: E402
from tests.notebooks import ASSIGNMENT, filled, source_solutions, write_submission  # noqa: E402
from tests.students import a07, a08  # noqa: E402

REAL_MODEL = "07_real_model"
DELTANET = "08_gated_deltanet"


def wall(command, cwd, env=None, exit_code: int = 0) -> float:
    """Seconds ``command`` took; it must exit with ``exit_code`` (1: a notebook that loses points)."""
    start = time.perf_counter()
    done = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True)
    elapsed = time.perf_counter() - start
    if done.returncode != exit_code:
        raise SystemExit(f"{' '.join(map(str, command))} failed:\n{done.stdout}{done.stderr}")
    return elapsed


def median_wall(command, cwd, repeats, env=None, exit_code: int = 0) -> float:
    return statistics.median(wall(command, cwd, env() if callable(env) else env, exit_code) for _ in range(repeats))


def with_mistake(folder: Path, module, exercise: str, named: str) -> Path:
    """A solved notebook of ``module``'s assignment with the simulated student's mistake ``named`` in ``exercise``."""
    code = next(source for name, said, source in module.MISTAKES if name == exercise and said == named)
    answers = {**source_solutions(module.ASSIGNMENT), exercise: code}
    return write_submission(folder, filled(answers, module.ASSIGNMENT), module.ASSIGNMENT)


def empty_store(root: Path):
    """An environment whose course cache holds the real one's weights and no known outputs: a new one each call."""
    def env() -> dict:
        cache = caches.without_outputs(Path(tempfile.mkdtemp(prefix="cache-", dir=root)) / "cache")
        return {**os.environ, CACHE_ENV: str(cache)}
    return env


def cold_and_warm(command, root: Path, repeats: int) -> tuple[float, float]:
    """Median walls of ``command`` (a notebook with a mistake) with an empty store, then with the store filled
    (the real cache's)."""
    cold = median_wall(command, REPO, repeats, empty_store(root), exit_code=1)
    wall(command, REPO, exit_code=1)  # fills the real cache's store, if it is not filled yet
    return cold, median_wall(command, REPO, repeats, exit_code=1)


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
        graded = [sys.executable, "-m", "pytest", f"autograder/test_{DELTANET}.py", "-q", "-p", "no:cacheprovider",
                  "--submission"]
        deltanet_s = median_wall([*graded, deltanet], REPO, repeats)
        wrong = with_mistake(root / "deltanet-wrong", a08, "Qwen35GatedDeltaNet", "输出的 RMSNorm 乘的是 (1 + weight)")
        wrong_08 = cold_and_warm([*graded, wrong], root, repeats)
        if args.real_model:
            graded = [sys.executable, "-m", "pytest", f"autograder/test_{REAL_MODEL}.py", "-q", "-p",
                      "no:cacheprovider", "--submission"]
            real = write_submission(root / "real", filled(source_solutions(REAL_MODEL), REAL_MODEL), REAL_MODEL)
            real_s = median_wall([*graded, real], REPO, repeats)
            lanes = {f"{n} lane{'s' if n > 1 else ''}": median_wall([*graded, real], REPO, repeats,
                                                                  {**os.environ, LANES_ENV: str(n)})
                     for n in range(1, MOST_LANES + 1)}
            wrong = with_mistake(root / "real-wrong", a07, "greedy_generate", "所有层共用了一个 KVCache")
            wrong_07 = cold_and_warm([*graded, wrong], root, repeats)

    print(f"{cores()} cores here: `pytest autograder/` grades in {lane_count()} lane(s)"
          + ("" if lane_count() == 1 or start_early() else
             ", the second once more than one assignment, or 07's real model, is handed over")
          + f", unless {LANES_ENV} says otherwise (then all from the start)")
    print(f"python -c 'import torch'                      {torch_s:6.2f} s")
    print(f"pytest autograder/ (one solved 01)            {pytest_s:6.2f} s   "
          f"{pytest_s / torch_s:4.2f}x torch import, {pytest_s / nbgrader_s:4.2f}x nbgrader")
    print(f"  same, third-party pytest plugins not loaded {pytest_bare_s:6.2f} s   "
          f"{pytest_bare_s / torch_s:4.2f}x torch import, {pytest_bare_s / nbgrader_s:4.2f}x nbgrader")
    print(f"nbgrader autograde (same submission)          {nbgrader_s:6.2f} s")
    print(f"pytest test_{DELTANET}.py (one solved 08){deltanet_s:8.2f} s   {deltanet_s / torch_s:4.2f}x torch import")
    print(f"  one named mistake in its layer, no store  {wrong_08[0]:8.2f} s   {wrong_08[0] / torch_s:4.2f}x torch import")
    print(f"  the same, the store filled                {wrong_08[1]:8.2f} s   {wrong_08[1] / torch_s:4.2f}x torch import")
    if args.real_model:
        print(f"pytest test_{REAL_MODEL}.py (one solved 07)  {real_s:6.2f} s   {real_s / torch_s:4.2f}x torch import")
        for name, seconds in lanes.items():
            print(f"  the same in {name:<8} ({LANES_ENV})   {seconds:6.2f} s   {seconds / torch_s:4.2f}x torch import")
        print(f"  one named mistake in greedy_generate, no store {wrong_07[0]:5.2f} s   "
              f"{wrong_07[0] / torch_s:4.2f}x torch import")
        print(f"  the same, the store filled                {wrong_07[1]:8.2f} s   {wrong_07[1] / torch_s:4.2f}x torch import")
    print("goal: pytest under 2x the torch import (both start torch: the grader and its sandbox's fork server), "
          f"{DELTANET} too" + (f"; {REAL_MODEL} under 3x" if args.real_model else "") +
          "; a notebook with one named mistake under 4x, the store filled")


if __name__ == "__main__":
    main()
