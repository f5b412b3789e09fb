"""What decides an assignment's verdicts, besides the notebook: the engine's core, that assignment's checks,
the references in ``solutions/`` and the ``course`` modules they import, the weights the cases read, and
torch's version.

The modules are found by following imports (read from the source, never executed) from the core's entry
points and from the assignment's check modules, through ``autograder.engine``, ``solutions`` and ``course``.
``fingerprint(assignment)`` hashes exactly those files, so a stored verdict is reused until one of them
changes: editing a doctor message, the handout's README, the score table or a plot regrades nothing; editing
a check regrades every notebook of the assignments that use it. It does not depend on where the course is
installed, so shards on different machines agree.
"""
import ast
import functools
import hashlib
import importlib.util
import sys
from pathlib import Path

import torch

# The packages a verdict may depend on; imports of anything else (torch, the standard library) are not followed.
PACKAGES = ("autograder", "solutions", "course")
# Where grading starts: the entry points of every channel, the sandbox's processes (started by name, not
# imported) and the protocols they look up by name.
CORE = ("autograder.engine.grading", "autograder.engine.sandbox.zygote", "autograder.engine.sandbox.harness",
        "course.protocols")
CHECKS = "autograder.engine.checks"
_HASHED_BYTES = 64 * 2**20


@functools.cache
def module_file(name: str) -> Path | None:
    """The source file of module ``name`` (None when it is not one of ``PACKAGES``' modules)."""
    if name.partition(".")[0] not in PACKAGES:
        return None
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return None
    return Path(spec.origin) if spec and spec.origin and spec.origin.endswith(".py") else None


@functools.cache
def imports_of(name: str) -> frozenset[str]:
    """The modules of ``PACKAGES`` that module ``name`` imports anywhere in its source (in functions too)."""
    file = module_file(name)
    if file is None:
        return frozenset()
    package = name if file.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(file.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[:len(parts) - node.level + 1] + ([base] if base else []))
            found.add(base)
            found.update(f"{base}.{alias.name}" for alias in node.names)  # ``from package import module``
    modules = {m for m in found if module_file(m) is not None}
    # Importing a module runs its packages' __init__ files too.
    modules |= {m.rsplit(".", i)[0] for m in list(modules) for i in range(1, m.count(".") + 1)}
    return frozenset(m for m in modules if module_file(m) is not None)


def closure(roots, stop=lambda name: False) -> set[str]:
    """``roots`` and every module they import, transitively; a module for which ``stop`` is true is kept but
    its imports are not followed."""
    seen, todo = set(), list(roots)
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        if not stop(name):
            todo.extend(imports_of(name))
    return seen


def _listing_only(name: str) -> bool:
    """Modules whose imports are not the verdicts' dependencies: ``autograder`` imports the engine lazily, for
    its public API, and ``assignments`` imports every check, to list them."""
    return name in ("autograder", "autograder.engine.assignments")


def verdict_modules(assignment: str) -> list[str]:
    """Every module that can decide a verdict of ``assignment``, sorted: the core and everything it imports,
    and the assignment's own check modules with everything they import (other assignments' checks among
    them where a check builds on them)."""
    from autograder.engine.assignments import ASSIGNMENTS

    declared = {id(getattr(module, "EXERCISE", None)): name for name, module in list(sys.modules.items())
                if name.startswith(CHECKS + ".")}
    checks = {declared[id(e)] for e in ASSIGNMENTS[assignment]}
    return sorted(closure(CORE, _listing_only) | closure(checks, _listing_only))


def _weights(digest, assignment: str, modules: list[str]) -> None:
    """The weights the assignment's cases read: the Qwen3.5 checkpoint where its checks load one (the stand-in
    by its bytes, a real one by size and time), and whether each of the real models it needs is there (a
    conversion is of the pinned file, whose checksum its module holds, or it is not there at all)."""
    from autograder.engine.assignments import RECORDS
    from course import qwen35_weights

    if "course.qwen35_weights" in modules:
        try:
            folder = qwen35_weights.find_checkpoint().folder
            for file in sorted(p for p in folder.iterdir() if p.is_file()):
                size = file.stat().st_size
                digest.update(file.name.encode() + (file.read_bytes() if size <= _HASHED_BYTES else
                                                    f"{size} {file.stat().st_mtime_ns}".encode()))
        except qwen35_weights.CheckpointError as e:
            digest.update(str(e).encode())
    for weights in RECORDS[assignment].needs:
        digest.update(f"{weights.name}: {'ready' if weights.ready() else 'absent'}".encode())


def fingerprint(assignment: str) -> str:
    """A hash of everything besides a notebook that decides ``assignment``'s verdicts (see the module's
    docstring)."""
    digest = hashlib.sha256(f"torch {torch.__version__}; {assignment}".encode())
    modules = verdict_modules(assignment)
    for name in modules:
        data = module_file(name).read_bytes()
        digest.update(f"{name} {len(data)}\n".encode() + data)
    _weights(digest, assignment, modules)
    return digest.hexdigest()
