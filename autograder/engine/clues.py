"""Facts about a wrong output, in the student's terms, for when no known mistake explains it: a constant factor
(and which of the case's sizes it equals), axes swapped, a shift along an axis, errors confined to some
positions, rows that do not sum to 1, zeros that are not zero, and which cases came out right.

A clue states what is true of the output; it never names a mistake the code was not shown to make.
"""
import inspect
import itertools
import math
from collections.abc import Sequence

import torch

from course.protocols import Case

MAX_CLUES = 3
_LISTED = 4  # case labels listed per side when saying which cases came out right


def _close(a: torch.Tensor, b: torch.Tensor, tol) -> bool:
    return a.shape == b.shape and bool(((a - b).abs() <= tol.atol + tol.rtol * b.abs()).all())


def _parts(got, want, names: tuple[str, ...], name="输出"):
    """The (name, got, want) float tensor pairs of an output, in order (tuples taken apart)."""
    if isinstance(want, (tuple, list)) and isinstance(got, (tuple, list)) and len(got) == len(want):
        names = names or tuple(f"{name}[{i}]" for i in range(len(want)))
        for g, w, n in zip(got, want, names):
            yield from _parts(g, w, (), n)
    elif isinstance(want, torch.Tensor) and isinstance(got, torch.Tensor) and want.is_floating_point() \
            and got.is_floating_point():
        yield name, got.detach().double(), want.double()


def named_sizes(reference, case: Case) -> dict[float, str]:
    """The sizes a case is made of, each with every place it comes from: ``{8.0: "q 的最后一维 8、k 的最后一维 8"}``."""
    sizes: dict[float, list[str]] = {}

    def add(value, label):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 1:
            return
        places = sizes.setdefault(float(value), [])
        if label not in places:
            places.append(label)

    try:
        target = reference.__init__ if inspect.isclass(reference) else reference
        params = [p for p in inspect.signature(target).parameters if p != "self"]
    except (TypeError, ValueError):
        params = []
    args = case.args
    if inspect.isclass(reference) and args and isinstance(args[0], tuple):
        args = (*args[0], *args[1:])  # a module's case: (init, weights, x)
    for index, value in enumerate(args):
        name = params[index] if index < len(params) else f"第 {index + 1} 个参数"
        if isinstance(value, torch.Tensor) and value.dim():
            for axis, size in enumerate(value.shape):
                where = "最后一维" if axis == value.dim() - 1 else f"第 {axis} 维"
                add(size, f"{name} 的{where} {size}")
        elif hasattr(value, "__dict__") and not isinstance(value, torch.nn.Module):
            for attr, attr_value in vars(value).items():
                add(attr_value, f"{attr} = {attr_value}")
        else:
            add(value, f"{name} = {value}")
    ints = {label.split(" = ")[0]: size for size, labels in sizes.items() for label in labels if " = " in label}
    if "hidden_size" in ints and "num_heads" in ints:
        add(ints["hidden_size"] / ints["num_heads"], f"hidden_size / num_heads = {ints['hidden_size'] / ints['num_heads']:g}")
    return {size: "、".join(labels) for size, labels in sizes.items()}


def _factor_names(factor: float, sizes: dict[float, str]) -> list[str]:
    found = []
    for size, label in sizes.items():
        for value, shown in ((size, f"{size:g}"), (math.sqrt(size), f"√{size:g}"), (1 / size, f"1/{size:g}"),
                             (1 / math.sqrt(size), f"1/√{size:g}")):
            if math.isclose(abs(factor), value, rel_tol=2e-3):
                found.append(f"{'−' if factor < 0 else ''}{shown}（{label}）")
    return found


def _constant_factor(got, want, tol, sizes) -> str | None:
    norm = float((want * want).sum())
    if norm == 0:
        return None
    factor = float((got * want).sum()) / norm
    if math.isclose(factor, 1.0, rel_tol=1e-3) or abs(factor) < 1e-6 or not _close(got, factor * want, tol):
        return None  # 0 times the reference is an output of zeros, which _zeros_not_zero and the numbers say
    if math.isclose(factor, -1.0, rel_tol=1e-3):
        return "每个数的大小都对，只是符号全反了（正好是参考的 −1 倍）。"
    names = _factor_names(factor, sizes)
    said = f"，也就是 {' 或 '.join(names)}" if names else ""
    return f"整个输出正好是参考的 {factor:.6g} 倍{said}：差的是一个统一的缩放系数。"


def _constant_offset(got, want, tol) -> str | None:
    diff = got - want
    offset = float(diff.mean())
    if abs(offset) <= tol.atol or not _close(got, want + offset, tol):
        return None
    return f"每个位置都比参考多了同一个数 {offset:.6g}。"


