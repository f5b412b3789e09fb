"""How the code under test is called: a ``Case`` holds the inputs, a call protocol turns a function or
class into outputs. One definition serves both sides: in the sandbox the protocols call the student's
code; in the grader they call the reference and the known mistakes.

This module runs inside the sandbox, so it imports torch and, to build a real model around a student's
attention, the course's model code (``course.llama``, which the sandbox may read): no reference, no check.
Errors raised here reach the student, so they say in Chinese what the code should look like; a
``GraderProblem`` raised here (the model's files cannot be read) is the grading environment's, and reaches the
teacher as such (``harness`` vouches that this module raised it).
"""
import functools
import inspect
import sys
import threading
from dataclasses import dataclass, field, replace

import torch
from safetensors import SafetensorError
from torch import nn

from autograder.engine.errors import GraderProblem
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
    """One call of the code under test: ``label`` tells the student what was tried."""

    label: str
    args: tuple = ()
    kwargs: dict = field(default_factory=dict)

    @property
    def dtype(self) -> torch.dtype:
        """The dtype of the first float tensor among the inputs (float32 when there is none)."""
        found = []
        map_tensors((self.args, self.kwargs), lambda t: found.append(t.dtype) if t.is_floating_point() else None)
        return found[0] if found else torch.float32

    def in_float64(self) -> "Case":
        """The same case with every float tensor converted to float64, for the reference."""
        up = lambda t: t.double() if t.is_floating_point() else t.clone()  # noqa: E731
        return replace(self, args=map_tensors(self.args, up), kwargs=map_tensors(self.kwargs, up))


def call_function(fn, case: Case):
    """How most exercises are called: the function itself, with the case's arguments."""
    return fn(*case.args, **case.kwargs)


def _layout_problems(have: dict, want: dict) -> list[str]:
    problems = [f"缺少 {name}" for name in want if name not in have]
    problems += [f"多了 {name}" for name in have if name not in want]
    problems += [f"{name} 的形状应是 {want[name]}，得到 {have[name]}"
                 for name in want if name in have and have[name] != want[name]]
    return problems


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
    problems = _layout_problems(have, {name: list(t.shape) for name, t in weights.items()})
    if problems:
        raise ValueError("参数和约定不一致：" + "；".join(problems)
                         + "。投影层用 nn.Linear(..., bias=False)，名字按练习里的约定（q_proj、k_proj、v_proj、o_proj ……）。")
    # Copies in the module's dtype: the module must not share (and so may not change) the case's tensors.
    module.load_state_dict({name: t.to(dtype, copy=True) for name, t in weights.items()}, assign=True)
    return module


def pair(value, what: str) -> tuple:
    """``value`` as a tuple when it holds two things; otherwise a clear error saying ``what`` should return two."""
    if not (isinstance(value, (tuple, list)) and len(value) == 2):
        raise TypeError(f"{what} 应该返回两个值，得到的是 {type(value).__name__}。")
    return tuple(value)


def call_module(cls, case: Case):
    """A module with an ``(init, weights, x)`` case: build it in the case's dtype, run ``forward(x, **kwargs)``."""
    init, weights, x = case.args
    with torch.no_grad():
        return build(cls, init, weights, case.dtype)(x, **case.kwargs)


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


def _decode(step, cache, x, attention_mask, steps, values: bool = False) -> tuple:
    """Feed ``x`` through ``step(x, attention_mask=..., cache=...)`` in chunks of ``steps`` positions, one
    ``cache`` for all of them.

    Returns the outputs joined along the sequence, ``len(cache)`` at the end, and the shapes of what the
    module handed to ``cache.update`` each time (what the cache holds: KV heads, or latents); with ``values``,
    also what it handed, position by position (``_handed``).
    """
    stored, handed = [], []
    update = cache.update

    def recording_update(*parts, **named):
        # Forwards whatever the module passes (a cache of its own may take more than (k, v)); records the
        # shapes of the tensors among them.
        tensors = [part for part in (*parts, *named.values()) if isinstance(part, torch.Tensor)]
        stored.append([size for part in tensors for size in part.shape])
        if values:
            handed.append([t.detach().clone() for t in tensors])
        return update(*parts, **named)

    cache.update = recording_update
    found = _feed(step, cache, x, attention_mask, steps, "update 就地追加"), len(cache), torch.tensor(stored, dtype=torch.long)
    return (*found, _handed(handed)) if values else found


