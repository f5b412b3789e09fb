"""The protocols of 08: the recurrent rules (``call_rule``), the causal conv (``call_conv``) and the Gated
DeltaNet layer (``call_recurrent_decoder``), each also continued from the state it handed back, which must give
what one call over the whole sequence gives."""
import inspect

import torch
from torch import nn

from course.protocols.case import Case, build, neighbour, pair
from course.protocols.modules import feed, pair_out, watching_returns

# What ``call_recurrent_decoder`` records on the way through a Gated DeltaNet layer run whole: what the notebook's
# steps (methods of the layer) returned, and the gated norm's output, for locating the first step that differs.
DELTANET_STAGES = ("convolve", "heads", "gates", "core", "norm")
_PICKS = {"convolve": lambda r: r[0], "heads": tuple, "gates": tuple, "core": lambda r: r[0]}


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
    x (``(out, stages)``, see ``_whole``), or through one ``GatedDeltaNetCache`` (the one defined next to ``cls``) in the chunks
    ``case.kwargs["steps"]`` gives, each call seeing the mask's columns up to its last position. Then returns
    the outputs joined along the sequence and what the cache holds at the end: ``(out, conv_state,
    recurrent_state)``, the states as graded (``kept_state``: kept in float32, as Hugging Face keeps them, is
    right)."""
    attention_mask, steps = case.kwargs.get("attention_mask"), case.kwargs.get("steps")
    init, weights, x = case.args
    if steps is None:
        layer = build(cls, init, weights, case.dtype)
        _check_norm_starts_at_one(layer, init[0])
        return _whole(layer, x, attention_mask)
    with torch.no_grad():
        cache = neighbour(cls, "GatedDeltaNetCache")()
        out = feed(build(cls, init, weights, case.dtype), cache, x, attention_mask, steps, "就地更新它的状态")
    return out, kept_state(cache.conv_state, case.dtype), kept_state(cache.recurrent_state, case.dtype)


def _check_norm_starts_at_one(layer, config) -> None:
    """The layer's output norm is a plain RMSNorm, whose weight starts at ones (Hugging Face's, and the
    notebook's own check): a fresh one of the layer's norm class is built to see it. The weights graded are always
    loaded, so no output could show it."""
    norm = getattr(layer, "norm", None)
    try:
        fresh = type(norm)(config.linear_value_head_dim, config.rms_norm_eps)
    except Exception:  # noqa: BLE001 - a norm built otherwise is judged by its outputs alone
        return
    weight = getattr(fresh, "weight", None)
    if isinstance(weight, torch.Tensor) and weight.is_floating_point() and not bool((weight == 1).all()):
        raise ValueError(f"新建的 {type(norm).__name__} 的 weight 应从 1 开始（普通 RMSNorm，乘 weight；不是作业 06 那种从 0 "
                         f"开始、乘 (1 + weight) 的零中心 norm），得到的前几个值是 {weight.flatten()[:4].tolist()}。")


def _whole(layer, x, attention_mask) -> tuple:
    """``layer(x, attention_mask)`` without a cache: ``(out, stages)``, ``stages`` holding what each step of
    ``DELTANET_STAGES`` gave, as far as the layer has them (only ``out`` is graded)."""
    stages = {name: [] for name in DELTANET_STAGES}
    watched = {}
    for name, pick in _PICKS.items():
        step = getattr(type(layer), name, None)
        code = getattr(inspect.unwrap(step), "__code__", None) if callable(step) else None
        if code is not None:
            watched[code] = (stages[name], pick)
    norm = getattr(layer, "norm", None)
    hook = norm.register_forward_hook(lambda module, inputs, out: stages["norm"].append(out)) \
        if isinstance(norm, nn.Module) else None
    try:
        with torch.no_grad(), watching_returns(watched):
            out = pair_out(layer(x, **({} if attention_mask is None else {"attention_mask": attention_mask})), "forward")
    finally:
        if hook is not None:
            hook.remove()
    return out, {name: tuple(tensors) for name, tensors in stages.items()}


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
