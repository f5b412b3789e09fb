"""The score table printed after ``pytest autograder/`` and the Gradescope-style results.json."""
import json
from collections import defaultdict
from pathlib import Path

from autograder.engine.model import Verdict
from autograder.files import write_atomically


class Scoreboard:
    """Verdicts in the order they were graded, per assignment."""

    def __init__(self):
        self.verdicts: dict[str, list[Verdict]] = defaultdict(list)
        self.not_submitted: list[str] = []  # assignments the submission does not contain: listed, not counted
        self.not_started: list[str] = []  # assignments whose every exercise is still the stub: listed, not counted
        self.graded_folder = ""

    def add(self, assignment: str, verdict: Verdict) -> None:
        self.verdicts[assignment].append(verdict)

    def total(self) -> tuple[int, int]:
        all_verdicts = [v for vs in self.verdicts.values() for v in vs]
        return sum(v.points for v in all_verdicts), sum(v.max_points for v in all_verdicts)

    def table(self) -> list[str]:
        width = max((len(v.exercise) for vs in self.verdicts.values() for v in vs), default=10) + 2
        lines = [f"评分的文件夹 Graded: {self.graded_folder}"] if self.graded_folder else []
        for assignment, verdicts in self.verdicts.items():
            lines.append(assignment)
            for v in verdicts:
                mark = "✓" if v.passed else "⚠" if v.grader_problem else "✗"
                lines.append(f"  {mark} {v.exercise:<{width}} {v.points:>2}/{v.max_points:<2}  {v.summary}")
            got, out_of = sum(v.points for v in verdicts), sum(v.max_points for v in verdicts)
            lines.append(f"    {'小计 subtotal':<{width}} {got:>2}/{out_of}")
        for assignment in self.not_submitted:
            lines.append(f"{assignment}  未提交 not submitted（不计入总分）")
        for assignment in self.not_started:
            lines.append(f"{assignment}  未开始 not started：每个练习都还是 raise NotImplementedError（不计入总分）")
        got, out_of = self.total()
        lines.append(f"总分 Total: {got}/{out_of}" + self._left_out())
        return lines

    def _left_out(self) -> str:
        """What the total leaves out, said after it ("" when nothing is)."""
        parts = [f"{len(names)} 个作业{what}" for names, what in ((self.not_started, "未开始"),
                                                               (self.not_submitted, "未提交")) if names]
        return f"（{'，'.join(parts)}，不计入）" if parts else ""

    def write_results_json(self, path: Path, *, visibility: str = "visible", execution_time: float | None = None,
                           output: str = "") -> None:
        """Gradescope's results.json: a test per exercise with the given ``visibility`` (Gradescope's
        "visible", "hidden", "after_due_date" or "after_published"), ``output`` for the whole submission, and
        the grading time in seconds when given."""
        tests = [
            {"name": f"{assignment} / {v.exercise}", "score": v.points, "max_score": v.max_points,
             "status": "passed" if v.passed else "failed", "output": v.message, "visibility": visibility}
            for assignment, verdicts in self.verdicts.items() for v in verdicts
        ]
        score, _ = self.total()
        results = {"score": score, "tests": tests}
        for names, what in ((self.not_submitted, "未提交"), (self.not_started, "未开始")):
            if names:
                output = "\n".join(x for x in (output, f"{what}（不计入总分）：" + "、".join(names)) if x)
        if output:
            results["output"] = output
        if execution_time is not None:
            results["execution_time"] = round(execution_time)
        write_atomically(Path(path), json.dumps(results, ensure_ascii=False, indent=2))
