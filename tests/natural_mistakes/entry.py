"""The record of one natural mistake, and a helper to derive a mistaken definition from a correct one."""
from dataclasses import dataclass

KINDS = ("single", "cascade", "raises", "double")


@dataclass(frozen=True)
class Entry:
    id: str            # "01-scores-sqrt-of-seq-len", unique
    kind: str          # "single" | "cascade" | "raises" | "double"
    cause: str         # exactly what is wrong, in plain precise English (the truth a correct message must name)
    code: dict         # {definition name: full replacement source of that function/class}; others stay correct
    exercises: tuple   # the graded exercises whose verdict this mistake should fail


def patch(source: str, *pairs: tuple[str, str]) -> str:
    """``source`` with each ``(old, new)`` replacement applied; every ``old`` must occur exactly once.

    Used to write a mistaken definition as a small edit of the correct one, so that the result is still a
    full, runnable definition.
    """
    for old, new in pairs:
        count = source.count(old)
        if count != 1:
            raise ValueError(f"expected exactly one occurrence of {old!r}, found {count}")
        source = source.replace(old, new)
    return source