def _feed(step, cache, x, attention_mask, steps, in_place: str) -> torch.Tensor:
    """``step(x, attention_mask=..., cache=cache)`` on ``x`` in chunks of ``steps`` positions, each call seeing the
    mask's columns up to its last position: the outputs joined along the sequence. ``in_place`` says, in the
    message for a step that returns another cache, how the cache changes."""
    outputs, end = [], 0
    for n in steps:
        start, end = end, end + n
        mask = None if attention_mask is None else attention_mask[:, :end]
        out, returned = pair(step(x[:, start:end], attention_mask=mask, cache=cache), "带 cache 的 forward")
        if returned is not cache:
            raise TypeError(f"带 cache 调用 forward 时应返回 (out, cache)，cache 就是传进来的那个对象（{in_place}）。")
        outputs.append(out)
    return torch.cat(outputs, dim=1)


def _handed(handed: list) -> torch.Tensor:
    """The tensors handed to ``cache.update``, ``[B, T_i, ·]`` each, joined along the last dim per call and along
    the sequence across calls: ``[B, T, Σ widths]``. Empty when they are not such tensors (their shapes, recorded
    beside, say what is wrong)."""
    try:
        return torch.cat([torch.cat(parts, dim=-1) for parts in handed], dim=1)
    except (RuntimeError, IndexError, ValueError):
        return torch.zeros(0)


def _run_decoder(cls, case: Case, cache_name: str, method: str, values: bool = False):
    """A module with ``method(x, attention_mask=None, cache=None) → (out, cache)``: run it on the whole of x,
    or decode x through one cache in the chunks ``case.kwargs["steps"]`` gives (``values``: see ``_decode``)."""
    init, weights, x = case.args
    attention_mask, steps = case.kwargs.get("attention_mask"), case.kwargs.get("steps")
    with torch.no_grad():
        module = build(cls, init, weights, case.dtype)
        step = getattr(module, method)
        if steps is None:
            kwargs = {} if attention_mask is None else {"attention_mask": attention_mask}
            out, returned = pair(step(x, **kwargs), method)
            if returned is not None:
                raise TypeError(f"不带 cache 调用 {method} 时应返回 (out, None)：返回的 cache 就是传进来的那个，"
                                f"没有传就是 None，得到的是 {type(returned).__name__}。")
            return out
        return _decode(step, neighbour(cls, cache_name)(), x, attention_mask, steps, values)


def call_decoder(cls, case: Case):
    """GQA's ``forward``, decoding through the ``KVCache`` next to it."""
    return _run_decoder(cls, case, "KVCache", "forward")


def call_latent_decoder(cls, case: Case):
    """MLA's ``forward``, decoding through the ``LatentKVCache`` next to it: the course's MLA caches the normalised
    latent and the rotated rope key, so what it hands the cache is graded too."""
    return _run_decoder(cls, case, "LatentKVCache", "forward", values=True)


def call_absorbed_decoder(cls, case: Case):
    """MLA's ``forward_absorbed``, decoding through the ``LatentKVCache`` next to it (what it hands the cache too)."""
    return _run_decoder(cls, case, "LatentKVCache", "forward_absorbed", values=True)


