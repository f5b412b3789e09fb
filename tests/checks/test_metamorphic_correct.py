"""A verdict depends on what the code computes, never on how it is written: every presentation of a correct notebook
(``tests/presentations.py``) gets full points: the released notebooks solved, and the notebooks of the simulated
students (``tests/students``) and of the natural mistakes' writer. Graded through the real path: a multi-cell
``.ipynb``, read as the grader reads a submission. (The same presentations of mistaken code:
``tests/checks/test_metamorphic_mistakes.py``.)"""
import ast

import pytest

from autograder.engine.assignments import ASSIGNMENTS
from autograder.engine.grading import grade_cells
from tests import natural_mistakes, students
from tests.presentations import (
    PRESENTATIONS,
    graded_cells,
    present,
    released_blocks,
    source_blocks,
    student_blocks,
)


def _failures(verdicts) -> list[str]:
    return [f"{v.exercise}: {v.message}" for v in verdicts if not v.passed]


@pytest.mark.metamorphic
@pytest.mark.parametrize("presentation", list(PRESENTATIONS))
@pytest.mark.parametrize("assignment", list(ASSIGNMENTS))
def test_the_reference_solutions_pass_in_every_presentation(assignment, presentation, sandbox):
    cells = graded_cells(present(presentation, released_blocks(assignment)), f"{assignment}.ipynb")
    assert not _failures(grade_cells(assignment, cells, sandbox))


@pytest.mark.metamorphic
@pytest.mark.parametrize("presentation", list(PRESENTATIONS))
@pytest.mark.parametrize("module", students.ALL, ids=lambda m: m.ASSIGNMENT)
def test_the_simulated_students_correct_code_passes_in_every_presentation(module, presentation, sandbox):
    """The correct code of ``tests/students``, its notebook cell by cell as ``module.layout()`` writes it."""
    cells = graded_cells(present(presentation, student_blocks(module.layout())))
    assert not _failures(grade_cells(module.ASSIGNMENT, cells, sandbox))


def _distinct_notebooks(modules) -> list:
    """One module per distinct correct notebook: the later writers of 07 (g07, h07, i07) wrote their mistakes into
    f07's correct code, and the same cells get the same verdicts."""
    found = {}
    for module in modules:
        found.setdefault((module.HEADER, tuple(module.CORRECT.items())), module)
    return list(found.values())


WRITERS = _distinct_notebooks(natural_mistakes.ASSIGNMENTS)


@pytest.mark.metamorphic
@pytest.mark.parametrize("presentation", list(PRESENTATIONS))
@pytest.mark.parametrize("module", WRITERS, ids=lambda m: m.__name__.rsplit(".", 1)[-1])
def test_code_written_by_others_passes_in_every_presentation(module, presentation, sandbox):
    """The correct code of the natural mistakes' writers, who never read the graders, one definition per cell."""
    cells = graded_cells(present(presentation, source_blocks(module.HEADER, module.CORRECT)))
    assert not _failures(grade_cells(module.ASSIGNMENT, cells, sandbox))


MARKS = {
    "imports in the answer cell": "import torch.nn.functional as F",
    "from torch.nn import functional as F": "from torch.nn import functional as F",
    "imports inside the functions": "    import torch.nn.functional as F",
    "torch.nn.functional spelled out": "torch.nn.functional.softmax(",
    "from torch import nn, Tensor": "from torch import nn, Tensor",
    "no type hints, no docstrings": "def masked_softmax(scores, mask=None):",
    "from __future__ import annotations": "from __future__ import annotations",
    "each definition in its own cell": None,
    "helpers in cells after their caller": None,
    "a stub left above, defined again below": "raise NotImplementedError()",
    "@torch.no_grad()": "@torch.no_grad()",
    "@torch.inference_mode()": "@torch.inference_mode()",
    "a functools.wraps decorator of the student's own": "@traced",
    "einsum for @": "matmul(",
    "methods call module-level helpers": "return _MultiHeadAttention_forward(self, x, attention_mask, causal)",
}


@pytest.mark.parametrize("presentation", [name for name in PRESENTATIONS if name != "as written"])
def test_each_presentation_changes_the_notebooks_and_keeps_them_valid_python(presentation):
    """A presentation that changed nothing could not fail: each leaves its mark on the released notebooks, and
    every cell still parses."""
    original = [block for assignment in ASSIGNMENTS for block in released_blocks(assignment)]
    shown = [block for assignment in ASSIGNMENTS for block in present(presentation, released_blocks(assignment))]
    for block in shown:
        ast.parse(block.source)
    answers = [b.source for b in shown if b.role == "answer"]
    assert answers != [b.source for b in original if b.role == "answer"] or len(shown) != len(original)
    mark = MARKS[presentation]
    if mark is not None:
        assert any(mark in source for source in answers), answers
    if presentation == "each definition in its own cell":
        assert len(shown) > len(original)
    if presentation == "helpers in cells after their caller":
        order = [name for b in shown if b.role == "answer" for name in _top_names(b.source)]
        assert order.index("attention") < order.index("masked_softmax") < order.index("attention_scores"), order
        assert order.index("MultiHeadAttention") < order.index("merge_heads") < order.index("split_heads"), order


def _top_names(source: str) -> list[str]:
    return [node.name for node in ast.parse(source).body if isinstance(node, (ast.FunctionDef, ast.ClassDef))]

