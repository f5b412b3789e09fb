"""``grades.csv`` and ``mistakes.csv``: the class's points and its named mistakes, as plain CSV files a
spreadsheet or an LMS imports.

grades.csv has one row per student: a column per exercise (``<assignment>/<exercise>``), one per
assignment (its total) and one that says whether it was handed in late (``<assignment>/late``: ``yes`` or
``no`` as the LMS's export marks it, empty where the export says nothing), then ``total`` and ``percent``.
An assignment the student did not hand in is left empty, not 0, so an LMS can tell "missing" from "scored
nothing"; ``total`` counts it as 0. Points are the engine's, the same as ``pytest autograder/`` and
``nbgrader autograde`` give. The files are UTF-8 with a byte-order mark, which is what Excel needs to show
Chinese names; other programs ignore it.

Both are spreadsheet-safe: a text cell that a spreadsheet would run as a formula (a student's or a mistake's
name starting with ``=``, ``+``, ``-``, ``@``, a tab or a carriage return) is written with a leading ``'``,
as OWASP advises against CSV injection; the numbers the course writes stay numbers.
"""
import csv
import io

from autograder.engine.assignments import ASSIGNMENTS
from autograder.instructor.classroom.results_store import NotebookResult

_BOM = "\ufeff"
_LATE = {True: "yes", False: "no", None: ""}
_FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")  # OWASP's list: what makes a spreadsheet read a formula


def spreadsheet_safe(cell: object) -> object:
    """``cell`` as a spreadsheet shows it and never runs: text that starts a formula gets a leading ``'``, which
    the spreadsheet shows as text; anything else (the numbers the course writes) is kept as it is."""
    return "'" + cell if isinstance(cell, str) and cell.startswith(_FORMULA_STARTS) else cell


def csv_text(rows: list[list], byte_order_mark: bool = True) -> str:
    """The CSV text of ``rows``, every cell spreadsheet-safe: the one writer of the course's CSV files (with the
    byte-order mark Excel needs, unless told not to: an LMS's import wants none)."""
    buffer = io.StringIO()
    csv.writer(buffer).writerows([spreadsheet_safe(cell) for cell in row] for row in rows)
    return (_BOM if byte_order_mark else "") + buffer.getvalue()


class Gradebook:
    """Rows of grades.csv and the mistakes' tally, filled one student at a time."""

    def __init__(self, assignments: list[str]):
        self.assignments = assignments
        self.max_total = sum(e.points for a in assignments for e in ASSIGNMENTS[a])
        self.rows: list[list] = []
        # (assignment, exercise, mistake) -> the students whose verdict named it
        self.mistakes: dict[tuple[str, str, str], list[str]] = {}

    def header(self) -> list[str]:
        columns = ["student"]
        for assignment in self.assignments:
            columns += [f"{assignment}/{e.name}" for e in ASSIGNMENTS[assignment]] + [assignment, f"{assignment}/late"]
        return columns + ["total", "percent"]

    def add(self, student: str, results: dict[str, NotebookResult], late: dict[str, bool | None] | None = None) -> None:
        """One student's row: ``results`` and, per assignment, whether it was late (missing: not known)."""
        row, total, late = [student], 0, late or {}
        for assignment in self.assignments:
            result = results.get(assignment)
            if result is None:
                row += [""] * (len(ASSIGNMENTS[assignment]) + 2)
                continue
            row += [v.points for v in result.verdicts] + [result.points, _LATE[late.get(assignment)]]
            total += result.points
            for verdict in result.verdicts:
                if verdict.mistake:
                    self.mistakes.setdefault((assignment, verdict.exercise, verdict.mistake), []).append(student)
        self.rows.append(row + [total, f"{100 * total / self.max_total:.1f}" if self.max_total else ""])

    def grades_csv(self) -> str:
        return csv_text([self.header(), *self.rows])

    def mistake_rows(self) -> list[tuple[str, str, str, list[str]]]:
        """(assignment, exercise, mistake, students): by assignment and exercise, the most common first."""
        order = {(a, e.name): (i, j) for i, a in enumerate(ASSIGNMENTS) for j, e in enumerate(ASSIGNMENTS[a])}
        return sorted(((a, e, m, sorted(s)) for (a, e, m), s in self.mistakes.items()),
                      key=lambda row: (order[row[0], row[1]], -len(row[3]), row[2]))

    def mistakes_csv(self) -> str:
        rows = [[a, e, m, len(s), "; ".join(s)] for a, e, m, s in self.mistake_rows()]
        return csv_text([["assignment", "exercise", "mistake", "count", "students"], *rows])