def call_generate(fn, case: Case) -> tuple:
    """``fn(model, input_ids, max_new_tokens, attention_mask=None)`` (greedy generation) in the real model
    stored in the folder ``case.args[0]``, with the ``LlamaAttention`` defined next to ``fn`` in every layer:
    the student's loop runs the student's attention, the reference's the reference's.

    Returns what ``fn`` returned, and whether the model was given no more positions than the prompt and the
    new tokens, each once (a bool tensor): true of a loop that decodes through its caches, however it feeds
    the prompt; false of one that runs the whole sequence again for every token.

    The weights are read from that folder here, where the code runs (the sandbox may read it), instead of
    travelling with the case.
    """
    folder, input_ids, max_new_tokens, attention_mask = case.args
    kwargs = {} if attention_mask is None else {"attention_mask": attention_mask}
    return _generate(fn, folder, input_ids, max_new_tokens, (), kwargs,
                     "argmax 选出的下一个 token 是 [B]，要写成 argmax(dim=-1, keepdim=True) 或 [:, None] 变成 [B, 1]。")


# Where code that ignores the generator it is given draws from: torch's global generator, seeded from the case's
# seed plus this when the model first runs (building it may draw from it), so that such code gives the same wrong
# tokens on every run, and a mistake can reproduce them.
GLOBAL_SEED_OFFSET = 1000
# Held while torch's global generator is seeded and drawn from for one call: the grader's threads take turns.
_GLOBAL_GENERATOR = threading.Lock()


def call_sample_generate(fn, case: Case) -> tuple:
    """``fn(model, input_ids, max_new_tokens, generator, attention_mask=None, **sampling)`` (sampled generation),
    run as ``call_generate`` runs greedy generation, with ``generator = torch.Generator().manual_seed(seed)``
    made here for each call and used once before it: ``case.args`` is ``(folder, input_ids, max_new_tokens, attention_mask,
    seed)``, ``case.kwargs`` the sampling options (``temperature, top_k, top_p``). Torch's global generator is
    seeded too (``GLOBAL_SEED_OFFSET``) and restored afterwards.

    Returns what ``fn`` returned, whether the model read each position once (as ``call_generate``), and the
    generator's next number after the call: one draw per step and no other use of it leave the reference's.
    """
    folder, input_ids, max_new_tokens, attention_mask, seed = case.args
    kwargs = {**({} if attention_mask is None else {"attention_mask": attention_mask}), **case.kwargs}
    generator = torch.Generator().manual_seed(seed)
    torch.rand((), generator=generator)  # handed over already used, as a notebook's generator often is
    with _GLOBAL_GENERATOR, torch.random.fork_rng(devices=[]):
        tokens, once = _generate(fn, folder, input_ids, max_new_tokens, (generator,), kwargs,
                                 "torch.multinomial(probs, 1, generator=generator) 抽出的正是 [B, 1]：probs 要是 [B, V] 两维。",
                                 first_run=lambda: torch.manual_seed(seed + GLOBAL_SEED_OFFSET))
    return tokens, once, torch.rand((), generator=generator)


def _generate(fn, folder: str, input_ids: torch.Tensor, max_new_tokens: int, extra: tuple, kwargs: dict,
              shape_hint: str, first_run=None) -> tuple:
    """``fn(model, input_ids, max_new_tokens, *extra, **kwargs)`` in the real model in ``folder`` with the
    ``LlamaAttention`` that goes with ``fn`` (``neighbour``): what it returned, and whether the model read each
    position at most once. ``shape_hint`` says how the code should shape the next token when it feeds the model a
    wrong shape; ``first_run()``, when given, is called as the model is first run."""
    attention = neighbour(fn, "LlamaAttention")
    fed = []

    def record(args, named):
        ids = args[0] if args else named.get("input_ids")
        if isinstance(ids, torch.Tensor) and ids.dim() != 2:
            raise ValueError(f"第 {len(fed) + 1} 次调用模型时，input_ids 的形状是 {list(ids.shape)}，应是 [B, T] 两维："
                             + shape_hint)
        if first_run is not None and not fed:
            first_run()
        fed.append(ids.shape[-1] if isinstance(ids, torch.Tensor) else 0)

    with torch.no_grad():
        tokens = fn(_Counted(lambda: real_model(folder, attention), record), input_ids, max_new_tokens, *extra, **kwargs)
    return tokens, torch.tensor(sum(fed) <= input_ids.shape[-1] + max_new_tokens)


