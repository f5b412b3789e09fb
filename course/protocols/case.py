"""What every call protocol shares: the ``Case`` (one call's inputs), the plain call, building a module from
its weights, and finding the definitions that go with the code under test (``neighbour``)."""
import inspect
import sys
from dataclasses import dataclass, field, replace

import torch
from safetensors import SafetensorError
from torch import nn

from course.errors import GraderProblem
from course.stored_tensors import StoredTensors


def map_tensors(value, fn):
    """``value`` with ``fn`` applied to every tensor inside tuples, lists and dicts."""
    if isinstance(value, torch.Tensor):
        return fn(value)
    if isinstance(value, tuple):
        return tuple(map_tensors(v, fn) for v in value)
    if isinstance(value, list):
        return [map_tensors(v, fn) for v in value]
    if isinstance(value, dict):
        return {k: map_tensors(v, fn) for k, v in value.items()}
    return value


@dataclass(frozen=True)
class Case:
    """One call of the code under test: ``label`` tells the student what was tried. A ``public`` case is also
    tried by the notebook's visible check (``course.checking``), which ships its inputs and the outputs the grader
    expects on it; the others never leave the grader."""

    label: str
    args: tuple = ()
    kwargs: dict = field(default_factory=dict)
    public: bool = False

    @property
    def dtype(self) -> torch.dtype:
        """The dtype of the first float tensor among the inputs (float32 when there is none)."""
        found = []
        map_tensors((self.args, self.kwargs), lambda t: found.append(t.dtype) if t.is_floating_point() else None)
        return found[0] if found else torch.float32

    def in_float64(self) -> "Case":
        """The same case with every float tensor converted to float64, for the reference: tensors of its own, so
        that the case, which every grading of the process shares (``Exercise.made_cases``), stays as it was."""
        up = lambda t: t.to(torch.float64, copy=True) if t.is_floating_point() else t.clone()  # noqa: E731
        return replace(self, args=map_tensors(self.args, up), kwargs=map_tensors(self.kwargs, up))

    def cloned(self) -> "Case":
        """The same case with a copy of every tensor, in its own dtype."""
        return replace(self, args=map_tensors(self.args, torch.clone), kwargs=map_tensors(self.kwargs, torch.clone))


def call_function(fn, case: Case):
    """How most exercises are called: the function itself, with the case's arguments."""
    return fn(*case.args, **case.kwargs)


def build(cls, init: tuple, weights: "dict | StoredTensors", dtype: torch.dtype) -> nn.Module:
    """``cls(*init)`` converted to ``dtype`` with ``weights`` loaded (a dict, or ``StoredTensors`` read here from
    the course's cache); a wrong parameter layout is a clear message instead of a ``load_state_dict`` dump. Every
    parameter is replaced, so none is initialised first (``course.llama.parameters_on_meta``): a layer of
    Qwen3.5's size would spend most of its run on that."""
    from course.llama import parameters_on_meta

    if isinstance(weights, StoredTensors):
        try:
            weights = weights.load()
        except (OSError, SafetensorError) as e:
            raise GraderProblem(f"读不到课程缓存里的权重（{type(e).__name__}: {e}）：评分的沙盒要能读课程的缓存文件夹"
                                "（$ATTENTION_COURSE_CACHE）") from None

    with parameters_on_meta():
        module = cls(*init)
    module = module.to(dtype)
    have = {name: list(t.shape) for name, t in module.state_dict().items()}
    problems = layout_problems(have, {name: list(t.shape) for name, t in weights.items()})
    if problems:
        raise ValueError("参数和约定不一致：" + "；".join(problems)
                         + "。投影层用 nn.Linear(..., bias=False)，名字按练习里的约定（q_proj、k_proj、v_proj、o_proj ……）。")
    # Copies in the module's dtype: the module must not share (and so may not change) the case's tensors.
    module.load_state_dict({name: t.to(dtype, copy=True) for name, t in weights.items()}, assign=True)
    return module


def layout_problems(have: dict, want: dict) -> list[str]:
    problems = [f"缺少 {name}" for name in want if name not in have]
    problems += [f"多了 {name}" for name in have if name not in want]
    problems += [f"{name} 的形状应是 {want[name]}，得到 {have[name]}"
                 for name in want if name in have and have[name] != want[name]]
    return problems


def pair(value, what: str) -> tuple:
    """``value`` as a tuple when it holds two things; otherwise a clear error saying ``what`` should return two."""
    if not (isinstance(value, (tuple, list)) and len(value) == 2):
        raise TypeError(f"{what} 应该返回两个值，得到的是 {type(value).__name__}。")
    return tuple(value)


# The module the sandbox runs a notebook's definitions in (``harness.run``), registered in ``sys.modules`` as
# Jupyter registers ``__main__``: where the protocols find the student's own classes that go with the code under test.
STUDENT_MODULE = "__student__"

_REQUIRED = object()


def neighbour(owner, name: str, default=_REQUIRED):
    """The definition ``name`` that goes with the code under test ``owner`` (a function or a class): the
    notebook's own while the sandbox runs a notebook (``STUDENT_MODULE``), else the one in the module that
    defines ``owner`` (the reference's, a known mistake's). Decorators do not matter: a notebook's names are
    looked up in the notebook, and ``owner`` is unwrapped (``functools.wraps``) to find its module.

    Without it: ``default`` when given; else, in a notebook, a ``NameError`` naming it (the student's to add);
    beside a reference, a ``GraderProblem``.
    """
    student = sys.modules.get(STUDENT_MODULE)
    if student is not None:
        found = vars(student).get(name)
        if found is None and default is _REQUIRED:
            raise NameError(f"notebook 里没有 {name} 的定义：{getattr(owner, '__name__', '这一题')} 要用你自己写的 {name}。",
                            name=name)
    else:
        module = sys.modules.get(getattr(inspect.unwrap(owner), "__module__", None) or "")
        found = getattr(module, name, None)
        if found is None and default is _REQUIRED:
            raise GraderProblem(f"the grader found no {name} in the module of {owner!r}")
    return default if found is None else found
