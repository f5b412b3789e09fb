"""Which graded exercises a natural mistake can change: those whose check runs a definition the entry replaces.

A check runs the exercise's own definition, the ones it is built on (``Exercise.uses``) and the ones its call
protocol hands over (``protocols.PULLED``), and through them every definition their source names. Following
names is an over-approximation (a name mentioned may be a name called; attribute names and strings count too,
for ``self.helper`` and ``globals()["helper"]``). An exercise outside the closure runs exactly the correct code,
which ``checks.writers_correct_code_passes_and_every_entry_is_a_mistake`` grades, so grading or probing it
again for every entry would only repeat that verdict.
"""
import ast
from functools import cache

from autograder.engine.assignments import ASSIGNMENTS
from course.protocols import PULLED


@cache
def _names(text: str) -> tuple[frozenset, frozenset]:
    """(the top-level names ``text`` defines, every name, attribute and string it mentions)."""
    tree = ast.parse(text)
    defined = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            defined.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            defined |= {t.id for t in targets if isinstance(t, ast.Name)}
    mentioned = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            mentioned.add(node.id)
        elif isinstance(node, ast.Attribute):
            mentioned.add(node.attr)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            mentioned.add(node.value)
    return frozenset(defined), frozenset(mentioned)


def affected(module, entry) -> tuple[str, ...]:
    """The exercises of ``module``'s assignment, in order, whose checks can run one of ``entry``'s definitions."""
    versions = {key: [text] + ([entry.code[key]] if key in entry.code else []) for key, text in module.CORRECT.items()}
    found = []
    for exercise in ASSIGNMENTS[module.ASSIGNMENT]:
        todo = [exercise.definition, *exercise.uses, *PULLED.get(exercise.call.__name__, ())]
        seen, reached = set(), set()
        while todo:
            name = todo.pop()
            if name in seen:
                continue
            seen.add(name)
            for key, texts in versions.items():
                if any(name in _names(text)[0] for text in texts):
                    reached.add(key)
                    todo += [n for text in texts for n in _names(text)[1]]
        if reached & set(entry.code):
            found.append(exercise.name)
    return tuple(found)