class _Counted:
    """Stands for the model: ``record(args, kwargs)`` sees every call of it (``model(...)`` or ``model.forward(...)``)
    before it runs, and the model is built the first time the code under test uses it, so that a loop that is not
    written yet fails as such, before the attention it would run is even built. The counting is this object's, not
    a hook on the model, which ``real_model`` shares between the calls (and the threads) of a grading run."""

    def __init__(self, build, record):
        self._build, self._record, self._model = build, record, None

    def _real(self) -> nn.Module:
        if self._model is None:
            self._model = self._build()
        return self._model

    def __getattr__(self, name):
        return self.__call__ if name == "forward" else getattr(self._real(), name)

    def __call__(self, *args, **kwargs):
        model = self._real()
        self._record(args, kwargs)
        return model(*args, **kwargs)


@functools.lru_cache(maxsize=2)
def real_model(folder: str, attention) -> nn.Module:
    """The model in ``folder`` with ``attention`` in every layer (kept for the next case of the same run)."""
    from course import llama  # the weights loader: only the protocols that need a model import it

    config = llama.read_config(folder)
    with torch.device("cpu"):
        probe = attention(config)
    problems = _layout_problems({name: list(t.shape) for name, t in probe.state_dict().items()},
                                {name: list(shape) for name, shape in llama.attention_shapes(config).items()})
    if problems:
        raise ValueError("LlamaAttention(config) 的参数和约定不一致：" + "；".join(problems) + "。")
    try:
        return llama.load_model(folder, attention)
    except OSError as e:
        raise GraderProblem(f"读不到 {folder} 里的模型权重（{type(e).__name__}: {e}）") from None


def call_cache(cls, case: Case) -> tuple:
    """A fresh cache, then ``update`` with each (k, v) of the case: its return values and ``len()`` as it goes."""
    (steps,) = case.args
    cache = cls()
    if len(cache):
        raise ValueError(f"新建的 {cls.__name__}() 不是空的：len() 是 {len(cache)}，应该是 0。缓存的张量要存在实例上"
                         "（在 __init__ 里 self.… = …）：写在类属性里的列表是所有实例共用的一份；"
                         "也看看 len() 数的是不是缓存里的位置数。")
    seen = [len(cache)]
    for k, v in steps:
        seen += [*pair(cache.update(k, v), "update"), len(cache)]
    return tuple(seen)


class WholeScores(RuntimeError):
    """Raised in the student's code at the matrix product that gives scores for more keys than one block."""


_PRODUCTS = {torch.matmul, torch.Tensor.matmul, torch.Tensor.__matmul__, torch.Tensor.__rmatmul__, torch.bmm,
             torch.Tensor.bmm, torch.mm, torch.Tensor.mm, torch.baddbmm, torch.einsum, torch.tensordot,
             torch.nn.functional.linear}


class _BlockWatch(torch.overrides.TorchFunctionMode):
    """Watches the matrix products of an attention: one that gives scores of ``Tq`` queries for more than
    ``block_size`` keys (``[..., Tq, n]`` or ``[..., n, Tq]``, n > block_size; n is not D or Dv, which the
    products with v have) means the keys were not taken a block at a time. Only products: a broadcast by
    mistake (a running sum without keepdim) makes tables of that shape too, and is not this."""

    def __init__(self, q_len: int, block_size: int, dims: tuple[int, ...]):
        super().__init__()
        self.q_len, self.block_size, self.dims = q_len, block_size, dims

    def __torch_function__(self, func, types, args=(), kwargs=None):
        result = func(*args, **(kwargs or {}))
        if func in _PRODUCTS and isinstance(result, torch.Tensor) and result.is_floating_point() and result.dim() >= 2:
            self._check(tuple(result.shape))
        return result

    def _check(self, shape: tuple[int, ...]):
        rows, cols = shape[-2:]
        width = cols if rows == self.q_len else rows if cols == self.q_len else 0
        if width > self.block_size and width not in self.dims:
            raise WholeScores(f"这一步算出了形状 {list(shape)} 的浮点张量：一次处理了 {width} 个 key，可 block_size = "
                              f"{self.block_size}。online softmax 每次只处理 block_size 个 key：分数、exp 和它们的和都按块算，"
                              "再用 running max 和 running sum 把各块接起来。")


