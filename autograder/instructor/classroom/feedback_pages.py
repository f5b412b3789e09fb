"""``feedback/<student>/<assignment>.html``: what a student gets back — each exercise's verdict and
message, in Chinese, and nothing of the hidden checks' code (the engine's messages never hold it).

Everything a notebook can influence (its messages quote the student's own lines) is escaped: the page
holds no script and loads nothing, so it opens anywhere, offline.
"""
from html import escape

from autograder.instructor.classroom.results_store import NotebookResult

_STYLE = """
body { font-family: system-ui, "Noto Sans CJK SC", "PingFang SC", "Microsoft YaHei", sans-serif; max-width: 56rem;
       margin: 2rem auto; padding: 0 1rem; color: #222; }
table { border-collapse: collapse; width: 100%; }
th, td { border-bottom: 1px solid #ddd; padding: .5rem; text-align: left; vertical-align: top; }
td.points { white-space: nowrap; }
.passed { color: #1a7f37; } .failed { color: #b42318; } .grader { color: #9a6700; }
pre { white-space: pre-wrap; background: #f6f8fa; padding: .5rem; margin: .4rem 0 0; font-size: .9em; }
"""


def _row(verdict) -> str:
    mark, css = ("✓", "passed") if verdict.passed else ("⚠", "grader") if verdict.grader_problem else ("✗", "failed")
    details = f"<pre>{escape(verdict.details)}</pre>" if verdict.details else ""
    return (f"<tr><td><code>{escape(verdict.exercise)}</code></td>"
            f"<td class='points'>{verdict.points} / {verdict.max_points}</td>"
            f"<td><span class='{css}'>{mark} {escape(verdict.summary)}</span>{details}</td></tr>")


def feedback_page(student: str, assignment: str, result: NotebookResult) -> str:
    """The HTML page of one student's verdicts on one assignment."""
    rows = "\n".join(_row(v) for v in result.verdicts)
    problem = ("<p class='grader'>⚠ 有的练习因为评分程序自己的问题没能评分，不是你的代码的问题；"
               "老师会重新评分。</p>" if result.grader_problem else "")
    return f"""<!DOCTYPE html>
<html lang="zh-CN">
<head><meta charset="utf-8"><title>{escape(assignment)} 评分反馈 · {escape(student)}</title>
<style>{_STYLE}</style></head>
<body>
<h1>{escape(assignment)} 评分反馈</h1>
<p>学生：{escape(student)}　得分：<strong>{result.points} / {result.max_points}</strong></p>
{problem}
<table>
<thead><tr><th>练习</th><th>得分</th><th>结果</th></tr></thead>
<tbody>
{rows}
</tbody>
</table>
<p>每个练习要么全部得分，要么不得分。评分程序只读取 notebook 里的 import、函数和类的定义以及全大写常量，
在隔离的沙箱里运行它们，再和参考实现比较；失败时说明是哪个用例、期望什么、得到了什么，
能认出来的常见错误会直接点名。</p>
</body>
</html>
"""
