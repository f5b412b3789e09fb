"""The natural mistakes of assignment 07, graded through the real SmolLM2 model as ``tests/checks/test_natural_mistakes.py``
grades the others."""
import pytest

from tests.natural_mistakes import a07, checks


@pytest.mark.slow
def test_the_writers_own_correct_code_passes_and_every_entry_really_is_a_mistake(sandbox):
    checks.writers_correct_code_passes_and_every_entry_is_a_mistake(a07, sandbox)


@pytest.mark.slow
@pytest.mark.parametrize("entry", a07.ENTRIES, ids=[entry.id for entry in a07.ENTRIES])
def test_a_natural_mistake_reads_as_judged(entry, sandbox):
    checks.reads_as_judged(a07, entry, sandbox)
