"""Two known mistakes made at once, tried only when no single known mistake explains a wrong answer:

- two of one exercise's own, where each replaces a different step of the same reference class (the checks'
  ``_variant(step=...)``): a class that inherits from both makes both;
- two of one exercise's own made by one builder of wrong implementations (``variants``) with different settings:
  the builder given both settings makes both;
- one of an exercise this one builds on (``Exercise.uses``), the one its own check named, put into this
  exercise's reference and each of its mistakes by ``Exercise.on_base``: what the student's code gives on
  their own broken base, whether this exercise is otherwise right or has a known mistake of its own.

Each is an ordinary ``Mistake``, so ``diagnosis`` holds it to the same rule as any other: it must reproduce
every case it can be tried on.
"""
import functools
from collections.abc import Callable

from autograder.engine.model import Exercise, Mistake

BASE_ONLY = "除了用到的 {base} 的错，这一题自己没有错"


def variants(build: Callable[..., Callable]) -> Callable[..., Callable]:
    """``build(**settings) → fn``, a builder of wrong implementations that changes one thing per setting, made
    so that each fn it makes says how it was made, and ``pairs`` can build two of its mistakes at once. The
    same settings give the same fn (the outputs of a mistake are kept by its fn); setting values are hashable."""
    @functools.wraps(build)
    def made(**settings) -> Callable:
        return _made(build, tuple(sorted(settings.items())))
    return made


def pairs(exercise: Exercise) -> tuple[Mistake, ...]:
    """Every two of ``exercise``'s mistakes that replace different steps of one reference class, or that one
    builder (``variants``) makes with different settings, made together."""
    stepped = [m for m in exercise.mistakes if _steps(m)]
    built = [m for m in exercise.mistakes if _settings(m)]
    made = [(a, b, _both(a.fn, b.fn)) for i, a in enumerate(stepped) for b in stepped[i + 1:]
            if a.fn.__bases__ == b.fn.__bases__ and not _steps(a) & _steps(b)]
    made += [(a, b, _made(a.fn.made_as[0], tuple(sorted(_settings(a) | _settings(b)))))
             for i, a in enumerate(built) for b in built[i + 1:]
             if a.fn.made_as[0] is b.fn.made_as[0] and not _keys(a) & _keys(b)]
    return tuple(Mistake(f"{a.name}；{b.name}", f"这里有两个错。① {a.hint} ② {b.hint}", fn,
                         native_dtype=a.native_dtype or b.native_dtype) for a, b, fn in made)


def on_base(exercise: Exercise, base: str, named: str) -> tuple[Mistake, ...]:
    """``exercise``'s reference and mistakes, each on the base exercise ``base`` written with its known mistake
    ``named`` (every way the catalogue writes it): the reference first, whose fit means only the base is wrong.
    Empty where ``exercise.on_base`` cannot put that base in."""
    from autograder.engine.assignments import EXERCISES  # it imports the checks, some of which import judging

    if exercise.on_base is None or base not in EXERCISES:
        return ()
    found = []
    for wrong in (m for m in EXERCISES[base].mistakes if m.name == named and m.fn is not None):
        for own in (Mistake(BASE_ONLY.format(base=base), "", exercise.reference), *exercise.mistakes):
            fn = own.fn and exercise.on_base(own.fn, base, wrong.fn)
            if fn is not None and own.error is None and own.matches is None:
                found.append(Mistake(own.name, own.hint, fn, native_dtype=own.native_dtype or wrong.native_dtype,
                                     tried_on=own.tried_on))
    return tuple(found)


def is_base_only(mistake: Mistake, base: str) -> bool:
    """Whether ``mistake``, one of ``on_base(..., base, ...)``, is the reference on that base."""
    return mistake.name == BASE_ONLY.format(base=base)


def _steps(mistake: Mistake) -> set[str]:
    """The steps a mistake given as a class of the checks' ``_variant`` replaces (empty for any other)."""
    if not isinstance(mistake.fn, type) or mistake.error is not None or mistake.matches is not None \
            or mistake.tried_on is not None:
        return set()
    return {name for name in vars(mistake.fn) if not name.startswith("__")}


def _settings(mistake: Mistake) -> set[tuple[str, object]]:
    """The settings a mistake made by a ``variants`` builder was made with (empty for any other)."""
    if not hasattr(mistake.fn, "made_as") or mistake.error is not None or mistake.matches is not None \
            or mistake.tried_on is not None:
        return set()
    return set(mistake.fn.made_as[1])


def _keys(mistake: Mistake) -> set[str]:
    """Which of its builder's settings a ``variants`` mistake changes."""
    return {key for key, _ in _settings(mistake)}


@functools.cache
def _made(build: Callable[..., Callable], settings: tuple[tuple[str, object], ...]) -> Callable:
    fn = build(**dict(settings))
    fn.made_as = (build, settings)
    return fn


@functools.cache
def _both(a: type, b: type) -> type:
    """One class for two mistakes (cached: the outputs of a mistake are kept by its function)."""
    return type("Both", (a, b), {})
