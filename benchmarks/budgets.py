"""What the runs of each budget's cases use (``model.Budget``), as the fork server measures them: the solved
notebook's, and each attack's from tests/sandbox/test_budgets.py, which would score full marks without the budget.
Each attack runs with its CPU limit lifted (to 120 s), so the figure is what it needs, not where it was stopped.
The margins are the figures the budgets rest on: how far below the budget honest code stays, how far above it the
attacks go.

Run: python benchmarks/budgets.py [--repeats N]
"""
import argparse
import statistics
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from autograder.engine.assignments import EXERCISES  # noqa: E402
from autograder.engine.judging import budget_job  # noqa: E402
from autograder.engine.sandbox.client import shared  # noqa: E402
from tests.sandbox.test_budgets import HOLDING, UNCOUNTED  # noqa: E402
from tests.students import a01, a07  # noqa: E402

LIFTED_CPU_S = 120.0
RUNS = {
    "online_softmax_attention": (a01, {"solved": None, "solved, split-K (each block's partials kept)": a01.OTHER_CORRECT[0][2],
                                       **HOLDING}),
    "greedy_generate": (a07, {"solved": None, "no cache, through the model itself": UNCOUNTED}),
}


def usage(exercise, student, answer: str | None, repeats: int) -> tuple[float, float]:
    """Median (MiB the run's resident memory rose, CPU seconds) of the budget's cases run for ``answer``."""
    job = budget_job(exercise, student.cells(None if answer is None else {exercise.name: answer}))
    found = []
    for _ in range(repeats):
        result = shared().run(job, LIFTED_CPU_S)
        if result.kind != "report":
            raise SystemExit(f"{exercise.name}: the run ended as {result.kind} ({result.detail})")
        found.append((result.detail["grew_bytes"] / 2**20, result.detail["cpu_s"]))
    return statistics.median(f[0] for f in found), statistics.median(f[1] for f in found)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    repeats = parser.parse_args().repeats
    for name, (student, answers) in RUNS.items():
        exercise = EXERCISES[name]
        budget = exercise.budget
        limit = (f"memory {budget.memory_bytes / 2**20:.0f} MiB" if budget.memory_bytes is not None
                 else f"CPU {budget.cpu_s:.1f} s")
        print(f"{name}: budget {limit}")
        for label, answer in answers.items():
            grew, cpu = usage(exercise, student, answer, 1 if answer is not None and budget.cpu_s else repeats)
            used = grew / (budget.memory_bytes / 2**20) if budget.memory_bytes is not None else cpu / budget.cpu_s
            print(f"  {label:<56} rose {grew:7.0f} MiB  CPU {cpu:6.2f} s  = {used:5.2f} × the budget")


if __name__ == "__main__":
    main()
