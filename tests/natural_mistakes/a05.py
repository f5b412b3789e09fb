"""05_output_gate: split_query_gate, apply_output_gate, gate_gradient."""
from . import a01
from .entry import Entry, patch

ASSIGNMENT = "05_output_gate"

HEADER = a01.HEADER

SPLIT_QUERY_GATE = '''
def split_query_gate(q_out: torch.Tensor, num_heads: int, head_dim: int) -> tuple[torch.Tensor, torch.Tensor]:
    """[B, T, H*2D] -> (query [B, T, H, D], gate [B, T, H, D]); head h owns [query_h | gate_h]."""
    per_head = q_out.reshape(*q_out.shape[:-1], num_heads, 2 * head_dim)
    query = per_head[..., :head_dim]
    gate = per_head[..., head_dim:]
    return query, gate
'''

APPLY_OUTPUT_GATE = '''
def apply_output_gate(attn_out: torch.Tensor, gate: torch.Tensor) -> torch.Tensor:
    """attn_out * sigmoid(gate), elementwise, in attn_out's dtype."""
    return attn_out * torch.sigmoid(gate).to(attn_out.dtype)
'''

GATE_GRADIENT = '''
def gate_gradient(x: torch.Tensor, w: torch.Tensor, r: torch.Tensor, o: torch.Tensor,
                  t: torch.Tensor) -> torch.Tensor:
    """dL/dw for L = sum_n (y_n - t_n)^2 / 2, y = r + sigmoid(x @ w) * o."""
    g = torch.sigmoid(x @ w)          # [N]
    y = r + g * o                     # [N]
    per_token = (y - t) * o * g * (1 - g)
    return per_token @ x              # [F]
'''

CORRECT = {**a01.CORRECT, "split_query_gate": SPLIT_QUERY_GATE, "apply_output_gate": APPLY_OUTPUT_GATE,
           "gate_gradient": GATE_GRADIENT}

SQ, AG, GG = "split_query_gate", "apply_output_gate", "gate_gradient"

HALF_SPLIT = '''
def split_query_gate(q_out: torch.Tensor, num_heads: int, head_dim: int) -> tuple[torch.Tensor, torch.Tensor]:
    """[B, T, H*2D] -> (query [B, T, H, D], gate [B, T, H, D]); head h owns [query_h | gate_h]."""
    query, gate = q_out.chunk(2, dim=-1)
    query = query.reshape(*q_out.shape[:-1], num_heads, head_dim)
    gate = gate.reshape(*q_out.shape[:-1], num_heads, head_dim)
    return query, gate
'''
NO_SIGMOID = patch(APPLY_OUTPUT_GATE, ("return attn_out * torch.sigmoid(gate).to(attn_out.dtype)", "return attn_out * gate"))
SIGN_FLIP = patch(GATE_GRADIENT, ("per_token = (y - t) * o * g * (1 - g)", "per_token = (t - y) * o * g * (1 - g)"))

