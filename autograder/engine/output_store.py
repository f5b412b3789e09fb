"""What the reference and the known mistakes give on the cases of the assignments that run real models (07's
SmolLM2, 08's Gated DeltaNet at Qwen3.5's sizes), kept on disk so that each new grading process (a student's
``pytest autograder/``, a class worker, a test worker) does not run those models again to diagnose a mistake.

The outputs depend only on the code and weights that decide the assignment's verdicts, which
``provenance.fingerprint`` hashes: they are kept under ``<course cache>/known-outputs/<assignment>/<fingerprint>/``,
one file per (function, case contents), and a new fingerprint starts an empty folder. Each file holds the key
it was written for and a digest of its bytes, checked on every read: a file that is cut short, altered or
misplaced is computed again and rewritten, never believed. Only the exercises the course registers
(``assignments.EXERCISES``), with their own reference and mistakes, are kept: an exercise rebuilt with other
functions (a test's) has no stable name to be kept under.

These files are answers: the sandbox's walls hide the folder (``folder()`` is one of ``walls._answer_folders``),
and it is made readable by its owner only. Nothing here imports torch at module level: the fork server imports
this module as it starts.
"""
import functools
import hashlib
import io
import os
import shutil
import tempfile
from pathlib import Path

from course.cache import cache_dir

# The assignments whose cases run real models: the others' outputs cost less to compute than to read.
KEPT_ASSIGNMENTS = ("07_real_model", "08_gated_deltanet")
FINGERPRINTS_KEPT = 3  # per assignment: the course versions that share this cache (newest by use)
_DIGEST = 32
_ABOUT = "ABOUT.txt"  # also the file the walls' probe run tries to read


def folder() -> Path:
    """The store's folder, made (owner-only) with the file the walls' probe tries to read."""
    return _made(cache_dir() / "known-outputs")


def _made(root: Path) -> Path:
    probe = root / _ABOUT
    if not probe.is_file():
        root.mkdir(parents=True, exist_ok=True)
        os.chmod(root, 0o700)
        probe.write_text("What the course's references and known mistakes give on the graders' cases "
                         "(autograder/engine/output_store.py). Safe to delete.\n", encoding="utf-8")
    return root


@functools.cache
def _registered() -> dict:
    """Exercise name -> (the registered exercise, its assignment)."""
    from autograder.engine.assignments import ASSIGNMENTS

    return {e.name: (e, name) for name, exercises in ASSIGNMENTS.items() for e in exercises}


def _assignment_of(exercise) -> str | None:
    found = _registered().get(exercise.name)
    return found[1] if found and found[0] is exercise else None


@functools.cache
def _fingerprint_folder(cache: Path, assignment: str) -> Path:
    """The store's folder in the course cache ``cache`` for the assignment's grader as it is now, made once per
    process; the oldest others dropped."""
    from autograder.engine.provenance import fingerprint

    base = _made(cache / "known-outputs") / assignment
    here = base / fingerprint(assignment)
    here.mkdir(parents=True, exist_ok=True)
    os.utime(here)
    older = sorted((p for p in base.iterdir() if p.is_dir() and p != here), key=lambda p: p.stat().st_mtime)
    for stale in older[:max(0, len(older) - (FINGERPRINTS_KEPT - 1))]:
        shutil.rmtree(stale, ignore_errors=True)
    return here


def key(exercise, function: str, case_digest: bytes) -> "tuple[Path, str] | None":
    """Where ``function``'s output on a case of ``exercise`` is kept (``function``: "reference", or a mistake's
    name with how it is run), and the key written in the file; None when it is not kept on disk."""
    assignment = _assignment_of(exercise)
    if assignment not in KEPT_ASSIGNMENTS or case_digest is None:
        return None
    written = f"{exercise.name}\n{exercise.call.__name__}\n{function}\n{case_digest.hex()}"
    name = hashlib.sha256(written.encode()).hexdigest()[:40] + ".pt"
    try:
        return _fingerprint_folder(cache_dir(), assignment) / name, written
    except OSError:  # a cache that cannot be written (a read-only home): nothing is kept, grading goes on
        return None


class Raised:
    """What is kept for a function that raised on the case (diagnosis's "cannot be tried here")."""


RAISED = Raised()


def read(where: "tuple[Path, str]"):
    """The value kept at ``where`` (``key``'s answer), or None when there is none to believe."""
    import torch

    path, written = where
    try:
        data = path.read_bytes()
    except OSError:
        return None
    body = data[_DIGEST:]
    if len(data) <= _DIGEST or hashlib.blake2b(body, digest_size=_DIGEST).digest() != data[:_DIGEST]:
        return None
    try:
        kept = torch.load(io.BytesIO(body), weights_only=True)
    except Exception:  # noqa: BLE001 - any unreadable file is a miss, computed again
        return None
    if not isinstance(kept, dict) or kept.get("key") != written:
        return None
    return RAISED if kept.get("raised") else kept.get("value")


def write(where: "tuple[Path, str]", value) -> None:
    """Keep ``value`` at ``where``, atomically. A value that does not come back from a weights-only load (an
    object torch cannot restore safely), or a disk that refuses the file, is simply not kept."""
    import torch

    path, written = where
    record = {"key": written, "raised": True} if value is RAISED else {"key": written, "value": value}
    buffer = io.BytesIO()
    try:
        torch.save(record, buffer)
        torch.load(io.BytesIO(buffer.getvalue()), weights_only=True)
    except Exception:  # noqa: BLE001 - not a value to keep
        return
    body = buffer.getvalue()
    try:
        handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=".writing-")
    except OSError:
        return
    try:
        with os.fdopen(handle, "wb") as out:
            out.write(hashlib.blake2b(body, digest_size=_DIGEST).digest() + body)
        os.replace(temporary, path)
    except OSError:
        Path(temporary).unlink(missing_ok=True)