def call_blockwise(fn, case: Case):
    """``fn(q, k, v, mask=None, block_size=16)``, stopped at the first matrix product that gives scores for more
    than ``block_size`` keys at once (``WholeScores``)."""
    q, k, v = case.args[:3]
    block_size = case.kwargs.get("block_size", case.args[4] if len(case.args) > 4 else 16)
    with _BlockWatch(q.shape[-2], block_size, (q.shape[-1], v.shape[-1])):
        return fn(*case.args, **case.kwargs)


def call_norm(cls, case: Case):
    """Build the norm, give it the case's weight (None: keep the fresh initialisation), apply it."""
    dim, eps, weight, x = case.args
    norm = cls(dim, eps).to(x.dtype)
    if weight is not None:
        norm.load_state_dict({"weight": weight})
    with torch.no_grad():
        return norm(x)


# What ``call_layer`` records on the way through a layer, in order, for locating the first step that differs.
LAYER_STAGES = ("split", "norm", "rope", "attention", "gate")


def call_layer(cls, case: Case):
    """Build a layer from its config, load the weights in the case's dtype, run ``forward(x, cos, sin, mask)``.

    Returns ``(out, stages)``: ``stages`` holds what passed through the layer's steps (the input and output of
    ``q_norm`` and ``k_norm``, what ``apply_partial_rope`` and ``attention`` returned, the input of ``o_proj``),
    as far as the layer uses those parts. Only ``out`` is graded; the stages say where a wrong ``out`` starts.
    """
    cfg, weights, x, cos, sin, attention_mask = case.args
    layer = build(cls, (cfg,), weights, x.dtype)
    stages = {name: [] for name in LAYER_STAGES}
    hooks = _hook_stages(layer, stages)
    watched = {}
    for name, stage, pick in (("apply_partial_rope", "rope", lambda r: r), ("attention", "attention", lambda r: r[0])):
        step = neighbour(cls, name, None)
        code = getattr(inspect.unwrap(step), "__code__", None) if callable(step) else None
        if code is not None:
            watched[code] = (stages[stage], pick)
    previous = sys.getprofile()
    sys.setprofile(_returns_into(watched))  # this thread's alone: the module's names stay as they are
    try:
        with torch.no_grad():
            out = layer(x, cos, sin, attention_mask=attention_mask)
    finally:
        sys.setprofile(previous)
        for hook in hooks:
            hook.remove()
    return out, {name: tuple(tensors) for name, tensors in stages.items()}


def _returns_into(watched: dict):
    """A profile function (``sys.setprofile``) that appends ``pick(what it returned)`` to ``into`` whenever a
    function whose code is in ``watched`` (code -> ``(into, pick)``) returns a tensor that way."""
    def profile(frame, event, result):
        if event != "return" or frame.f_code not in watched:
            return
        into, pick = watched[frame.f_code]
        try:
            picked = pick(result)
        except (TypeError, IndexError, KeyError):
            return
        if isinstance(picked, torch.Tensor):
            into.append(picked)
    return profile


def _hook_stages(layer, stages: dict) -> list:
    """Hooks that record q_norm's input (the split query), both norms' outputs and o_proj's input."""
    q_norm, k_norm, o_proj = (getattr(layer, name, None) for name in ("q_norm", "k_norm", "o_proj"))
    hooks = []
    if isinstance(q_norm, nn.Module):
        hooks.append(q_norm.register_forward_pre_hook(lambda module, inputs: stages["split"].append(inputs[0])))
    for norm in (q_norm, k_norm):
        if isinstance(norm, nn.Module):
            hooks.append(norm.register_forward_hook(lambda module, inputs, out: stages["norm"].append(out)))
    if isinstance(o_proj, nn.Module):
        hooks.append(o_proj.register_forward_pre_hook(lambda module, inputs: stages["gate"].append(inputs[0])))
    return hooks


