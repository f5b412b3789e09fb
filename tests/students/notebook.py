"""What the simulated students share: ``swapped`` (a variant of a piece of code) and ``layout`` / ``cells`` (a
student's notebook, cell by cell, as the grader reads it).

A student's notebook is not one cell with every import at the top. ``layout`` writes it as a notebook is: the
first cell imports ``torch`` and what the definitions need while they run (``nn`` for ``class M(nn.Module)``);
the cell the notebook provides (the earlier assignments' answers) comes next; then every definition of the
answers in a cell of its own, an answer's helpers after the definition that calls them; and each other import
(``math``, ``torch.nn.functional``) in a cell of its own, just below the first cell that uses it, the way a
student adds one when a call fails (Python only needs it at call time).
"""
import ast
import functools
from typing import NamedTuple

from autograder.engine.student_code import Cell

_DEFINING = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
_IMPORTS = (ast.Import, ast.ImportFrom)


def swapped(source: str, *pairs: str) -> str:
    """``source`` with each ``old`` of ``(old, new, old, new, ...)`` replaced; each must be there."""
    for old, new in zip(pairs[::2], pairs[1::2]):
        assert old in source, old
        source = source.replace(old, new)
    return source


class Piece(NamedTuple):
    """One code cell: ``role`` is "imports" (the notebook's first code cell), "answer" (a definition of the answer
    to ``exercise``) or "given" (a cell the notebook provides, or an import the student added)."""

    role: str
    source: str
    exercise: str = ""


def _names(node: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}


def at_definition(node: ast.stmt) -> set[str]:
    """The names a top-level statement needs while it runs (not when what it defines is later called): a
    definition's decorators, bases, defaults and annotations, and a class body's statements outside its methods."""
    if isinstance(node, ast.ClassDef):
        needed = set().union(*map(_names, [*node.decorator_list, *node.bases, *node.keywords]))
        for item in node.body:
            needed |= at_definition(item) if isinstance(item, _DEFINING) else _names(item)
        return needed
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
        args = node.args
        parts = [*node.decorator_list, *args.defaults, *[d for d in args.kw_defaults if d is not None]]
        parts += [a.annotation for a in (*args.posonlyargs, *args.args, *args.kwonlyargs, args.vararg, args.kwarg)
                  if a is not None and a.annotation is not None]
        parts += [node.returns] if node.returns is not None else []
        return set().union(*map(_names, parts))
    return _names(node)


def _imported(node: ast.stmt) -> set[str]:
    return {(a.asname or a.name).split(".")[0] for a in node.names}


def _definitions(source: str) -> list[str]:
    """``source`` cut into one piece per top-level definition, verbatim: the lines before a definition (comments,
    blank lines) go with it, the lines after the last one stay with the last."""
    lines = source.splitlines(keepends=True)
    ends = [node.end_lineno for node in ast.parse(source).body if isinstance(node, _DEFINING)]
    starts = [0, *ends[:-1]]
    ends = [*ends[:-1], len(lines)]
    return ["".join(lines[start:end]) for start, end in zip(starts, ends)]


def _callers_first(pieces: list[str]) -> list[str]:
    """The definitions of one answer, the last (the one the exercise names) first and its helpers after it, but each
    still after the pieces it needs while it runs (a base class) or defines again (``class M(M)``)."""
    trees = [ast.parse(p).body for p in pieces]
    defines = [{n.name for n in body if isinstance(n, _DEFINING)} for body in trees]
    needs = [set().union(*map(at_definition, body)) for body in trees]
    placed, wanted = [], list(reversed(range(len(pieces))))
    while wanted:
        chosen = next(i for i in wanted if all(j in placed for j in range(i) if defines[j] & (needs[i] | defines[i])))
        placed.append(chosen)
        wanted.remove(chosen)
    return [pieces[i] for i in placed]


def layout(header: str, answers: dict[str, str]) -> list[Piece]:
    """The notebook of ``header`` (imports, and what the notebook provides) and ``answers`` (exercise -> the
    student's code, in notebook order), as the cells a student's notebook has (see the module's docstring)."""
    return list(_layout(header, tuple(answers.items())))


@functools.lru_cache(maxsize=256)  # the same notebook is laid out for many tests, each time the same
def _layout(header: str, answers: tuple[tuple[str, str], ...]) -> tuple[Piece, ...]:
    tree = ast.parse(header)
    imports = [node for node in tree.body if isinstance(node, _IMPORTS)]
    given = _without_imports(header)
    pieces = [Piece("given", given)] if given.strip() else []
    for exercise, source in answers:
        pieces += [Piece("answer", piece, exercise) for piece in _callers_first(_definitions(source))]
    trees = [ast.parse(p.source) for p in pieces]
    needed = set().union(*(at_definition(node) for tree in trees for node in tree.body))
    uses = [_names(tree) for tree in trees]
    # torch, what is needed while the definitions run, and what nothing uses stay in the first cell.
    early = [node for node in imports if _imported(node) & (needed | {"torch"}) or not _imported(node) & set().union(*uses)]
    cells = [Piece("imports", "".join(ast.unparse(node) + "\n" for node in early)), *pieces]
    uses = [set(), *uses]  # an import cell reads no names
    for node in imports:
        if node in early:
            continue
        first_use = next(i for i, names in enumerate(uses) if _imported(node) & names)
        cells.insert(first_use + 1, Piece("given", ast.unparse(node) + "\n"))
        uses.insert(first_use + 1, set())
    return tuple(cells)


def _without_imports(source: str) -> str:
    """``source`` without its top-level import lines (they go to the import cells)."""
    lines = source.splitlines(keepends=True)
    dropped = {line for node in ast.parse(source).body if isinstance(node, _IMPORTS)
               for line in range(node.lineno - 1, node.end_lineno)}
    return "".join(line for i, line in enumerate(lines) if i not in dropped)


def cells(pieces: list[Piece]) -> list[Cell]:
    """The pieces as the grader reads a notebook that was run from top to bottom: one code cell each."""
    return [Cell(f"代码单元 #{n}", piece.source, f"In [{n}]") for n, piece in enumerate(pieces, 1)]


def answers(correct: dict[str, str], replace: dict[str, str] | None = None) -> dict[str, str]:
    """``correct`` (exercise -> code, in notebook order) with some answers replaced."""
    return {**correct, **(replace or {})}
