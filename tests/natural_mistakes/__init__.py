"""Natural student mistakes, one module per assignment, written from the release notebooks alone.

Each module ``aNN`` has ``ASSIGNMENT`` (the folder name), ``HEADER`` (the imports a student's code needs),
``CORRECT`` (an independent correct implementation of every graded definition of that assignment and of
the earlier definitions it uses, by name, in notebook order) and ``ENTRIES`` (a list of ``Entry``).
``source(module, entry)`` builds the student source text with the entry's replacements applied.

Written from ``release/*.ipynb``, ``COURSE_SPEC.md`` section 3 and ``course/`` only, without reading the
graders, their mistake catalogue, the reference solutions or the seeded-mistake tests.

The modules ``fNN`` are a later writer's set of the same form, for the newest exercises and for doubles over the
older ones, written from the notebooks alone after the graders had been told the earlier sets' mistakes; where an
``fNN`` module leaves out a definition its notebook needs, it takes ``aNN``'s.

``g07``, ``h07`` and ``i07`` are three more writers', for 07's ``apply_penalties``, ``min_p_filter`` and ``beam_search``,
added after the others.
``a09`` and ``f09`` are two writers' sets for 09, each written without the other's.

Conventions:

- ``CORRECT`` also holds the student's own helpers that graded code calls (``rotate_half`` in 04, 06 and 07;
  ``RMSNorm`` in 04, as the notebook provides it). In 04 the key ``forward_absorbed`` holds the notebook's
  ``class MultiHeadLatentAttention(MultiHeadLatentAttention)`` cell that adds the method.
- ``exercises`` lists the changed graded definitions and every graded definition that calls them: a wrong
  ``masked_softmax`` also fails ``attention``. In 07, ``greedy_generate`` is taken to be graded with a reference
  attention but with the ``KVCache`` of the submission, so LlamaAttention's own mistakes list only
  ``LlamaAttention`` while a wrong ``KVCache`` helper lists both.
- ``python -m tests.natural_mistakes.verify`` checks every entry against ``CORRECT`` on probes of our own
  (``probes.py``) and never grades a mistake; ``--grade-correct`` grades the correct sources only.
"""
from . import a01, a02, a03, a04, a05, a06, a07, a08, a09, f01, f02, f03, f05, f07, f08, f09, g07, h07, i07
from .entry import KINDS, Entry, patch

ASSIGNMENTS = (a01, a02, a03, a04, a05, a06, a07, a08, a09, f01, f02, f03, f05, f07, f08, f09, g07, h07, i07)


def definitions(module, entry: Entry | None = None) -> dict[str, str]:
    """Every CORRECT definition by name, in order, with ``entry``'s replacements."""
    replacements = {} if entry is None else dict(entry.code)
    unknown = set(replacements) - set(module.CORRECT)
    if unknown:
        raise KeyError(f"{entry.id}: replaces definitions not in CORRECT: {sorted(unknown)}")
    return {name: replacements.get(name, text) for name, text in module.CORRECT.items()}


def source(module, entry: Entry | None = None) -> str:
    """HEADER + every CORRECT definition (with ``entry``'s replacements), joined in the order of CORRECT."""
    parts = [module.HEADER.rstrip("\n"), *(text.strip("\n") for text in definitions(module, entry).values())]
    return "\n\n\n".join(parts) + "\n"


def all_entries():
    """(module, entry) for every entry of every assignment."""
    return [(module, entry) for module in ASSIGNMENTS for entry in module.ENTRIES]


__all__ = ["ASSIGNMENTS", "Entry", "KINDS", "all_entries", "definitions", "patch", "source"]
