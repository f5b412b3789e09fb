"""The grader's rule against changing inputs in place, for the notebooks' own visible checks.

The grader gives 0 points to an exercise whose code, on any case, changes a tensor it was given: it takes
``copies`` of every input before the call, names each input by the parameter it is handed to (``named``) and
lists those that differ after (``changed``), in ``autograder/engine/sandbox/harness.py``, and says ``HINT``. A
visible check starts with ``name = inplace.guard(name)``, so that the calls it makes apply the same rule and say
at once which input was changed, in the student's own parameter names, and how to fix it.

Only the outermost guarded call compares: when a guarded ``attention`` calls a guarded ``masked_softmax`` on
scores it made itself, only ``attention``'s inputs count, as in the grader, which compares only the inputs it
handed over.
"""
import functools
import inspect
import threading

import torch

HINT = ("带下划线的操作（masked_fill_、add_ ……）、x *= ...（+=、/= 也一样）和 x[...] = ... 会改掉调用者传进来的张量："
        "改用不带下划线的版本（scores = scores.masked_fill(...)、x = x * ...），或者先复制一份再改（x = x.clone()）。")
_GUARDED = "_course_guards_inputs"
_inside = threading.local()  # whether a guarded call is running in this thread


def same(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Whether ``b`` still holds ``a``'s values exactly: the same shape, dtype and values, NaN where ``a`` had NaN."""
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    if torch.equal(a, b):
        return True
    equal = a == b
    if a.is_floating_point():
        equal |= a.isnan() & b.isnan()
    return bool(equal.all())


def copies(value):
    """``value`` with every tensor inside tuples, lists and dicts replaced by a copy of its values."""
    if isinstance(value, torch.Tensor):
        return value.detach().clone()
    if isinstance(value, tuple):
        return tuple(copies(v) for v in value)
    if isinstance(value, list):
        return [copies(v) for v in value]
    if isinstance(value, dict):
        return {k: copies(v) for k, v in value.items()}
    return value


def changed_inputs(before, after, where: str) -> list[str]:
    """The inputs whose tensors differ between ``before`` (``copies`` taken before the call) and ``after`` (the
    same input after it), named for the student from ``where``, the input's own name: ``参数 scores``,
    ``参数 cos_sin 的第 1 项``, ``参数 kwargs['mask']``."""
    if isinstance(before, torch.Tensor):
        return [] if isinstance(after, torch.Tensor) and same(before, after) else [where]
    if isinstance(before, (tuple, list)):
        if not isinstance(after, (tuple, list)) or len(after) != len(before):
            return [where]
        return [name for i, (b, a) in enumerate(zip(before, after))
                for name in changed_inputs(b, a, f"{where} 的第 {i + 1} 项")]
    if isinstance(before, dict):
        if not isinstance(after, dict):
            return [where]
        return [name for key in before for name in changed_inputs(before[key], after.get(key), f"{where}[{key!r}]")]
    return []


def named(fn, args: tuple, kwargs: dict) -> list[tuple[str, object]]:
    """The arguments of a call of ``fn`` named for the student: by parameter (``self`` is no tensor, so it never
    shows; a call that leaves out parameters binds as far as it goes), or, when they do not bind to the
    signature, by position and keyword."""
    try:
        bound = inspect.signature(fn).bind_partial(*args, **kwargs).arguments
        return [(f"参数 {name}", value) for name, value in bound.items()]
    except (TypeError, ValueError):
        return [*((f"第 {i + 1} 个参数", value) for i, value in enumerate(args)),
                *((f"参数 {name}", value) for name, value in kwargs.items())]


def changed(given: list[tuple[str, object]], before: list) -> list[str]:
    """The inputs among ``given`` (``named``'s pairs, after the call) whose tensors differ from ``before`` (the
    ``copies`` of their values, taken before it), named as ``changed_inputs`` names them."""
    return [name for (where, value), copy in zip(given, before) for name in changed_inputs(copy, value, where)]


def said(found: list[str]) -> str:
    """The sentence that tells the student which inputs a call changed (``changed``'s names), as the visible checks
    and the grader say it."""
    return f"调用之后，输入的值变了：{'、'.join(found)}。"


def _guarded(fn):
    if getattr(fn, _GUARDED, False):
        return fn

    @functools.wraps(fn)
    def call(*args, **kwargs):
        if getattr(_inside, "running", False):
            return fn(*args, **kwargs)
        given = named(fn, args, kwargs)
        before = [copies(value) for _, value in given]
        _inside.running = True
        try:
            result = fn(*args, **kwargs)
        finally:
            _inside.running = False
        found = changed(given, before)
        if found:
            raise AssertionError(f"{getattr(fn, '__qualname__', fn)} 原地修改了输入：{said(found)}"
                                 f"评分时，改了输入的练习得 0 分。{HINT}")
        return result

    setattr(call, _GUARDED, True)
    return call


def guard(obj):
    """``obj`` with its calls checked for changed inputs: a function is wrapped; a class gets its public methods
    (and ``__call__``) wrapped in place, static ones too (a ``torch.autograd.Function``'s ``forward`` and
    ``backward``), those it inherits from classes of the same notebook too, and is returned. Guarding twice
    changes nothing."""
    if isinstance(obj, type):
        for owner in reversed(obj.__mro__):
            if owner.__module__ != obj.__module__:
                continue  # torch's nn.Module, object: not the student's
            for name, member in vars(owner).items():
                if name.startswith("_") and name != "__call__":
                    continue
                if isinstance(member, staticmethod):
                    setattr(obj, name, staticmethod(_guarded(getattr(obj, name))))
                elif inspect.isfunction(member):
                    setattr(obj, name, _guarded(getattr(obj, name)))
        return obj
    return _guarded(obj) if callable(obj) else obj
