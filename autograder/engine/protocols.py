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
from dataclasses import dataclass, field, replace

import torch
from torch import nn

from autograder.engine.sandbox.walls import GraderProblem


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


def build(cls, init: tuple, weights: dict, dtype: torch.dtype) -> nn.Module:
    """``cls(*init)`` converted to ``dtype`` with ``weights`` loaded; a wrong parameter layout is a clear
    message instead of a ``load_state_dict`` dump."""
    module = cls(*init).to(dtype)
    have = {name: list(t.shape) for name, t in module.state_dict().items()}
    problems = _layout_problems(have, {name: list(t.shape) for name, t in weights.items()})
    if problems:
        raise ValueError("参数和约定不一致：" + "；".join(problems)
                         + "。投影层用 nn.Linear(..., bias=False)，名字按练习里的约定（q_proj、k_proj、v_proj、o_proj ……）。")
    module.load_state_dict(weights)
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


def _cache_class(cls, name: str):
    """The cache class ``name`` defined next to ``cls``: the student's module decodes with the student's own
    cache, the reference with the reference's."""
    cache = cls.forward.__globals__.get(name)
    if cache is None:
        raise NameError(f"找不到 {name}：{cls.__name__} 解码时要用你自己写的 {name} 类。")
    return cache


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
    outputs, end = [], 0
    for n in steps:
        start, end = end, end + n
        mask = None if attention_mask is None else attention_mask[:, :end]
        out, returned = pair(step(x[:, start:end], attention_mask=mask, cache=cache), "带 cache 的 forward")
        if returned is not cache:
            raise TypeError("带 cache 调用 forward 时应返回 (out, cache)，cache 就是传进来的那个对象（update 就地追加）。")
        outputs.append(out)
    found = torch.cat(outputs, dim=1), len(cache), torch.tensor(stored, dtype=torch.long)
    return (*found, _handed(handed)) if values else found


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
        return _decode(step, _cache_class(cls, cache_name)(), x, attention_mask, steps, values)


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
    attention = fn.__globals__.get("LlamaAttention")
    if attention is None:
        raise NameError(f"找不到 LlamaAttention：{fn.__name__} 要在模型的每一层里用你自己写的 LlamaAttention。")
    kwargs = {} if attention_mask is None else {"attention_mask": attention_mask}
    fed, hooks = [], []

    def record(module, args, named):
        ids = args[0] if args else named.get("input_ids")
        if isinstance(ids, torch.Tensor) and ids.dim() != 2:
            raise ValueError(f"第 {len(fed) + 1} 次调用模型时，input_ids 的形状是 {list(ids.shape)}，应是 [B, T] 两维："
                             "argmax 选出的下一个 token 是 [B]，要写成 argmax(dim=-1, keepdim=True) 或 [:, None] 变成 [B, 1]。")
        fed.append(ids.shape[-1] if isinstance(ids, torch.Tensor) else 0)

    def build() -> nn.Module:
        model = real_model(folder, attention)
        hooks.append(model.register_forward_pre_hook(record, with_kwargs=True))
        return model

    try:
        with torch.no_grad():
            tokens = fn(_OnFirstUse(build), input_ids, max_new_tokens, **kwargs)
    finally:
        for hook in hooks:
            hook.remove()
    return tokens, torch.tensor(sum(fed) <= input_ids.shape[-1] + max_new_tokens)


class _OnFirstUse:
    """Stands for the model and builds it the first time the code under test uses it: a loop that is not
    written yet fails as such, before the attention it would run is even built."""

    def __init__(self, build):
        self._build, self._model = build, None

    def _real(self) -> nn.Module:
        if self._model is None:
            self._model = self._build()
        return self._model

    def __getattr__(self, name):
        return getattr(self._real(), name)

    def __call__(self, *args, **kwargs):
        return self._real()(*args, **kwargs)


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
    space = cls.forward.__globals__
    originals = {name: space.get(name) for name in ("apply_partial_rope", "attention")}
    for name, stage, pick in (("apply_partial_rope", "rope", lambda r: r), ("attention", "attention", lambda r: r[0])):
        if callable(originals[name]):
            space[name] = _recording(originals[name], stages[stage], pick)
    try:
        with torch.no_grad():
            out = layer(x, cos, sin, attention_mask=attention_mask)
    finally:
        space.update(originals)
        for hook in hooks:
            hook.remove()
    return out, {name: tuple(tensors) for name, tensors in stages.items()}


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


def _recording(fn, into: list, pick):
    """``fn``, also appending ``pick(its result)`` to ``into`` when that is a tensor."""
    def recorded(*args, **kwargs):
        result = fn(*args, **kwargs)
        try:
            picked = pick(result)
        except (TypeError, IndexError, KeyError):
            picked = None
        if isinstance(picked, torch.Tensor):
            into.append(picked)
        return result
    return recorded


PROTOCOLS = {fn.__name__: fn for fn in (call_function, call_module, call_decoder, call_latent_decoder,
                                         call_absorbed_decoder, call_generate, call_cache, call_norm, call_layer)}

# The student's own classes that a protocol hands to the code under test, whatever that code names: the cache
# a decoder is given, the attention in every layer of the real model.
PULLED = {"call_decoder": ("KVCache",), "call_latent_decoder": ("LatentKVCache",),
          "call_absorbed_decoder": ("LatentKVCache",), "call_generate": ("LlamaAttention",)}
