"""03_gqa_kv_cache: KVCache, repeat_kv, GroupedQueryAttention, kv_cache_bytes, attention_flops."""
from . import a02
from .entry import Entry, patch

ASSIGNMENT = "03_gqa_kv_cache"

HEADER = a02.HEADER

KVCACHE = '''
class KVCache:
    """Keys and values of every position seen so far, [B, Hkv, T_cached, D] each, for one layer."""

    def __init__(self):
        self.k = None
        self.v = None

    def update(self, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Append k, v [B, Hkv, T_new, D] along the sequence dim; return all cached (k, v)."""
        if self.k is None:
            self.k, self.v = k, v
        else:
            self.k = torch.cat([self.k, k], dim=2)
            self.v = torch.cat([self.v, v], dim=2)
        return self.k, self.v

    def __len__(self) -> int:
        """The number of cached positions."""
        if self.k is None:
            return 0
        return self.k.shape[2]
'''

REPEAT_KV = '''
def repeat_kv(x: torch.Tensor, n_rep: int) -> torch.Tensor:
    """[B, Hkv, T, D] -> [B, Hkv*n_rep, T, D]: query head h reads KV head h // n_rep."""
    if n_rep == 1:
        return x
    return torch.repeat_interleave(x, n_rep, dim=1)
'''

GQA = '''
class GroupedQueryAttention(nn.Module):
    """Causal self-attention in which groups of query heads share key/value heads (MHA, GQA or MQA)."""

    def __init__(self, hidden_size: int, num_heads: int, num_kv_heads: int, head_dim: int | None = None):
        super().__init__()
        if head_dim is None:
            head_dim = hidden_size // num_heads
        self.num_heads = num_heads
        self.num_kv_heads = num_kv_heads
        self.head_dim = head_dim
        self.q_proj = nn.Linear(hidden_size, num_heads * head_dim, bias=False)
        self.k_proj = nn.Linear(hidden_size, num_kv_heads * head_dim, bias=False)
        self.v_proj = nn.Linear(hidden_size, num_kv_heads * head_dim, bias=False)
        self.o_proj = nn.Linear(num_heads * head_dim, hidden_size, bias=False)

    def forward(self, x: torch.Tensor, attention_mask: torch.Tensor | None = None,
                cache: KVCache | None = None) -> tuple[torch.Tensor, KVCache | None]:
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
        k = repeat_kv(k, n_rep)
        v = repeat_kv(v, n_rep)
        out, _ = attention(q, k, v, mask)
        return self.o_proj(merge_heads(out)), cache
'''

KV_BYTES = '''
def kv_cache_bytes(batch: int, seq_len: int, num_layers: int, num_kv_heads: int, head_dim: int,
                   bytes_per_elem: int) -> int:
    """Bytes of a KV cache: one key and one value vector per position, KV head and layer."""
    per_token_per_layer = 2 * num_kv_heads * head_dim
    return batch * seq_len * num_layers * per_token_per_layer * bytes_per_elem
'''

FLOPS = '''
def attention_flops(batch: int, q_len: int, k_len: int, hidden_size: int, num_heads: int, num_kv_heads: int,
                    head_dim: int) -> int:
    """FLOPs of one attention layer on q_len new tokens attending to k_len positions, 2 per multiply-add."""
    q_macs = q_len * hidden_size * num_heads * head_dim
    kv_macs = 2 * q_len * hidden_size * num_kv_heads * head_dim
    o_macs = q_len * num_heads * head_dim * hidden_size
    scores_macs = num_heads * q_len * k_len * head_dim
    mix_macs = num_heads * q_len * k_len * head_dim
    per_sequence = q_macs + kv_macs + o_macs + scores_macs + mix_macs
    return 2 * batch * per_sequence
'''

CORRECT = {**a02.CORRECT, "KVCache": KVCACHE, "repeat_kv": REPEAT_KV, "GroupedQueryAttention": GQA,
           "kv_cache_bytes": KV_BYTES, "attention_flops": FLOPS}

KC, RK, G, KB, AF = "KVCache", "repeat_kv", "GroupedQueryAttention", "kv_cache_bytes", "attention_flops"

CAT_HEADS = patch(KVCACHE, ("self.k = torch.cat([self.k, k], dim=2)", "self.k = torch.cat([self.k, k], dim=1)"),
                  ("self.v = torch.cat([self.v, v], dim=2)", "self.v = torch.cat([self.v, v], dim=1)"))
