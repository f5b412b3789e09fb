"""What goes back into Canvas after grading a class from Canvas's download: ``canvas.csv`` for the Gradebook's
Import, and ``canvas-feedback/<assignment>.zip`` for each assignment's "Re-Upload Submissions".

canvas.csv is laid out as Canvas's own gradebook export: the columns Student, ID, SIS User ID, SIS Login ID and
Section, then one column per assignment (its total points, the name of the course's assignment: rename the
header to the Canvas assignment's title, or to ``Title (id)``, before importing), and a ``Points Possible`` row.
Canvas finds each student by the ID column, the user id its download wrote into the file name; the SIS
columns and Section are left empty. A student who handed nothing in for an assignment gets an empty cell.

Each feedback zip holds one page per student, ``<name>[_LATE]_<user id>_<file id>_<assignment>_feedback.html``:
Canvas routes a re-uploaded file by the user id and file id at the front of its name (the first two parts of
digits between underscores) and attaches it to that student's submission as a comment. The zips are written
with fixed timestamps, so the same results always give the same bytes.
"""
import shutil
import zipfile
from pathlib import Path, PurePosixPath

from autograder.engine.assignments import ASSIGNMENTS
from autograder.files import write_atomically
from autograder.instructor.classroom.gradebook import csv_text
from autograder.instructor.classroom.graded_class import GradedClass
from autograder.instructor.classroom.roster import CanvasName, canvas_name

CSV = "canvas.csv"
FEEDBACK = "canvas-feedback"
_STUDENT_COLUMNS = ["Student", "ID", "SIS User ID", "SIS Login ID", "Section"]
_ZIP_TIME = (1980, 1, 1, 0, 0, 0)


def feedback_name(canvas: CanvasName, assignment: str) -> str:
    return f"{canvas.prefix}_{assignment}_feedback.html"


class CanvasReturn:
    """canvas.csv and the feedback zips of one run, filled one student at a time (``add``; each page goes into its
    zip at once, so memory does not grow with the class), finished by ``close``: nothing at all (and the files of an
    earlier run removed) when no notebook came from Canvas."""

    def __init__(self, out: Path, graded: GradedClass):
        self.out, self.assignments = out, graded.assignments
        self.names = {(e.student, e.assignment): found for e in graded.entries
                      if (found := canvas_name(PurePosixPath(e.source).parts[0] if e.source else ""))}
        self.rows: list[list] = []
        self.zips: dict[str, tuple[Path, zipfile.ZipFile]] = {}  # assignment -> (its temporary file, the zip)

    def add(self, student: str, points: dict[str, float], pages: dict[str, str]) -> None:
        """One student's total per assignment handed in, and the feedback page of each."""
        found = {a: self.names[student, a] for a in self.assignments if (student, a) in self.names}
        if not found:
            return
        first = next(iter(found.values()))
        self.rows.append([first.name, first.user, "", "", ""] + [points.get(a, "") for a in self.assignments])
        for assignment, canvas in found.items():
            info = zipfile.ZipInfo(feedback_name(canvas, assignment), _ZIP_TIME)
            info.compress_type, info.external_attr = zipfile.ZIP_DEFLATED, 0o644 << 16
            self._zip(assignment).writestr(info, pages[assignment].encode("utf-8"))

    def close(self) -> bool:
        """Write (or, with no Canvas notebook, remove) the files; whether there are any."""
        folder = self.out / FEEDBACK
        for path, archive in self.zips.values():
            archive.close()
            path.replace(folder / path.name.removeprefix("."))
        for stale in folder.glob("*.zip") if folder.is_dir() else ():
            if stale.stem not in self.zips:
                stale.unlink()
        if not self.rows:
            (self.out / CSV).unlink(missing_ok=True)
            shutil.rmtree(folder, ignore_errors=True)
            return False
        possible = [sum(e.points for e in ASSIGNMENTS[a]) for a in self.assignments]
        rows = [_STUDENT_COLUMNS + self.assignments, ["Points Possible", "", "", "", ""] + possible, *self.rows]
        write_atomically(self.out / CSV, csv_text(rows, byte_order_mark=False))
        return True

    def _zip(self, assignment: str) -> zipfile.ZipFile:
        if assignment not in self.zips:
            (self.out / FEEDBACK).mkdir(exist_ok=True)
            path = self.out / FEEDBACK / f".{assignment}.zip"  # renamed when whole
            self.zips[assignment] = (path, zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED))
        return self.zips[assignment][1]
