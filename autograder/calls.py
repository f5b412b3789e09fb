"""How the code under test is called: a ``Case`` holds the inputs, a call protocol turns a function or
class into outputs. One definition serves both sides: in the sandbox the protocols call the student's
code; in the grader they call the reference and the known mistakes.

This module runs inside the sandbox, so it imports torch and nothing of the course: no reference, no
check. Errors raised here reach the student, so they say in Chinese what the code should look like.
"""
from dataclasses import dataclass, field, replace

import torch
from torch import nn


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


def _cache_class(cls):
    """The ``KVCache`` defined next to ``cls``: the student's module decodes with the student's own cache,
    the reference with the reference's."""
    cache = cls.forward.__globals__.get("KVCache")
    if cache is None:
        raise NameError("找不到 KVCache：GroupedQueryAttention 解码时要用你自己写的 KVCache 类。")
    return cache


def _decode(module, cache, x, attention_mask, steps) -> tuple:
    """Feed ``x`` through ``module`` in chunks of ``steps`` positions, one ``cache`` for all of them.

    Returns the outputs joined along the sequence, ``len(cache)`` at the end, and the shape of every ``k``
    the module handed to ``cache.update`` (the cache must hold the KV heads, not the repeated ones).
    """
    stored = []
    update = cache.update

    def recording_update(k, v):
        stored.append(list(k.shape))
        return update(k, v)

    cache.update = recording_update
    outputs, end = [], 0
    for n in steps:
        start, end = end, end + n
        mask = None if attention_mask is None else attention_mask[:, :end]
        out, returned = pair(module(x[:, start:end], attention_mask=mask, cache=cache), "带 cache 的 forward")
        if returned is not cache:
            raise TypeError("带 cache 调用 forward 时应返回 (out, cache)，cache 就是传进来的那个对象（update 就地追加）。")
        outputs.append(out)
    return torch.cat(outputs, dim=1), len(cache), torch.tensor(stored, dtype=torch.long)


def call_decoder(cls, case: Case):
    """A module with ``forward(x, attention_mask=None, cache=None) → (out, cache)``: run it on the whole of x,
    or decode x through one cache in the chunks ``case.kwargs["steps"]`` gives."""
    init, weights, x = case.args
    attention_mask, steps = case.kwargs.get("attention_mask"), case.kwargs.get("steps")
    with torch.no_grad():
        module = build(cls, init, weights, case.dtype)
        if steps is None:
            kwargs = {} if attention_mask is None else {"attention_mask": attention_mask}
            out, _ = pair(module(x, **kwargs), "forward")
            return out
        return _decode(module, _cache_class(cls)(), x, attention_mask, steps)


def call_cache(cls, case: Case) -> tuple:
    """A fresh cache, then ``update`` with each (k, v) of the case: its return values and ``len()`` as it goes."""
    (steps,) = case.args
    cache = cls()
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


def call_layer(cls, case: Case):
    """Build a layer from its config, load the weights in the case's dtype, run ``forward(x, cos, sin, mask)``."""
    cfg, weights, x, cos, sin, attention_mask = case.args
    layer = build(cls, (cfg,), weights, x.dtype)
    with torch.no_grad():
        return layer(x, cos, sin, attention_mask=attention_mask)


PROTOCOLS = {fn.__name__: fn for fn in (call_function, call_module, call_decoder, call_cache, call_norm, call_layer)}