ENTRIES = [
    # ---- split_query_gate ----
    Entry("05-split-half-of-projection", "single",
          "split_query_gate cuts the whole projection in half (first H*D outputs = query, last H*D = gate) "
          "instead of per head [query_h | gate_h]",
          {SQ: HALF_SPLIT},
          (SQ,)),
    Entry("05-split-gate-first", "single",
          "split_query_gate takes the gate from the first D entries of each head and the query from the last D "
          "(query and gate swapped)",
          {SQ: patch(SPLIT_QUERY_GATE, ("    query = per_head[..., :head_dim]\n    gate = per_head[..., head_dim:]\n",
                                        "    gate = per_head[..., :head_dim]\n    query = per_head[..., head_dim:]\n"))},
          (SQ,)),
    Entry("05-split-elementwise-interleave", "single",
          "split_query_gate reshapes each head to [D, 2] and takes even entries as the query and odd entries as "
          "the gate, instead of the first D and the last D",
          {SQ: '''
def split_query_gate(q_out: torch.Tensor, num_heads: int, head_dim: int) -> tuple[torch.Tensor, torch.Tensor]:
    """[B, T, H*2D] -> (query [B, T, H, D], gate [B, T, H, D]); head h owns [query_h | gate_h]."""
    pairs = q_out.reshape(*q_out.shape[:-1], num_heads, head_dim, 2)
    return pairs[..., 0], pairs[..., 1]
'''},
          (SQ,)),
    Entry("05-split-transposed-heads", "single",
          "split_query_gate also moves the heads before time and returns [B, H, T, D] instead of [B, T, H, D]",
          {SQ: patch(SPLIT_QUERY_GATE, ("    return query, gate\n", "    return query.transpose(1, 2), gate.transpose(1, 2)\n"))},
          (SQ,)),
    Entry("05-split-hardcoded-batch", "single",
          "split_query_gate reshapes to (1, -1, H, 2D), hard-coding a batch of 1, so a batch of B sentences "
          "comes back as [1, B*T, H, D]",
          {SQ: patch(SPLIT_QUERY_GATE, ("per_head = q_out.reshape(*q_out.shape[:-1], num_heads, 2 * head_dim)",
                                        "per_head = q_out.reshape(1, -1, num_heads, 2 * head_dim)"))},
          (SQ,)),
    Entry("05-split-size-misread", "raises",
          "split_query_gate calls torch.split(per_head, 2, dim=-1), reading the 2 as 'two pieces' although it is "
          "the size of each piece, so unpacking into (query, gate) fails",
          {SQ: '''
def split_query_gate(q_out: torch.Tensor, num_heads: int, head_dim: int) -> tuple[torch.Tensor, torch.Tensor]:
    """[B, T, H*2D] -> (query [B, T, H, D], gate [B, T, H, D]); head h owns [query_h | gate_h]."""
    per_head = q_out.reshape(*q_out.shape[:-1], num_heads, 2 * head_dim)
    query, gate = torch.split(per_head, 2, dim=-1)
    return query, gate
'''},
          (SQ,)),
    # ---- apply_output_gate ----
    Entry("05-gate-no-sigmoid", "single",
          "apply_output_gate multiplies by the raw gate scores, without the sigmoid",
          {AG: NO_SIGMOID},
          (AG,)),
    Entry("05-gate-one-minus-sigmoid", "single",
          "apply_output_gate multiplies by 1 - sigmoid(gate), so a larger score closes the gate",
          {AG: patch(APPLY_OUTPUT_GATE, ("torch.sigmoid(gate)", "(1 - torch.sigmoid(gate))"))},
          (AG,)),
    Entry("05-gate-exp-ratio-overflow", "single",
          "apply_output_gate writes the sigmoid as exp(z) / (1 + exp(z)), which is inf / inf = NaN for large "
          "scores such as 100",
          {AG: patch(APPLY_OUTPUT_GATE, ("torch.sigmoid(gate)", "(torch.exp(gate) / (1 + torch.exp(gate)))"))},
          (AG,)),
    Entry("05-gate-softmax", "single",
          "apply_output_gate uses softmax over the last dim instead of an elementwise sigmoid, so a head's gates "
          "must sum to 1",
          {AG: patch(APPLY_OUTPUT_GATE, ("torch.sigmoid(gate)", "torch.softmax(gate, dim=-1)"))},
          (AG,)),
    Entry("05-gate-inplace", "single",
          "apply_output_gate multiplies attn_out in place (attn_out.mul_), overwriting the caller's tensor",
          {AG: patch(APPLY_OUTPUT_GATE, ("return attn_out * torch.sigmoid(gate).to(attn_out.dtype)",
                                         "return attn_out.mul_(torch.sigmoid(gate).to(attn_out.dtype))"))},
          (AG,)),
    Entry("05-gate-float32-result", "single",
          "apply_output_gate computes in float32 and returns float32 for bfloat16 inputs (never casts back)",
          {AG: patch(APPLY_OUTPUT_GATE, ("return attn_out * torch.sigmoid(gate).to(attn_out.dtype)",
                                         "return attn_out.float() * torch.sigmoid(gate.float())"))},
          (AG,)),
    # ---- gate_gradient ----
    Entry("05-grad-sign", "single",
          "gate_gradient uses (t - y) instead of (y - t), so the gradient has the wrong sign",
          {GG: SIGN_FLIP},
          (GG,)),
    Entry("05-grad-no-sigmoid-slope", "single",
          "gate_gradient leaves out the sigmoid's slope g * (1 - g)",
          {GG: patch(GATE_GRADIENT, ("per_token = (y - t) * o * g * (1 - g)", "per_token = (y - t) * o"))},
          (GG,)),
    Entry("05-grad-no-head-output", "single",
          "gate_gradient leaves out the factor o_n (dy/dg)",
          {GG: patch(GATE_GRADIENT, ("per_token = (y - t) * o * g * (1 - g)", "per_token = (y - t) * g * (1 - g)"))},
          (GG,)),
    Entry("05-grad-not-summed", "single",
          "gate_gradient multiplies each token's factor by its row of x but never sums over tokens, returning "
          "[N, F] instead of [F]",
          {GG: patch(GATE_GRADIENT, ("return per_token @ x              # [F]", "return per_token[:, None] * x"))},
          (GG,)),
    Entry("05-grad-mean-over-tokens", "single",
          "gate_gradient averages over the tokens (divides by N) instead of summing",
          {GG: patch(GATE_GRADIENT, ("return per_token @ x              # [F]", "return (per_token[:, None] * x).mean(dim=0)"))},
          (GG,)),
    Entry("05-grad-forgets-residual", "single",
          "gate_gradient computes the output as y = g * o, forgetting the residual r",
          {GG: patch(GATE_GRADIENT, ("y = r + g * o                     # [N]", "y = g * o                         # [N]"))},
          (GG,)),
    Entry("05-grad-w-times-x", "raises",
          "gate_gradient computes the gate scores as w @ x instead of x @ w, a shape error unless N == F",
          {GG: patch(GATE_GRADIENT, ("g = torch.sigmoid(x @ w)          # [N]", "g = torch.sigmoid(w @ x)          # [N]"))},
          (GG,)),
    Entry("05-grad-x-transposed", "raises",
          "gate_gradient sums with per_token @ x.T instead of per_token @ x, a shape error unless N == F",
          {GG: patch(GATE_GRADIENT, ("return per_token @ x              # [F]", "return per_token @ x.T"))},
          (GG,)),
    # ---- two mistakes ----
    Entry("05-double-half-split-and-no-sigmoid", "double",
          "two mistakes: split_query_gate cuts the whole projection in half instead of per head, and "
          "apply_output_gate multiplies by the raw gate scores without the sigmoid",
          {SQ: HALF_SPLIT, AG: NO_SIGMOID},
          (SQ, AG)),
    Entry("05-double-grad-sign-and-no-slope", "double",
          "two mistakes in gate_gradient: it uses (t - y) instead of (y - t) and leaves out the slope g * (1 - g)",
          {GG: patch(SIGN_FLIP, ("per_token = (t - y) * o * g * (1 - g)", "per_token = (t - y) * o"))},
          (GG,)),
    Entry("05-double-gate-swapped-and-grad-mean", "double",
          "two mistakes: split_query_gate returns the gate part as the query (swapped), and gate_gradient "
          "averages over tokens instead of summing",
          {SQ: patch(SPLIT_QUERY_GATE, ("    query = per_head[..., :head_dim]\n    gate = per_head[..., head_dim:]\n",
                                        "    gate = per_head[..., :head_dim]\n    query = per_head[..., head_dim:]\n")),
           GG: patch(GATE_GRADIENT, ("return per_token @ x              # [F]", "return (per_token[:, None] * x).mean(dim=0)"))},
          (SQ, GG)),
    Entry("05-double-transposed-and-one-minus", "double",
          "two mistakes: split_query_gate returns [B, H, T, D] (heads moved before time), and apply_output_gate "
          "multiplies by 1 - sigmoid(gate)",
          {SQ: patch(SPLIT_QUERY_GATE, ("    return query, gate\n", "    return query.transpose(1, 2), gate.transpose(1, 2)\n")),
           AG: patch(APPLY_OUTPUT_GATE, ("torch.sigmoid(gate)", "(1 - torch.sigmoid(gate))"))},
          (SQ, AG)),
    # A later set, written from the notebooks alone.
    Entry("05-double-silu-gate-and-grad-factor-two", "double",
          "two mistakes: apply_output_gate multiplies by SiLU(gate) = gate·sigmoid(gate) (the SwiGLU gate) "
          "instead of sigmoid(gate), and gate_gradient differentiates (y - t)^2 / 2 as 2 (y - t), so the "
          "gradient is twice too large",
          {AG: patch(APPLY_OUTPUT_GATE, ("torch.sigmoid(gate)", "F.silu(gate)")),
           GG: patch(GATE_GRADIENT, ("per_token = (y - t) * o * g * (1 - g)", "per_token = 2 * (y - t) * o * g * (1 - g)"))},
          (AG, GG)),
    Entry("05-double-headwise-gate-and-slope-of-z", "double",
          "two mistakes: apply_output_gate uses one gate per head, sigmoid of the mean of the head's gate scores, "
          "instead of an elementwise sigmoid(gate), and gate_gradient writes the sigmoid's slope as "
          "g·(1 - z) with the pre-activation z = x @ w instead of g·(1 - g)",
          {AG: patch(APPLY_OUTPUT_GATE, ("torch.sigmoid(gate)", "torch.sigmoid(gate.mean(dim=-1, keepdim=True))")),
           GG: patch(GATE_GRADIENT, ("per_token = (y - t) * o * g * (1 - g)", "per_token = (y - t) * o * g * (1 - x @ w)"))},
          (AG, GG)),
    # A held-out set, written from the notebooks alone.
    Entry("05-ho-double-split-sigmoid-gate-and-tanh-slope", "double",
          "two mistakes: split_query_gate already applies the sigmoid to the gate it returns instead of returning "
          "the raw gate scores, and gate_gradient uses the slope of tanh, 1 - g², instead of the sigmoid's "
          "g (1 - g)",
          {SQ: patch(SPLIT_QUERY_GATE, ("gate = per_head[..., head_dim:]", "gate = torch.sigmoid(per_head[..., head_dim:])")),
           GG: patch(GATE_GRADIENT, ("per_token = (y - t) * o * g * (1 - g)", "per_token = (y - t) * o * (1 - g * g)"))},
          (SQ, GG)),
    Entry("05-ho-double-split-heads-first-and-tanh-gate", "double",
          "two mistakes: split_query_gate reshapes [B, T, H*2D] straight to [B, H, T, 2D] (no transpose), which "
          "both returns the wrong layout and mixes tokens and heads when T > 1; and apply_output_gate multiplies by "
          "tanh(gate) instead of sigmoid(gate), so negative scores flip the sign of the output",
          {SQ: patch(SPLIT_QUERY_GATE, ("per_head = q_out.reshape(*q_out.shape[:-1], num_heads, 2 * head_dim)",
                                        "per_head = q_out.reshape(q_out.shape[0], num_heads, -1, 2 * head_dim)")),
           AG: patch(APPLY_OUTPUT_GATE, ("torch.sigmoid(gate)", "torch.tanh(gate)"))},
          (SQ, AG)),
    Entry("05-ho-double-sigmoid-of-product-and-half-derivative", "double",
          "two mistakes: apply_output_gate returns sigmoid(attn_out * gate), putting the product inside the "
          "sigmoid, instead of attn_out * sigmoid(gate); and gate_gradient keeps the 1/2 of the loss in the "
          "derivative, dL/dy = (y - t) / 2 instead of (y - t), so the gradient is half the right one",
          {AG: patch(APPLY_OUTPUT_GATE, ("return attn_out * torch.sigmoid(gate).to(attn_out.dtype)",
                                         "return torch.sigmoid(attn_out * gate).to(attn_out.dtype)")),
           GG: patch(GATE_GRADIENT, ("per_token = (y - t) * o * g * (1 - g)", "per_token = 0.5 * (y - t) * o * g * (1 - g)"))},
          (AG, GG)),
]
