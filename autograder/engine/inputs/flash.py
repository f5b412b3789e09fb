"""The inputs 09's three checks share: q, k, v of given shapes, and the layouts of tiles each pass is graded on.
Their sizes keep the tile watch sound (``protocols.watches.TileWatch``): no batch, head or head dim equals a
length or a tile length, except in the hand case and the one-query case."""
import torch

from autograder.engine.inputs.seeded import dtype_name, randn
from course import toy


def qkv(gen, lead: tuple[int, ...], q_len: int, k_len: int, dim: int = 6, dim_v: int = 7,
        dtype: torch.dtype = torch.float32, scale: float = 1.0):
    """``q [*lead, q_len, dim]`` (times ``scale``), ``k [*lead, k_len, dim]``, ``v [*lead, k_len, dim_v]``."""
    return (randn(gen, *lead, q_len, dim, dtype=dtype, scale=scale), randn(gen, *lead, k_len, dim, dtype=dtype),
            randn(gen, *lead, k_len, dim_v, dtype=dtype))


def growing(gen) -> tuple:
    """Keys that grow along the sequence (the max of each later tile is larger: what was summed must be
    rescaled), q ``[2, 3, 20, 6]``, k/v ``[2, 3, 45, 6 / 7]``."""
    k = randn(gen, 2, 3, 45, 6) * torch.linspace(0.5, 4.0, 45).unsqueeze(-1)
    return randn(gen, 2, 3, 20, 6, scale=2.0), k, randn(gen, 2, 3, 45, 7)


def three_tokens() -> tuple:
    """01's hand example, 今天 / 天气 / 不错: q, k, v ``[1, 3, 2]``."""
    return toy.queries()[None], toy.keys()[None], toy.values()[None]


def layout(q, v, causal: bool, block_q: int | None, block_k: int | None) -> str:
    """How a case reads in a label: the shapes, causal or not, the tiles, the dtype."""
    tiles = ("默认的 16 × 16 块" if block_q is None else f"block_q={block_q}，block_k={block_k}")
    return (f"q {list(q.shape)}，k/v 长 {v.shape[-2]}（Dv = {v.shape[-1]}），causal={causal}，{tiles}，"
            f"{dtype_name(q.dtype)}")


# (label, lead, Tq, Tk, causal, block_q, block_k, dtype, scale): the seeded cases of both passes.
SHAPES = (
    ("", (2, 3), 37, 37, False, 16, 8, torch.float32, 1.0),
    ("Tq = Tk 的因果注意力，", (2, 3), 40, 40, True, None, None, torch.float32, 1.0),
    ("带缓存的预填充（Tk > Tq，query i 在位置 Tk − Tq + i），", (2, 3), 20, 45, True, 8, 16, torch.float32, 1.0),
    ("Tq > Tk：前 Tq − Tk 个 query 什么都看不见（o = 0，lse = −inf），", (2, 3), 100, 12, True, 16, 8, torch.float32, 1.0),
    ("解码一步，", (2, 3), 1, 19, True, 4, 8, torch.float32, 1.0),
    ("k/v 比一块还短，", (2,), 11, 5, False, 4, 16, torch.float32, 1.0),
    ("分数上千（不先减最大值，exp 就会溢出），", (2, 2), 24, 35, True, 8, 8, torch.float32, 300.0),
    ("", (3,), 22, 22, True, 5, 5, torch.float64, 1.0),
)
