"""``report.html``: one self-contained page about the class — per assignment, a histogram of the scores,
the pass rate of each exercise, the most common named mistakes (plots are PNG images embedded in the page)
and the slowest submissions. It loads nothing, so it opens offline and can be mailed as one file.

Everything but the slowest submissions (measured seconds) depends only on the verdicts, so the same
class gives the same page, whether graded in one run or in shards.
"""
import base64
import heapq
import io
import statistics
from collections import Counter
from dataclasses import dataclass, field
from html import escape

from matplotlib.figure import Figure

from autograder.engine.assignments import ASSIGNMENTS
from autograder.instructor.classroom.results_store import NotebookResult

TOP_MISTAKES = 10
SLOWEST = 5


@dataclass
class AssignmentStats:
    """What the report says about one assignment, gathered one student at a time."""

    assignment: str
    scores: list[int] = field(default_factory=list)
    passed: Counter = field(default_factory=Counter)  # exercise -> students who passed it
    mistakes: Counter = field(default_factory=Counter)  # (exercise, mistake) -> students
    grader_problems: list[str] = field(default_factory=list)
    slowest: list[tuple[float, str, int]] = field(default_factory=list)  # a heap of (seconds, student, points)

    @property
    def max_points(self) -> int:
        return sum(e.points for e in ASSIGNMENTS[self.assignment])

    def add(self, student: str, result: NotebookResult) -> None:
        self.scores.append(result.points)
        for verdict in result.verdicts:
            self.passed[verdict.exercise] += verdict.passed
            if verdict.mistake:
                self.mistakes[verdict.exercise, verdict.mistake] += 1
        if result.grader_problem:
            self.grader_problems.append(student)
        entry = (result.seconds, student, result.points)
        (heapq.heappush if len(self.slowest) < SLOWEST else heapq.heappushpop)(self.slowest, entry)

    def full_marks(self) -> float:
        return sum(s == self.max_points for s in self.scores) / len(self.scores) if self.scores else 0.0

    def top_mistakes(self) -> list[tuple[tuple[str, str], int]]:
        return sorted(self.mistakes.items(), key=lambda item: (-item[1], item[0]))[:TOP_MISTAKES]


def _png(figure: Figure) -> str:
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=100, metadata={"Software": None})  # no version: same bytes each run
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode()


def _histogram(stats: AssignmentStats) -> str:
    figure = Figure(figsize=(6.4, 2.8), layout="constrained")
    ax = figure.subplots()
    counts = Counter(stats.scores)
    points = range(stats.max_points + 1)
    ax.bar(points, [counts.get(p, 0) for p in points], color="#4c72b0", width=0.8)
    ax.set_xlabel(f"points (of {stats.max_points})")
    ax.set_ylabel("students")
    ax.set_title("Scores")
    ax.yaxis.get_major_locator().set_params(integer=True)
    return _png(figure)


def _pass_rates(stats: AssignmentStats) -> str:
    names = [e.name for e in ASSIGNMENTS[stats.assignment]]
    rates = [100 * stats.passed[n] / len(stats.scores) if stats.scores else 0 for n in names]
    figure = Figure(figsize=(6.4, 0.45 * len(names) + 1.0), layout="constrained")
    ax = figure.subplots()
    ax.barh(names[::-1], rates[::-1], color="#55a868")
    ax.set_xlim(0, 100)
    ax.set_xlabel("students who passed (%)")
    ax.set_title("Pass rate per exercise")
    for y, rate in enumerate(rates[::-1]):
        ax.text(min(rate + 1, 88), y, f"{rate:.0f}%", va="center", fontsize=9)
    return _png(figure)


