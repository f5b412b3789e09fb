"""Why ``chunked_gated_delta_rule`` has no budget (``model.Budget``) that would stop the per-position loop from outside
the student's process: both forms do O(T·Dk·Dv) work, so their CPU times differ by a small factor that honest
chunked code can lose again. Prints the CPU seconds (one thread) of the reference's chunked rule in float32 and in
float64 (an honest answer that works in float64), of a chunked rule that solves each chunk's system row by row in
Python (honest, and slow), and of the per-position loop written lean (in-place updates, matrix-vector products),
for a small state (Python's cost a step dominates), a middling one and a large one (memory traffic dominates).

Run: python benchmarks/chunked_rule_cost.py
"""
import sys
import time
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from solutions.gated_deltanet import chunked_gated_delta_rule  # noqa: E402

SHAPES = [(1, 1, 4096, 8, 4), (1, 1, 1024, 256, 320), (1, 1, 2048, 768, 1024)]  # (B, H, T, Dk, Dv)


def in_float64(q, k, v, g, beta, chunk_size=64):
    o, state = chunked_gated_delta_rule(*(t.double() for t in (q, k, v, g, beta)), chunk_size=chunk_size)
    return o.float(), state.float()


def rows_in_python(q, k, v, g, beta, chunk_size=64):
    """The chunked rule with each chunk's lower-triangular system solved one row at a time."""
    state = q.new_zeros(*q.shape[:-2], q.shape[-1], v.shape[-1])
    out = []
    for start in range(0, q.shape[-2], chunk_size):
        part = slice(start, start + chunk_size)
        qc, kc, vc, bc = q[..., part, :], k[..., part, :], v[..., part, :], beta[..., part]
        gamma = g[..., part].cumsum(-1)
        c = qc.shape[-2]
        below = torch.ones(c, c, dtype=torch.bool).tril()
        decay = (gamma[..., :, None] - gamma[..., None, :]).masked_fill(~below, float("-inf")).exp()
        a = (bc[..., :, None] * (kc @ kc.mT) * decay).tril(-1)
        rhs = bc[..., None] * (vc - (gamma.exp()[..., None] * kc) @ state)
        delta = torch.zeros_like(rhs)
        for i in range(c):
            delta[..., i, :] = rhs[..., i, :] - (a[..., i, :i, None] * delta[..., :i, :]).sum(-2)
        out.append((gamma.exp()[..., None] * qc) @ state + ((qc @ kc.mT) * decay) @ delta)
        state = gamma[..., -1, None, None].exp() * state + ((gamma[..., -1:] - gamma).exp()[..., None] * kc).mT @ delta
    return torch.cat(out, dim=-2), state


def per_position(q, k, v, g, beta, chunk_size=64):
    """The recurrent rule, one position at a time, with as little work a step as it allows."""
    state = q.new_zeros(*q.shape[:-2], q.shape[-1], v.shape[-1])
    out = q.new_empty(*q.shape[:-1], v.shape[-1])
    decay = g.exp()
    for t in range(q.shape[-2]):
        state.mul_(decay[..., t, None, None])
        delta = (v[..., t, :] - (k[..., t, None, :] @ state)[..., 0, :]) * beta[..., t, None]
        state.add_(k[..., t, :, None] * delta[..., None, :])
        out[..., t, :] = (q[..., t, None, :] @ state)[..., 0, :]
    return out, state


RULES = {"reference, float32": chunked_gated_delta_rule, "reference, float64": in_float64,
         "chunked, rows solved in Python": rows_in_python, "per position, lean": per_position}


def inputs(b, h, t, dk, dv):
    gen = torch.Generator().manual_seed(0)
    q = torch.randn(b, h, t, dk, generator=gen)
    k = torch.nn.functional.normalize(torch.randn(b, h, t, dk, generator=gen), dim=-1)
    v = torch.randn(b, h, t, dv, generator=gen)
    return q, k, v, -0.1 * torch.rand(b, h, t, generator=gen), torch.rand(b, h, t, generator=gen)


def main() -> None:
    torch.set_num_threads(1)
    for shape in SHAPES:
        args = inputs(*shape)
        want = chunked_gated_delta_rule(*args)[0]
        print(f"B, H, T, Dk, Dv = {shape}")
        seconds = {}
        for name, rule in RULES.items():
            start = time.process_time()
            got = rule(*args)[0]
            seconds[name] = time.process_time() - start
            assert torch.allclose(got, want, atol=1e-3, rtol=1e-3), name
        slowest_honest = max(seconds[name] for name in RULES if not name.startswith("per position"))
        for name, spent in seconds.items():
            print(f"    {spent:6.3f} s  {name}")
        print(f"    the per-position loop takes {seconds['per position, lean'] / slowest_honest:.1f}x the slowest "
              "honest chunked answer")


if __name__ == "__main__":
    main()
