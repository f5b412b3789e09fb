"""Ways of writing the same notebook that do not change what its code computes: imports in another cell or inside
the function, another spelling of ``torch.nn.functional``, type hints and docstrings, helpers in cells of their own
before or after their caller, a definition repeated further down, decorators, ``einsum`` for ``@``, a method that
calls a module-level helper. A grader must give every presentation of a notebook the same verdicts, and for a
mistake the same named mistake.

A notebook is taken as a list of ``Block``: its import cell, the answer cells (each the answer to one exercise),
and everything else, kept as it is. A presentation rewrites the answers (through ``ast``: comments go, the code
stays) and may add, split or move cells; ``notebook`` writes the blocks out as a real ``.ipynb``.
"""
import ast
import copy
import zlib
from collections.abc import Callable
from dataclasses import dataclass, replace

import nbformat

from autograder.engine.ipynb import parse_code_cells
from autograder.engine.student_code import Cell
from tests.notebooks import filled, source_solutions
from tests.students.notebook import at_definition


@dataclass(frozen=True)
class Block:
    """One code cell: ``role`` is "imports" (the notebook's first code cell), "answer" (the answer to
    ``exercise``) or "given" (any other cell, left as it is); ``cell`` is the released notebook's cell it came
    from, whose metadata it keeps (None for a cell a presentation adds, as a student adds one)."""

    role: str
    source: str
    exercise: str = ""
    cell: object = None


# --- reading and writing notebooks -------------------------------------------------------------------------------

def released_blocks(assignment: str, answers: dict[str, str] | None = None) -> list[Block]:
    """The released notebook of ``assignment`` with its answer cells filled (the reference solutions, with
    ``answers`` instead where given), as blocks; markdown cells are left out (the grader never reads them)."""
    nb = filled({**source_solutions(assignment), **(answers or {})}, assignment)
    blocks, first = [], True
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        grade_id = cell.metadata.get("nbgrader", {}).get("grade_id", "")
        if grade_id.startswith("solution_"):
            blocks.append(Block("answer", cell.source, grade_id.removeprefix("solution_"), cell))
        else:
            blocks.append(Block("imports" if first else "given", cell.source, cell=cell))
        first = False
    return blocks


def source_blocks(header: str, definitions: dict[str, str]) -> list[Block]:
    """A notebook written from scratch: ``header`` (its imports) in the first cell, then each of ``definitions``
    (name -> source) in an answer cell of its own, in order."""
    return [Block("imports", header), *(Block("answer", source, name) for name, source in definitions.items())]


def student_blocks(pieces) -> list[Block]:
    """A simulated student's notebook (``tests.students``: ``module.layout()``), cell by cell, as blocks."""
    return [Block(piece.role, piece.source, piece.exercise) for piece in pieces]


def notebook(blocks: list[Block]) -> nbformat.NotebookNode:
    """The blocks as an nbformat 4 notebook: each a code cell, with the metadata of the cell it came from."""
    nb = nbformat.v4.new_notebook()
    for block in blocks:
        cell = nbformat.v4.new_code_cell(block.source)
        if block.cell is not None:
            cell.metadata = copy.deepcopy(block.cell.metadata)
        nb.cells.append(cell)
    return nb


def graded_cells(blocks: list[Block], name: str = "notebook.ipynb") -> list[Cell]:
    """The code cells the grader reads from the notebook these blocks make, written and read back as a file is."""
    return parse_code_cells(nbformat.writes(notebook(blocks)).encode(), name)


# --- what a piece of code refers to --------------------------------------------------------------------------------

# The names students import, how (in this order), and what the short ones stand for.
IMPORTS = {"torch": "import torch", "math": "import math", "F": "import torch.nn.functional as F",
           "nn": "from torch import nn", "functools": "import functools"}
FULL_NAMES = {"F": "torch.nn.functional", "nn": "torch.nn", "Tensor": "torch.Tensor"}
_DEFINING = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)


def _names(node: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}


def _defined(node: ast.stmt) -> set[str]:
    if isinstance(node, _DEFINING):
        return {node.name}
    if isinstance(node, (ast.Import, ast.ImportFrom)):
        return {(a.asname or a.name).split(".")[0] for a in node.names}
    return {t.id for t in ast.walk(node) if isinstance(t, ast.Name) and isinstance(t.ctx, ast.Store)}


def _imports_for(names: set[str], functional: str = IMPORTS["F"]) -> list[ast.stmt]:
    """The import statements of the modules among ``names``; ``functional`` says how to import ``F``."""
    return [ast.parse(functional if name == "F" else statement).body[0] for name, statement in IMPORTS.items()
            if name in names]


# --- rewriting answers -------------------------------------------------------------------------------------------

