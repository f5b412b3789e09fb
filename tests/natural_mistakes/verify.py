"""Checks that every entry is really a mistake, by comparing it with CORRECT on probes of our own.

It never calls the grader on a mistake. ``python -m tests.natural_mistakes.verify [01 02 ...]`` prints, for
each entry, which exercises its probes tell apart from the correct code, and flags entries whose listed
exercises look unchanged, whose unlisted exercises change, or whose "raises" kind raises nothing.
``--grade-correct`` additionally grades every CORRECT source with the autograder (correct code only).
"""
import sys

import torch

from . import ASSIGNMENTS, source
from .probes import PROBES
from .reach import affected

RAISED = "raised"


def load(text: str) -> dict:
    namespace = {"__name__": "student"}
    exec(compile(text, "<student>", "exec"), namespace)
    return namespace


def same(a, b) -> bool:
    if isinstance(a, torch.Tensor):
        if not isinstance(b, torch.Tensor) or a.shape != b.shape or a.dtype != b.dtype:
            return False
        if not a.is_floating_point():
            return torch.equal(a, b)
        tol = 2e-2 if a.dtype in (torch.bfloat16, torch.float16) else 1e-5
        return torch.allclose(a.double(), b.double(), atol=tol, rtol=tol, equal_nan=True)
    if isinstance(a, (tuple, list)):
        return isinstance(b, (tuple, list)) and len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    return type(a) is type(b) and a == b


def run_probe(probe, namespace):
    try:
        with torch.random.fork_rng():
            return probe(namespace)
    except Exception as error:  # noqa: BLE001 - a mistake may raise anything
        return (RAISED, type(error).__name__, str(error)[:120])


def raised(value) -> bool:
    return isinstance(value, tuple) and len(value) == 3 and value[0] == RAISED


def compare(module, entry, correct_ns, correct_out, every_probe=False):
    """{exercise: (differs, any probe raised)} for one entry; the exercises it cannot change (``reach``) are
    not probed again, and an exercise's probes stop at the first that differs (unless ``every_probe``, or the
    entry should raise and nothing has yet)."""
    try:
        ns = load(source(module, entry))
    except Exception as error:  # noqa: BLE001
        return {ex: (True, True) for ex in PROBES[module.ASSIGNMENT]}, f"definition raised {error!r}"
    result = {}
    can_change = affected(module, entry)
    for exercise, probes in PROBES[module.ASSIGNMENT].items():
        differs, any_raised = False, False
        if exercise not in can_change:  # it runs the correct code, whose outputs these are
            result[exercise] = (differs, any_raised)
            continue
        for i, probe in enumerate(probes):
            got = run_probe(probe, ns)
            if raised(got):
                any_raised = True
            if not same(correct_out[exercise][i], got):
                differs = True
            if differs and not every_probe and (any_raised or entry.kind != "raises"):
                break
        result[exercise] = (differs, any_raised)
    return result, None


def verify(module, verbose=False) -> int:
    problems = 0
    correct_ns = load(source(module))
    probes = PROBES[module.ASSIGNMENT]
    correct_out = {}
    for exercise, plist in probes.items():
        correct_out[exercise] = [run_probe(p, correct_ns) for p in plist]
        for i, out in enumerate(correct_out[exercise]):
            if raised(out):
                print(f"  !! probe {exercise}[{i}] raises on CORRECT: {out}")
                problems += 1
    ids = set()
    for entry in module.ENTRIES:
        if entry.id in ids:
            print(f"  !! duplicate id {entry.id}")
            problems += 1
        ids.add(entry.id)
        result, note = compare(module, entry, correct_ns, correct_out, every_probe=verbose)
        differing = [ex for ex, (d, _) in result.items() if d]
        raising = [ex for ex, (_, r) in result.items() if r]
        flags = []
        missing = [ex for ex in entry.exercises if not result.get(ex, (False, False))[0]]
        extra = [ex for ex in differing if ex not in entry.exercises]
        if missing:
            flags.append(f"listed but unchanged: {missing}")
        if extra:
            flags.append(f"changed but unlisted: {extra}")
        if entry.kind == "raises" and not raising:
            flags.append("kind raises, but nothing raised")
        if entry.kind != "raises" and raising:
            flags.append(f"(raises in {raising})")
        if entry.kind == "double" and len(entry.code) == 1:
            flags.append("(double in one definition)")
        bad = any(not f.startswith("(") for f in flags)
        problems += bad
        if bad or verbose:
            print(f"  {'!!' if bad else 'ok'} {entry.id} [{entry.kind}] differs={differing} {'; '.join(flags)}"
                  + (f" {note}" if note else ""))
    print(f"{module.ASSIGNMENT}: {len(module.ENTRIES)} entries, {problems} problem(s)")
    return problems


def grade_correct(module) -> int:
    from autograder import grade_code
    text = source(module)
    failures = 0
    for name in PROBES[module.ASSIGNMENT]:
        verdict = grade_code(name, text)
        print(f"  grade {name}: {'pass' if verdict.passed else 'FAIL'}")
        if not verdict.passed:
            failures += 1
            print(verdict)
    return failures


def main(argv):
    wanted = [a for a in argv if not a.startswith("-")]
    total = 0
    for module in ASSIGNMENTS:
        if wanted and module.ASSIGNMENT[:2] not in wanted:
            continue
        if "--grade-correct" in argv:
            total += grade_correct(module)
        total += verify(module, verbose="-v" in argv)
    return 1 if total else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
