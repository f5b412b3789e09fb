"""05_output_gate: a double over split_query_gate and apply_output_gate."""
from . import a05
from .entry import Entry, patch

ASSIGNMENT = "05_output_gate"
HEADER = '''import math\nimport torch\n'''

CORRECT = {
    "split_query_gate": '''def split_query_gate(q_out: torch.Tensor, num_heads: int, head_dim: int) -> tuple[torch.Tensor, torch.Tensor]:
    """[B, T, H*2D] -> (query [B, T, H, D], gate [B, T, H, D]); head h owns [query_h | gate_h]."""
    per_head = q_out.unflatten(-1, (num_heads, 2 * head_dim))
    return per_head[..., :head_dim], per_head[..., head_dim:]
''',
    "apply_output_gate": '''def apply_output_gate(attn_out: torch.Tensor, gate: torch.Tensor) -> torch.Tensor:
    """attn_out * sigmoid(gate), elementwise."""
    return attn_out * torch.sigmoid(gate)
''',
}
C = CORRECT
_SPLIT = patch(C["split_query_gate"],
               ("per_head = q_out.unflatten(-1, (num_heads, 2 * head_dim))\n    return per_head[..., :head_dim], per_head[..., head_dim:]",
                "query, gate = q_out.chunk(2, dim=-1)\n"
                "    return query.unflatten(-1, (num_heads, head_dim)), gate.unflatten(-1, (num_heads, head_dim))"))
_GATE = patch(C["apply_output_gate"], ("return attn_out * torch.sigmoid(gate)", "return attn_out * gate"))

ENTRIES = [
    Entry("f05-double-halves-and-raw-gate", "double",
          "(1) split_query_gate cuts q_proj's output into first half = query, second half = gate (q_out.chunk(2)) "
          "instead of Qwen3.5's per-head layout [query_h | gate_h]; (2) apply_output_gate multiplies by the raw "
          "gate scores instead of sigmoid(gate).",
          {"split_query_gate": _SPLIT, "apply_output_gate": _GATE},
          ("split_query_gate", "apply_output_gate")),
]

# The definitions this writer did not write are the first writer's (a05), so that the notebook is whole.
HEADER = a05.HEADER + "".join(line + "\n" for line in HEADER.splitlines() if line not in a05.HEADER.splitlines())
CORRECT = {**a05.CORRECT, **CORRECT}
