"""Compare a student's output with the reference and say, in Chinese, how they differ.

Outputs are tensors or (nested) tuples of tensors. Float references are float64; the student's tensor
must have the expected dtype and lie within that dtype's tolerance. Bool and integer outputs must match
exactly. Positions marked ``free`` (which no implementation defines) only have to be finite. ``compare``
raises on no output the sandbox's report can carry (``sandbox.report.from_plain``): a wrong one is a
``Mismatch``.
"""
from dataclasses import dataclass

import torch

from course.tolerances import Tolerance

# A wrong output's kind, as a verdict's summary line says it ("没有通过：shape 不对").
SUMMARY = {"type": "返回值的类型不对", "length": "返回值的个数不对", "shape": "shape 不对", "dtype": "dtype 不对",
           "nan": "输出里有 NaN", "values": "数值不对", "free": "输出里有 NaN 或 inf"}


@dataclass(frozen=True)
class Mismatch:
    """Why an output is wrong. ``kind`` is one of type, length, shape, dtype, nan, values, free
    (NaN or inf where any finite value is right)."""

    kind: str
    text: str


def _where(index) -> str:
    return "[" + ", ".join(str(int(i)) for i in index) + "]"


def _position(flat: int, shape) -> tuple[int, ...]:
    """The index of element ``flat`` of a row-major tensor of ``shape``: ``torch.unravel_index`` without its
    first-use import of sympy (through torch.fx), over half a second in every fresh grader."""
    index = []
    for size in reversed(shape):
        flat, i = divmod(flat, size)
        index.append(i)
    return tuple(reversed(index))


def _shape(t: torch.Tensor) -> str:
    return str(list(t.shape))


def _first_worst(excess: torch.Tensor) -> int:
    """The flat index of the first element within a millionth of the largest ``excess`` (a few float32 ulps): where
    several differences are equal but for rounding, which is largest is up to the CPU, and the message must read the
    same on every machine."""
    top = excess.max()
    near = excess == top if torch.isinf(top) else excess >= top - 1e-6 * top.abs()
    return int(near.flatten().nonzero()[0])


def _fmt(x) -> str:
    return f"{x:.6g}" if isinstance(x, float) else str(x)


def _fmt_pair(want: float, got: float) -> tuple[str, str]:
    """Both numbers with one significant digit more than it takes to tell them apart (at least 6)."""
    digits = next((d for d in range(6, 17) if f"{want:.{d}g}" != f"{got:.{d}g}"), 6)
    digits = digits + 1 if digits > 6 else digits
    return f"{want:.{digits}g}", f"{got:.{digits}g}"


def compare(got, want, float_dtype: torch.dtype, tol: Tolerance, name: str = "输出",
            names: tuple[str, ...] = (), equal_nan: bool = False, free=None) -> Mismatch | None:
    """First difference between ``got`` and ``want`` (None when they agree).

    ``float_dtype`` is the dtype every float tensor of the output must have; ``tol`` applies to them.
    ``names`` names the elements of a tuple output. ``equal_nan`` lets NaN match NaN, for recognising
    known mistakes. ``free`` is a bool tensor broadcastable to the output (a tuple of them, or None,
    for a tuple output) marking positions where any finite value is accepted.
    """
    if isinstance(want, (tuple, list)):
        if not isinstance(got, (tuple, list)):
            return Mismatch("type", f"{name}应该是 {len(want)} 个元素的 tuple，得到的是 {type(got).__name__}。")
        if len(got) != len(want):
            return Mismatch("length", f"{name}应该有 {len(want)} 个元素，得到 {len(got)} 个。")
        names = names or tuple(f"{name}[{i}]" for i in range(len(want)))
        frees = free if isinstance(free, (tuple, list)) else (free,) + (None,) * (len(want) - 1)
        for g, w, n, f in zip(got, want, names, frees):
            mismatch = compare(g, w, float_dtype, tol, n, equal_nan=equal_nan, free=f)
            if mismatch:
                return mismatch
        return None
    if not isinstance(want, torch.Tensor):
        return _compare_plain(got, want, name)
    if not isinstance(got, torch.Tensor):
        return Mismatch("type", f"{name}应该是 torch.Tensor，得到的是 {_type_name(got)}。")
    if got.shape != want.shape:
        return Mismatch("shape", f"{name}的 shape 不对：期望 {_shape(want)}，得到 {_shape(got)}。")
    expected_dtype = float_dtype if want.is_floating_point() else want.dtype
    if got.dtype != expected_dtype:
        return Mismatch("dtype", f"{name}的 dtype 不对：期望 {expected_dtype}，得到 {got.dtype}。")
    if not want.is_floating_point():
        return _compare_exact(got, want, name)
    if free is not None:
        free = free.expand(want.shape)
        if not got[free].isfinite().all():
            return Mismatch("free", f"{name}在 padding 的 query 那几行里有 NaN 或 inf：那几行的值随便是多少都行，"
                                    "但必须是有限的数，否则下一层里 0 × NaN 还是 NaN，会把真实 token 也污染了。")
        want = torch.where(free, got.double(), want)
    return _compare_close(got.double(), want, tol, name, equal_nan, got.dtype)