# --- 08: the recurrent rules, the causal conv and the Gated DeltaNet layer, continued from their states ---

def kept_state(state, dtype: torch.dtype):
    """A state that the code under test handed back, as graded for input of ``dtype``: one kept in float32, as
    Hugging Face's kernels and its cache keep every state whatever the input, counts as one in the input's dtype.
    The one rule for every state of 08, the rules' and the layer cache's; any other dtype is left for the
    comparison to refuse."""
    if isinstance(state, torch.Tensor) and state.dtype == torch.float32 != dtype:
        return state.to(dtype)
    return state


def _with_kept_state(result, dtype: torch.dtype):
    """``(out, state)`` with the state as graded (``kept_state``); anything else as it is, for the comparison."""
    if isinstance(result, (tuple, list)) and len(result) == 2:
        return result[0], kept_state(result[1], dtype)
    return result


def _in_two_calls(fn, first: tuple, rest: tuple, kwargs: dict, state_name: str, dim: int) -> tuple:
    """``fn(*first, **kwargs)``, then ``fn(*rest, **kwargs, state_name=the state it returned)``: the two
    outputs joined along ``dim`` and the last state."""
    out, state = pair(fn(*first, **kwargs), fn.__name__)
    more, state = pair(fn(*rest, **{**kwargs, state_name: state}), fn.__name__)
    return torch.cat([out, more], dim=dim), state


def call_rule(fn, case: Case) -> tuple:
    """A rule ``fn(q, k, v, *per_position, state=None, **options) → (o, state)`` (q, k, v ``[B, H, T, D]``, the
    per-position tensors such as g and beta ``[B, H, T]``), called once; or, when ``case.kwargs`` holds a
    ``split``, on the first ``split`` positions and then from the state it returned on the rest:
    ``(o of both calls joined along T, the last state)``, which one call over the whole sequence gives too.
    The other kwargs (a ``state`` to start from, ``chunk_size``) go to both calls."""
    kwargs = dict(case.kwargs)
    split = kwargs.pop("split", None)
    if split is None:
        return _with_kept_state(fn(*case.args, **kwargs), case.dtype)

    def part(t, where):
        return t[..., where, :] if t.dim() == 4 else t[..., where]
    return _with_kept_state(_in_two_calls(fn, tuple(part(t, slice(None, split)) for t in case.args),
                                          tuple(part(t, slice(split, None)) for t in case.args), kwargs, "state", -2),
                            case.dtype)


class PerPosition(RuntimeError):
    """Raised in the student's code once it has made more state-shaped tensors than a chunked rule would."""


