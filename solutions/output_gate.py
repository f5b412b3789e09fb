"""Reference for 05_output_gate: the per-head query/gate split, the sigmoid gate and its gradient."""
import torch


def split_query_gate(q_out: torch.Tensor, num_heads: int, head_dim: int):
    """``q_out [B, T, H·2D]`` -> ``(query [B, T, H, D], gate [B, T, H, D])``.

    Qwen3.5 lays q_proj's outputs out head by head: head h owns ``2D`` consecutive outputs,
    its query first and its gate second.
    """
    per_head = q_out.unflatten(-1, (num_heads, 2 * head_dim))
    query, gate = per_head.split(head_dim, dim=-1)
    return query, gate


def apply_output_gate(attn_out: torch.Tensor, gate: torch.Tensor) -> torch.Tensor:
    """``attn_out * sigmoid(gate)``, elementwise (same or broadcastable shapes)."""
    return attn_out * torch.sigmoid(gate)


def gate_gradient(x: torch.Tensor, w: torch.Tensor, r: torch.Tensor, o: torch.Tensor, t: torch.Tensor):
    """Gradient of ``sum((r + sigmoid(x @ w) * o - t)**2 / 2)`` with respect to ``w``.

    ``x [N, F]`` one row per token, ``w [F]`` the gate weights, ``r, o, t [N]`` residual, head output
    and target per token. Returns ``[F]``: ``sum_n (y_n - t_n) · o_n · g_n (1 - g_n) · x_n``.
    """
    g = torch.sigmoid(x @ w)
    y = r + g * o
    return ((y - t) * o * g * (1 - g)) @ x