def _each_answer(rewrite: Callable[[ast.Module, Block], ast.Module]):
    """A presentation that rewrites the tree of every answer cell (``rewrite(tree, block)``)."""
    def present(blocks: list[Block]) -> list[Block]:
        return [replace(b, source=ast.unparse(ast.fix_missing_locations(rewrite(ast.parse(b.source), b))))
                if b.role == "answer" else b for b in blocks]
    return present


def _dotted(path: str) -> ast.expr:
    head, *rest = path.split(".")
    node = ast.Name(head, ast.Load())
    for part in rest:
        node = ast.Attribute(node, part, ast.Load())
    return node


def _path(node: ast.expr) -> str | None:
    """``torch.nn.functional`` for the expression ``torch.nn.functional``; None for anything else."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        inner = _path(node.value)
        return None if inner is None else f"{inner}.{node.attr}"
    return None


class _Respell(ast.NodeTransformer):
    """Replaces the dotted paths in ``paths`` (e.g. ``torch.nn.functional`` -> ``F``) wherever they are read,
    longest first, and the names in ``names`` (e.g. ``F`` -> ``torch.nn.functional``)."""

    def __init__(self, paths: dict[str, str] | None = None, names: dict[str, str] | None = None):
        self.paths = sorted((paths or {}).items(), key=lambda item: -len(item[0]))
        self.names = names or {}

    def visit_Attribute(self, node):
        path = _path(node)
        for old, new in self.paths:
            if path is not None and (path == old or path.startswith(old + ".")):
                return ast.copy_location(_dotted(new + path[len(old):]), node)
        return self.generic_visit(node)

    def visit_Name(self, node):
        if isinstance(node.ctx, ast.Load) and node.id in self.names:
            return ast.copy_location(_dotted(self.names[node.id]), node)
        return node


# Calls of torch that mean the same through torch.nn.functional (F.softmax(x, dim) is torch.softmax(x, dim)).
_THROUGH_F = {"torch.nn.functional": "F", "torch.softmax": "F.softmax"}


def _through_f(tree: ast.Module) -> ast.Module:
    return _Respell(_THROUGH_F).visit(tree)


def _prepend(tree: ast.Module, statements: list[ast.stmt]) -> ast.Module:
    """``tree`` with ``statements`` first (after a ``__future__`` import, which must stay first)."""
    future = [n for n in tree.body if isinstance(n, ast.ImportFrom) and n.module == "__future__"]
    rest = [n for n in tree.body if n not in future]
    tree.body = [*future, *statements, *rest]
    return tree


def _imports_in_the_cell(functional: str):
    """Each answer cell starts with its own imports, ``torch.nn.functional`` imported as ``functional`` says and
    used for what it provides, so that ``F`` is imported nowhere else."""
    def rewrite(tree, block):
        tree = _through_f(tree)
        return _prepend(tree, _imports_for(_names(tree), functional))
    return _each_answer(rewrite)


def _functions(tree: ast.Module):
    """Every function of the cell, top-level or a method, with the class it belongs to (None at top level)."""
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            yield node, None
        elif isinstance(node, ast.ClassDef):
            for item in node.body:
                if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    yield item, node


def _body_start(function) -> int:
    """Where a function's code starts: after its docstring."""
    body = function.body
    return 1 if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
        and isinstance(body[0].value.value, str) else 0


def _imports_inside(tree, block):
    """Every function imports what its body uses, inside; the cell imports only what its definitions need to run."""
    tree = _through_f(tree)
    for function, _ in _functions(tree):
        inside = set().union(*map(_names, function.body))
        at = _body_start(function)
        function.body[at:at] = _imports_for(inside)
    return _prepend(tree, _imports_for(set().union(*map(at_definition, tree.body))))


def _spelled_out(tree, block):
    """``torch.nn.functional.softmax``, ``torch.nn.Linear``, ``torch.Tensor``: every module by its full name."""
    tree = _Respell(names=FULL_NAMES).visit(_through_f(tree))
    return _prepend(tree, _imports_for(_names(tree)))


def _from_torch(tree, block):
    tree = _Respell({"torch.Tensor": "Tensor", "torch.nn": "nn"}).visit(tree)
    return _prepend(tree, [ast.parse("from torch import nn, Tensor").body[0]])


def _bare(tree, block):
    """No type hints on functions, no docstrings."""
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            node.returns = None
            args = node.args
            for a in (*args.posonlyargs, *args.args, *args.kwonlyargs, args.vararg, args.kwarg):
                if a is not None:
                    a.annotation = None
        if isinstance(node, (*_DEFINING, ast.Module)) and _body_start(node):
            node.body = node.body[1:] or [ast.Pass()]
    return tree


