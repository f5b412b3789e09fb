"""A synthetic class, for the class-grading tests and benchmark: per-student folders laid out like
release/, each notebook correct, half-done, untouched, with one seeded mistake, or hostile."""
import random
from pathlib import Path

from autograder.engine.assignments import ASSIGNMENTS
from tests.notebooks import filled, released, source_solutions, write_submission
from tests.students import ALL, a08

# 08's seeded mistakes are left out of the class: with them, every class written from a seed would change.
IN_THE_CLASS = tuple(module for module in ALL if module is not a08)


def seeded_mistakes() -> dict[str, list[tuple[str, str, str]]]:
    """Assignment -> its seeded mistakes (exercise, the name the grader gives it, the student's code), each under
    the assignment of its exercise (06's student's ``rope_cos_sin`` under 04)."""
    owner = {e.name: a for a, exercises in ASSIGNMENTS.items() for e in exercises}
    found: dict[str, list] = {}
    for mistake in (mistake for module in IN_THE_CLASS for mistake in module.MISTAKES):
        found.setdefault(owner[mistake[0]], []).append(mistake)
    return found


def half_done(assignment: str):
    """The first half of the exercises solved, the rest left as released."""
    exercises = ASSIGNMENTS[assignment]
    solutions = source_solutions(assignment)
    return filled({e.name: solutions[e.name] for e in exercises[:(len(exercises) + 1) // 2]}, assignment)


def with_mistake(assignment: str, mistake: tuple[str, str, str]):
    exercise, _, code = mistake
    return filled({**source_solutions(assignment), exercise: code}, assignment)


# Text no UTF-8 file can hold (two lone surrogates: in this order they make no pair), with what a terminal or a
# page would misread (NUL, an escape, a right-to-left override, a line separator) and text that is fine.
UNWRITABLE = "\udfff\ud800\x00\x1b[2J\u202e\u2028 名字 \U0001f600"


def unwritable(assignment: str = "01_attention_basics"):
    """The correct notebook, but ``padding_mask`` (which no later exercise of 01 calls) raises with
    ``UNWRITABLE`` as its message: graded, it must lose that exercise only, whatever writes the message down."""
    code = f"def padding_mask(attention_mask):\n    raise ValueError({UNWRITABLE!r})\n"
    return filled({**source_solutions(assignment), "padding_mask": code}, assignment)


def hostile(assignment: str, targets: list[Path], stall: bool = False):
    """A notebook that, besides its correct answers, tries at definition time to overwrite ``targets`` (other
    students' notebooks, the grader's outputs) and to kill the grader, and whose first exercise either
    loops forever (``stall``) or answers with a forged object."""
    first = ASSIGNMENTS[assignment][0].name
    attack = f'''
import os, signal

TARGETS = {[str(t) for t in targets]!r}


def _attack():
    done = []
    for path in TARGETS:
        try:
            with open(path, "w") as f:
                f.write("forged")
            done.append(path)
        except OSError:
            pass
    for pid in (os.getppid(), 1):
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    return done


TAMPERED = _attack()
'''
    if first[0].isupper():  # a class to write: one that does nothing
        forged = f"class {first}:\n    def __init__(self, *args, **kwargs):\n        pass\n"
    else:
        body = "    while True:\n        pass\n" if stall else "    return {'score': 100, 'passed': True}\n"
        forged = f"def {first}(*args, **kwargs):\n{body}"
    return filled({**source_solutions(assignment), first: attack + "\n\n" + forged}, assignment)


def _honest(kind: str, assignment: str, rng: random.Random, mistakes: dict):
    if kind == "correct":
        return filled(source_solutions(assignment), assignment)
    if kind == "mistaken":
        return with_mistake(assignment, rng.choice(mistakes[assignment]))
    return half_done(assignment) if kind == "half" else released(assignment)


def write_class(folder: Path, students: int, assignments: list[str] | None = None, *, seed: int = 0,
                hostile_every: int = 50, targets: list[Path] = ()) -> dict[tuple[str, str], str]:
    """Write ``students`` students' notebooks under ``folder/<student>/<assignment>/``; return the kind of
    each notebook. Every ``hostile_every``-th student is hostile throughout (the first one's first notebook
    loops forever); the others mix correct (40 %), mistaken (25 %), half-done (20 %) and untouched (15 %)."""
    rng = random.Random(seed)
    assignments = assignments or list(ASSIGNMENTS)
    mistakes = seeded_mistakes()
    kinds = {}
    for index in range(students):
        student = f"student{index:03d}"
        for number, assignment in enumerate(assignments):
            if hostile_every and index % hostile_every == hostile_every - 1:
                stall = index == hostile_every - 1 and number == 0  # the first hostile student's first notebook
                kind, nb = "hostile", hostile(assignment, list(targets), stall=stall)
            else:
                kind = rng.choices(["correct", "mistaken", "half", "untouched"], [40, 25, 20, 15])[0]
                if kind == "mistaken" and not mistakes.get(assignment):
                    kind = "correct"
                nb = _honest(kind, assignment, rng, mistakes)
            nb.metadata["student"] = student  # as real notebooks, no two are the same bytes
            write_submission(folder / student, nb, assignment)
            kinds[student, assignment] = kind
    return kinds