def _axes_swapped(got, want, tol) -> str | None:
    if got.dim() != want.dim() or got.dim() > 6 or got.dim() < 2:
        return None
    for order in itertools.permutations(range(want.dim())):
        if list(order) == list(range(want.dim())):
            continue
        moved = want.permute(order)
        if moved.shape == got.shape and _close(got, moved, tol):
            swapped = [i for i, j in enumerate(order) if i != j]
            if len(swapped) == 2:
                a, b = swapped
                return (f"数值都对，但第 {a} 维和第 {b} 维对调了（维度从 0 数；期望 shape {list(want.shape)}，"
                        f"得到 {list(got.shape)}）。")
            return (f"数值都对，但维度的顺序不对：你的第 i 维是参考的第 {list(order)}[i] 维"
                    f"（期望 shape {list(want.shape)}，得到 {list(got.shape)}）。")
    return None


def _shifted(got, want, tol) -> str | None:
    if got.shape != want.shape:
        return None
    for axis in range(want.dim()):
        size = want.shape[axis]
        if size < 2:
            continue
        if _close(got, want.flip(axis), tol):
            return f"数值都在，但第 {axis} 维（大小 {size}）的顺序整个反了过来。"
        for step in (1, -1, 2, -2):
            if abs(step) >= size:
                continue
            keep = [slice(None)] * want.dim()
            keep[axis] = slice(max(step, 0), size + min(step, 0))
            moved = want.roll(step, axis)
            if _close(got[tuple(keep)], moved[tuple(keep)], tol) and not _close(got, want, tol):
                return (f"沿第 {axis} 维（大小 {size}）错开了 {abs(step)} 个位置：你在位置 i 的值是参考在位置 "
                        f"i {'−' if step > 0 else '+'} {abs(step)} 的值。")
    return None


def _spans(indices: list[int]) -> str:
    runs, start = [], None
    for i, index in enumerate(indices):
        if start is None:
            start = index
        if i + 1 == len(indices) or indices[i + 1] != index + 1:
            runs.append(f"{start}" if start == index else f"{start}–{index}")
            start = None
    return "、".join(runs[:6]) + ("……" if len(runs) > 6 else "")


def _confined(got, want, tol) -> str | None:
    """Wrong values only at some indices of one axis (the rotary dims, some heads, the last positions...)."""
    if got.shape != want.shape or got.dim() == 0:
        return None
    wrong = ((got - want).abs() > tol.atol + tol.rtol * want.abs()) | (got.isnan() != want.isnan())
    if not wrong.any():
        return None
    best = None
    for axis in range(want.dim()):
        size = want.shape[axis]
        if size < 2:
            continue
        bad = wrong.movedim(axis, 0).reshape(size, -1).any(dim=1).nonzero().flatten().tolist()
        if len(bad) < size and (best is None or len(bad) / size < best[2] / best[1]):
            best = (axis, size, len(bad), bad)
    if best is None:
        return None
    axis, size, count, bad = best
    return (f"错只出在第 {axis} 维（大小 {size}）的 {count} 个位置上：{_spans(bad)}；"
            f"这一维的其他位置全对。")


def _rows_sum_to_one(got, want) -> str | None:
    if want.dim() == 0 or (want < 0).any():
        return None
    want_sums, got_sums = want.sum(-1), got.sum(-1)
    if not bool(((want_sums - 1).abs() < 1e-6).logical_or(want_sums.abs() < 1e-12).all()):
        return None
    off = ((got_sums - want_sums).abs() > 1e-3).nonzero()
    if not len(off):
        return None
    where = tuple(off[0].tolist())
    return (f"每一行（最后一维）加起来应该是 1（整行被遮住的是 0），你有 {len(off)} 行不是："
            f"比如 {list(where)} 那一行加起来是 {float(got_sums[where]):.4g}。")


def _zeros_not_zero(got, want) -> str | None:
    zero = want == 0
    if not zero.any() or zero.all():
        return None
    off = (zero & (got.abs() > 1e-6)).nonzero()
    if not len(off):
        return None
    return (f"参考里正好是 0 的 {int(zero.sum())} 个位置（比如被遮住的位置），你有 {len(off)} 个不是 0："
            f"第一个在 {off[0].tolist()}，是 {float(got[tuple(off[0].tolist())]):.4g}。")


def _not_finite(got, want) -> str | None:
    bad = ~got.isfinite() & want.isfinite()
    if not bad.any():
        return None
    first = bad.nonzero()[0].tolist()
    return f"输出里有 {int(bad.sum())} 个 inf 或 NaN，参考在那里是有限的数：第一个在 {first}。"


def _one_axis_longer_or_shorter(got, want) -> str | None:
    """The output is the reference cut short, or the reference with extra entries, along one axis."""
    if not (isinstance(got, torch.Tensor) and isinstance(want, torch.Tensor)) or got.dim() != want.dim():
        return None
    differ = [axis for axis in range(want.dim()) if got.shape[axis] != want.shape[axis]]
    if len(differ) != 1:
        return None
    axis = differ[0]
    common = min(got.shape[axis], want.shape[axis])
    if not torch.equal(got.narrow(axis, 0, common).double(), want.narrow(axis, 0, common).double()):
        return None
    more = got.shape[axis] - want.shape[axis]
    return (f"沿第 {axis} 维，前 {common} 个都和参考一样，只是{'多了' if more > 0 else '少了'} {abs(more)} 个"
            f"（期望 {want.shape[axis]} 个，得到 {got.shape[axis]} 个）。")


