"""``course-handout OUT --assignment A ...``: what a class hands out — the named assignments' released
notebooks, the ``course`` helpers and ``data/`` — with a ``pyproject.toml`` that installs ``course`` alone and
what students need to run the notebooks (``handout-pyproject.toml`` beside this module, which reads them from
``course/requirements.txt`` and ``course/notebook-requirements.txt``), and a README for students. Nothing of
``solutions/``, ``autograder/`` (the graders and their hidden checks) or ``source/`` goes in.

The assignments must be named: what a class may see is the instructor's call, and a default would hand out
either too much (every notebook) or, unnoticed, too little. A later notebook builds on the answers of earlier
assignments (its read-only "provided" cells, see ``autograder/instructor/release.py``), so a handout that holds
both a notebook and a later one that answers it is refused unless --include-earlier-answers says so (at the
end of a term, say); a notebook that answers an assignment handed out before is noted, to hand out once that
one is due.
"""
import argparse
import json
import re
import shutil
import sys
from pathlib import Path

from autograder.engine.assignments import ASSIGNMENTS
from course import layout
from course.layout import ROOT as REPO

PYPROJECT = Path(__file__).with_name("handout-pyproject.toml")

README = """# 注意力，亲手算（Attention, by hand）— 学生版

这是课程发给你的材料：

- `release/`：作业 notebook，每个作业一个文件夹；每个文件夹里还有 `checks.pt.xz`：检查单元要用的公开用例
  （输入和评分程序期望的输出，不含答案），不要删；
- `course/`：notebook 用到的辅助代码（玩具数据、画图、Qwen3.5 权重和分词器的加载）；
- `data/`：课程数据，包括 Qwen3.5 第 3 层的**合成替身**权重（随机数，格式和真实模型一样）。

## 安装

需要 Python 3.10 或更新的版本。在这个文件夹里：

```bash
python -m venv .venv
source .venv/bin/activate                 # Windows：.venv\\Scripts\\activate
# 没有 NVIDIA GPU 的话，先装 CPU 版的 torch（约 200 MB，而不是好几 GB）：
python -m pip install "torch=={torch}" --extra-index-url https://download.pytorch.org/whl/cpu
python -m pip install .
```

## 做作业

`release/` 是发给你的原件。先建一份自己的工作副本，在副本上做：

```bash
course-work                               # 把 release/ 里的 notebook 拷到 work/，已有的文件不会被覆盖
jupyter lab work/                         # 左边的文件浏览器里是全部作业，从 work/{first}/{first}.ipynb 开始
```

把每个练习里的 `raise NotImplementedError()` 换成你的代码。**每个练习后面有一个检查单元**，写完就运行它：
它用手算的小例子、几种形状和 dtype 检验你的函数，也会发现「原地修改了传进来的张量」（评分时这样的练习得 0 分，
检查会说出是哪个参数被改了、怎么改）。检查单元只有一行 `check("练习名")`，跑的是评分程序自己的公开用例，
说的和评分时一样；评分时还会再跑一些不公开的用例。这份材料里没有评分程序，检查单元就是你能运行的检查。
第一次打开时，「Run All」会停在第一个还没实现的练习的检查上：这是正常的，从上往下一个一个做。

本次包含的作业：{assignments}。

## 提交

按老师的要求提交 notebook 文件本身（例如 `{first}.ipynb`），不要改文件名。
老师评分时只读取 notebook 里的 import、函数和类的定义以及全大写常量，在隔离的环境里运行，用比检查单元更多的形状、
dtype 和边界情况和参考实现比较；每个练习要么全部得分，要么不得分，反馈会说明哪里不对。
"""


def _copy_tree(source: Path, target: Path) -> None:
    shutil.copytree(source, target, ignore=shutil.ignore_patterns("__pycache__", "*.pyc", ".ipynb_checkpoints"))


def provided_answers(root: Path, assignments: list[str]) -> dict[str, list[str]]:
    """Notebook of ``assignments`` (in ``root/release/``) -> the course's other assignments whose exercises its
    provided cells answer, in course order."""
    carried = {}
    for later in assignments:
        sources = []
        for notebook in (root / layout.RELEASE / later).glob("*.ipynb"):
            cells = json.loads(notebook.read_text(encoding="utf-8"))["cells"]
            sources += ["".join(c["source"]) for c in cells
                        if c.get("metadata", {}).get("nbgrader", {}).get("grade_id", "").startswith("provided_")]
        answered = [a for a in ASSIGNMENTS if a != later and any(
            re.search(rf"^(def|class) {e.name}\b", text, re.MULTILINE) for e in ASSIGNMENTS[a] for text in sources)]
        if answered:
            carried[later] = answered
    return carried


def build(out: Path, assignments: list[str], repo: Path = REPO) -> None:
    """Write the handout of ``assignments`` (in course order) into the new folder ``out``."""
    import torch

    _copy_tree(repo / "course", out / "course")
    _copy_tree(repo / layout.DATA, out / layout.DATA)
    for assignment in assignments:
        _copy_tree(repo / layout.RELEASE / assignment, out / layout.RELEASE / assignment)
    shutil.copy(PYPROJECT, out / "pyproject.toml")
    (out / "README.md").write_text(README.format(torch=torch.__version__.split("+")[0], first=assignments[0],
                                                 assignments="、".join(assignments)), encoding="utf-8")


def main(argv=None) -> int:
    released = [a for a in ASSIGNMENTS if (REPO / layout.RELEASE / a).is_dir()]
    parser = argparse.ArgumentParser(prog="course-handout", description="Write what a class hands out: the named "
                                     "assignments' release/ folders, course/, data/, a pyproject.toml that installs "
                                     "course, and a README.", formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog="\n".join(__doc__.splitlines()[6:]).replace("``", ""))
    parser.add_argument("out", type=Path, help="a new folder to write the handout into")
    parser.add_argument("--assignment", nargs="+", action="extend", choices=released, required=True, metavar="A",
                        help=f"the assignments to hand out, e.g. the one released this week (released: "
                             f"{', '.join(released)})")
    parser.add_argument("--include-earlier-answers", action="store_true",
                        help="hand out a notebook together with a later one whose provided cells answer it")
    args = parser.parse_args(argv)
    if args.out.exists() and any(args.out.iterdir()):
        print(f"course-handout: {args.out} is not empty; give a new folder", file=sys.stderr)
        return 1
    assignments = sorted(set(args.assignment), key=list(ASSIGNMENTS).index)
    carried = provided_answers(REPO, assignments)
    together = {later: [a for a in earlier if a in assignments] for later, earlier in carried.items()}
    together = {later: earlier for later, earlier in together.items() if earlier}
    if together and not args.include_earlier_answers:
        for later, earlier in together.items():
            print(f"course-handout: {later}'s notebook gives the answers of {', '.join(earlier)} (its provided "
                  "cells), which this handout also holds.", file=sys.stderr)
        print("Hand out only what has been released so far, or pass --include-earlier-answers to give those "
              "answers with it.", file=sys.stderr)
        return 1
    build(args.out, assignments)
    print(f"Wrote the handout to {args.out}: release/ ({', '.join(assignments)}), course/, data/, "
          "pyproject.toml, README.md. Students install it with `pip install .`.")
    for later, earlier in carried.items():
        before = [a for a in earlier if a not in assignments]
        if before:
            print(f"Note: {later}'s notebook gives the answers of {', '.join(before)} (its provided cells); hand it "
                  "out once those are due.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
