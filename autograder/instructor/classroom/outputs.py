"""Write what ``course-grade`` produces from a graded class and its stored results: grades.csv,
mistakes.csv, report.html and feedback/<student>/<assignment>.html, and for a class from Canvas's download what
goes back into Canvas (``canvas_return``). One pass over the students, one student's results in memory at a
time, so memory does not grow with the class.
"""
from dataclasses import dataclass
from pathlib import Path

from autograder.files import write_atomically
from autograder.instructor.classroom.canvas_return import CanvasReturn
from autograder.instructor.classroom.class_report import AssignmentStats, report_html
from autograder.instructor.classroom.feedback_pages import feedback_page
from autograder.instructor.classroom.gradebook import Gradebook
from autograder.instructor.classroom.graded_class import GradedClass
from autograder.instructor.classroom.results_store import ResultStore
from course import layout
from course.tools.plotting import use_chinese_font

FILES = ("grades.csv", "mistakes.csv", "report.html")
FEEDBACK = layout.FEEDBACK


@dataclass
class Written:
    """What was written, for the terminal summary."""

    students: int
    stats: list[AssignmentStats]
    pages: int
    canvas: bool  # whether canvas.csv and canvas-feedback/ were written


def write_outputs(out: Path, graded: GradedClass, stores: list[ResultStore]) -> Written:
    out = Path(out)
    gradebook = Gradebook(graded.assignments)
    stats = {a: AssignmentStats(a) for a in graded.assignments}
    canvas = CanvasReturn(out, graded)
    pages: set[Path] = set()
    for student, results, late in graded.by_student(stores):
        gradebook.add(student, results, late)
        texts = {}
        for assignment, result in results.items():
            stats[assignment].add(student, result)
            page = out / FEEDBACK / student / f"{assignment}.html"
            texts[assignment] = feedback_page(student, assignment, result)
            _write_if_changed(page, texts[assignment])
            pages.add(page)
        canvas.add(student, {a: r.points for a, r in results.items()}, texts)
    _remove_stale_pages(out / FEEDBACK, pages)
    wrote_canvas = canvas.close()
    write_atomically(out / "grades.csv", gradebook.grades_csv())
    write_atomically(out / "mistakes.csv", gradebook.mistakes_csv())
    use_chinese_font()  # mistake names in the plots are Chinese
    write_atomically(out / "report.html", report_html(list(stats.values()), len(graded.students)))
    return Written(len(graded.students), list(stats.values()), len(pages), wrote_canvas)


def _write_if_changed(path: Path, text: str) -> None:
    """Rewrite a page only when it changes, so a second run touches only the notebooks that changed."""
    try:
        if path.read_text(encoding="utf-8") == text:
            return
    except OSError:
        path.parent.mkdir(parents=True, exist_ok=True)
    write_atomically(path, text)


def _remove_stale_pages(folder: Path, kept: set[Path]) -> None:
    """Remove the pages of notebooks that are no longer in the class (a student left, a shard moved)."""
    if not folder.is_dir():
        return
    for page in folder.glob("*/*.html"):
        if page not in kept:
            page.unlink()
    for student in folder.iterdir():
        if student.is_dir() and not any(student.iterdir()):
            student.rmdir()
