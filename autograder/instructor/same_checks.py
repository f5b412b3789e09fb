"""Whether two visible-checks files (``release/<assignment>/checks.pt.xz``, as ``course.checking.load`` reads
them) say the same when two machines made them from the same source.

Another CPU rounds the last bits of floats its own way (its BLAS sums in another order, its vector ``log`` and
``exp`` differ by an ulp), and that moves three things a file holds: float values, by a few ulps; which elements
of a mistake's output that overflows are infinite or NaN; and, on a case where a mistake's run in the case's dtype
sits near ``diagnosis.SELF_AGREEMENT`` of the tolerance from its float64 run, whether the file keeps that
mistake's output there at all (and so which mistakes a ``claims`` entry lists). Everything else — labels,
shapes, dtypes, integers, which cases, which mistakes and their messages — comes from the source and must be equal.
"""
import types

import torch


def same_checks(a: dict, b: dict) -> bool:
    """Exercise name -> its visible check's data, the same in ``a`` and ``b`` up to another machine's rounding."""
    return a.keys() == b.keys() and all(_same_exercise(a[name], b[name]) for name in a)


def _same_exercise(a: dict, b: dict) -> bool:
    plain = a.keys() - {"cases"}
    return (a.keys() == b.keys() and close({k: a[k] for k in plain}, {k: b[k] for k in plain})
            and len(a["cases"]) == len(b["cases"]) and all(map(_same_case, a["cases"], b["cases"])))


def _same_case(a: dict, b: dict) -> bool:
    """A public case: its inputs and outputs equal to a hundredth of the case's tolerance (inputs made in float32
    carry their last bits into every output), its mistakes' outputs compared where both files keep one (and where
    both are finite), and each claim on the mistakes both keep."""
    numbers = {"args", "kwargs", "expected"}
    plain = a.keys() - numbers - {"mistakes", "claims"}
    if a.keys() != b.keys() or not close({k: a[k] for k in plain}, {k: b[k] for k in plain}):
        return False
    within = tuple(t / 100 for t in a["tolerance"])
    both = a["mistakes"].keys() & b["mistakes"].keys()
    return (close({k: a[k] for k in numbers}, {k: b[k] for k in numbers}, within=within)
            and close({i: a["mistakes"][i] for i in both}, {i: b["mistakes"][i] for i in both}, True, within)
            and a["claims"].keys() == b["claims"].keys()
            and all([i for i in a["claims"][m] if i in both] == [i for i in b["claims"][m] if i in both]
                    for m in a["claims"]))


def close(a, b, overflows: bool = False, within: tuple[float, float] | None = None) -> bool:
    """``a`` and ``b`` (tensors, in tuples, lists, dicts and namespaces) are equal but for the last bits of their
    floats: the same dtypes and shapes, integers and other values equal, floats within a few ulps (float64 within
    1e-9) or, given ``within`` (atol, rtol), within that; non-finite where the other is non-finite; with
    ``overflows``, compared only where both are finite."""
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(close(a[k], b[k], overflows, within) for k in a)
    if isinstance(a, (tuple, list)):
        return type(a) is type(b) and len(a) == len(b) and all(close(x, y, overflows, within) for x, y in zip(a, b))
    if isinstance(a, types.SimpleNamespace):
        return isinstance(b, types.SimpleNamespace) and close(vars(a), vars(b), overflows, within)
    if isinstance(a, torch.Tensor):
        if not (isinstance(b, torch.Tensor) and a.dtype == b.dtype and a.shape == b.shape):
            return False
        if not a.is_floating_point():
            return torch.equal(a, b)
        ulps = 1e-9 if a.dtype == torch.float64 else 4 * torch.finfo(a.dtype).eps
        atol, rtol = (max(ulps, within[0]), max(ulps, within[1])) if within else (ulps, ulps)
        a, b = a.double(), b.double()
        finite = a.isfinite() & b.isfinite()
        return bool((overflows or torch.equal(a.isfinite(), b.isfinite()))
                    and a[finite].isclose(b[finite], rtol=rtol, atol=atol).all())
    return type(a) is type(b) and a == b