class _StateWatch(torch.overrides.TorchFunctionMode):
    """Counts the float tensors shaped like the state, ``[..., Dk, Dv]`` or ``[..., Dv, Dk]``, that the code
    makes: a rule that works a chunk at a time makes a few per chunk (the decayed state, the chunk's write, their
    sum), one that steps through the positions makes at least one per position. Only sound where no other
    tensor of the rule can have that shape: Dk ≠ Dv, and neither is T or a chunk's length (see ``call_chunkwise``)."""

    PER_CHUNK, SPARE = 8, 8  # generous: Hugging Face's chunked rule makes 3 per chunk and 2 more

    def __init__(self, key_dim: int, value_dim: int, length: int, chunk_size: int):
        super().__init__()
        self.shapes = {(key_dim, value_dim), (value_dim, key_dim)}
        self.length, self.chunk_size, self.made = length, chunk_size, 0
        self.chunks = -(-length // chunk_size)
        self.limit = self.PER_CHUNK * self.chunks + self.SPARE

    def __torch_function__(self, func, types, args=(), kwargs=None):
        result = func(*args, **(kwargs or {}))
        if (isinstance(result, torch.Tensor) and result.is_floating_point() and result.dim() >= 2
                and tuple(result.shape[-2:]) in self.shapes):
            self.made += 1
            if self.made > self.limit:
                raise PerPosition(f"到这一步，代码已经算出了 {self.made} 个状态形状 {list(result.shape)} 的张量，可 T = "
                                  f"{self.length}、chunk_size = {self.chunk_size} 只有 {self.chunks} 块：按块计算时，每块只更新"
                                  "一次状态（块内用矩阵乘法一次算完），不会每个位置都更新一次。")
        return result


def call_chunkwise(fn, case: Case) -> tuple:
    """``call_rule`` for a chunked rule ``fn(q, k, v, g, beta, chunk_size=64, state=None)``, stopped once a call
    has made more state-shaped tensors than a few per chunk (``PerPosition``): the recurrent loop, one position
    at a time, gives the same numbers but is not the chunked form. Watched only where the shapes are unambiguous."""
    q, v = case.args[0], case.args[2]
    key_dim, value_dim = q.shape[-1], v.shape[-1]
    chunk_size = case.kwargs.get("chunk_size", 64)
    split = case.kwargs.get("split")
    lengths = {q.shape[-2]} if split is None else {split, q.shape[-2] - split}
    ambiguous = {length for t in lengths for length in (t, min(t, chunk_size), t % chunk_size)}
    if key_dim == value_dim or {key_dim, value_dim} & ambiguous:
        return call_rule(fn, case)

    @functools.wraps(fn)
    def watched(q, *args, **kwargs):
        with _StateWatch(key_dim, value_dim, q.shape[-2], chunk_size):
            return fn(q, *args, **kwargs)
    return call_rule(watched, case)


def call_conv(fn, case: Case) -> tuple:
    """``fn(x, weight, conv_state=None) → (y, conv_state)`` called once; or, when ``case.kwargs`` holds a
    ``split``, on the first ``split`` positions of ``x [B, C, T]`` and then from the conv state it returned on
    the rest: ``(y of both calls joined along T, the last conv state)``. A ``conv_state`` among the kwargs is
    where the first call starts."""
    kwargs = dict(case.kwargs)
    split = kwargs.pop("split", None)
    if split is None:
        return _with_kept_state(fn(*case.args, **kwargs), case.dtype)
    x, weight = case.args
    return _with_kept_state(_in_two_calls(fn, (x[..., :split], weight), (x[..., split:], weight), kwargs,
                                          "conv_state", -1), case.dtype)


def call_recurrent_decoder(cls, case: Case):
    """A Gated DeltaNet layer's ``forward(x, attention_mask=None, cache=None) → (out, cache)``: on the whole of
    x (``out``), or through one ``GatedDeltaNetCache`` (the one defined next to ``cls``) in the chunks
    ``case.kwargs["steps"]`` gives, each call seeing the mask's columns up to its last position. Then returns
    the outputs joined along the sequence and what the cache holds at the end: ``(out, conv_state,
    recurrent_state)``, the states as graded (``kept_state``: kept in float32, as Hugging Face keeps them, is
    right)."""
    attention_mask, steps = case.kwargs.get("attention_mask"), case.kwargs.get("steps")
    if steps is None:
        return _run_decoder(cls, case, "GatedDeltaNetCache", "forward")
    init, weights, x = case.args
    with torch.no_grad():
        cache = neighbour(cls, "GatedDeltaNetCache")()
        out = _feed(build(cls, init, weights, case.dtype), cache, x, attention_mask, steps, "就地更新它的状态")
    return out, kept_state(cache.conv_state, case.dtype), kept_state(cache.recurrent_state, case.dtype)


PROTOCOLS = {fn.__name__: fn for fn in (call_function, call_blockwise, call_module, call_decoder, call_latent_decoder,
                                         call_absorbed_decoder, call_generate, call_sample_generate, call_cache, call_norm,
                                         call_layer, call_rule, call_chunkwise, call_conv,
                                         call_recurrent_decoder)}

# The student's own classes that a protocol hands to the code under test, whatever that code names: the cache
# a decoder is given, the attention in every layer of the real model.
PULLED = {"call_decoder": ("KVCache",), "call_latent_decoder": ("LatentKVCache",),
          "call_absorbed_decoder": ("LatentKVCache",), "call_generate": ("LlamaAttention",),
          "call_sample_generate": ("LlamaAttention",)}