def _unit_axes(got, want) -> str | None:
    """The output is the reference with a dimension of size 1 added or missing (values unchanged)."""
    if not (isinstance(got, torch.Tensor) and isinstance(want, torch.Tensor)) or got.dim() == want.dim() \
            or [n for n in got.shape if n != 1] != [n for n in want.shape if n != 1]:
        return None
    if not torch.equal(got.reshape(want.shape).double(), want.double()):
        return None
    more = got.dim() > want.dim()
    return (f"数值都和参考一样，只是{'多了' if more else '少了'}大小为 1 的维（期望 {list(want.shape)}，得到 {list(got.shape)}）："
            + ("是不是 stack 了 [B, 1] 的张量（该用 cat），或者少了一次 squeeze？" if more else "是不是多 squeeze 了一次？"))


def _is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _about_count(got, want, sizes) -> list[str]:
    """A count (bytes, FLOPs) off by a factor that is one of the case's sizes or a small whole number: on one
    number every other ratio is true and says nothing."""
    if not want or not got:
        return []
    factor = got / want
    names = _factor_names(factor, sizes)
    whole = next((n for n in (2, 3, 4) if math.isclose(factor, n) or math.isclose(factor, 1 / n)), None)
    if not names and whole is None:
        return []
    said = "，也就是 " + " 或 ".join(names) if names else ""
    return [f"你的结果正好是期望的 {factor:.6g} 倍{said}：少乘或多乘了一个因子。"]


def about_output(reference, case: Case, got, want, tol, names: tuple[str, ...] = ()) -> list[str]:
    """Facts about ``got`` against ``want`` (the reference's output, float64) on ``case``, the most telling first."""
    if _is_number(got) and _is_number(want):
        return _about_count(got, want, named_sizes(reference, case))
    pairs = zip(got, want) if isinstance(got, (tuple, list)) and isinstance(want, (tuple, list)) else [(got, want)]
    for g, w in pairs:
        cut = _one_axis_longer_or_shorter(g, w) or _unit_axes(g, w)
        if cut:
            return [cut]
    sizes = named_sizes(reference, case)
    mixed = _which_parts(got, want, tol, names)
    for name, g, w in _parts(got, want, names):
        if g.shape == w.shape and _close(g, w, tol):
            continue
        prefix = f"{name}：" if name != "输出" else ""
        found = [_not_finite(g, w)] if g.shape == w.shape else []
        # A factor or an offset says something only about many numbers, all of them finite.
        if g.shape == w.shape and g.numel() > 1 and bool(g.isfinite().all()):
            found += [_constant_factor(g, w, tol, sizes), _constant_offset(g, w, tol)]
        found += [_axes_swapped(g, w, tol), _shifted(g, w, tol)]
        if g.shape == w.shape:
            found += [_rows_sum_to_one(g, w), _zeros_not_zero(g, w), _confined(g, w, tol)]
        found = [prefix + clue for clue in found if clue][:MAX_CLUES - bool(mixed)]
        return found + [mixed] if mixed else found
    return [mixed] if mixed else []


def _same_part(got, want, tol) -> bool:
    if isinstance(want, torch.Tensor):
        if not isinstance(got, torch.Tensor) or got.shape != want.shape:
            return False
        if want.is_floating_point() and got.is_floating_point():
            return _close(got.detach().double().nan_to_num(), want.double().nan_to_num(), tol)
        return torch.equal(got, want)
    return type(got) is type(want) and got == want


def _which_parts(got, want, tol, names: tuple[str, ...]) -> str | None:
    """Of an output of several parts, which came out right and which wrong, when some of each."""
    if not (isinstance(got, (tuple, list)) and isinstance(want, (tuple, list))) or len(got) != len(want) or len(want) < 2:
        return None
    names = names or tuple(f"第 {i + 1} 个返回值" for i in range(len(want)))
    same = [_same_part(g, w, tol) for g, w in zip(got, want)]
    if all(same) or not any(same):
        return None
    right = "、".join(n for n, ok in zip(names, same) if ok)
    wrong = "、".join(n for n, ok in zip(names, same) if not ok)
    return f"返回的 {len(want)} 项里，{right}对了；{wrong}不对。"


def about_cases(cases: Sequence[Case], right: Sequence[bool]) -> str | None:
    """Which cases came out right and which wrong, when some of each: the families tell where to look."""
    good = [c.label for c, ok in zip(cases, right) if ok]
    bad = [c.label for c, ok in zip(cases, right) if not ok]
    if not good or not bad:
        return None

    def listed(labels):
        return "；".join(f"「{label}」" for label in labels[:_LISTED]) + ("……" if len(labels) > _LISTED else "")

    return (f"{len(right)} 个跑完的用例里对了 {len(good)} 个。对的：{listed(good)}。错的：{listed(bad)}。"
            "比比两边的用例有什么不同。")