REPEAT_TILED = patch(REPEAT_KV, ("return torch.repeat_interleave(x, n_rep, dim=1)", "return x.repeat(1, n_rep, 1, 1)"))
NO_OFFSET_GQA = patch(GQA, ("mask = causal_mask(seq, k_len)",
                            "mask = torch.tril(torch.ones(seq, k_len)).bool()"))

ENTRIES = [
    # ---- KVCache (GroupedQueryAttention uses it) ----
    Entry("03-cache-cat-heads-dim", "cascade",
          "KVCache.update concatenates along dim=1 (the KV-head dim) instead of dim=2 (the sequence dim); "
          "GroupedQueryAttention is correct but decodes with a cache that grows the wrong way",
          {KC: CAT_HEADS},
          (KC, G)),
    Entry("03-cache-new-before-old", "cascade",
          "KVCache.update puts the new positions in front of the cached ones (torch.cat([new, old])), so the "
          "cache is out of order",
          {KC: patch(KVCACHE, ("self.k = torch.cat([self.k, k], dim=2)", "self.k = torch.cat([k, self.k], dim=2)"),
                     ("self.v = torch.cat([self.v, v], dim=2)", "self.v = torch.cat([v, self.v], dim=2)"))},
          (KC, G)),
    Entry("03-cache-len-counts-updates", "single",
          "KVCache.__len__ counts calls to update instead of cached positions (a prefill of 3 tokens counts as 1)",
          {KC: '''
class KVCache:
    """Keys and values of every position seen so far, [B, Hkv, T_cached, D] each, for one layer."""

    def __init__(self):
        self.k = None
        self.v = None
        self.steps = 0

    def update(self, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Append k, v [B, Hkv, T_new, D] along the sequence dim; return all cached (k, v)."""
        if self.k is None:
            self.k, self.v = k, v
        else:
            self.k = torch.cat([self.k, k], dim=2)
            self.v = torch.cat([self.v, v], dim=2)
        self.steps += 1
        return self.k, self.v

    def __len__(self) -> int:
        """The number of cached positions."""
        return self.steps
'''},
          (KC, G)),
    Entry("03-cache-returns-new-only", "cascade",
          "KVCache.update stores the concatenation but returns only the new k, v, so attention sees only the "
          "newest positions",
          {KC: '''
class KVCache:
    """Keys and values of every position seen so far, [B, Hkv, T_cached, D] each, for one layer."""

    def __init__(self):
        self.k = None
        self.v = None

    def update(self, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Append k, v [B, Hkv, T_new, D] along the sequence dim; return all cached (k, v)."""
        if self.k is None:
            self.k, self.v = k, v
        else:
            self.k = torch.cat([self.k, k], dim=2)
            self.v = torch.cat([self.v, v], dim=2)
        return k, v

    def __len__(self) -> int:
        """The number of cached positions."""
        if self.k is None:
            return 0
        return self.k.shape[2]
'''},
          (KC, G)),
    Entry("03-cache-class-attribute-lists", "cascade",
          "KVCache keeps its tensors in lists defined as class attributes, so every KVCache() shares one "
          "storage: a new cache is not empty",
          {KC: '''
class KVCache:
    """Keys and values of every position seen so far, [B, Hkv, T_cached, D] each, for one layer."""
    keys = []
    values = []

    def __init__(self):
        pass

    def update(self, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Append k, v [B, Hkv, T_new, D] along the sequence dim; return all cached (k, v)."""
        self.keys.append(k)
        self.values.append(v)
        return torch.cat(self.keys, dim=2), torch.cat(self.values, dim=2)

    def __len__(self) -> int:
        """The number of cached positions."""
        return sum(k.shape[2] for k in self.keys)
'''},
          (KC, G)),
    Entry("03-cache-len-empty-crash", "raises",
          "KVCache.__len__ reads self.k.shape without handling the empty cache, so len(KVCache()) raises "
          "AttributeError on None",
          {KC: patch(KVCACHE, ("        if self.k is None:\n            return 0\n        return self.k.shape[2]",
                               "        return self.k.shape[2]"))},
          (KC,)),
    # ---- repeat_kv ----
    Entry("03-repeat-tiled", "cascade",
          "repeat_kv uses x.repeat(1, n_rep, 1, 1), which tiles the KV heads (0, 1, 0, 1, ...) instead of "
          "repeat_interleave's (0, 0, 1, 1, ...), so query head h reads KV head h % Hkv instead of h // n_rep",
          {RK: REPEAT_TILED},
          (RK, G)),
    Entry("03-repeat-interleave-no-dim", "raises",
          "repeat_kv calls repeat_interleave without dim=1, which flattens the tensor to 1-D",
          {RK: patch(REPEAT_KV, ("torch.repeat_interleave(x, n_rep, dim=1)", "torch.repeat_interleave(x, n_rep)"))},
          (RK, G)),
    Entry("03-repeat-seq-dim", "single",
          "repeat_kv repeats along dim=2 (the sequence) instead of dim=1 (the heads), returning "
          "[B, Hkv, T*n_rep, D]",
          {RK: patch(REPEAT_KV, ("torch.repeat_interleave(x, n_rep, dim=1)", "torch.repeat_interleave(x, n_rep, dim=2)"))},
          (RK, G)),
    Entry("03-repeat-expand-wrong-axis", "single",
          "repeat_kv's expand trick inserts the new axis before the KV-head axis ([B, n_rep, Hkv, T, D]), so "
          "the merged heads come out tiled (0, 1, 0, 1, ...) like repeat",
          {RK: '''
def repeat_kv(x: torch.Tensor, n_rep: int) -> torch.Tensor:
    """[B, Hkv, T, D] -> [B, Hkv*n_rep, T, D]: query head h reads KV head h // n_rep."""
    batch, kv_heads, seq, dim = x.shape
    x = x[:, None].expand(batch, n_rep, kv_heads, seq, dim)
    return x.reshape(batch, n_rep * kv_heads, seq, dim)
'''},
          (RK, G)),
    # ---- GroupedQueryAttention ----
    Entry("03-gqa-mask-not-offset", "single",
          "GroupedQueryAttention builds its causal mask as a lower triangle from the top-left corner "
          "(tril of ones(T, k_len)) instead of causal_mask(T, k_len), so with a cache the new token sees only "
          "key 0",
          {G: NO_OFFSET_GQA},
          (G,)),
    Entry("03-gqa-causal-mask-query-len-only", "raises",
          "GroupedQueryAttention calls causal_mask(T) without k_len; the [T, T] mask does not match the "
          "[T, k_len] scores once a multi-token chunk follows cached positions (a shape error)",
          {G: patch(GQA, ("mask = causal_mask(seq, k_len)", "mask = causal_mask(seq)"))},
          (G,)),
    Entry("03-gqa-repeat-before-cache", "single",
          "GroupedQueryAttention calls repeat_kv before cache.update, so the cache stores num_heads copies "
          "instead of num_kv_heads heads (the output is right but the cache is n_rep times too large)",
          {G: patch(GQA, ("        if cache is not None:\n            k, v = cache.update(k, v)\n", ""),
                    ("        k = repeat_kv(k, n_rep)\n        v = repeat_kv(v, n_rep)\n",
                     "        k = repeat_kv(k, n_rep)\n        v = repeat_kv(v, n_rep)\n"
                     "        if cache is not None:\n            k, v = cache.update(k, v)\n"),
                    ("        k_len = k.shape[2]\n        mask = causal_mask(seq, k_len)\n"
                     "        if attention_mask is not None:\n            mask = mask & padding_mask(attention_mask)\n", ""),
                    ("        out, _ = attention(q, k, v, mask)\n",
                     "        mask = causal_mask(seq, k.shape[2])\n"
                     "        if attention_mask is not None:\n            mask = mask & padding_mask(attention_mask)\n"
                     "        out, _ = attention(q, k, v, mask)\n"))},
          (G,)),
    Entry("03-gqa-ignores-head-dim", "single",
          "GroupedQueryAttention ignores the head_dim argument and always uses hidden_size // num_heads",
          {G: patch(GQA, ("        if head_dim is None:\n            head_dim = hidden_size // num_heads\n",
                          "        head_dim = hidden_size // num_heads\n"))},
          (G,)),
    Entry("03-gqa-kv-proj-full-width", "raises",
          "GroupedQueryAttention sizes k_proj and v_proj as num_heads * head_dim (like MHA) instead of "
          "num_kv_heads * head_dim; splitting them into num_kv_heads heads gives the wrong head_dim",
          {G: patch(GQA, ("self.k_proj = nn.Linear(hidden_size, num_kv_heads * head_dim, bias=False)",
                          "self.k_proj = nn.Linear(hidden_size, num_heads * head_dim, bias=False)"),
                    ("self.v_proj = nn.Linear(hidden_size, num_kv_heads * head_dim, bias=False)",
                     "self.v_proj = nn.Linear(hidden_size, num_heads * head_dim, bias=False)"))},
          (G,)),
    Entry("03-gqa-ignores-padding", "single",
          "GroupedQueryAttention never uses attention_mask, so padded positions are attended to",
          {G: patch(GQA, ("        if attention_mask is not None:\n            mask = mask & padding_mask(attention_mask)\n", ""))},
          (G,)),
    Entry("03-gqa-creates-cache", "single",
          "GroupedQueryAttention creates a new KVCache when cache is None and returns it, instead of returning "
          "None without a cache",
          {G: patch(GQA, ("        if cache is not None:\n            k, v = cache.update(k, v)\n",
                          "        if cache is None:\n            cache = KVCache()\n        k, v = cache.update(k, v)\n"))},
          (G,)),
    Entry("03-gqa-returns-out-only", "raises",
          "GroupedQueryAttention.forward returns only the output tensor, not the pair (out, cache)",
          {G: patch(GQA, ("return self.o_proj(merge_heads(out)), cache", "return self.o_proj(merge_heads(out))"))},
          (G,)),
    Entry("03-gqa-k-len-before-update", "raises",
          "GroupedQueryAttention takes k_len = len(cache) before calling cache.update, i.e. only the positions "
          "cached before this call, so causal_mask(T, k_len) lacks the T new key columns and does not match "
          "the [T, len(cache) + T] scores",
          {G: patch(GQA, ("        if cache is not None:\n            k, v = cache.update(k, v)\n        k_len = k.shape[2]\n",
                          "        k_len = seq if cache is None else len(cache)\n"
                          "        if cache is not None:\n            k, v = cache.update(k, v)\n"))},
          (G,)),
    # ---- kv_cache_bytes ----
    Entry("03-bytes-no-factor-two", "single",
          "kv_cache_bytes forgets the factor 2 for keys and values (counts only the keys)",
          {KB: patch(KV_BYTES, ("per_token_per_layer = 2 * num_kv_heads * head_dim", "per_token_per_layer = num_kv_heads * head_dim"))},
          (KB,)),
    Entry("03-bytes-float", "single",
          "kv_cache_bytes returns a float, not a Python int: it counts bits and converts with / 8",
          {KB: patch(KV_BYTES, ("return batch * seq_len * num_layers * per_token_per_layer * bytes_per_elem",
                                "bits = batch * seq_len * num_layers * per_token_per_layer * bytes_per_elem * 8\n    return bits / 8"))},
          (KB,)),
    # ---- two mistakes ----
    Entry("03-double-cat-heads-and-tiled-repeat", "double",
          "two mistakes: KVCache.update concatenates along dim=1 (heads) instead of dim=2, and repeat_kv tiles "
          "with repeat instead of repeat_interleave",
          {KC: CAT_HEADS, RK: REPEAT_TILED},
          (KC, RK, G)),
    Entry("03-double-no-offset-and-no-factor-two", "double",
          "two mistakes: GroupedQueryAttention's causal mask is not offset by the cached length, and "
          "kv_cache_bytes forgets the factor 2 for keys and values",
          {G: NO_OFFSET_GQA,
           KB: patch(KV_BYTES, ("per_token_per_layer = 2 * num_kv_heads * head_dim", "per_token_per_layer = num_kv_heads * head_dim"))},
          (G, KB)),
    Entry("03-double-gqa-tiled-and-no-padding", "double",
          "two mistakes in GroupedQueryAttention: it shares KV heads with x.repeat (tiled, not interleaved) "
          "instead of calling repeat_kv, and it never uses attention_mask",
          {G: patch(GQA, ("        if attention_mask is not None:\n            mask = mask & padding_mask(attention_mask)\n", ""),
                    ("        k = repeat_kv(k, n_rep)\n        v = repeat_kv(v, n_rep)\n",
                     "        k = k.repeat(1, n_rep, 1, 1)\n        v = v.repeat(1, n_rep, 1, 1)\n"))},
          (G,)),
    Entry("03-double-new-before-old-and-float-bytes", "double",
          "two mistakes: KVCache.update puts the new positions in front of the cached ones, and kv_cache_bytes "
          "returns a float (bits / 8) instead of an int",
          {KC: patch(KVCACHE, ("self.k = torch.cat([self.k, k], dim=2)", "self.k = torch.cat([k, self.k], dim=2)"),
                     ("self.v = torch.cat([self.v, v], dim=2)", "self.v = torch.cat([v, self.v], dim=2)")),
           KB: patch(KV_BYTES, ("return batch * seq_len * num_layers * per_token_per_layer * bytes_per_elem",
                                "bits = batch * seq_len * num_layers * per_token_per_layer * bytes_per_elem * 8\n    return bits / 8"))},
          (KC, G, KB)),
    # ---- attention_flops ----
    Entry("03-flops-counts-macs", "single",
          "attention_flops counts multiply-adds, not FLOPs: it never multiplies by 2, so every count is half "
          "the right one",
          {AF: patch(FLOPS, ("return 2 * batch * per_sequence", "return batch * per_sequence"))},
          (AF,)),
    Entry("03-flops-kv-proj-query-heads", "single",
          "attention_flops counts k_proj and v_proj with num_heads output heads, as in MHA, instead of "
          "num_kv_heads (so GQA and MHA get the same count)",
          {AF: patch(FLOPS, ("kv_macs = 2 * q_len * hidden_size * num_kv_heads * head_dim",
                             "kv_macs = 2 * q_len * hidden_size * num_heads * head_dim"))},
          (AF,)),
    Entry("03-flops-scores-kv-heads", "single",
          "attention_flops counts Q·Kᵀ and weights·V over num_kv_heads heads instead of num_heads query heads, "
          "as if GQA also saved the score computation",
          {AF: '''
def attention_flops(batch: int, q_len: int, k_len: int, hidden_size: int, num_heads: int, num_kv_heads: int,
                    head_dim: int) -> int:
    """FLOPs of one attention layer on q_len new tokens attending to k_len positions, 2 per multiply-add."""
    projections = 2 * batch * q_len * hidden_size * head_dim * (2 * num_heads + 2 * num_kv_heads)
    # K and V only have num_kv_heads heads, so the score table is computed per KV head
    attn = 4 * batch * num_kv_heads * q_len * k_len * head_dim
    return projections + attn
'''},
          (AF,)),
    Entry("03-flops-proj-over-k-len", "single",
          "attention_flops counts all four projections over k_len tokens instead of the q_len new tokens, "
          "i.e. it re-projects the cached positions at every step",
          {AF: '''
def attention_flops(batch: int, q_len: int, k_len: int, hidden_size: int, num_heads: int, num_kv_heads: int,
                    head_dim: int) -> int:
    """FLOPs of one attention layer on q_len new tokens attending to k_len positions, 2 per multiply-add."""
    q_proj = 2 * batch * k_len * hidden_size * num_heads * head_dim
    kv_proj = 2 * 2 * batch * k_len * hidden_size * num_kv_heads * head_dim
    qk = 2 * batch * num_heads * q_len * k_len * head_dim
    av = 2 * batch * num_heads * q_len * k_len * head_dim
    o_proj = 2 * batch * k_len * num_heads * head_dim * hidden_size
    return q_proj + kv_proj + qk + av + o_proj
'''},
          (AF,)),
    Entry("03-flops-scores-q-len-squared", "single",
          "attention_flops counts the score table as q_len × q_len (the prefill T² habit) instead of "
          "q_len × k_len, so the cached positions are left out of Q·Kᵀ and weights·V",
          {AF: patch(FLOPS, ("scores_macs = num_heads * q_len * k_len * head_dim",
                             "scores_macs = num_heads * q_len * q_len * head_dim"),
                     ("mix_macs = num_heads * q_len * k_len * head_dim",
                      "mix_macs = num_heads * q_len * q_len * head_dim"))},
          (AF,)),
    Entry("03-flops-no-o-proj", "single",
          "attention_flops leaves out o_proj: it counts only q_proj, k_proj and v_proj among the projections",
          {AF: '''
def attention_flops(batch: int, q_len: int, k_len: int, hidden_size: int, num_heads: int, num_kv_heads: int,
                    head_dim: int) -> int:
    """FLOPs of one attention layer on q_len new tokens attending to k_len positions, 2 per multiply-add."""
    qkv = q_len * hidden_size * (num_heads + 2 * num_kv_heads) * head_dim
    scores = 2 * num_heads * q_len * k_len * head_dim
    return 2 * batch * (qkv + scores)
'''},
          (AF,)),
    Entry("03-flops-no-batch", "single",
          "attention_flops never multiplies by batch: it returns the FLOPs of a single sequence",
          {AF: patch(FLOPS, ("return 2 * batch * per_sequence", "return 2 * per_sequence"))},
          (AF,)),
    Entry("03-flops-one-kv-projection", "single",
          "attention_flops counts one projection of width num_kv_heads * head_dim for K and V together, "
          "forgetting that k_proj and v_proj are two matrices (the K/V factor 2 is missing)",
          {AF: patch(FLOPS, ("kv_macs = 2 * q_len * hidden_size * num_kv_heads * head_dim",
                             "kv_macs = q_len * hidden_size * num_kv_heads * head_dim"))},
          (AF,)),
    Entry("03-flops-counts-softmax", "single",
          "attention_flops adds 4·B·H·q_len·k_len FLOPs for the scaling by 1/√D and the softmax (exp, sum, "
          "divide), which the exercise says not to count",
          {AF: '''
def attention_flops(batch: int, q_len: int, k_len: int, hidden_size: int, num_heads: int, num_kv_heads: int,
                    head_dim: int) -> int:
    """FLOPs of one attention layer on q_len new tokens attending to k_len positions, 2 per multiply-add."""
    proj = 2 * batch * q_len * hidden_size * head_dim * (2 * num_heads + 2 * num_kv_heads)
    matmuls = 4 * batch * num_heads * q_len * k_len * head_dim
    n_scores = batch * num_heads * q_len * k_len
    softmax = 4 * n_scores  # scale, exp, sum, divide for every score
    return proj + matmuls + softmax
'''},
          (AF,)),
    Entry("03-flops-causal-visible-only", "single",
          "attention_flops counts only the scores the causal mask lets through (query i sees "
          "k_len - q_len + i + 1 keys) instead of the full q_len × k_len table; it agrees when q_len == 1 "
          "(decode) but is too small for prefill and multi-token chunks",
          {AF: '''
def attention_flops(batch: int, q_len: int, k_len: int, hidden_size: int, num_heads: int, num_kv_heads: int,
                    head_dim: int) -> int:
    """FLOPs of one attention layer on q_len new tokens attending to k_len positions, 2 per multiply-add."""
    proj = q_len * hidden_size * head_dim * (2 * num_heads + 2 * num_kv_heads)
    # new query i sits at position k_len - q_len + i and sees keys 0 .. k_len - q_len + i
    visible = q_len * (k_len - q_len) + q_len * (q_len + 1) // 2
    attn = 2 * num_heads * visible * head_dim
    return 2 * batch * (proj + attn)
'''},
          (AF,)),
    Entry("03-flops-float-kv-ratio", "single",
          "attention_flops writes the projection term as 4·B·q_len·d·D·H·(1 + num_kv_heads / num_heads), whose "
          "true division makes the result a float instead of an int (and inexact for large counts)",
          {AF: '''
def attention_flops(batch: int, q_len: int, k_len: int, hidden_size: int, num_heads: int, num_kv_heads: int,
                    head_dim: int) -> int:
    """FLOPs of one attention layer on q_len new tokens attending to k_len positions, 2 per multiply-add."""
    proj = 4 * batch * q_len * hidden_size * head_dim * num_heads * (1 + num_kv_heads / num_heads)
    attn = 4 * batch * num_heads * q_len * k_len * head_dim
    return proj + attn
'''},
          (AF,)),
    Entry("03-flops-asserts-mha-width", "raises",
          "attention_flops asserts hidden_size == num_heads * head_dim, which is false for valid layers such as "
          "Qwen3.5's (hidden 1024, 8 heads × 256), so it raises AssertionError there",
          {AF: patch(FLOPS, ("    q_macs = q_len * hidden_size * num_heads * head_dim\n",
                             "    assert hidden_size == num_heads * head_dim, \"hidden_size must be num_heads * head_dim\"\n"
                             "    q_macs = q_len * hidden_size * num_heads * head_dim\n"))},
          (AF,)),
    Entry("03-flops-q-o-proj-square", "single",
          "attention_flops counts q_proj and o_proj as hidden_size × hidden_size matrices instead of "
          "hidden_size × num_heads·head_dim; it agrees only when hidden_size == num_heads * head_dim",
          {AF: patch(FLOPS, ("q_macs = q_len * hidden_size * num_heads * head_dim",
                             "q_macs = q_len * hidden_size * hidden_size"),
                     ("o_macs = q_len * num_heads * head_dim * hidden_size",
                      "o_macs = q_len * hidden_size * hidden_size"))},
          (AF,)),
    Entry("03-flops-double-q-k-len-swapped", "double",
          "two mistakes in attention_flops: the projections are counted over k_len tokens instead of q_len, "
          "and the score table is q_len × q_len instead of q_len × k_len (q_len and k_len swapped in both places)",
          {AF: patch(FLOPS, ("q_macs = q_len * hidden_size * num_heads * head_dim",
                             "q_macs = k_len * hidden_size * num_heads * head_dim"),
                     ("kv_macs = 2 * q_len * hidden_size * num_kv_heads * head_dim",
                      "kv_macs = 2 * k_len * hidden_size * num_kv_heads * head_dim"),
                     ("o_macs = q_len * num_heads * head_dim * hidden_size",
                      "o_macs = k_len * num_heads * head_dim * hidden_size"),
                     ("scores_macs = num_heads * q_len * k_len * head_dim",
                      "scores_macs = num_heads * q_len * q_len * head_dim"),
                     ("mix_macs = num_heads * q_len * k_len * head_dim",
                      "mix_macs = num_heads * q_len * q_len * head_dim"))},
          (AF,)),
    Entry("03-double-bytes-and-flops-one-of-k-v", "double",
          "two mistakes, both forgetting that K and V are two tensors: kv_cache_bytes has no factor 2 (stores "
          "only keys), and attention_flops counts a single KV projection instead of k_proj and v_proj",
          {KB: patch(KV_BYTES, ("per_token_per_layer = 2 * num_kv_heads * head_dim", "per_token_per_layer = num_kv_heads * head_dim")),
           AF: patch(FLOPS, ("kv_macs = 2 * q_len * hidden_size * num_kv_heads * head_dim",
                             "kv_macs = q_len * hidden_size * num_kv_heads * head_dim"))},
          (KB, AF)),
    # A later set, written from the notebooks alone.
    Entry("03-bytes-no-layers", "single",
          "kv_cache_bytes never multiplies by num_layers: it returns the bytes of one layer's cache",
          {KB: patch(KV_BYTES, ("return batch * seq_len * num_layers * per_token_per_layer * bytes_per_elem",
                                "return batch * seq_len * per_token_per_layer * bytes_per_elem"))},
          (KB,)),
    Entry("03-bytes-counts-bits", "single",
          "kv_cache_bytes multiplies by 8 as if converting to bits, although bytes_per_elem is already a "
          "number of bytes, so every count is 8 times too large",
          {KB: patch(KV_BYTES, ("return batch * seq_len * num_layers * per_token_per_layer * bytes_per_elem",
                                "return batch * seq_len * num_layers * per_token_per_layer * bytes_per_elem * 8"))},
          (KB,)),
    Entry("03-bytes-numpy-int64", "single",
          "kv_cache_bytes multiplies the factors with numpy.prod, which returns a numpy.int64 instead of a "
          "Python int (the value is right)",
          {KB: '''
def kv_cache_bytes(batch: int, seq_len: int, num_layers: int, num_kv_heads: int, head_dim: int,
                   bytes_per_elem: int) -> int:
    """Bytes of a KV cache: one key and one value vector per position, KV head and layer."""
    import numpy as np
    return np.prod([2, batch, seq_len, num_layers, num_kv_heads, head_dim, bytes_per_elem])
'''},
          (KB,)),
    Entry("03-flops-batch-only-on-attention", "single",
          "attention_flops multiplies only Q·Kᵀ and weights·V by the batch size and counts the four projections "
          "once, as if sharing the weights across the batch also shared their FLOPs",
          {AF: '''
def attention_flops(batch: int, q_len: int, k_len: int, hidden_size: int, num_heads: int, num_kv_heads: int,
                    head_dim: int) -> int:
    """FLOPs of one attention layer on q_len new tokens attending to k_len positions, 2 per multiply-add."""
    # the projection weights are shared by every sequence of the batch
    projections = 2 * q_len * hidden_size * head_dim * (2 * num_heads + 2 * num_kv_heads)
    attention = 4 * batch * num_heads * q_len * k_len * head_dim
    return projections + attention
'''},
          (AF,)),
    Entry("03-flops-k-len-plus-q-len", "single",
          "attention_flops reads k_len as the number of cached positions only and counts the score table as "
          "q_len × (k_len + q_len), although k_len already includes the new tokens",
          {AF: patch(FLOPS, ("scores_macs = num_heads * q_len * k_len * head_dim",
                             "scores_macs = num_heads * q_len * (k_len + q_len) * head_dim"),
                     ("mix_macs = num_heads * q_len * k_len * head_dim",
                      "mix_macs = num_heads * q_len * (k_len + q_len) * head_dim"))},
          (AF,)),
    Entry("03-flops-no-weights-times-v", "single",
          "attention_flops counts Q·Kᵀ but forgets the second matrix product, weights·V, so the attention term "
          "is 2·B·H·q_len·k_len·D instead of 4·B·H·q_len·k_len·D",
          {AF: patch(FLOPS, ("per_sequence = q_macs + kv_macs + o_macs + scores_macs + mix_macs",
                             "per_sequence = q_macs + kv_macs + o_macs + scores_macs"))},
          (AF,)),
    Entry("03-flops-q-proj-with-gate", "single",
          "attention_flops counts q_proj as Qwen3.5's gated projection, 2·H·D outputs wide (query and gate), "
          "instead of the plain H·D of the exercise's table",
          {AF: patch(FLOPS, ("q_macs = q_len * hidden_size * num_heads * head_dim",
                             "q_macs = q_len * hidden_size * 2 * num_heads * head_dim  # query and gate"))},
          (AF,)),
    Entry("03-flops-head-dim-from-hidden", "single",
          "attention_flops ignores its head_dim argument and recomputes head_dim = hidden_size // num_heads (the "
          "02 habit), which is wrong whenever hidden_size != num_heads * head_dim (Qwen3.5: 1024 vs 8 × 256)",
          {AF: patch(FLOPS, ("    q_macs = q_len * hidden_size * num_heads * head_dim\n",
                             "    head_dim = hidden_size // num_heads\n"
                             "    q_macs = q_len * hidden_size * num_heads * head_dim\n"))},
          (AF,)),
    Entry("03-double-len-head-dim-and-bytes-no-layers", "double",
          "two mistakes: KVCache.__len__ returns self.k.shape[-1] (head_dim) instead of self.k.shape[2] (the "
          "cached positions), and kv_cache_bytes never multiplies by num_layers",
          {KC: patch(KVCACHE, ("        return self.k.shape[2]", "        return self.k.shape[-1]")),
           KB: patch(KV_BYTES, ("return batch * seq_len * num_layers * per_token_per_layer * bytes_per_elem",
                                "return batch * seq_len * per_token_per_layer * bytes_per_elem"))},
          (KC, G, KB)),
    Entry("03-double-repeat-batch-dim-and-flops-k-plus-q", "double",
          "two mistakes: repeat_kv repeats along dim 0 (the batch) instead of dim 1 (the KV heads), and "
          "attention_flops counts the score table as q_len × (k_len + q_len) although k_len already includes "
          "the new tokens",
          {RK: patch(REPEAT_KV, ("torch.repeat_interleave(x, n_rep, dim=1)", "torch.repeat_interleave(x, n_rep, dim=0)")),
           AF: patch(FLOPS, ("scores_macs = num_heads * q_len * k_len * head_dim",
                             "scores_macs = num_heads * q_len * (k_len + q_len) * head_dim"),
                     ("mix_macs = num_heads * q_len * k_len * head_dim",
                      "mix_macs = num_heads * q_len * (k_len + q_len) * head_dim"))},
          (RK, G, AF)),
    # A held-out set, written from the notebooks alone.
    Entry("03-ho-bytes-no-batch", "single",
          "kv_cache_bytes never multiplies by batch: it returns the bytes of the cache of a single sequence",
          {KB: patch(KV_BYTES, ("return batch * seq_len * num_layers * per_token_per_layer * bytes_per_elem",
                                "return seq_len * num_layers * per_token_per_layer * bytes_per_elem"))},
          (KB,)),
    Entry("03-ho-flops-kv-proj-over-k-len", "single",
          "attention_flops counts k_proj and v_proj over all k_len positions (as if the cached keys and values "
          "were projected again at every step) while q_proj and o_proj are counted over the q_len new tokens",
          {AF: patch(FLOPS, ("kv_macs = 2 * q_len * hidden_size * num_kv_heads * head_dim",
                             "kv_macs = 2 * k_len * hidden_size * num_kv_heads * head_dim"))},
          (AF,)),
    Entry("03-ho-flops-two-b-twice", "single",
          "attention_flops copies every term from the FLOPs column of the table, which already includes the "
          "factor 2B, and then multiplies the sum by 2B again as the hint says for multiply-add counts, so the "
          "result is 2B times too large (4B² instead of 2B)",
          {AF: '''
def attention_flops(batch: int, q_len: int, k_len: int, hidden_size: int, num_heads: int, num_kv_heads: int,
                    head_dim: int) -> int:
    """FLOPs of one attention layer on q_len new tokens attending to k_len positions, 2 per multiply-add."""
    q_proj = 2 * batch * q_len * hidden_size * num_heads * head_dim
    kv_proj = 2 * 2 * batch * q_len * hidden_size * num_kv_heads * head_dim
    scores = 2 * batch * num_heads * q_len * k_len * head_dim
    mix = 2 * batch * num_heads * q_len * k_len * head_dim
    o_proj = 2 * batch * q_len * num_heads * head_dim * hidden_size
    return 2 * batch * (q_proj + kv_proj + scores + mix + o_proj)
'''},
          (AF,)),
]
