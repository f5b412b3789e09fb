"""What an exercise is and what a verdict says: the types every check declares itself with (``Exercise``,
``Mistake``) and every channel reads (``Verdict``). How a verdict is reached is ``judging``'s.
"""
import threading
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

import torch

from autograder.engine import limits
from autograder.engine.sandbox.report import utf8
from course import tolerances
from course.protocols import PROTOCOLS, Case, call_function

_GRADER_PROBLEM = "评分环境出了问题，不是你的代码的问题"


@dataclass(frozen=True)
class Mistake:
    """A known mistake: a wrong implementation with the reference's signature (``fn``); where the wrong
    outputs vary too much to reproduce, a test of the student's output (``matches(case, got)``); or, for a
    mistake that shows as an error rather than an output, a pattern searched for in the error message and the
    student's line it quotes (``error``, a regular expression)."""

    name: str
    hint: str
    fn: Callable | None = None
    matches: Callable[[Case, Any], bool] | None = None
    error: str | None = None
    # Run ``fn`` on the case's own dtype rather than on float64: for mistakes that are about precision.
    native_dtype: bool = False
    # The cases whose outputs this mistake defines to their tolerance (all when None); on the others the
    # student's rounding, not the mistake, decides the numbers (cosines of 10⁸ radians in float32). For a
    # ``matches`` mistake, the cases where it cannot come out right: a right output there rules it out.
    tried_on: Callable[[Case], bool] | None = None


@dataclass(frozen=True)
class Budget:
    """A rule about *how* the code runs (hold one block of scores at a time; decode through the caches), enforced
    by what the run cannot do rather than by what the student's process says. ``cases()`` are sized so that the
    intended algorithm gets through them with room to spare and the way around it cannot, and they run alone, in
    a child of their own, whose resident memory may rise at most ``memory_bytes`` above what it held before the
    student's code ran, and which may use at most ``cpu_s`` seconds of CPU time. The fork server measures both
    (the kernel's accounts of the child, ``zygote``), so a forged report, or code that slips past the in-process
    watches, gains nothing. Tried once every other case is right; when the run does not fit, the verdict names
    ``mistake`` and says ``why`` with the case's figures."""

    cases: Callable[[], list[Case]]
    mistake: Mistake
    why: str
    memory_bytes: int | None = None
    cpu_s: float | None = None


@dataclass(frozen=True)
class Exercise:
    """What a grader needs to know about one exercise of the contract (the names and shapes each notebook states)."""

    name: str
    points: int
    reference: Callable
    cases: Callable[[], list[Case]]
    mistakes: tuple[Mistake, ...] = ()
    output_names: tuple[str, ...] = ()
    tolerance_overrides: dict = field(default_factory=dict)
    # How the code is called, from ``course.protocols`` (it runs in the sandbox, so it must live there).
    call: Callable[[Callable, Case], Any] = call_function
    # Extra properties the output must have beyond matching the reference, e.g. exact zeros: a rule of
    # ``course.output_rules``, ``verify(case, got, expected)`` (the notebook's visible check applies it too).
    verify: Callable[[Case, Any, Any], "str | None"] | None = None
    # Positions of the output that no implementation defines (padding queries): any finite value is right.
    free: Callable[[Case], Any] | None = None
    # The notebook's name that holds the code, when it is not the exercise's (a method of a class).
    defines: str = ""
    # For a call protocol that returns ``(output, stages)``: the stages in order, ``(key, label)``. Only the
    # output is graded; the first stage that differs from the reference's is named in the message.
    stages: tuple[tuple[str, str], ...] = ()
    # The exercises of ``uses`` that each stage runs, by key: a stage that goes wrong before any of them has run
    # is this exercise's own mistake, even on a broken base.
    stage_uses: dict[str, tuple[str, ...]] = field(default_factory=dict)
    # Other exercises (contract names) that a student's version of this one builds on. When the student's code
    # uses one (or the call protocol hands it over, ``protocols.PULLED``) and it fails its own check, the
    # verdict names it instead of diagnosing this exercise on a broken base.
    uses: tuple[str, ...] = ()
    # ``on_base(fn, name, base_fn)``: the reference or a mistake ``fn`` of this exercise with its use of the
    # exercise ``name`` (one of ``uses``) made by ``base_fn``, a known mistake of that one; None where it cannot
    # be put in. Lets a verdict on a broken base still say whether this exercise has a mistake of its own.
    on_base: Callable[[Callable, str, Callable], Callable | None] | None = None
    # The contract computes in float32 (low-precision inputs converted first) and casts the result back, so a
    # mix of dtypes is explained with that rule rather than "make new tensors in the input's dtype".
    works_in_float32: bool = False
    budget: Budget | None = None

    def __post_init__(self):
        if PROTOCOLS.get(self.call.__name__) is not self.call:
            raise ValueError(f"{self.name}: call must be one of course.protocols.PROTOCOLS, which the sandbox knows "
                             f"by name; got {self.call!r}")

    def made_cases(self) -> tuple[Case, ...]:
        """``cases()``, made once per process for the weights the course finds: every notebook is graded on the
        same cases, and those of a real-size layer take a fifth of a second to make (``known_outputs`` then hashes
        each once). Shared by every grading, so never changed: what runs on a case in the grader gets copies
        (``Case.in_float64``, ``Case.cloned``), the sandbox its own unpickled ones. Made anew for another ``cases``
        function (a test's ``dataclasses.replace(exercise, cases=...)``), or once the weights are found elsewhere."""
        return _made_once(self.cases)

    def made_budget_cases(self) -> tuple[Case, ...]:
        """``budget.cases()``, made once per process as ``made_cases`` are (none without a budget)."""
        return _made_once(self.budget.cases) if self.budget else ()

    def graded(self, value):
        """The part of a call's result that is graded (the output, without the stages)."""
        return value[0] if self.stages and isinstance(value, (tuple, list)) and len(value) == 2 else value

    @property
    def definition(self) -> str:
        return self.defines or self.name

    def free_in(self, case: Case):
        """The positions of ``case``'s output where any finite value is right (``free``), or None."""
        return self.free(case) if self.free else None

    def tolerance(self, dtype: torch.dtype) -> tolerances.Tolerance:
        return tolerances.for_dtype(dtype, self.tolerance_overrides)


