"""Student code cannot change its grade or stop the grading: each trick fails its own exercise only."""
import pytest

from autograder.assignments import ASSIGNMENTS
from autograder.exercise import grade
from autograder.notebook_source import Cell, student_code
from tests.student_code import notebook_code

TRICKS = {
    "sys.exit": ("import sys\ndef attention_scores(q, k):\n    sys.exit(0)\n", "sys.exit"),
    "os._exit": ("import os\ndef attention_scores(q, k):\n    os._exit(0)\n", "提前退出"),
    "infinite loop": ("def attention_scores(q, k):\n    while True:\n        pass\n", "死循环"),
    "huge allocation": ("import torch\ndef attention_scores(q, k):\n    return torch.ones(2**31)\n", "内存"),
    "patch torch and the grader": ('''
import torch
def attention_scores(q, k):
    import autograder.compare, autograder.exercise
    autograder.compare.compare = lambda *a, **kw: None
    autograder.exercise.check_output = lambda *a, **kw: None
    torch.testing.assert_close = lambda *a, **kw: None
    torch.Tensor.__eq__ = lambda self, other: True
    return torch.zeros(*q.shape[:-1], k.shape[-2], dtype=q.dtype)
''', "数值不对"),
    "kill the parent's torch.matmul": ('''
import torch
def attention_scores(q, k):
    torch.matmul = lambda a, b: torch.zeros(())
    return q @ k.transpose(-2, -1) / q.shape[-1] ** 0.5
''', None),
}


@pytest.mark.parametrize("trick", TRICKS)
def test_trick_fails_only_its_exercise(trick):
    source, named = TRICKS[trick]
    code = student_code([Cell("代码单元 #1", notebook_code({"attention_scores": source}))])
    verdicts = {e.name: grade(e, code, timeout_s=3) for e in ASSIGNMENTS["01_attention_basics"]}
    scores = verdicts.pop("attention_scores")
    if named is None:  # the trick harms only the student's own process; their answer is right
        assert scores.passed, scores.message
    else:
        assert not scores.passed
        assert named in scores.message, scores.message
    # attention calls the student's attention_scores, so it shares its fate; the rest are untouched
    verdicts.pop("attention")
    assert all(v.passed for v in verdicts.values()), {n: v.message for n, v in verdicts.items()}


def test_forged_results_fail_the_exercise():
    forge = '''
import sys
def attention_scores(q, k):
    frame = sys._getframe(1)
    while "outcomes" not in frame.f_locals:
        frame = frame.f_back
    frame.f_locals["outcomes"].extend([("error", "nothing")] * 3)
    raise ValueError("stop")
'''
    code = student_code([Cell("代码单元 #1", notebook_code({"attention_scores": forge}))])
    verdict = grade(ASSIGNMENTS["01_attention_basics"][0], code, timeout_s=3)
    assert not verdict.passed
    assert "格式不对" in verdict.message
