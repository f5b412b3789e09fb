"""07_real_model: LlamaAttention, greedy_generate."""
from . import a01, a02, a03, a04
from .entry import Entry, patch

ASSIGNMENT = "07_real_model"

HEADER = a01.HEADER

LLAMA = '''
class LlamaAttention(nn.Module):
    """Llama's attention: GQA with a KV cache and rotate-half RoPE over the whole head."""

    def __init__(self, config):
        super().__init__()
        self.num_heads = config.num_attention_heads
        self.num_kv_heads = config.num_key_value_heads
        self.head_dim = config.head_dim
        self.rope_theta = config.rope_theta
        hidden = config.hidden_size
        self.q_proj = nn.Linear(hidden, self.num_heads * self.head_dim, bias=False)
        self.k_proj = nn.Linear(hidden, self.num_kv_heads * self.head_dim, bias=False)
        self.v_proj = nn.Linear(hidden, self.num_kv_heads * self.head_dim, bias=False)
        self.o_proj = nn.Linear(self.num_heads * self.head_dim, hidden, bias=False)

    def forward(self, x: torch.Tensor, attention_mask: torch.Tensor | None = None, cache=None):
        seq = x.shape[1]
        start = 0 if cache is None else len(cache)
        positions = torch.arange(start, start + seq)
        cos, sin = rope_cos_sin(positions, self.head_dim, self.rope_theta)

        q = split_heads(self.q_proj(x), self.num_heads)
        k = split_heads(self.k_proj(x), self.num_kv_heads)
        v = split_heads(self.v_proj(x), self.num_kv_heads)
        q = apply_rope(q, cos, sin)
        k = apply_rope(k, cos, sin)
        if cache is not None:
            k, v = cache.update(k, v)

        mask = causal_mask(seq, k.shape[2])
        if attention_mask is not None:
            mask = mask & padding_mask(attention_mask)
        n_rep = self.num_heads // self.num_kv_heads
        out, _ = attention(q, repeat_kv(k, n_rep), repeat_kv(v, n_rep), mask)
        return self.o_proj(merge_heads(out)), cache
'''

GREEDY = '''
def greedy_generate(model, input_ids: torch.Tensor, max_new_tokens: int,
                    attention_mask: torch.Tensor | None = None) -> torch.Tensor:
    """Greedy decoding through one KVCache per layer; returns the new tokens [B, max_new_tokens]."""
    caches = [KVCache() for _ in model.layers]
    new_tokens = []
    step_ids = input_ids
    mask = attention_mask
    with torch.no_grad():
        for _ in range(max_new_tokens):
            logits = model(step_ids, attention_mask=mask, caches=caches)
            next_token = logits[:, -1, :].argmax(dim=-1, keepdim=True)   # [B, 1]
            new_tokens.append(next_token)
            step_ids = next_token
            if mask is not None:
                mask = torch.cat([mask, torch.ones_like(mask[:, :1])], dim=1)
    if not new_tokens:
        return input_ids.new_zeros((input_ids.shape[0], 0))
    return torch.cat(new_tokens, dim=1)
'''

CORRECT = {**a01.CORRECT, "split_heads": a02.SPLIT_HEADS, "merge_heads": a02.MERGE_HEADS,
           "KVCache": a03.KVCACHE, "repeat_kv": a03.REPEAT_KV, "rope_cos_sin": a04.ROPE_COS_SIN,
           "rotate_half": a04.ROTATE_HALF, "apply_rope": a04.APPLY_ROPE,
           "LlamaAttention": LLAMA, "greedy_generate": GREEDY}

L, GG = "LlamaAttention", "greedy_generate"

POSITIONS_FROM_ZERO = patch(LLAMA, ("positions = torch.arange(start, start + seq)", "positions = torch.arange(seq)"))
MASK_NOT_EXTENDED = patch(GREEDY, ("            if mask is not None:\n"
                                   "                mask = torch.cat([mask, torch.ones_like(mask[:, :1])], dim=1)\n", ""))
