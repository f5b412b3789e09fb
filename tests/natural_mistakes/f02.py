"""02_multi_head: doubles over split_heads, merge_heads and MultiHeadAttention (01's answers as the provided cell
gives them are in CORRECT because MultiHeadAttention calls them)."""
from . import a02
from .entry import Entry, patch

ASSIGNMENT = "02_multi_head"
HEADER = '''import math\nimport torch\nfrom torch import nn\n'''

CORRECT = {
    "attention_scores": '''def attention_scores(q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    head_dim = q.shape[-1]
    return q @ k.transpose(-2, -1) / math.sqrt(head_dim)
''',
    "causal_mask": '''def causal_mask(q_len: int, k_len: int | None = None, window: int | None = None) -> torch.Tensor:
    if k_len is None:
        k_len = q_len
    query_positions = torch.arange(q_len).unsqueeze(1) + (k_len - q_len)  # [Tq, 1]
    key_positions = torch.arange(k_len).unsqueeze(0)                      # [1, Tk]
    visible = key_positions <= query_positions
    if window is not None:
        visible = visible & (key_positions > query_positions - window)
    return visible
''',
    "padding_mask": '''def padding_mask(attention_mask: torch.Tensor) -> torch.Tensor:
    return attention_mask.bool()[:, None, None, :]
''',
    "masked_softmax": '''def masked_softmax(scores: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
    if mask is None:
        return torch.softmax(scores, dim=-1)
    lowest = torch.finfo(scores.dtype).min
    weights = torch.softmax(torch.where(mask, scores, lowest), dim=-1)
    return torch.where(mask, weights, 0.0)
''',
    "attention": '''def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
              mask: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    weights = masked_softmax(attention_scores(q, k), mask)
    return weights @ v, weights
''',
    "split_heads": '''def split_heads(x: torch.Tensor, num_heads: int) -> torch.Tensor:
    """[B, T, H*D] -> [B, H, T, D]; head h gets features h*D ... (h+1)*D - 1 of every token."""
    batch, seq, width = x.shape
    per_head = x.view(batch, seq, num_heads, width // num_heads)
    return per_head.transpose(1, 2)
''',
    "merge_heads": '''def merge_heads(x: torch.Tensor) -> torch.Tensor:
    """[B, H, T, D] -> [B, T, H*D]: the inverse of split_heads."""
    batch, heads, seq, dim = x.shape
    return x.transpose(1, 2).reshape(batch, seq, heads * dim)
''',
    "MultiHeadAttention": '''class MultiHeadAttention(nn.Module):
    """Multi-head self-attention: H heads of width D = hidden_size / H, concatenated, then o_proj."""

    def __init__(self, hidden_size: int, num_heads: int):
        super().__init__()
        self.num_heads = num_heads
        self.q_proj = nn.Linear(hidden_size, hidden_size, bias=False)
        self.k_proj = nn.Linear(hidden_size, hidden_size, bias=False)
        self.v_proj = nn.Linear(hidden_size, hidden_size, bias=False)
        self.o_proj = nn.Linear(hidden_size, hidden_size, bias=False)

    def forward(self, x: torch.Tensor, attention_mask: torch.Tensor | None = None,
                causal: bool = True) -> torch.Tensor:
        seq = x.shape[1]
        q = split_heads(self.q_proj(x), self.num_heads)
        k = split_heads(self.k_proj(x), self.num_heads)
        v = split_heads(self.v_proj(x), self.num_heads)
        mask = causal_mask(seq) if causal else None
        if attention_mask is not None:
            pad = padding_mask(attention_mask)
            mask = pad if mask is None else mask & pad
        out, _ = attention(q, k, v, mask)
        return self.o_proj(merge_heads(out))
''',
}
C = CORRECT
FROM_01 = ("attention_scores", "causal_mask", "padding_mask", "masked_softmax", "attention")  # 03 and 07 use them too

_split_wrong = patch(C["split_heads"], ("per_head = x.view(batch, seq, num_heads, width // num_heads)\n    return per_head.transpose(1, 2)",
                                        "return x.view(batch, num_heads, seq, width // num_heads)"))
_merge_wrong = patch(C["merge_heads"], ("return x.transpose(1, 2).reshape(batch, seq, heads * dim)",
                                        "return x.reshape(batch, seq, heads * dim)"))
_or = ("mask = pad if mask is None else mask & pad", "mask = pad if mask is None else mask | pad")
_vk = ("v = split_heads(self.v_proj(x), self.num_heads)", "v = split_heads(self.k_proj(x), self.num_heads)")

ENTRIES = [
    Entry("f02-double-view-without-transpose", "double",
          "(1) split_heads views [B, T, H*D] directly as [B, H, T, D] instead of view(B, T, H, D) then "
          "transpose(1, 2), so each 'head' gets pieces of the wrong tokens; (2) merge_heads reshapes [B, H, T, D] "
          "straight to [B, T, H*D] without first transposing heads and positions back, so one output row "
          "concatenates one head's results for several tokens.",
          {"split_heads": _split_wrong, "merge_heads": _merge_wrong},
          ("split_heads", "merge_heads", "MultiHeadAttention")),
    Entry("f02-double-mask-or-and-v-from-k", "double",
          "(1) MultiHeadAttention combines the causal and the padding mask with | instead of &, so a position may "
          "be attended when either condition holds (future real tokens, and padding in the past); (2) the values "
          "are computed with k_proj instead of v_proj (copy-paste), so v_proj's weights are never used.",
          {"MultiHeadAttention": patch(C["MultiHeadAttention"], _or, _vk)},
          ("MultiHeadAttention",)),
]

# The definitions this writer did not write are the first writer's (a02), so that the notebook is whole.
HEADER = a02.HEADER + "".join(line + "\n" for line in HEADER.splitlines() if line not in a02.HEADER.splitlines())
CORRECT = {**a02.CORRECT, **CORRECT}
