"""The protocols of modules: built from their weights in the case's dtype and run whole (``call_module``,
``call_norm``, ``call_layer`` with the stages it passes through), or decoded through a cache of the student's
own in chunks (``call_decoder`` and MLA's two), and the caches themselves (``call_cache``)."""
import contextlib
import inspect
import sys

import torch
from torch import nn

from course.protocols.case import Case, build, neighbour, pair


def call_module(cls, case: Case):
    """A module with an ``(init, weights, x)`` case: build it in the case's dtype, run ``forward(x, **kwargs)``."""
    init, weights, x = case.args
    with torch.no_grad():
        return build(cls, init, weights, case.dtype)(x, **case.kwargs)


def call_decoder(cls, case: Case):
    """GQA's ``forward``, decoding through the ``KVCache`` next to it."""
    return run_decoder(cls, case, "KVCache", "forward")


def call_latent_decoder(cls, case: Case):
    """MLA's ``forward``, decoding through the ``LatentKVCache`` next to it: the course's MLA caches the normalised
    latent and the rotated rope key, so what it hands the cache is graded too."""
    return run_decoder(cls, case, "LatentKVCache", "forward", values=True)


def call_absorbed_decoder(cls, case: Case):
    """MLA's ``forward_absorbed``, decoding through the ``LatentKVCache`` next to it (what it hands the cache too)."""
    return run_decoder(cls, case, "LatentKVCache", "forward_absorbed", values=True)


def run_decoder(cls, case: Case, cache_name: str, method: str, values: bool = False):
    """A module with ``method(x, attention_mask=None, cache=None) → (out, cache)``: run it on the whole of x,
    or decode x through one cache in the chunks ``case.kwargs["steps"]`` gives (``values``: see ``_decode``)."""
    init, weights, x = case.args
    attention_mask, steps = case.kwargs.get("attention_mask"), case.kwargs.get("steps")
    with torch.no_grad():
        module = build(cls, init, weights, case.dtype)
        step = getattr(module, method)
        if steps is None:
            return pair_out(step(x, **({} if attention_mask is None else {"attention_mask": attention_mask})), method)
        return _decode(step, neighbour(cls, cache_name)(), x, attention_mask, steps, values)


def pair_out(result, method: str):
    """The ``out`` of what ``method`` returned when called without a cache, which must be ``(out, None)``."""
    out, returned = pair(result, method)
    if returned is not None:
        raise TypeError(f"不带 cache 调用 {method} 时应返回 (out, None)：返回的 cache 就是传进来的那个，"
                        f"没有传就是 None，得到的是 {type(returned).__name__}。")
    return out


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
    found = feed(step, cache, x, attention_mask, steps, "update 就地追加"), len(cache), torch.tensor(stored, dtype=torch.long)
    return (*found, _handed(handed)) if values else found


def feed(step, cache, x, attention_mask, steps, in_place: str) -> torch.Tensor:
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
    watched = {}
    for name, stage, pick in (("apply_partial_rope", "rope", lambda r: r), ("attention", "attention", lambda r: r[0])):
        step = neighbour(cls, name, None)
        code = getattr(inspect.unwrap(step), "__code__", None) if callable(step) else None
        if code is not None:
            watched[code] = (stages[stage], pick)
    try:
        with torch.no_grad(), watching_returns(watched):
            out = layer(x, cos, sin, attention_mask=attention_mask)
    finally:
        for hook in hooks:
            hook.remove()
    return out, {name: tuple(tensors) for name, tensors in stages.items()}


def _returns_into(watched: dict):
    """A profile function (``sys.setprofile``) that appends ``pick(what it returned)`` to ``into`` whenever a
    function whose code is in ``watched`` (code -> ``(into, pick)``) returns a tensor that way (or a tuple of
    tensors, each appended)."""
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
        elif isinstance(picked, tuple) and picked and all(isinstance(t, torch.Tensor) for t in picked):
            into.extend(picked)
    return profile


@contextlib.contextmanager
def watching_returns(watched: dict):
    """A context in which ``_returns_into(watched)`` sees this thread's returns (the module's names stay as
    they are)."""
    previous = sys.getprofile()
    sys.setprofile(_returns_into(watched))
    try:
        yield
    finally:
        sys.setprofile(previous)


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
