"""The natural mistakes of ``tests/natural_mistakes`` — written from the notebooks by someone who had not read
the graders — graded as a class would be, against the judgement a second reader made of their messages
(``judged.py``): every one caught, no name judged wrong, and the names and clues of that judgement still there.

When a message changes, its judgement is stale: run ``python benchmarks/feedback_naming.py --out m.json``,
judge the entries that changed against their causes, and update ``judged.py``."""
import pytest

from autograder.engine.grading import grade_cells
from autograder.engine.student_code import Cell
from tests.natural_mistakes import ASSIGNMENTS, all_entries, source, verify
from tests.natural_mistakes.judged import JUDGED, NAMES
from tests.natural_mistakes.reading import names, reading

ENTRIES = all_entries()


@pytest.mark.slow
@pytest.mark.parametrize("module", ASSIGNMENTS, ids=[module.ASSIGNMENT for module in ASSIGNMENTS])
def test_the_writers_own_correct_code_passes_and_every_entry_really_is_a_mistake(module, sandbox):
    """Correct code written by someone else is accepted; each mistake differs from it on probes of the writer's
    own (never the grader's cases), in exactly the exercises it lists, and raises when it says it does."""
    for verdict in grade_cells(module.ASSIGNMENT, [Cell("代码单元 #1", source(module))], sandbox):
        assert verdict.passed, verdict.message
    assert verify.verify(module) == 0


def test_every_entry_is_judged_and_none_was_named_wrongly_or_missed():
    assert {entry.id for _, entry in ENTRIES} == set(JUDGED)
    failed = {key: (judged, why) for key, (judged, why) in JUDGED.items() if judged in ("wrong", "missed")}
    assert not failed, failed


@pytest.mark.slow
@pytest.mark.parametrize("module, entry", ENTRIES, ids=[entry.id for _, entry in ENTRIES])
def test_a_natural_mistake_reads_as_judged(module, entry, sandbox):
    verdicts = grade_cells(module.ASSIGNMENT, [Cell("代码单元 #1", source(module, entry))], sandbox)
    row = {"exercises": list(entry.exercises),
           "verdicts": [{"exercise": v.exercise, "passed": v.passed, "summary": v.summary, "details": v.details,
                         "mistake": v.mistake} for v in verdicts]}
    judged, why = JUDGED[entry.id]
    now = reading(row)
    assert now != "missed", f"{entry.id} is not caught: {entry.cause}"
    assert names(row) == NAMES.get(entry.id, {}), (f"{entry.id}: the names changed since they were judged "
                                                   f"({why}); judge them again: {names(row)}")
    if judged in ("named", "clue"):
        assert now in ("named", "clue"), f"{entry.id} was judged {judged} ({why}), now reads {now}"