def _compare_plain(got, want, name) -> Mismatch | None:
    """``got`` against a ``want`` that is a number, a string or None. A tensor holding one element counts as
    that number (``item()``: no tensor is asked for its truth value, which has none for other sizes)."""
    if isinstance(got, torch.Tensor):
        if got.numel() != 1:
            return Mismatch("type", f"{name}应该是 {type(want).__name__}，得到的是 shape 为 {_shape(got)} 的张量。")
        got = got.item()
    if isinstance(want, (int, float)) and not isinstance(want, bool) and not isinstance(got, (int, float)):
        # What the sandbox could not hand back as a builtin comes as the text "<module>.<type> 对象".
        said = got if isinstance(got, str) and got.endswith(" 对象") else type(got).__name__
        numpy = "：numpy 的数先用 int(…) 或 float(…) 转成 Python 的数" if "numpy" in said else ""
        return Mismatch("type", f"{name}应该是 Python 的 {type(want).__name__}，得到的是 {said}{numpy}。")
    if got != want:
        return Mismatch("values", f"{name}期望 {want!r}，得到 {got!r}。")
    return None


def _type_name(x) -> str:
    return x if isinstance(x, str) else type(x).__name__


def _compare_exact(got, want, name) -> Mismatch | None:
    wrong = got != want
    if not wrong.any():
        return None
    if want.dim() == 0:  # one value: no position to point at
        return Mismatch("values", f"{name}期望 {want.item()}，得到 {got.item()}。")
    first = wrong.nonzero()[0]
    return Mismatch(
        "values",
        f"{name}有 {int(wrong.sum())} 个位置不对（共 {want.numel()} 个）；第一个在 {_where(first)}："
        f"期望 {want[tuple(first)].item()}，得到 {got[tuple(first)].item()}。",
    )


def _compare_close(got, want, tol, name, equal_nan, dtype) -> Mismatch | None:
    bad_nan = torch.isnan(got) & ~(torch.isnan(want) & equal_nan)
    if bad_nan.any():
        if want.dim() == 0:
            return Mismatch("nan", f"{name}是 NaN，期望 {_fmt(want.item())}。")
        first = bad_nan.nonzero()[0]
        return Mismatch("nan", f"{name}里有 {int(bad_nan.sum())} 个 NaN；第一个在 {_where(first)}，"
                               f"那里期望 {_fmt(want[tuple(first)].item())}。")
    both_nan = torch.isnan(got) & torch.isnan(want)
    same_inf = torch.isinf(want) & (got == want)
    ok_exact = both_nan | same_inf
    diff = torch.where(ok_exact, torch.zeros_like(got), (got - want).abs())
    diff = torch.nan_to_num(diff, nan=float("inf"))
    limit = tol.atol + tol.rtol * want.abs().nan_to_num(posinf=0.0, neginf=0.0)
    wrong = diff > limit
    if not wrong.any():
        return None
    if want.dim() == 0:
        expected, actual = _fmt_pair(want.item(), got.item())
        return Mismatch("values", f"{name}的数值不对（{dtype}：{tol}）：期望 {expected}，得到 {actual}。")
    where = _position(_first_worst(torch.where(wrong, diff - limit, torch.full_like(diff, -1.0))), want.shape)
    expected, actual = _fmt_pair(want[where].item(), got[where].item())
    scale = abs(want[where].item())
    relative = f"相对误差 {_fmt(diff[where].item() / scale)}" if scale > 0 else "期望值是 0，没有相对误差"
    return Mismatch(
        "values",
        f"{name}的数值不对：{int(wrong.sum())} 个元素（共 {want.numel()} 个）超出容差（{dtype}：{tol}）。"
        f"差得最多的在 {_where(where)}：期望 {expected}，得到 {actual}，"
        f"绝对误差 {_fmt(diff[where].item())}，{relative}。",
    )
