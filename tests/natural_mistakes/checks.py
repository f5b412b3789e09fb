"""The two checks of the natural mistakes, for the test files that run them (07's, graded through the real model,
sit in a file of their own so that the full run spreads them over another core)."""
from autograder.engine.assignments import ASSIGNMENTS
from autograder.engine.grading import grade_cells, judge
from autograder.engine.student_code import Cell
from tests.natural_mistakes import definitions, reach, source, verify
from tests.natural_mistakes.judged import JUDGED, NAMES
from tests.natural_mistakes.reading import names, reading
from tests.presentations import graded_cells, one_of_them, present, source_blocks


def writers_correct_code_passes_and_every_entry_is_a_mistake(module, sandbox) -> None:
    """Correct code written by someone else is accepted; each mistake differs from it on probes of the writer's
    own (never the grader's cases), in exactly the exercises it lists, and raises when it says it does."""
    for verdict in grade_cells(module.ASSIGNMENT, [Cell("代码单元 #1", source(module))], sandbox):
        assert verdict.passed, verdict.message
    assert verify.verify(module) == 0


def presented(module, entry, presentation: str | None = None) -> list[Cell]:
    """The cells of the entry's notebook, one definition per cell, in ``presentation``; by default the one its id
    picks (``tests.presentations.one_of_them``), so that over all the entries every presentation is graded."""
    blocks = source_blocks(module.HEADER, definitions(module, entry))
    return graded_cells(present(presentation or one_of_them(entry.id), blocks))


def verdicts(module, entry, sandbox) -> list:
    """The verdicts on the entry's notebook, in the presentation its id picks, of the exercises it can change
    (``reach.affected``): the others run the correct code."""
    graded = reach.affected(module, entry)
    cells, given = presented(module, entry), {}
    return [judge(e, cells, sandbox, verdicts=given) for e in ASSIGNMENTS[module.ASSIGNMENT] if e.name in graded]


def reads_as_judged(module, entry, sandbox) -> None:
    """The entry is caught, its names are those judged, and a message judged named or clue still is, in the
    presentation its id picks. Only the exercises the entry can change are graded (``verdicts``)."""
    graded = reach.affected(module, entry)
    assert set(entry.exercises) <= set(graded), f"{entry.id} lists exercises it cannot change: {entry.exercises}"
    row = {"exercises": list(entry.exercises),
           "verdicts": [{"exercise": v.exercise, "passed": v.passed, "summary": v.summary, "details": v.details,
                         "mistake": v.mistake} for v in verdicts(module, entry, sandbox)]}
    judged, why = JUDGED[entry.id]
    assert set(NAMES.get(entry.id, {})) <= set(graded), f"{entry.id} was judged on exercises it cannot change"
    now = reading(row)
    assert now != "missed", f"{entry.id} is not caught: {entry.cause}"
    assert names(row) == NAMES.get(entry.id, {}), (f"{entry.id}: the names changed since they were judged "
                                                   f"({why}); judge them again: {names(row)}")
    if judged in ("named", "clue"):
        assert now in ("named", "clue"), f"{entry.id} was judged {judged} ({why}), now reads {now}"