# Exercise.made_cases: cases() -> (where the weights were found, what it made), for as long as that function lives;
# made under the lock, so that threads grading at once share one set (and each case's digest).
_made: "weakref.WeakKeyDictionary[Callable, tuple[tuple, tuple[Case, ...]]]" = weakref.WeakKeyDictionary()
_making = threading.Lock()


def _made_once(cases: Callable[[], list[Case]]) -> tuple[Case, ...]:
    where = _weights_found()
    with _making:
        made = _made.get(cases)
        if made is None or made[0] != where:
            made = _made[cases] = (where, tuple(cases()))
    return made[1]


def _weights_found() -> tuple:
    """Where the cases' weights come from: the course's cache (SmolLM2, Qwen3.5's cached layers) and the Qwen3.5
    checkpoint found (``$QWEN35_PATH``, the Hugging Face cache ...); None for one that cannot be told."""
    from course import cache, qwen35_weights

    try:
        checkpoint = qwen35_weights.find_checkpoint().folder
    except qwen35_weights.CheckpointError:
        checkpoint = None
    return cache.cache_dir(), checkpoint


@dataclass(frozen=True)
class Verdict:
    exercise: str
    points: int
    max_points: int
    summary: str  # one line
    details: str = ""
    grader_problem: bool = False  # the grader could not judge this exercise; not the student's doing
    mistake: str = ""  # the known mistake the code matches, when one does (for a class's table of mistakes)

    def __post_init__(self):
        # Every text of a verdict may carry the student's words (a returned string, an error message): cleaned
        # and capped here, where each channel (terminal, results.json, the class store, feedback pages,
        # nbgrader cells) takes its text from.
        for name, cap in (("summary", limits.SUMMARY_CHARS), ("details", limits.MESSAGE_CHARS),
                          ("mistake", limits.SUMMARY_CHARS)):
            object.__setattr__(self, name, _clean(str(getattr(self, name)), cap))

    @property
    def passed(self) -> bool:
        return self.points == self.max_points

    @property
    def message(self) -> str:
        return self.summary + ("\n" + self.details if self.details else "")

    def headline(self) -> str:
        """A failed verdict as the student reads it: the exercise, its zero out of the points, the message (a
        failed pytest test, a hidden-test cell's error, nbgrader's error output)."""
        return f"{self.exercise}（0/{self.max_points} 分）：{self.message}"


def public(cases: list[Case], *indices: int) -> list[Case]:
    """``cases`` with those at ``indices`` made public: the notebook's visible check tries them too
    (``course.checking``). Chosen so that each named mistake fails at least one of them, the worked example first:
    then a ✓ in the notebook is a promise the grader keeps on every mistake the course knows."""
    return [replace(case, public=True) if i in indices else case for i, case in enumerate(cases)]


def grader_problem(exercise: Exercise, what: str) -> Verdict:
    """A verdict saying that the grader, not the student, failed on this exercise."""
    return Verdict(exercise.name, 0, exercise.points, f"{_GRADER_PROBLEM}：{what}",
                   "请把这条信息告诉老师或助教；修好评分环境后重新评分。", grader_problem=True)


def _clean(text: str, cap: int) -> str:
    """Text safe to print and write anywhere: valid UTF-8 (``report.utf8``), no control characters (terminal
    escapes) but newlines and tabs, at most ``cap`` characters (cut ones end in "……")."""
    kept = "".join(ch for ch in utf8(text[:cap + 1]) if ch in "\n\t" or (ch >= " " and not 0x7f <= ord(ch) < 0xa0))
    return kept if len(kept) <= cap else kept[:cap - 2] + "……"