def _postponed(tree, block):
    """``from __future__ import annotations``, and every method's return annotated with its own class, which
    exists only after the class statement: right only because annotations are no longer evaluated."""
    for function, owner in _functions(tree):
        if owner is not None and function.returns is None and function.name != "__init__":
            function.returns = ast.Name(owner.name, ast.Load())
    tree.body.insert(0, ast.parse("from __future__ import annotations").body[0])
    return tree


def _decorated(decorator: str, init: bool = False, skip: frozenset = frozenset()):
    """Every function and method of the answers (``__init__`` too where ``init``) under ``decorator``, innermost,
    but in the answers to the exercises of ``skip``."""
    def rewrite(tree, block):
        for function, _ in _functions(tree):
            if block.exercise not in skip and (init or function.name != "__init__"):
                function.decorator_list.append(ast.parse(decorator, mode="eval").body)
        return tree
    return _each_answer(rewrite)


class _Matmul(ast.NodeTransformer):
    def visit_BinOp(self, node):
        self.generic_visit(node)
        if isinstance(node.op, ast.MatMult):
            return ast.copy_location(ast.Call(ast.Name("matmul", ast.Load()), [node.left, node.right], []), node)
        return node


MATMUL = '''
def matmul(a, b):
    """a @ b, written with einsum where both are matrices (or stacks of them)."""
    if a.dim() >= 2 and b.dim() >= 2:
        return torch.einsum("...ij,...jk->...ik", a, b)
    return torch.matmul(a, b)
'''

TRACED = '''
import functools


def traced(fn):
    """A decorator of the student's own: calls fn unchanged."""
    @functools.wraps(fn)
    def call(*args, **kwargs):
        return fn(*args, **kwargs)
    return call
'''


def _einsum(blocks: list[Block]) -> list[Block]:
    """``a @ b`` becomes ``matmul(a, b)``, a helper (einsum) defined in a cell after the last answer."""
    rewritten = _each_answer(lambda tree, block: _Matmul().visit(tree))(blocks)
    last = max(i for i, b in enumerate(rewritten) if b.role == "answer")
    return [*rewritten[:last + 1], Block("given", "import torch\n" + MATMUL), *rewritten[last + 1:]]


def _own_decorator(blocks: list[Block]) -> list[Block]:
    decorated = _decorated("traced", init=True)(blocks)
    first = min(i for i, b in enumerate(decorated) if b.role == "answer")
    return [*decorated[:first], Block("given", TRACED), *decorated[first:]]


# --- moving code between cells -------------------------------------------------------------------------------------

def _pieces(block: Block) -> list[Block]:
    """An answer cell cut into one cell per definition; the statements before a definition (its imports) go with it."""
    tree = ast.parse(block.source)
    pieces, pending = [], []
    for node in tree.body:
        pending.append(node)
        if isinstance(node, _DEFINING):
            pieces.append(pending)
            pending = []
    if pending and pieces:  # statements after the last definition stay with it
        pieces[-1].extend(pending)
    elif pending:
        pieces.append(pending)
    return [Block("answer", ast.unparse(ast.Module(body=nodes, type_ignores=[])), block.exercise,
                  block.cell if i == 0 else None) for i, nodes in enumerate(pieces)]


def _one_cell_each(blocks: list[Block]) -> list[Block]:
    """Every definition of an answer cell in a cell of its own, in order."""
    return [piece for block in blocks for piece in (_pieces(block) if block.role == "answer" else [block])]


def _callers_first(blocks: list[Block]) -> list[Block]:
    """Every definition of the answers in a cell of its own, in reverse order, so that a function comes before the
    helpers it calls (an exercise before the earlier ones it builds on), but each still after the pieces it needs
    while it runs (a base class, a decorator) or defines again (``class M(M)``). They all sit where the last answer
    was: the cells given between the answers come before them."""
    pieces = [piece for block in blocks if block.role == "answer" for piece in _pieces(block)]
    trees = [ast.parse(p.source) for p in pieces]
    defines = [set().union(*map(_defined, t.body)) for t in trees]
    needs = [set().union(*map(at_definition, t.body)) for t in trees]
    after = [{j for j in range(i) if defines[j] & (needs[i] | defines[i])} for i in range(len(trees))]
    wanted, placed = list(reversed(range(len(trees)))), []
    while wanted:  # the lowest piece left can always go: every earlier one is placed
        chosen = next(i for i in wanted if after[i] <= set(placed))
        placed.append(chosen)
        wanted.remove(chosen)
    last = max(i for i, b in enumerate(blocks) if b.role == "answer")
    return [*(b for b in blocks[:last] if b.role != "answer"), *(pieces[i] for i in placed), *blocks[last + 1:]]


class _Stub(ast.NodeTransformer):
    def visit_FunctionDef(self, node):
        node.body = node.body[:_body_start(node)] + [ast.parse("raise NotImplementedError()").body[0]]
        return node


