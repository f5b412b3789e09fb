"""The natural mistakes of ``tests/natural_mistakes`` — written from the notebooks by someone who had not read
the graders — graded as a class would be, against the judgement a second reader made of their messages
(``judged.py``): every one caught, no name judged wrong, and the names and clues of that judgement still there.

When a message changes, its judgement is stale: run ``python benchmarks/feedback_naming.py --out m.json``,
judge the entries that changed against their causes, and update ``judged.py``."""
import pytest

from tests.natural_mistakes import ASSIGNMENTS, a07, all_entries, checks, reach
from tests.natural_mistakes.judged import JUDGED

ENTRIES = all_entries()
OTHERS = [module for module in ASSIGNMENTS if module is not a07]  # 07's: tests/checks/test_natural_mistakes_real_model.py


@pytest.mark.slow
@pytest.mark.parametrize("module", OTHERS, ids=[module.ASSIGNMENT for module in OTHERS])
def test_the_writers_own_correct_code_passes_and_every_entry_really_is_a_mistake(module, sandbox):
    checks.writers_correct_code_passes_and_every_entry_is_a_mistake(module, sandbox)


def test_every_entry_is_judged_and_none_was_named_wrongly_or_missed():
    assert {entry.id for _, entry in ENTRIES} == set(JUDGED)
    failed = {key: (judged, why) for key, (judged, why) in JUDGED.items() if judged in ("wrong", "missed")}
    assert not failed, failed


def test_an_entry_is_graded_on_what_reaches_its_definitions_and_nothing_else():
    """A changed helper reaches the exercises that name it, through the definitions in between; an exercise that
    names none of the changed ones is left out (it runs the correct code)."""
    entry = {e.id: e for _, e in ENTRIES}
    assert reach.affected(a07, entry["07-helper-cache-len-counts-updates"]) == (
        "LlamaAttention", "greedy_generate", "sample_generate")  # KVCache: in their uses, or handed over
    assert reach.affected(a07, entry["07-sp-exp-overflow"]) == ("sampling_probs", "sample_generate")
    assert reach.affected(a07, entry["07-sg-argmax"]) == ("sample_generate",)
    # rotate_half is no exercise: LlamaAttention reaches it through apply_rope, and the generators through that
    assert reach.affected(a07, entry["07-helper-rotate-half-sign"]) == (
        "LlamaAttention", "greedy_generate", "sample_generate")


@pytest.mark.slow
@pytest.mark.parametrize("module, entry", [(m, e) for m, e in ENTRIES if m is not a07],
                         ids=[entry.id for m, entry in ENTRIES if m is not a07])
def test_a_natural_mistake_reads_as_judged(module, entry, sandbox):
    checks.reads_as_judged(module, entry, sandbox)
