"""03_gqa_kv_cache: attention_flops (singles), and doubles over repeat_kv, KVCache, GroupedQueryAttention,
kv_cache_bytes and attention_flops. The provided answers of 01/02 are in CORRECT because the GQA module calls them.
attention_flops follows the notebook's formula: 2B q_len d D (2H + 2H_kv) + 4BH q_len k_len D."""
from . import a03, f02
from .entry import Entry, patch

ASSIGNMENT = "03_gqa_kv_cache"
HEADER = '''import math\nimport torch\nfrom torch import nn\n'''

CORRECT = {
    **{name: f02.CORRECT[name] for name in f02.FROM_01},  # the same writer's answers of 01
    "split_heads": '''def split_heads(x: torch.Tensor, num_heads: int) -> torch.Tensor:
    """[B, T, H*D] -> [B, H, T, D]."""
    batch, seq, width = x.shape
    per_head = x.view(batch, seq, num_heads, width // num_heads)
    return per_head.transpose(1, 2)
''',
    "merge_heads": '''def merge_heads(x: torch.Tensor) -> torch.Tensor:
    """[B, H, T, D] -> [B, T, H*D]."""
    batch, heads, seq, dim = x.shape
    return x.transpose(1, 2).reshape(batch, seq, heads * dim)
''',
    "KVCache": '''class KVCache:
    """Keys and values of every position seen so far, [B, Hkv, T_cached, D] each, for one layer."""

    def __init__(self):
        self.keys = None
        self.values = None

    def update(self, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        if self.keys is not None:
            k = torch.cat([self.keys, k], dim=2)
            v = torch.cat([self.values, v], dim=2)
        self.keys, self.values = k, v
        return k, v

    def __len__(self) -> int:
        return 0 if self.keys is None else self.keys.shape[2]
''',
    "repeat_kv": '''def repeat_kv(x: torch.Tensor, n_rep: int) -> torch.Tensor:
    """[B, Hkv, T, D] -> [B, Hkv*n_rep, T, D]: query head h reads KV head h // n_rep."""
    if n_rep == 1:
        return x
    return x.repeat_interleave(n_rep, dim=1)
''',
    "GroupedQueryAttention": '''class GroupedQueryAttention(nn.Module):
    """Causal self-attention in which groups of query heads share key/value heads (MHA, GQA or MQA)."""

    def __init__(self, hidden_size: int, num_heads: int, num_kv_heads: int, head_dim: int | None = None):
        super().__init__()
        self.num_heads = num_heads
        self.num_kv_heads = num_kv_heads
        self.head_dim = head_dim if head_dim is not None else hidden_size // num_heads
        self.q_proj = nn.Linear(hidden_size, num_heads * self.head_dim, bias=False)
        self.k_proj = nn.Linear(hidden_size, num_kv_heads * self.head_dim, bias=False)
        self.v_proj = nn.Linear(hidden_size, num_kv_heads * self.head_dim, bias=False)
        self.o_proj = nn.Linear(num_heads * self.head_dim, hidden_size, bias=False)

    def forward(self, x: torch.Tensor, attention_mask: torch.Tensor | None = None, cache=None):
        seq = x.shape[1]
        q = split_heads(self.q_proj(x), self.num_heads)
        k = split_heads(self.k_proj(x), self.num_kv_heads)
        v = split_heads(self.v_proj(x), self.num_kv_heads)
        if cache is not None:
            k, v = cache.update(k, v)
        k_len = k.shape[2]
        mask = causal_mask(seq, k_len)
        if attention_mask is not None:
            mask = mask & padding_mask(attention_mask)
        n_rep = self.num_heads // self.num_kv_heads
        out, _ = attention(q, repeat_kv(k, n_rep), repeat_kv(v, n_rep), mask)
        return self.o_proj(merge_heads(out)), cache
''',
    "kv_cache_bytes": '''def kv_cache_bytes(batch: int, seq_len: int, num_layers: int, num_kv_heads: int, head_dim: int,
                   bytes_per_elem: int) -> int:
    """Bytes of a KV cache: one key and one value vector per position, KV head and layer."""
    return 2 * batch * seq_len * num_layers * num_kv_heads * head_dim * bytes_per_elem
''',
    "attention_flops": '''def attention_flops(batch: int, q_len: int, k_len: int, hidden_size: int, num_heads: int, num_kv_heads: int,
                    head_dim: int) -> int:
    """FLOPs of one attention layer on q_len new tokens attending to k_len positions, 2 per multiply-add."""
    projections = q_len * hidden_size * head_dim * (num_heads + 2 * num_kv_heads + num_heads)  # q, k, v, o
    scores_and_mix = 2 * num_heads * q_len * k_len * head_dim                                # Q.K^T and weights.V
    return 2 * batch * (projections + scores_and_mix)
''',
}
C = CORRECT
AF = C["attention_flops"]