def _defined_twice(blocks: list[Block]) -> list[Block]:
    """Above each answer, the released stub of its definitions is left in place (``raise NotImplementedError()``):
    the answer below, defined again, is what counts."""
    out = []
    for block in blocks:
        if block.role == "answer":
            out.append(Block("answer", ast.unparse(_Stub().visit(ast.parse(block.source))), block.exercise, block.cell))
            block = replace(block, cell=None)
        out.append(block)
    return out


def _uses_the_class(function) -> bool:
    """Whether a method's body needs to stay in its class: ``super()``, ``__class__`` or a mangled ``__name``."""
    for node in ast.walk(function):
        name = node.id if isinstance(node, ast.Name) else node.attr if isinstance(node, ast.Attribute) else ""
        if name in ("super", "__class__") or (name.startswith("__") and not name.endswith("__")):
            return True
    return False


def _call_with_same_arguments(helper: str, function) -> ast.expr:
    """``helper(...)`` called with every argument of ``function``, as ``function`` received them."""
    args = function.args
    positional = [ast.Name(a.arg, ast.Load()) for a in (*args.posonlyargs, *args.args)]
    if args.vararg:
        positional.append(ast.Starred(ast.Name(args.vararg.arg, ast.Load()), ast.Load()))
    keywords = [ast.keyword(a.arg, ast.Name(a.arg, ast.Load())) for a in args.kwonlyargs]
    if args.kwarg:
        keywords.append(ast.keyword(None, ast.Name(args.kwarg.arg, ast.Load())))
    return ast.Call(ast.Name(helper, ast.Load()), positional, keywords)


def _methods_call_helpers(blocks: list[Block]) -> list[Block]:
    """Each plain method of an answer's classes but ``__init__`` (and those that need the class itself) hands its
    work to a module-level function, defined in a cell after the class."""
    out = []
    for block in blocks:
        if block.role != "answer":
            out.append(block)
            continue
        tree, helpers = ast.parse(block.source), []
        for function, owner in list(_functions(tree)):
            if owner is None or function.name == "__init__" or _uses_the_class(function) or function.decorator_list:
                continue
            helper = copy.deepcopy(function)
            helper.name = f"_{owner.name}_{function.name.strip('_')}"
            helpers.append(helper)
            function.body = [ast.Return(_call_with_same_arguments(helper.name, function))]
        out.append(replace(block, source=ast.unparse(ast.fix_missing_locations(tree))))
        if helpers:
            out.append(Block("answer", ast.unparse(ast.fix_missing_locations(ast.Module(body=helpers, type_ignores=[]))),
                             block.exercise))
    return out


# --- the presentations ---------------------------------------------------------------------------------------------

# Exercises whose answers compute gradients (05's gate_gradient): no_grad and inference_mode would change them.
NEEDS_AUTOGRAD = frozenset({"gate_gradient"})
# Exercises whose outputs autograd keeps (09's FlashAttention, and the forward pass whose o and lse it saves for
# its backward): tensors made under inference_mode cannot be saved, so that decorator breaks the code for real.
SAVED_FOR_BACKWARD = frozenset({"flash_attention_forward", "FlashAttention"})

PRESENTATIONS: dict[str, Callable[[list[Block]], list[Block]]] = {
    "as written": lambda blocks: blocks,
    "imports in the answer cell": _imports_in_the_cell("import torch.nn.functional as F"),
    "from torch.nn import functional as F": _imports_in_the_cell("from torch.nn import functional as F"),
    "imports inside the functions": _each_answer(_imports_inside),
    "torch.nn.functional spelled out": _each_answer(_spelled_out),
    "from torch import nn, Tensor": _each_answer(_from_torch),
    "no type hints, no docstrings": _each_answer(_bare),
    "from __future__ import annotations": _each_answer(_postponed),
    "each definition in its own cell": _one_cell_each,
    "helpers in cells after their caller": _callers_first,
    "a stub left above, defined again below": _defined_twice,
    "@torch.no_grad()": _decorated("torch.no_grad()", skip=NEEDS_AUTOGRAD),
    "@torch.inference_mode()": _decorated("torch.inference_mode()", skip=NEEDS_AUTOGRAD | SAVED_FOR_BACKWARD),
    "a functools.wraps decorator of the student's own": _own_decorator,
    "einsum for @": _einsum,
    "methods call module-level helpers": _methods_call_helpers,
}


def present(name: str, blocks: list[Block]) -> list[Block]:
    """``blocks`` in the presentation ``name``."""
    return PRESENTATIONS[name](blocks)


def one_of_them(key: str) -> str:
    """A presentation chosen by ``key`` (a natural mistake's id), the same on every run: a tier that grades each of
    many entries once still grades them in every presentation."""
    return list(PRESENTATIONS)[zlib.crc32(key.encode()) % len(PRESENTATIONS)]