OWN_SCORES = ("        out, _ = attention(q, repeat_kv(k, n_rep), repeat_kv(v, n_rep), mask)\n",
              "        scores = q @ repeat_kv(k, n_rep).transpose(-2, -1)\n"
              "        weights = masked_softmax(scores, mask)\n"
              "        out = weights @ repeat_kv(v, n_rep)\n")

ENTRIES = [
    # ---- LlamaAttention ----
    Entry("07-llama-positions-from-zero", "single",
          "LlamaAttention uses RoPE positions arange(T) on every call instead of len(cache) + arange(T), so with "
          "a cache each new token is rotated as if it stood at position 0",
          {L: POSITIONS_FROM_ZERO},
          (L,)),
    Entry("07-llama-interleaved-rope", "single",
          "LlamaAttention rotates adjacent pairs (x0, x1), (x2, x3), ... (interleaved RoPE, GGUF's layout) "
          "instead of rotate-half pairs (i, i + D/2), though the converted weights are in rotate-half order",
          {L: patch(LLAMA, ("        q = apply_rope(q, cos, sin)\n        k = apply_rope(k, cos, sin)\n",
                            "        half = self.head_dim // 2\n"
                            "        c, s = cos[:, :half], sin[:, :half]\n"
                            "        def turn(t):\n"
                            "            even, odd = t[..., 0::2], t[..., 1::2]\n"
                            "            return torch.stack([even * c - odd * s, even * s + odd * c], dim=-1).flatten(-2)\n"
                            "        q = turn(q)\n        k = turn(k)\n"))},
          (L,)),
    Entry("07-llama-rotates-values", "single",
          "LlamaAttention applies RoPE to the values as well as to the queries and keys",
          {L: patch(LLAMA, ("        k = apply_rope(k, cos, sin)\n", "        k = apply_rope(k, cos, sin)\n        v = apply_rope(v, cos, sin)\n"))},
          (L,)),
    Entry("07-llama-repeat-before-cache", "single",
          "LlamaAttention expands the keys and values to num_heads with repeat_kv before cache.update, so the "
          "cache holds num_heads heads instead of num_key_value_heads",
          {L: patch(LLAMA, ("        if cache is not None:\n            k, v = cache.update(k, v)\n",
                            "        n_rep = self.num_heads // self.num_kv_heads\n"
                            "        k, v = repeat_kv(k, n_rep), repeat_kv(v, n_rep)\n"
                            "        if cache is not None:\n            k, v = cache.update(k, v)\n"),
                    ("        n_rep = self.num_heads // self.num_kv_heads\n        out, _ = attention(q, repeat_kv(k, n_rep), repeat_kv(v, n_rep), mask)\n",
                     "        out, _ = attention(q, k, v, mask)\n"))},
          (L,)),
    Entry("07-llama-tiled-kv-heads", "single",
          "LlamaAttention shares the KV heads with k.repeat(1, n_rep, 1, 1) (tiled) instead of repeat_kv, so "
          "query head h reads KV head h % Hkv instead of h // n_rep",
          {L: patch(LLAMA, ("out, _ = attention(q, repeat_kv(k, n_rep), repeat_kv(v, n_rep), mask)",
                            "out, _ = attention(q, k.repeat(1, n_rep, 1, 1), v.repeat(1, n_rep, 1, 1), mask)"))},
          (L,)),
    Entry("07-llama-mask-query-len-only", "raises",
          "LlamaAttention builds causal_mask(T) without k_len, which does not match the [T, k_len] scores when a "
          "chunk of several tokens follows cached positions",
          {L: patch(LLAMA, ("mask = causal_mask(seq, k.shape[2])", "mask = causal_mask(seq)"))},
          (L,)),
    Entry("07-llama-no-scaling", "single",
          "LlamaAttention computes its own scores q @ k^T and forgets to divide by sqrt(head_dim)",
          {L: patch(LLAMA, OWN_SCORES)},
          (L,)),
    Entry("07-llama-theta-hardcoded", "single",
          "LlamaAttention ignores config.rope_theta and hard-codes theta = 10000 (SmolLM2 uses 100000)",
          {L: patch(LLAMA, ("cos, sin = rope_cos_sin(positions, self.head_dim, self.rope_theta)",
                            "cos, sin = rope_cos_sin(positions, self.head_dim, 10000.0)"))},
          (L,)),
    Entry("07-llama-ignores-padding", "single",
          "LlamaAttention never uses attention_mask, so left-padded prompts attend to their pad tokens",
          {L: patch(LLAMA, ("        if attention_mask is not None:\n            mask = mask & padding_mask(attention_mask)\n", ""))},
          (L,)),
    Entry("07-llama-returns-out-only", "raises",
          "LlamaAttention.forward returns only the output tensor instead of the pair (out, cache)",
          {L: patch(LLAMA, ("return self.o_proj(merge_heads(out)), cache", "return self.o_proj(merge_heads(out))"))},
          (L,)),
    Entry("07-llama-len-of-none", "raises",
          "LlamaAttention computes the start position as len(cache) without handling cache=None, so a call "
          "without a cache raises TypeError",
          {L: patch(LLAMA, ("start = 0 if cache is None else len(cache)", "start = len(cache)"))},
          (L,)),
    # ---- helpers from the provided cell, replaced by a student's own buggy versions ----
    Entry("07-helper-cache-cat-heads", "cascade",
          "the notebook's KVCache was replaced by one that concatenates along dim=1 (heads) instead of dim=2 "
          "(positions); LlamaAttention and greedy_generate are correct but decode with a broken cache",
          {"KVCache": a03.CAT_HEADS},
          (L, GG)),
    Entry("07-helper-cache-len-counts-updates", "cascade",
          "the KVCache helper's __len__ counts update calls instead of cached positions, so LlamaAttention "
          "(correct) starts RoPE at the wrong position after the prompt is prefilled, and greedy_generate "
          "(correct) generates from wrongly rotated keys",
          {"KVCache": a03.ENTRIES[[e.id for e in a03.ENTRIES].index("03-cache-len-counts-updates")].code["KVCache"]},
          (L, GG)),
    Entry("07-helper-rotate-half-sign", "cascade",
          "the rotate_half helper behind apply_rope returns cat(x2, -x1) instead of cat(-x2, x1), so "
          "LlamaAttention (correct) rotates queries and keys the wrong way",
          {"rotate_half": a04.ROTATE_HALF_SIGN},
          (L,)),
    Entry("07-helper-repeat-kv-tiled", "cascade",
          "the repeat_kv helper tiles the KV heads with repeat instead of repeat_interleave, so LlamaAttention "
          "(correct) pairs query heads with the wrong KV heads",
          {"repeat_kv": a03.REPEAT_TILED},
          (L,)),
    # ---- greedy_generate ----
    Entry("07-greedy-refeeds-sequence", "single",
          "greedy_generate feeds the whole sequence so far (prompt + generated tokens) at every step while "
          "also passing the caches, so the caches fill with duplicate positions",
          {GG: patch(GREEDY, ("            step_ids = next_token\n",
                              "            input_ids = torch.cat([input_ids, next_token], dim=1)\n"
                              "            step_ids = input_ids\n"))},
          (GG,)),
    Entry("07-greedy-no-cache", "single",
          "greedy_generate never uses the KV cache: it recomputes the whole sequence at every step "
          "(model(ids) without caches), feeding far more positions than prompt + new tokens",
          {GG: '''
def greedy_generate(model, input_ids: torch.Tensor, max_new_tokens: int,
                    attention_mask: torch.Tensor | None = None) -> torch.Tensor:
    """Greedy decoding through one KVCache per layer; returns the new tokens [B, max_new_tokens]."""
    ids = input_ids
    mask = attention_mask
    with torch.no_grad():
        for _ in range(max_new_tokens):
            logits = model(ids, attention_mask=mask)
            next_token = logits[:, -1, :].argmax(dim=-1, keepdim=True)
            ids = torch.cat([ids, next_token], dim=1)
            if mask is not None:
                mask = torch.cat([mask, torch.ones_like(mask[:, :1])], dim=1)
    return ids[:, input_ids.shape[1]:]
'''},
          (GG,)),
    Entry("07-greedy-first-position-logits", "single",
          "greedy_generate takes the argmax of the logits at the first position (logits[:, 0]) instead of the "
          "last position",
          {GG: patch(GREEDY, ("next_token = logits[:, -1, :].argmax(dim=-1, keepdim=True)", "next_token = logits[:, 0, :].argmax(dim=-1, keepdim=True)"))},
          (GG,)),
    Entry("07-greedy-mask-not-extended", "raises",
          "greedy_generate passes the prompt's attention_mask unchanged at every step instead of appending a "
          "column of ones per new token, so it no longer covers the cached and new positions",
          {GG: MASK_NOT_EXTENDED},
          (GG,)),
    Entry("07-greedy-returns-prompt-too", "single",
          "greedy_generate returns the prompt followed by the new tokens instead of only the new tokens",
          {GG: patch(GREEDY, ("    return torch.cat(new_tokens, dim=1)\n", "    return torch.cat([input_ids] + new_tokens, dim=1)\n"))},
          (GG,)),
    Entry("07-greedy-one-shared-cache", "single",
          "greedy_generate builds its caches as [KVCache()] * len(model.layers): one cache object shared by "
          "every layer, so the layers append into and read from each other's keys and values",
          {GG: patch(GREEDY, ("caches = [KVCache() for _ in model.layers]", "caches = [KVCache()] * len(model.layers)"))},
          (GG,)),
    Entry("07-greedy-one-token-too-many", "single",
          "greedy_generate loops max_new_tokens + 1 times (off by one), returning one token more than "
          "max_new_tokens",
          {GG: patch(GREEDY, ("for _ in range(max_new_tokens):", "for _ in range(max_new_tokens + 1):"))},
          (GG,)),
    Entry("07-greedy-argmax-no-keepdim", "raises",
          "greedy_generate takes argmax(dim=-1) without keepdim, so the next input is [B] instead of [B, 1] and "
          "the model cannot embed it as a batch of sequences",
          {GG: patch(GREEDY, ("next_token = logits[:, -1, :].argmax(dim=-1, keepdim=True)   # [B, 1]",
                              "next_token = logits[:, -1, :].argmax(dim=-1)"),
                     ("    return torch.cat(new_tokens, dim=1)\n", "    return torch.stack(new_tokens, dim=1)\n"))},
          (GG,)),
    # ---- two mistakes ----
    Entry("07-double-positions-and-mask", "double",
          "two mistakes: LlamaAttention's RoPE positions restart at 0 on every call, and greedy_generate does "
          "not extend attention_mask as tokens are generated",
          {L: POSITIONS_FROM_ZERO, GG: MASK_NOT_EXTENDED},
          (L, GG)),
    Entry("07-double-greedy-first-logits-and-shared-cache", "double",
          "two mistakes in greedy_generate: one KVCache object is shared by every layer ([KVCache()] * n), and "
          "the next token is taken from the first position's logits",
          {GG: patch(GREEDY, ("caches = [KVCache() for _ in model.layers]", "caches = [KVCache()] * len(model.layers)"),
                     ("next_token = logits[:, -1, :].argmax(dim=-1, keepdim=True)", "next_token = logits[:, 0, :].argmax(dim=-1, keepdim=True)"))},
          (GG,)),
    Entry("07-double-no-padding-and-extra-token", "double",
          "two mistakes: LlamaAttention never uses attention_mask, and greedy_generate returns "
          "max_new_tokens + 1 tokens",
          {L: patch(LLAMA, ("        if attention_mask is not None:\n            mask = mask & padding_mask(attention_mask)\n", "")),
           GG: patch(GREEDY, ("for _ in range(max_new_tokens):", "for _ in range(max_new_tokens + 1):"))},
          (L, GG)),
]