def _mistake_chart(stats: AssignmentStats) -> str:
    top = stats.top_mistakes()[::-1]
    figure = Figure(figsize=(8.5, 0.45 * len(top) + 1.0), layout="constrained")  # wide: the labels are long
    ax = figure.subplots()
    ax.barh([f"{exercise}: {mistake}" for (exercise, mistake), _ in top], [n for _, n in top], color="#c44e52")
    ax.set_xlabel("students")
    ax.set_title("Most common named mistakes")
    ax.xaxis.get_major_locator().set_params(integer=True)
    return _png(figure)


def _summary_row(stats: AssignmentStats, students: int) -> str:
    mean = f"{statistics.mean(stats.scores):.1f}" if stats.scores else "–"
    median = f"{statistics.median(stats.scores):g}" if stats.scores else "–"
    return (f"<tr><td><a href='#{escape(stats.assignment)}'>{escape(stats.assignment)}</a></td>"
            f"<td>{len(stats.scores)} / {students}</td><td>{mean} / {stats.max_points}</td><td>{median}</td>"
            f"<td>{100 * stats.full_marks():.0f}%</td><td>{len(stats.grader_problems)}</td></tr>")


def _section(stats: AssignmentStats) -> str:
    name = escape(stats.assignment)
    if not stats.scores:
        return f"<section id='{name}'><h2>{name}</h2><p>No student handed this assignment in.</p></section>"
    mistakes = stats.top_mistakes()
    mistake_rows = "".join(f"<tr><td><code>{escape(e)}</code></td><td>{escape(m)}</td><td>{n}</td></tr>"
                           for (e, m), n in mistakes)
    mistake_part = (f"<img alt='most common named mistakes' src='{_mistake_chart(stats)}'>"
                    f"<table><tr><th>exercise</th><th>mistake</th><th>students</th></tr>{mistake_rows}</table>"
                    if mistakes else "<p>No failure matched a named mistake.</p>")
    slow_rows = "".join(f"<tr><td>{escape(student)}</td><td>{seconds:.1f} s</td><td>{points}</td></tr>"
                        for seconds, student, points in sorted(stats.slowest, reverse=True))
    problems = (f"<p class='grader'>⚠ The grader itself failed on the notebooks of "
                f"{escape(', '.join(stats.grader_problems))}; run course-grade again to regrade them.</p>"
                if stats.grader_problems else "")
    return f"""<section id="{name}">
<h2>{name}</h2>
{problems}
<img alt="score histogram" src="{_histogram(stats)}">
<img alt="pass rate per exercise" src="{_pass_rates(stats)}">
<h3>Most common named mistakes</h3>
{mistake_part}
<section class="slowest">
<h3>Slowest submissions</h3>
<table><tr><th>student</th><th>grading time</th><th>points</th></tr>{slow_rows}</table>
</section>
</section>"""


_STYLE = """
body { font-family: system-ui, "Noto Sans CJK SC", "PingFang SC", "Microsoft YaHei", sans-serif; max-width: 60rem;
       margin: 2rem auto; padding: 0 1rem; color: #222; }
table { border-collapse: collapse; margin: .5rem 0 1rem; }
th, td { border-bottom: 1px solid #ddd; padding: .3rem .6rem; text-align: left; }
img { display: block; max-width: 100%; margin: .5rem 0; }
.grader { color: #9a6700; }
"""


def report_html(stats: list[AssignmentStats], students: int) -> str:
    """The whole page, for ``students`` students and the per-assignment ``stats``."""
    rows = "".join(_summary_row(s, students) for s in stats)
    sections = "\n".join(_section(s) for s in stats)
    return f"""<!DOCTYPE html>
<html lang="en">
<head><meta charset="utf-8"><title>Class report</title><style>{_STYLE}</style></head>
<body>
<h1>Class report</h1>
<p>{students} students. Points come from the course's grading engine, the same as
<code>pytest autograder/</code> and <code>nbgrader autograde</code>.</p>
<table>
<tr><th>assignment</th><th>handed in</th><th>mean</th><th>median</th><th>full marks</th><th>grader problems</th></tr>
{rows}
</table>
{sections}
</body>
</html>
"""
