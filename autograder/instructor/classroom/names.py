"""Students' names as ``course-grade`` uses them: as folder names (``feedback/<student>/``), in the gradebook and
as who a student is. A name comes from a class folder's file names or, on a merge, from a shard's
``class.json``, which anyone may have edited; either way it is checked and normalised here before any use.
"""
import unicodedata
from collections.abc import Iterable

# Characters that would make a name a path elsewhere (separators of every platform), or break a line of the
# gradebook or a terminal: control characters, lone surrogates (undecodable file names; they cannot be
# written as UTF-8) and Unicode's own line and paragraph separators.
_SEPARATORS = ("/", "\\")
_FORBIDDEN_CATEGORIES = {"Cc", "Cs", "Zl", "Zp"}


class UnsafeName(ValueError):
    """A student name that cannot be used as a folder name or a gradebook row; the message says why."""


def student_name(name: object) -> str:
    """``name`` in Unicode NFC, the one form the course uses for folders and the gradebook. Raises
    ``UnsafeName`` when it is not text, is empty, or holds a path separator (``/`` or ``\\``), ``..``, NUL or
    another control character, a lone surrogate, or a line or paragraph separator."""
    if not isinstance(name, str) or not name.strip():
        raise UnsafeName(f"the student name {name!r} is empty or not text")
    if any(separator in name for separator in _SEPARATORS) or ".." in name:
        raise UnsafeName(f"the student name {name!r} holds a path separator or '..'")
    if any(unicodedata.category(ch) in _FORBIDDEN_CATEGORIES for ch in name):
        raise UnsafeName(f"the student name {name!r} holds a control character")
    return unicodedata.normalize("NFC", name)


def identity(name: str) -> str:
    """Who ``name`` is: its NFC form, case-folded (then NFC again: folding can leave text that is not NFC).
    Names with one identity are one folder on macOS's and Windows' file systems, which ignore case (and on
    macOS the Unicode form), and names that differ only in their Unicode form look the same everywhere."""
    return unicodedata.normalize("NFC", unicodedata.normalize("NFC", name).casefold())


def colliding(names: Iterable[str]) -> list[list[str]]:
    """The groups of two or more different names with one identity, each sorted, in order."""
    by_identity: dict[str, set[str]] = {}
    for name in names:
        by_identity.setdefault(identity(name), set()).add(name)
    return sorted(sorted(group) for group in by_identity.values() if len(group) > 1)


def collision_message(group: list[str]) -> str:
    """What is wrong with a group of ``colliding`` names, naming each; where a name is not in NFC, they are
    shown as code points too, as names that differ only in their Unicode form print the same."""
    shown = " and ".join(map(repr, group))
    if any(unicodedata.normalize("NFC", name) != name for name in group):
        return (f"students {shown} differ only in case or Unicode normalisation (NFC/NFD): "
                f"{' and '.join(map(ascii, group))}")
    return f"students {shown} differ only in case"
