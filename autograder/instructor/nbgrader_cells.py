"""``ReleasedCells``: the first of ``nbgrader autograde``'s sanitize preprocessors (see ``nbgrader_config.py``),
so that no student's notebook metadata can stop grading or inflate a grade.

nbgrader trusts each submitted cell's ``metadata.nbgrader``: a pasted copy of a hidden-test cell (two cells
with one grade_id), a grade_id renamed to another's, an unknown one, a missing ``schema_version`` or a
metadata value that is not a dict make its own preprocessors raise — and an outdated schema stops the whole
class, not just that student. Here every submitted cell is matched against the released notebook's cells as
the gradebook holds them (grade_id, type, points, checksum, source), and its nbgrader metadata is rebuilt
from them:

- a cell whose source is a released locked cell's (the instructor's test code, as released: the gradebook's
  copy with its hidden tests taken out, as ``nbgrader generate_assignment`` took them out) is that cell,
  whatever its metadata says; a second copy of it is dropped, since it holds nothing the student wrote;
- otherwise a cell carrying a released unlocked grade_id (a solution cell) is that cell, the first one only;
- every other cell is the student's own: its nbgrader metadata is removed, its code is graded as theirs;
- a released grade cell found nowhere is put back where it was released, so that it is graded, with the
  released points.

A locked cell gets the gradebook's source back (its hidden tests too), as ``OverwriteCells`` would; done here, an
honest notebook gives nbgrader nothing to warn about, so that every warning in the formgrader's Autograde dialog
is about a notebook that was changed. The nbgrader preprocessors after it (``DeduplicateIds``,
``OverwriteCells``, ``CheckCellMetadata``) then find a notebook in the released format, whose points are the
released points.
"""
from nbformat import NotebookNode
from nbformat.v4 import new_code_cell, new_markdown_cell
from nbgrader.api import Gradebook
from nbgrader.nbgraderformat import MetadataValidator
from nbgrader.preprocessors import ClearHiddenTests, NbGraderPreprocessor


def released_metadata(notebook) -> dict[str, dict]:
    """grade_id -> the nbgrader metadata the released cell carries, from the gradebook's ``notebook``."""
    points = {cell.name: cell.max_score for cell in notebook.grade_cells}
    solutions = {cell.name for cell in notebook.solution_cells}
    tasks = {cell.name for cell in notebook.task_cells}
    return {cell.name: {
        "schema_version": MetadataValidator.schema_version,
        "grade": cell.name in points,
        "grade_id": cell.name,
        "locked": cell.locked,
        "solution": cell.name in solutions,
        "task": cell.name in tasks,
        "points": points.get(cell.name, 0),
        "checksum": cell.checksum,
        "cell_type": cell.cell_type,
    } for cell in notebook.source_cells}


def claimed_grade_id(cell) -> str | None:
    """The grade_id a submitted cell's metadata claims, or None when its metadata is not nbgrader's shape."""
    metadata = cell.get("metadata")
    nbgrader = metadata.get("nbgrader") if isinstance(metadata, dict) else None
    grade_id = nbgrader.get("grade_id") if isinstance(nbgrader, dict) else None
    return grade_id if isinstance(grade_id, str) else None


def source_of(cell) -> str:
    source = cell.get("source", "")
    return "".join(source) if isinstance(source, list) else str(source)


def as_released(source: str, hidden: ClearHiddenTests) -> str:
    """A locked cell's source as students got it: its hidden tests removed by nbgrader's own preprocessor."""
    cell = NotebookNode(source=source)
    hidden._remove_hidden_test_region(cell)
    return cell.source


def restored_cell(source_cell, metadata: dict) -> NotebookNode:
    """The released cell, as the student was given it, for one they deleted."""
    make = new_code_cell if source_cell.cell_type == "code" else new_markdown_cell
    return make(source_cell.source, metadata={"deletable": False, "editable": not metadata["locked"],
                                                  "nbgrader": dict(metadata)})


class ReleasedCells(NbGraderPreprocessor):
    """Give a submitted notebook the released notebook's nbgrader cells (see the module's docstring)."""

    def preprocess(self, nb, resources):
        info = resources["nbgrader"]
        with Gradebook(info["db_url"]) as gradebook:
            notebook = gradebook.find_notebook(info["notebook"], info["assignment"])
            released = list(notebook.source_cells)
            metadata = released_metadata(notebook)
        hidden = ClearHiddenTests(config=self.config)  # with this course's delimiters
        locked_sources = {source: cell.name for cell in released if cell.locked
                          for source in (cell.source, as_released(cell.source, hidden))}
        sources = {cell.name: cell.source for cell in released}
        placed, cells = set(), []
        for cell in nb.cells:
            grade_id = self._identify(cell, metadata, locked_sources, placed)
            if grade_id is not None and grade_id in placed:
                self.log.warning("Dropping a second copy of the released cell '%s'", grade_id)
                continue
            self._set_metadata(cell, metadata.get(grade_id))
            if grade_id is not None:
                placed.add(grade_id)
                if metadata[grade_id]["locked"]:  # its hidden tests back, as OverwriteCells would put them, unlogged
                    cell.source = sources[grade_id]
            cells.append(cell)
        nb.cells = self._with_missing_grade_cells(cells, released, metadata, placed)
        return nb, resources

    @staticmethod
    def _identify(cell, metadata, locked_sources, placed) -> str | None:
        """The released grade_id this submitted cell stands for, or None for a cell of the student's own."""
        copied = locked_sources.get(source_of(cell))
        if copied is not None:
            return copied
        grade_id = claimed_grade_id(cell)
        if grade_id in metadata and not metadata[grade_id]["locked"] and grade_id not in placed:
            return grade_id
        return None

    def _set_metadata(self, cell, nbgrader: dict | None) -> None:
        if not isinstance(cell.get("metadata"), dict):
            cell["metadata"] = NotebookNode()
        if nbgrader is not None:
            cell.metadata["nbgrader"] = NotebookNode(nbgrader)
        elif "nbgrader" in cell.metadata:
            self.log.warning("Removing nbgrader metadata that no released cell has: %r", cell.metadata["nbgrader"])
            del cell.metadata["nbgrader"]

    def _with_missing_grade_cells(self, cells, released, metadata, placed) -> list:
        """``cells`` with each deleted grade cell put back after the released cell before it that is there."""
        position = {claimed_grade_id(cell): i for i, cell in enumerate(cells) if claimed_grade_id(cell)}
        after, missing = -1, {}  # index in ``cells`` to follow -> the cells to put back there, in released order
        for source_cell in released:
            if source_cell.name in placed:
                after = position[source_cell.name]
            elif metadata[source_cell.name]["grade"]:
                self.log.warning("Putting back the deleted grade cell '%s'", source_cell.name)
                missing.setdefault(after, []).append(restored_cell(source_cell, metadata[source_cell.name]))
        out = list(missing.get(-1, []))
        for i, cell in enumerate(cells):
            out += [cell, *missing.get(i, [])]
        return out
