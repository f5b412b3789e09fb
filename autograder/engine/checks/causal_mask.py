"""Check of ``causal_mask(q_len, k_len=None, window=None)``: bool ``[Tq, Tk]``, query i at position
``p = k_len - q_len + i`` sees keys ``j <= p``; with a sliding window of ``w``, only ``p - w < j <= p``."""
import torch

from autograder.engine.model import Exercise, Mistake, public
from course.protocols import Case
from solutions.attention_basics import causal_mask


def cases() -> list[Case]:
    found = [Case(f"causal_mask({q})", (q,)) for q in (3, 1, 5)]
    found += [Case(f"causal_mask({q}, {k})：k_len > q_len，前面已经有 {k - q} 个缓存的位置", (q, k))
              for q, k in ((1, 6), (3, 7), (2, 9))]
    found.append(Case("causal_mask(4, 4)", (4, 4)))
    # The sliding window last, so that code written before it was asked for passes everything above first.
    found += [Case(f"causal_mask({q}, window={w})：滑动窗口", (q,), {"window": w}) for q, w in ((5, 2), (4, 1), (6, 3))]
    found += [Case(f"causal_mask({q}, {k}, window={w})：滑动窗口，前面已经有 {k - q} 个缓存的位置", (q, k), {"window": w})
              for q, k, w in ((1, 8, 3), (3, 9, 4), (2, 7, 5))]
    found += [Case("causal_mask(4, window=4)：窗口和序列一样长，就是普通的因果掩码", (4,), {"window": 4}),
              Case("causal_mask(3, 5, window=10)：窗口比序列还长", (3, 5), {"window": 10})]
    return public(found, 0, 3, 7, 10, 13, 14)


def _causal_only(case: Case) -> bool:
    """The mistakes about the causal part say nothing of how their author would have written the window."""
    return case.kwargs.get("window") is None


def _positions(q_len, k_len):
    k_len = q_len if k_len is None else k_len
    return torch.arange(k_len - q_len, k_len).unsqueeze(1), torch.arange(k_len).unsqueeze(0)


def _lower(q_len, k_len=None, window=None, diagonal=0):
    """A lower-triangular mask anchored at the top-left corner."""
    return torch.ones(q_len, q_len if k_len is None else k_len, dtype=torch.bool).tril(diagonal)


def _offset(q_len, k_len=None):
    return (q_len if k_len is None else k_len) - q_len


def _band(low, q_len, k_len=None, window=None):
    """Keys ``low(p, w) < j <= p`` (``window=None``: all ``j <= p``)."""
    query, key = _positions(q_len, k_len)
    visible = key <= query
    return visible if window is None else visible & (key > low(query, window))


def _causal(name: str, hint: str, fn) -> Mistake:
    return Mistake(name, hint, fn, tried_on=_causal_only)


def _windowed(name: str, hint: str, low) -> Mistake:
    return Mistake(name, hint, lambda q, k=None, window=None: _band(low, q, k, window))


MISTAKES = (
    _causal("掩码反了：True 标在了不能看的位置", "约定是 True = 可以看（和 scaled_dot_product_attention 一样）。",
            lambda q, k=None, window=None: ~causal_mask(q, k)),
    _causal("上下三角弄反了：query 看到的是未来而不是过去", "第 i 行应该只在 j ≤ i 的列上为 True（下三角，tril）。",
            lambda q, k=None, window=None: torch.ones(q, q if k is None else k, dtype=torch.bool).triu(_offset(q, k))),
    _causal("掩码转置了：行应该是 query，列是 key", "返回 [Tq, Tk]：第 i 行第 j 列表示 query i 能否看 key j。",
            lambda q, k=None, window=None: causal_mask(q, k).mT),
    _causal("k_len > q_len 时没有偏移", "query i 的绝对位置是 k_len − q_len + i：解码时唯一的新 query 要能看到所有 key。",
            _lower),
    _causal("对角线被遮住了：token 看不到自己", "每个 token 可以看自己：j ≤ 位置，包括等号。",
            lambda q, k=None, window=None: _lower(q, k, diagonal=_offset(q, k) - 1)),
    _causal("返回了 0/1 的浮点数而不是 bool", "用 torch.bool：True = 可以看。",
            lambda q, k=None, window=None: causal_mask(q, k).float()),
    _causal("返回了加性掩码（0 / −inf）而不是 bool", "这个练习要的是 bool 掩码；−inf 留到 masked_softmax 里用。",
            lambda q, k=None, window=None: torch.zeros(causal_mask(q, k).shape).masked_fill(~causal_mask(q, k), float("-inf"))),
    Mistake("causal_mask 还没有 window 参数", "签名是 causal_mask(q_len, k_len=None, window=None)：window=None 时是普通的因果掩码，"
            "window=w 时 query 在位置 p 只看 p − w < j ≤ p。", error=r"unexpected keyword argument 'window'"),
    _windowed("窗口多算了一个 key：看到了 p − w 本身", "窗口大小是 w：query 在位置 p 时看 p − w < j ≤ p，正好 w 个 key（包括自己）。",
              lambda p, w: p - w - 1),
    _windowed("窗口少算了一个 key：只看到 w − 1 个", "窗口大小是 w：包括自己在内正好 w 个 key，p − w < j ≤ p。",
              lambda p, w: p - w + 1),
    Mistake("没有用 window：返回的还是普通的因果掩码", "window=w 时，除了不看未来，还要去掉比 p − w 更早的 key：再 & 上 j > p − w。",
            lambda q, k=None, window=None: causal_mask(q, k)),
    *(Mistake("只剩窗口，丢了因果：query 看到了未来", "窗口是在因果掩码之上再加一个条件：j ≤ p 和 j > p − w 两个都要满足。",
              lambda q, k=None, window=None, band=band: causal_mask(q, k) if window is None else band(*_positions(q, k), window))
      for band in (lambda p, j, w: j > p - w, lambda p, j, w: (p - j).abs() < w)),
    _windowed("窗口的下边界按 query 的行号算，没有加缓存的偏移", "因果的上边界和窗口的下边界都以绝对位置 p = k_len − q_len + i 为准："
              "j > p − w。", lambda p, w: p - w - p[:1]),
)

EXERCISE = Exercise("causal_mask", 3, causal_mask, cases, MISTAKES)