def _both(id_, cause, parts, exercises):
    code = {}
    for part in parts:
        code.update(part)
    return Entry(id_, "double", cause, code, exercises)

_P_KLEN = ("projections = q_len * hidden_size", "projections = k_len * hidden_size")
_ONE_T2 = ("scores_and_mix = 2 * num_heads", "scores_and_mix = num_heads")

ENTRIES = [
    Entry("f03-flops-projections-over-k-len", "single",
          "The four projections are counted over all k_len positions instead of only the q_len new tokens (the "
          "cached positions were projected in earlier steps).",
          {"attention_flops": patch(AF, _P_KLEN)}, ("attention_flops",)),
    Entry("f03-flops-kv-proj-with-query-heads", "single",
          "k_proj and v_proj are counted with num_heads outputs heads (as in MHA) instead of num_kv_heads: "
          "projections use 4H instead of 2H + 2H_kv.",
          {"attention_flops": patch(AF, ("(num_heads + 2 * num_kv_heads + num_heads)", "(4 * num_heads)"))},
          ("attention_flops",)),
    Entry("f03-flops-scores-with-kv-heads", "single",
          "Q.K^T and weights.V are counted with num_kv_heads heads instead of num_heads: after repeat_kv every query "
          "head does its own score table, GQA does not save these terms.",
          {"attention_flops": patch(AF, ("scores_and_mix = 2 * num_heads *", "scores_and_mix = 2 * num_kv_heads *"))},
          ("attention_flops",)),
    Entry("f03-flops-no-factor-two", "single",
          "Counts multiply-adds instead of FLOPs: the final factor 2 (one multiply-add = 2 FLOPs) is missing, so the "
          "result is half the right value.",
          {"attention_flops": patch(AF, ("return 2 * batch *", "return batch *"))}, ("attention_flops",)),
    Entry("f03-flops-only-one-t2-product", "single",
          "Only one of the two q_len x k_len matrix products is counted (Q.K^T but not weights.V): the score term is "
          "2BH q_len k_len D instead of 4BH q_len k_len D.",
          {"attention_flops": patch(AF, _ONE_T2)}, ("attention_flops",)),
    Entry("f03-flops-float-literal", "single",
          "The FLOP factor is written as the float 2.0, so the function returns a float (and rounds wrong above "
          "2^53) instead of an exact int.",
          {"attention_flops": patch(AF, ("return 2 * batch *", "return 2.0 * batch *"))}, ("attention_flops",)),
    Entry("f03-flops-no-o-proj", "single",
          "o_proj is left out of the projection count: only q, k and v (H + 2H_kv heads of D) are counted instead "
          "of 2H + 2H_kv.",
          {"attention_flops": patch(AF, ("(num_heads + 2 * num_kv_heads + num_heads)", "(num_heads + 2 * num_kv_heads)"))},
          ("attention_flops",)),
    Entry("f03-flops-causal-half-only", "single",
          "The score table is counted only over the causally visible (query, key) pairs, "
          "q_len*k_len - q_len*(q_len-1)//2, instead of the whole q_len x k_len table that the plain "
          "implementation computes before masking.",
          {"attention_flops": patch(AF, ("scores_and_mix = 2 * num_heads * q_len * k_len * head_dim",
                                         "scores_and_mix = 2 * num_heads * (q_len * k_len - q_len * (q_len - 1) // 2) * head_dim"))},
          ("attention_flops",)),
    _both("f03-double-flops-k-len-and-one-product",
          "(1) attention_flops counts the four projections over k_len positions instead of the q_len new tokens; "
          "(2) it counts only one of the two q_len x k_len products (2BH q_len k_len D instead of 4BH q_len k_len D).",
          ({"attention_flops": patch(AF, _P_KLEN)}, {"attention_flops": patch(AF, _ONE_T2)}),
          ("attention_flops",)),
    _both("f03-double-repeat-tile-and-topleft-mask",
          "(1) repeat_kv tiles the KV heads with x.repeat(1, n_rep, 1, 1) (0, 1, 0, 1, ...) instead of "
          "repeat_interleave, so query head h reads KV head h % Hkv instead of h // n_rep; (2) GroupedQueryAttention "
          "builds causal_mask(T) without k_len, so with a cache the new queries only see the first cached keys.",
          ({"repeat_kv": patch(C["repeat_kv"], ("return x.repeat_interleave(n_rep, dim=1)", "return x.repeat(1, n_rep, 1, 1)"))},
           {"GroupedQueryAttention": patch(C["GroupedQueryAttention"], ("mask = causal_mask(seq, k_len)", "mask = causal_mask(seq)"))}),
          ("repeat_kv", "GroupedQueryAttention")),
    _both("f03-double-bytes-no-two-and-flops-mha-kv",
          "(1) kv_cache_bytes forgets the factor 2 for keys and values (counts only one of K and V); (2) "
          "attention_flops counts k_proj and v_proj with num_heads output heads instead of num_kv_heads.",
          ({"kv_cache_bytes": patch(C["kv_cache_bytes"], ("return 2 * batch *", "return batch *"))},
           {"attention_flops": patch(AF, ("(num_heads + 2 * num_kv_heads + num_heads)", "(4 * num_heads)"))}),
          ("kv_cache_bytes", "attention_flops")),
    _both("f03-double-cache-heads-dim-and-len-counts-calls",
          "(1) KVCache.update concatenates along dim=1 (the heads dim, MiniMind's layout habit) instead of the "
          "sequence dim 2; (2) len(cache) counts update calls instead of cached positions.",
          ({"KVCache": patch(C["KVCache"], ("k = torch.cat([self.keys, k], dim=2)", "k = torch.cat([self.keys, k], dim=1)"),
                             ("v = torch.cat([self.values, v], dim=2)", "v = torch.cat([self.values, v], dim=1)"))},
           {"KVCache": patch(C["KVCache"], ("self.keys = None\n        self.values = None",
                                            "self.keys = None\n        self.values = None\n        self.calls = 0"),
                             ("self.keys, self.values = k, v", "self.keys, self.values = k, v\n        self.calls += 1"),
                             ("return 0 if self.keys is None else self.keys.shape[2]", "return self.calls"))}),
          ("KVCache", "GroupedQueryAttention")),
]
# two of the doubles edit one definition twice: their code is the combined edit
_COMBINED = {
    "f03-double-flops-k-len-and-one-product": {"attention_flops": patch(AF, _P_KLEN, _ONE_T2)},
    "f03-double-cache-heads-dim-and-len-counts-calls": {"KVCache": patch(
        C["KVCache"], ("k = torch.cat([self.keys, k], dim=2)", "k = torch.cat([self.keys, k], dim=1)"),
        ("v = torch.cat([self.values, v], dim=2)", "v = torch.cat([self.values, v], dim=1)"),
        ("self.keys = None\n        self.values = None", "self.keys = None\n        self.values = None\n        self.calls = 0"),
        ("self.keys, self.values = k, v", "self.keys, self.values = k, v\n        self.calls += 1"),
        ("return 0 if self.keys is None else self.keys.shape[2]", "return self.calls"))},
}
ENTRIES = [Entry(e.id, e.kind, e.cause, _COMBINED.get(e.id, e.code), e.exercises) for e in ENTRIES]

# The definitions this writer did not write are the first writer's (a03), so that the notebook is whole.
HEADER = a03.HEADER + "".join(line + "\n" for line in HEADER.splitlines() if line not in a03.HEADER.splitlines())
CORRECT = {**a03.CORRECT, **CORRECT}
