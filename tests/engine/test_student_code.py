"""Reading student code out of notebooks: only definitions run, and every problem gets a clear message."""
import nbformat
import torch

from autograder.engine import limits
from autograder.engine.assignments import EXERCISES
from autograder.engine.ipynb import NotebookError, read_code_cells
from autograder.engine.judging import grade
from autograder.engine.student_code import Cell, student_code
from tests.students import a01


def test_demo_cells_magics_and_plots_are_not_run(tmp_path):
    cells = [
        Cell("代码单元 #1", "%matplotlib inline\nimport matplotlib.pyplot as plt\n" + a01.source()),
        Cell("代码单元 #2", "plt.plot([1, 2])\nraise RuntimeError('a demo that fails')"),
        Cell("代码单元 #3", "%%time\nwhile True: pass"),
        Cell("代码单元 #4", "EPS = 1e-6\nlower = 3\nfor i in range(10**12): pass"),
    ]
    code = student_code(cells)
    assert set(code.defined) >= {"attention_scores", "EPS", "math", "torch"}
    assert "lower" not in code.defined and "plt" not in code.defined  # unused imports are dropped
    assert grade(EXERCISES["attention"], cells).passed


def test_renamed_function_is_reported_with_the_close_name():
    code = [Cell("代码单元 #1", a01.source().replace("def causal_mask", "def causal_masks"))]
    verdict = grade(EXERCISES["causal_mask"], code)
    assert "找不到 `causal_mask`" in verdict.message and "causal_masks" in verdict.message


def test_syntax_error_in_the_exercise_cell_is_reported():
    code = [Cell("代码单元 #1", a01.source()),
                         Cell("代码单元 #2", "def padding_mask(attention_mask)\n    return 1")]
    assert grade(EXERCISES["padding_mask"], code).passed  # the earlier definition still counts
    code = [Cell("代码单元 #1", "import torch\ndef padding_mask(attention_mask)\n    return 1")]
    verdict = grade(EXERCISES["padding_mask"], code)
    assert "代码单元 #1 有语法错误" in verdict.message and "第 2 行" in verdict.message


def test_error_points_at_the_students_line():
    code = [Cell("代码单元 #1", a01.source({"causal_mask": "def causal_mask(q_len, k_len=None):\n"
                                                                          "    x = 1\n    return x.shape\n"}))]
    verdict = grade(EXERCISES["causal_mask"], code)
    assert "AttributeError" in verdict.summary
    assert "代码单元 #1 第 " in verdict.details and "return x.shape" in verdict.details


def test_unreadable_notebooks_say_what_to_do(tmp_path):
    cases = {"truncated.ipynb": '{"cells": [', "not-a-notebook.ipynb": '{"hello": 1}'}
    for name, text in cases.items():
        (tmp_path / name).write_text(text, encoding="utf-8")
    messages = []
    for name in [*cases, "missing.ipynb"]:
        try:
            read_code_cells(tmp_path / name)
        except NotebookError as e:
            messages.append(str(e))
    assert len(messages) == 3
    assert "不是合法的 notebook" in messages[0] and "重新" in messages[0]
    assert "nbformat 4" in messages[1]
    assert "找不到 notebook" in messages[2]


def test_cells_are_read_in_order_with_labels(tmp_path):
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_markdown_cell("# hi"), nbformat.v4.new_code_cell("a = 1"),
                nbformat.v4.new_code_cell("def f():\n    return 2", execution_count=7)]
    path = tmp_path / "nb.ipynb"
    nbformat.write(nb, path)
    assert read_code_cells(path) == [Cell("代码单元 #1", "a = 1", "第 1 个代码单元"),
                                     Cell("代码单元 #2", "def f():\n    return 2", "In [7]")]


def test_hostile_notebook_files_are_refused_with_a_message(tmp_path):
    nested = tmp_path / "nested.ipynb"
    nested.write_text("[" * 200_000 + "]" * 200_000, encoding="utf-8")
    huge = tmp_path / "huge.ipynb"
    with open(huge, "wb") as f:
        f.truncate(limits.NOTEBOOK_BYTES + 1)
    outside = tmp_path / "submission" / "link.ipynb"
    outside.parent.mkdir()
    outside.symlink_to(huge)
    messages = {}
    for path in (nested, huge, outside):
        try:
            read_code_cells(path)
        except NotebookError as e:
            messages[path.name] = str(e)
    assert "不是合法的 notebook" in messages["nested.ipynb"]
    assert "超过了 32 MiB 的上限" in messages["huge.ipynb"]
    assert "提交文件夹以外的链接" in messages["link.ipynb"]


def test_parsing_hostile_code_is_a_syntax_message_not_a_crash():
    code = student_code([Cell("代码单元 #1", "X = " + "-" * 100_000 + "1"), Cell("代码单元 #2", "A = 1\0")])
    assert "无法解析" in code.syntax_errors["代码单元 #1"]
    assert code.syntax_errors["代码单元 #2"]


def test_an_import_is_kept_in_whichever_cell_it_is():
    """The import that a later cell makes for its own definition stays, whatever the cell before defined; a
    ``__future__`` import stays whole, since the rest of its cell compiles under it."""
    cells = [Cell("代码单元 #1", "import math\nimport torch\n"),
             Cell("代码单元 #2", "def helper(x):\n    return x + 1\n"),
             Cell("代码单元 #3", "import torch.nn.functional as F\nfrom collections import OrderedDict\n\n"
                                "def softmax_last(x):\n    return F.softmax(x, dim=-1)\n"),
             Cell("代码单元 #4", "from __future__ import annotations\n\n\nclass Later:\n"
                                "    def make(self) -> Later:\n        return Later()\n")]
    code = student_code(cells)
    assert {"F", "Later"} <= set(code.defined) and "OrderedDict" not in code.defined
    namespace = {}
    for compiled in code.compiled:
        exec(compiled, namespace)
    assert namespace["softmax_last"](torch.zeros(2)).tolist() == [0.5, 0.5]
    assert isinstance(namespace["Later"]().make(), namespace["Later"])
