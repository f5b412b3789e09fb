"""``grade(name)`` for the hidden-test cells of the source notebooks (run by ``nbgrader autograde``).

The kernel that runs the notebook has executed the student's code, so it may have been patched; the
grading therefore happens in a fresh interpreter (``python -m autograder.grade_cells``), fed with the
cells the kernel has executed so far, and reaches exactly the verdict ``pytest autograder/`` does.
"""
import json
import subprocess
import sys
import tempfile

from autograder import limits


class GradingFailure(Exception):
    """A failed exercise. IPython shows only the message (no code), so feedback leaks no hidden test."""

    def _render_traceback_(self):
        return [f"GradingFailure: {self}"]


def _executed_cells() -> list[dict]:
    from IPython import get_ipython

    shell = get_ipython()
    if shell is None:
        raise RuntimeError("grade() runs inside a Jupyter notebook.")
    return [{"label": f"In[{n}]", "source": source} for n, source in enumerate(shell.user_ns["In"]) if source]


def grade(name: str) -> None:
    """Grade exercise ``name`` on the code executed so far; print the verdict, raise when it fails."""
    payload = json.dumps({"exercise": name, "cells": _executed_cells()})
    try:
        # Not in the notebook's folder: a student's torch.py or autograder.py there must not shadow ours.
        done = subprocess.run([sys.executable, "-m", "autograder.grade_cells"], input=payload, text=True,
                              capture_output=True, cwd=tempfile.gettempdir(),
                              timeout=limits.EXERCISE_TIMEOUT_S + 60)
    except subprocess.TimeoutExpired:
        raise GradingFailure(f"{name}：评分超时。") from None
    if done.returncode != 0:
        raise GradingFailure(f"{name}：评分程序出错了：{done.stderr.strip()[-2000:]}")
    verdict = json.loads(done.stdout)
    if not verdict["passed"]:
        raise GradingFailure(f"{name}（0/{verdict['max_points']} 分）：{verdict['message']}")
    print(f"✓ {name}：通过（{verdict['points']}/{verdict['max_points']} 分）")
