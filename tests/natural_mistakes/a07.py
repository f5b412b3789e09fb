"""07_real_model: LlamaAttention, greedy_generate, sampling_probs, sample_generate."""
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

SAMPLING_PROBS = '''
def sampling_probs(logits: torch.Tensor, temperature: float = 1.0, top_k: int | None = None,
                   top_p: float | None = None) -> torch.Tensor:
    """logits [B, V] -> probs [B, V] (same dtype): temperature, then top-k, then top-p, renormalising after each."""
    probs = torch.softmax(logits.float() / temperature, dim=-1)
    vocab = probs.shape[-1]
    if top_k is not None and top_k < vocab:
        top = probs.topk(top_k, dim=-1).indices
        keep = torch.zeros_like(probs, dtype=torch.bool).scatter(-1, top, True)
        probs = probs.masked_fill(~keep, 0.0)
        probs = probs / probs.sum(dim=-1, keepdim=True)
    if top_p is not None:
        ranked, order = probs.sort(dim=-1, descending=True)
        before = ranked.double().cumsum(dim=-1) - ranked.double()   # mass of the more likely tokens
        keep_ranked = before < top_p
        keep = torch.zeros_like(keep_ranked).scatter(-1, order, keep_ranked)
        probs = probs.masked_fill(~keep, 0.0)
        probs = probs / probs.sum(dim=-1, keepdim=True)
    return probs.to(logits.dtype)
'''

SAMPLE = '''
def sample_generate(model, input_ids: torch.Tensor, max_new_tokens: int, generator: torch.Generator,
                    attention_mask: torch.Tensor | None = None, **sampling) -> torch.Tensor:
    """Sampled decoding through one KVCache per layer, one multinomial draw per step; returns [B, max_new_tokens]."""
    caches = [KVCache() for _ in range(len(model.layers))]
    batch = input_ids.shape[0]
    out = torch.zeros(batch, max_new_tokens, dtype=torch.long)
    feed, mask = input_ids, attention_mask
    with torch.no_grad():
        for step in range(max_new_tokens):
            logits = model(feed, attention_mask=mask, caches=caches)
            probs = sampling_probs(logits[:, -1], **sampling)
            token = torch.multinomial(probs, 1, generator=generator)   # [B, 1]
            out[:, step] = token[:, 0]
            feed = token
            if mask is not None:
                mask = torch.cat([mask, mask.new_ones(batch, 1)], dim=-1)
    return out
'''

# apply_penalties came later; written from the notebook alone by the writer of g07 (its mistakes are there).
APPLY_PENALTIES = '''def apply_penalties(logits: torch.Tensor, generated: torch.Tensor, repetition_penalty: float = 1.0,
                    frequency_penalty: float = 0.0, presence_penalty: float = 0.0) -> torch.Tensor:
    """logits [B, V] lowered for the tokens in generated [B, n] (int64), row by row: the repetition penalty
    (divide a positive logit, multiply a negative one, once per seen token), then minus frequency_penalty times
    the count and minus presence_penalty once. Returns a new [B, V] tensor of logits' dtype."""
    counts = torch.zeros(logits.shape, dtype=torch.long, device=logits.device)
    counts.scatter_add_(-1, generated, torch.ones_like(generated))
    seen = counts > 0
    shrunk = torch.where(logits > 0, logits / repetition_penalty, logits * repetition_penalty)
    out = torch.where(seen, shrunk, logits)
    out = out - frequency_penalty * counts.to(logits.dtype)
    out = out - presence_penalty * seen.to(logits.dtype)
    return out
'''

# min_p_filter too, by the writer of h07.
MIN_P_FILTER = '''def min_p_filter(probs: torch.Tensor, min_p: float) -> torch.Tensor:
    """probs [B, V] (each row a distribution) -> [B, V]: in each row keep the tokens with probability >= min_p times
    the row's largest, set the others to exactly 0, renormalise."""
    largest = probs.max(dim=-1, keepdim=True).values
    threshold = min_p * largest
    keep = probs >= threshold
    kept = torch.where(keep, probs, torch.zeros_like(probs))
    return kept / kept.sum(dim=-1, keepdim=True)
'''

# beam_search too, by the writer of i07.
BEAM_SEARCH = '''def beam_search(next_log_probs, input_ids, num_beams, max_new_tokens):
    """Beam search without an end token; returns (tokens [num_beams, max_new_tokens] int64, scores [num_beams])."""
    beams = input_ids[None]                              # [1, T]: the first step expands the prompt alone
    for step in range(max_new_tokens):
        log_probs = next_log_probs(beams)                # [n, V]
        vocab = log_probs.shape[-1]
        if step == 0:
            candidates = log_probs                       # one beam, score 0
        else:
            candidates = scores[:, None] + log_probs     # [num_beams, V]
        scores, flat = candidates.flatten().topk(num_beams)
        parent, token = flat // vocab, flat % vocab
        beams = torch.cat([beams[parent], token[:, None]], dim=-1)
    return beams[:, input_ids.shape[0]:], scores
'''

CORRECT = {**a01.CORRECT, "split_heads": a02.SPLIT_HEADS, "merge_heads": a02.MERGE_HEADS,
           "KVCache": a03.KVCACHE, "repeat_kv": a03.REPEAT_KV, "rope_cos_sin": a04.ROPE_COS_SIN,
           "rotate_half": a04.ROTATE_HALF, "apply_rope": a04.APPLY_ROPE,
           "LlamaAttention": LLAMA, "greedy_generate": GREEDY,
           "sampling_probs": SAMPLING_PROBS, "sample_generate": SAMPLE, "apply_penalties": APPLY_PENALTIES,
           "min_p_filter": MIN_P_FILTER, "beam_search": BEAM_SEARCH}

L, GG, SP, SG = "LlamaAttention", "greedy_generate", "sampling_probs", "sample_generate"

POSITIONS_FROM_ZERO = patch(LLAMA, ("positions = torch.arange(start, start + seq)", "positions = torch.arange(seq)"))
MASK_NOT_EXTENDED = patch(GREEDY, ("            if mask is not None:\n"
                                   "                mask = torch.cat([mask, torch.ones_like(mask[:, :1])], dim=1)\n", ""))
OWN_SCORES = ("        out, _ = attention(q, repeat_kv(k, n_rep), repeat_kv(v, n_rep), mask)\n",
              "        scores = q @ repeat_kv(k, n_rep).transpose(-2, -1)\n"
              "        weights = masked_softmax(scores, mask)\n"
              "        out = weights @ repeat_kv(v, n_rep)\n")
TOP_K_BLOCK = ("        top = probs.topk(top_k, dim=-1).indices\n"
               "        keep = torch.zeros_like(probs, dtype=torch.bool).scatter(-1, top, True)\n"
               "        probs = probs.masked_fill(~keep, 0.0)\n")
TEMPERATURE_ON_PROBS = patch(SAMPLING_PROBS, (
    "    probs = torch.softmax(logits.float() / temperature, dim=-1)\n",
    "    probs = torch.softmax(logits.float(), dim=-1)\n"
    "    probs = probs / temperature\n"
    "    probs = probs / probs.sum(dim=-1, keepdim=True)\n"))
TOPP_NO_UNSORT = patch(SAMPLING_PROBS, (
    "        keep = torch.zeros_like(keep_ranked).scatter(-1, order, keep_ranked)\n"
    "        probs = probs.masked_fill(~keep, 0.0)\n",
    "        probs = probs.masked_fill(~keep_ranked, 0.0)\n"))
SG_GLOBAL_RNG = patch(SAMPLE, ("token = torch.multinomial(probs, 1, generator=generator)", "token = torch.multinomial(probs, 1)"))
SG_NO_CACHE = '''
def sample_generate(model, input_ids: torch.Tensor, max_new_tokens: int, generator: torch.Generator,
                    attention_mask: torch.Tensor | None = None, **sampling) -> torch.Tensor:
    """Sampled decoding, one multinomial draw per step; returns [B, max_new_tokens]."""
    ids, mask = input_ids, attention_mask
    with torch.no_grad():
        for _ in range(max_new_tokens):
            logits = model(ids, attention_mask=mask)
            probs = sampling_probs(logits[:, -1], **sampling)
            token = torch.multinomial(probs, 1, generator=generator)
            ids = torch.cat([ids, token], dim=1)
            if mask is not None:
                mask = torch.cat([mask, torch.ones_like(mask[:, :1])], dim=1)
    return ids[:, input_ids.shape[1]:]
'''
SG_MASK_NOT_EXTENDED = patch(SAMPLE, ("            if mask is not None:\n"
                                      "                mask = torch.cat([mask, mask.new_ones(batch, 1)], dim=-1)\n", ""))

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
          "(positions); LlamaAttention, greedy_generate and sample_generate are correct but decode with a broken "
          "cache",
          {"KVCache": a03.CAT_HEADS},
          (L, GG, SG)),
    Entry("07-helper-cache-len-counts-updates", "cascade",
          "the KVCache helper's __len__ counts update calls instead of cached positions, so LlamaAttention "
          "(correct) starts RoPE at the wrong position after the prompt is prefilled, and greedy_generate and "
          "sample_generate (correct) generate from wrongly rotated keys",
          {"KVCache": a03.ENTRIES[[e.id for e in a03.ENTRIES].index("03-cache-len-counts-updates")].code["KVCache"]},
          (L, GG, SG)),
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
    # ---- sampling_probs ----
    Entry("07-sp-temperature-on-probs", "cascade",
          "sampling_probs divides the softmax probabilities by the temperature instead of the logits and then "
          "renormalises, so the temperature cancels out and has no effect",
          {SP: TEMPERATURE_ON_PROBS},
          (SP, SG)),
    Entry("07-sp-temperature-multiplies", "cascade",
          "sampling_probs multiplies the logits by the temperature instead of dividing by it, so temperature "
          "0.5 flattens the distribution and 2 sharpens it",
          {SP: patch(SAMPLING_PROBS, ("torch.softmax(logits.float() / temperature, dim=-1)",
                                      "torch.softmax(logits.float() * temperature, dim=-1)"))},
          (SP, SG)),
    Entry("07-sp-temperature-last", "cascade",
          "sampling_probs applies top-k and top-p to the temperature-1 distribution and divides by the "
          "temperature only at the end, so the filters choose their tokens from the wrong distribution",
          {SP: '''
def sampling_probs(logits: torch.Tensor, temperature: float = 1.0, top_k: int | None = None,
                   top_p: float | None = None) -> torch.Tensor:
    """logits [B, V] -> probs [B, V]: filter the logits with top-k and top-p, then temperature and softmax."""
    z = logits.float()
    if top_k is not None and top_k < z.shape[-1]:
        kth = z.topk(top_k, dim=-1).values[..., -1:]
        z = z.masked_fill(z < kth, float("-inf"))
    if top_p is not None:
        ranked, order = torch.softmax(z, dim=-1).sort(dim=-1, descending=True)
        keep_ranked = ranked.cumsum(dim=-1) - ranked < top_p
        keep = torch.zeros_like(keep_ranked).scatter(-1, order, keep_ranked)
        z = z.masked_fill(~keep, float("-inf"))
    return torch.softmax(z / temperature, dim=-1).to(logits.dtype)
'''},
          (SP, SG)),
    Entry("07-sp-topk-keeps-k-minus-1", "cascade",
          "sampling_probs removes every token whose probability is <= the k-th largest instead of < it, so "
          "top-k keeps only k - 1 tokens (top_k=1 keeps none: rows of 0/0 = NaN)",
          {SP: patch(SAMPLING_PROBS, (TOP_K_BLOCK,
                                      "        kth = probs.topk(top_k, dim=-1).values[..., -1:]\n"
                                      "        probs = probs.masked_fill(probs <= kth, 0.0)\n"))},
          (SP, SG)),
    Entry("07-sp-topk-kth-no-keepdim", "raises",
          "sampling_probs takes the k-th largest probability as topk(...).values[:, -1], shape [B] instead of "
          "[B, 1], so comparing it with probs [B, V] broadcasts along the vocabulary: it raises for a batch of "
          "several rows (and is right only for B = 1)",
          {SP: patch(SAMPLING_PROBS, (TOP_K_BLOCK,
                                      "        kth = probs.topk(top_k, dim=-1).values[:, -1]\n"
                                      "        probs = probs.masked_fill(probs < kth, 0.0)\n"))},
          (SP, SG)),
    Entry("07-sp-topk-larger-than-vocab", "raises",
          "sampling_probs calls probs.topk(top_k) without checking top_k against the vocabulary size, so "
          "top_k > V raises instead of removing nothing",
          {SP: patch(SAMPLING_PROBS, ("    if top_k is not None and top_k < vocab:\n", "    if top_k is not None:\n"))},
          (SP,)),
    Entry("07-sp-topk-masks-logits-with-zero", "cascade",
          "sampling_probs removes the tokens outside the top k by setting their logits to 0 instead of -inf "
          "before the softmax, so they keep a probability of exp(0) / sum instead of exactly 0",
          {SP: '''
def sampling_probs(logits: torch.Tensor, temperature: float = 1.0, top_k: int | None = None,
                   top_p: float | None = None) -> torch.Tensor:
    """logits [B, V] -> probs [B, V]: temperature, top-k on the logits, softmax, then top-p."""
    scaled = logits.float() / temperature
    if top_k is not None and top_k < scaled.shape[-1]:
        kth = scaled.topk(top_k, dim=-1).values[..., -1:]
        scaled = torch.where(scaled < kth, torch.zeros_like(scaled), scaled)
    probs = torch.softmax(scaled, dim=-1)
    if top_p is not None:
        ranked, order = probs.sort(dim=-1, descending=True)
        keep_ranked = ranked.cumsum(dim=-1) - ranked < top_p
        keep = torch.zeros_like(keep_ranked).scatter(-1, order, keep_ranked)
        probs = probs.masked_fill(~keep, 0.0)
        probs = probs / probs.sum(dim=-1, keepdim=True)
    return probs.to(logits.dtype)
'''},
          (SP, SG)),
    Entry("07-sp-topp-drops-crossing-token", "cascade",
          "sampling_probs keeps only the tokens whose inclusive cumulative probability is <= top_p (plus the "
          "most likely one), so the token that makes the sum cross top_p is removed instead of kept",
          {SP: patch(SAMPLING_PROBS, (
              "        before = ranked.double().cumsum(dim=-1) - ranked.double()   # mass of the more likely tokens\n"
              "        keep_ranked = before < top_p\n",
              "        remove = ranked.cumsum(dim=-1) > top_p\n"
              "        remove[..., 0] = False\n"
              "        keep_ranked = ~remove\n"))},
          (SP, SG)),
    Entry("07-sp-topp-no-sort", "cascade",
          "sampling_probs accumulates the probabilities for top-p in vocabulary order without sorting them "
          "from most to least likely, so it keeps the first tokens of the vocabulary instead of the most likely",
          {SP: patch(SAMPLING_PROBS, (
              "        ranked, order = probs.sort(dim=-1, descending=True)\n"
              "        before = ranked.double().cumsum(dim=-1) - ranked.double()   # mass of the more likely tokens\n"
              "        keep_ranked = before < top_p\n"
              "        keep = torch.zeros_like(keep_ranked).scatter(-1, order, keep_ranked)\n",
              "        before = probs.cumsum(dim=-1) - probs\n"
              "        keep = before < top_p\n"))},
          (SP, SG)),
    Entry("07-sp-topp-no-unsort", "cascade",
          "sampling_probs decides which tokens top-p keeps in sorted order but applies that mask to the "
          "unsorted probabilities without scattering it back, so it keeps the tokens at vocabulary positions "
          "0, 1, ... instead of the most likely ones",
          {SP: TOPP_NO_UNSORT},
          (SP, SG)),
    Entry("07-sp-no-renormalise-after-topk", "cascade",
          "sampling_probs does not renormalise after top-k (only once at the end), so top-p accumulates a "
          "distribution that sums to less than 1 and keeps too many tokens when both filters are used",
          {SP: patch(SAMPLING_PROBS, ("        probs = probs.masked_fill(~keep, 0.0)\n"
                                      "        probs = probs / probs.sum(dim=-1, keepdim=True)\n"
                                      "    if top_p is not None:\n",
                                      "        probs = probs.masked_fill(~keep, 0.0)\n"
                                      "    if top_p is not None:\n"),
                     ("    return probs.to(logits.dtype)\n",
                      "    probs = probs / probs.sum(dim=-1, keepdim=True)\n    return probs.to(logits.dtype)\n"))},
          (SP, SG)),
    Entry("07-sp-topp-not-renormalised", "single",
          "sampling_probs zeroes the tokens removed by top-p but does not renormalise afterwards, so the rows "
          "sum to less than 1 (torch.multinomial rescales by itself, so the sampled tokens are unaffected)",
          {SP: patch(SAMPLING_PROBS, ("        probs = probs.masked_fill(~keep, 0.0)\n"
                                      "        probs = probs / probs.sum(dim=-1, keepdim=True)\n"
                                      "    return probs.to(logits.dtype)\n",
                                      "        probs = probs.masked_fill(~keep, 0.0)\n"
                                      "    return probs.to(logits.dtype)\n"))},
          (SP,)),
    Entry("07-sp-exp-overflow", "single",
          "sampling_probs computes the softmax by hand as exp(z / T) / sum without subtracting the row "
          "maximum, so logits around 1e4 overflow to inf and give NaN",
          {SP: patch(SAMPLING_PROBS, ("    probs = torch.softmax(logits.float() / temperature, dim=-1)\n",
                                      "    weights = torch.exp(logits.float() / temperature)\n"
                                      "    probs = weights / weights.sum(dim=-1, keepdim=True)\n"))},
          (SP,)),
    Entry("07-sp-returns-float32", "single",
          "sampling_probs computes in float32 and never casts back, so bfloat16 logits give float32 "
          "probabilities instead of the input dtype",
          {SP: patch(SAMPLING_PROBS, ("    return probs.to(logits.dtype)\n", "    return probs\n"))},
          (SP,)),
    Entry("07-sp-temperature-in-place", "single",
          "sampling_probs divides the caller's logits by the temperature in place (logits /= temperature), "
          "so the tensor passed in is changed",
          {SP: patch(SAMPLING_PROBS, ("    probs = torch.softmax(logits.float() / temperature, dim=-1)\n",
                                      "    logits /= temperature\n"
                                      "    probs = torch.softmax(logits.float(), dim=-1)\n"))},
          (SP,)),
    # ---- sample_generate ----
    Entry("07-sg-global-rng", "single",
          "sample_generate calls torch.multinomial(probs, 1) without generator=generator, so it draws from "
          "torch's global random generator and the given seed has no effect",
          {SG: SG_GLOBAL_RNG},
          (SG,)),
    Entry("07-sg-global-seed-zero", "single",
          "sample_generate ignores the generator and instead calls torch.manual_seed(0) and draws from the "
          "global generator, so every call gives the tokens of seed 0 whatever generator is passed",
          {SG: patch(SAMPLE, ("    caches = [KVCache() for _ in range(len(model.layers))]\n",
                              "    torch.manual_seed(0)\n    caches = [KVCache() for _ in range(len(model.layers))]\n"),
                     ("token = torch.multinomial(probs, 1, generator=generator)", "token = torch.multinomial(probs, 1)"))},
          (SG,)),
    Entry("07-sg-reseeds-generator", "single",
          "sample_generate resets the generator with generator.manual_seed(generator.initial_seed()) before "
          "sampling, so a generator that was already used starts again from its seed",
          {SG: patch(SAMPLE, ("    caches = [KVCache() for _ in range(len(model.layers))]\n",
                              "    generator.manual_seed(generator.initial_seed())\n"
                              "    caches = [KVCache() for _ in range(len(model.layers))]\n"))},
          (SG,)),
    Entry("07-sg-own-inverse-cdf", "single",
          "sample_generate draws with its own inverse-CDF sampler (torch.rand(B, 1, generator=generator) against "
          "the cumulative probabilities) instead of torch.multinomial(probs, 1, generator=generator), so the same "
          "seed gives different tokens",
          {SG: patch(SAMPLE, ("            token = torch.multinomial(probs, 1, generator=generator)   # [B, 1]\n",
                              "            u = torch.rand(batch, 1, generator=generator)\n"
                              "            token = (probs.cumsum(dim=-1) < u).sum(dim=-1, keepdim=True)\n"
                              "            token = token.clamp(max=probs.shape[-1] - 1)\n"))},
          (SG,)),
    Entry("07-sg-extra-draw-at-end", "single",
          "sample_generate prefills and draws the first token before its loop and then runs max_new_tokens more "
          "steps, dropping the last token: the returned tokens are right but it feeds one token too many and "
          "draws one extra number from the generator",
          {SG: '''
def sample_generate(model, input_ids: torch.Tensor, max_new_tokens: int, generator: torch.Generator,
                    attention_mask: torch.Tensor | None = None, **sampling) -> torch.Tensor:
    """Sampled decoding through one KVCache per layer; returns [B, max_new_tokens]."""
    caches = [KVCache() for _ in model.layers]
    mask = attention_mask
    with torch.no_grad():
        logits = model(input_ids, attention_mask=mask, caches=caches)
        token = torch.multinomial(sampling_probs(logits[:, -1], **sampling), 1, generator=generator)
        tokens = [token]
        for _ in range(max_new_tokens):
            if mask is not None:
                mask = torch.cat([mask, torch.ones_like(mask[:, :1])], dim=1)
            logits = model(token, attention_mask=mask, caches=caches)
            token = torch.multinomial(sampling_probs(logits[:, -1], **sampling), 1, generator=generator)
            tokens.append(token)
    return torch.cat(tokens, dim=1)[:, :max_new_tokens]
'''},
          (SG,)),
    Entry("07-sg-argmax", "single",
          "sample_generate takes probs.argmax instead of drawing with torch.multinomial, so it is greedy "
          "decoding on the filtered distribution and never uses the generator",
          {SG: patch(SAMPLE, ("token = torch.multinomial(probs, 1, generator=generator)", "token = probs.argmax(dim=-1, keepdim=True)"))},
          (SG,)),
    Entry("07-sg-no-cache", "single",
          "sample_generate never uses a KV cache: it feeds the whole sequence so far at every step "
          "(model(ids) without caches), so the model reads far more positions than prompt + new tokens",
          {SG: SG_NO_CACHE},
          (SG,)),
    Entry("07-sg-first-position-logits", "single",
          "sample_generate samples from the logits of the first position of each call (logits[:, 0]) instead "
          "of the last, so after the prompt it samples from the wrong position",
          {SG: patch(SAMPLE, ("probs = sampling_probs(logits[:, -1], **sampling)", "probs = sampling_probs(logits[:, 0], **sampling)"))},
          (SG,)),
    Entry("07-sg-mask-not-extended", "raises",
          "sample_generate passes the prompt's attention_mask unchanged at every step instead of appending a "
          "column of ones per new token, so it no longer covers the cached and new positions",
          {SG: SG_MASK_NOT_EXTENDED},
          (SG,)),
    Entry("07-sg-drops-sampling-options", "single",
          "sample_generate calls sampling_probs(logits[:, -1]) without passing **sampling on, so temperature, "
          "top_k and top_p are ignored and it always samples from the plain softmax",
          {SG: patch(SAMPLE, ("probs = sampling_probs(logits[:, -1], **sampling)", "probs = sampling_probs(logits[:, -1])"))},
          (SG,)),
    Entry("07-sg-softmax-twice", "single",
          "sample_generate applies softmax to the logits itself and passes those probabilities to "
          "sampling_probs, which treats them as logits and softmaxes again, flattening the distribution",
          {SG: patch(SAMPLE, ("probs = sampling_probs(logits[:, -1], **sampling)",
                              "probs = sampling_probs(torch.softmax(logits[:, -1], dim=-1), **sampling)"))},
          (SG,)),
    Entry("07-sg-returns-3d", "single",
          "sample_generate stacks its [B, 1] draws with torch.stack(..., dim=1), returning [B, max_new_tokens, 1] "
          "instead of [B, max_new_tokens]",
          {SG: '''
def sample_generate(model, input_ids: torch.Tensor, max_new_tokens: int, generator: torch.Generator,
                    attention_mask: torch.Tensor | None = None, **sampling) -> torch.Tensor:
    """Sampled decoding through one KVCache per layer; returns the new tokens."""
    caches = [KVCache() for _ in model.layers]
    drawn = []
    feed, mask = input_ids, attention_mask
    with torch.no_grad():
        for _ in range(max_new_tokens):
            logits = model(feed, attention_mask=mask, caches=caches)
            feed = torch.multinomial(sampling_probs(logits[:, -1], **sampling), 1, generator=generator)
            drawn.append(feed)
            if mask is not None:
                mask = torch.cat([mask, torch.ones_like(mask[:, :1])], dim=1)
    return torch.stack(drawn, dim=1)
'''},
          (SG,)),
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
    Entry("07-double-temperature-on-probs-and-global-rng", "double",
          "two mistakes: sampling_probs divides the probabilities instead of the logits by the temperature "
          "(so it cancels), and sample_generate draws without generator=generator",
          {SP: TEMPERATURE_ON_PROBS, SG: SG_GLOBAL_RNG},
          (SP, SG)),
    Entry("07-double-topp-no-unsort-and-no-cache", "double",
          "two mistakes: sampling_probs applies the sorted top-p mask to the unsorted probabilities, and "
          "sample_generate recomputes the whole sequence without a KV cache at every step",
          {SP: TOPP_NO_UNSORT, SG: SG_NO_CACHE},
          (SP, SG)),
    # A later set, written from the notebooks alone.
    Entry("07-sp-topp-before-topk", "cascade",
          "sampling_probs applies top-p before top-k instead of after it, so top-p accumulates the unfiltered "
          "distribution and the nucleus is chosen before the top-k tokens are renormalised",
          {SP: '''
def sampling_probs(logits: torch.Tensor, temperature: float = 1.0, top_k: int | None = None,
                   top_p: float | None = None) -> torch.Tensor:
    """logits [B, V] -> probs [B, V]: temperature, then top-p, then top-k, renormalising after each."""
    probs = torch.softmax(logits.float() / temperature, dim=-1)
    vocab = probs.shape[-1]
    if top_p is not None:
        ranked, order = probs.sort(dim=-1, descending=True)
        before = ranked.cumsum(dim=-1) - ranked
        keep = torch.zeros_like(before, dtype=torch.bool).scatter(-1, order, before < top_p)
        probs = probs.masked_fill(~keep, 0.0)
        probs = probs / probs.sum(dim=-1, keepdim=True)
    if top_k is not None and top_k < vocab:
        top = probs.topk(top_k, dim=-1).indices
        keep = torch.zeros_like(probs, dtype=torch.bool).scatter(-1, top, True)
        probs = probs.masked_fill(~keep, 0.0)
        probs = probs / probs.sum(dim=-1, keepdim=True)
    return probs.to(logits.dtype)
'''},
          (SP, SG)),
    Entry("07-sp-topk-threshold-over-batch", "cascade",
          "sampling_probs takes the top-k threshold as topk(...).values.min(), the smallest of all rows' k "
          "largest probabilities, one threshold for the whole batch, instead of each row's own k-th largest: "
          "rows of a batch keep more than k tokens (a single row is right)",
          {SP: patch(SAMPLING_PROBS, (TOP_K_BLOCK,
                                      "        kth = probs.topk(top_k, dim=-1).values.min()\n"
                                      "        probs = probs.masked_fill(probs < kth, 0.0)\n"))},
          (SP, SG)),
    Entry("07-sp-topk-keeps-k-plus-1", "cascade",
          "sampling_probs takes the top-k threshold as the sorted probabilities at index top_k (the (k+1)-th "
          "largest, an off-by-one for index top_k - 1) and removes only what is below it, so top-k keeps k + 1 "
          "tokens",
          {SP: patch(SAMPLING_PROBS, (TOP_K_BLOCK,
                                      "        kth = probs.sort(dim=-1, descending=True).values[..., top_k:top_k + 1]\n"
                                      "        probs = probs.masked_fill(probs < kth, 0.0)\n"))},
          (SP, SG)),
    Entry("07-sp-topp-sorted-ascending", "cascade",
          "sampling_probs sorts the probabilities for top-p in ascending order (sort without descending=True), "
          "so it accumulates from the least likely token and keeps the unlikely tail instead of the nucleus",
          {SP: patch(SAMPLING_PROBS, ("ranked, order = probs.sort(dim=-1, descending=True)",
                                      "ranked, order = probs.sort(dim=-1)"))},
          (SP, SG)),
    Entry("07-sp-topp-gather-instead-of-scatter", "cascade",
          "sampling_probs maps the sorted top-p decisions back with keep_ranked.gather(-1, order) instead of "
          "scattering them to the positions in order, i.e. it applies the sorting permutation a second time "
          "instead of inverting it, so the kept set lands on the wrong tokens",
          {SP: patch(SAMPLING_PROBS, ("keep = torch.zeros_like(keep_ranked).scatter(-1, order, keep_ranked)",
                                      "keep = keep_ranked.gather(-1, order)"))},
          (SP, SG)),
    Entry("07-sp-renormalise-over-batch", "single",
          "sampling_probs renormalises after top-k and top-p with probs / probs.sum() over the whole batch "
          "instead of each row (sum(dim=-1, keepdim=True)), so with several rows no row sums to 1 (a single row "
          "is right, and torch.multinomial rescales each row itself, so the sampled tokens are unaffected)",
          {SP: SAMPLING_PROBS.replace("probs / probs.sum(dim=-1, keepdim=True)", "probs / probs.sum()")},
          (SP,)),
    Entry("07-sp-topp-fills-minus-inf-on-probs", "cascade",
          "sampling_probs removes the tokens outside the nucleus by filling the probabilities (not the logits) "
          "with -inf, so whenever a token is removed the renormalising sum is -inf: the kept tokens come out -0 "
          "and the removed ones NaN instead of a distribution with exact zeros",
          {SP: patch(SAMPLING_PROBS, ("        keep = torch.zeros_like(keep_ranked).scatter(-1, order, keep_ranked)\n"
                                      "        probs = probs.masked_fill(~keep, 0.0)\n",
                                      "        keep = torch.zeros_like(keep_ranked).scatter(-1, order, keep_ranked)\n"
                                      "        probs = probs.masked_fill(~keep, float(\"-inf\"))\n"))},
          (SP, SG)),
    Entry("07-sg-keeps-position-dim", "raises",
          "sample_generate slices the logits as logits[:, -1:] (keeping the position dim), so sampling_probs "
          "returns [B, 1, V] and torch.multinomial, which takes only 1-D or 2-D input, raises",
          {SG: patch(SAMPLE, ("probs = sampling_probs(logits[:, -1], **sampling)",
                              "probs = sampling_probs(logits[:, -1:], **sampling)"))},
          (SG,)),
    Entry("07-sg-feeds-1d-token", "raises",
          "sample_generate feeds the drawn token squeezed to shape [B] instead of [B, 1], so the next model call "
          "gets 1-D input_ids and fails",
          {SG: patch(SAMPLE, ("            feed = token\n", "            feed = token.squeeze(-1)\n"))},
          (SG,)),
    Entry("07-sg-mask-extended-with-zeros", "single",
          "sample_generate extends attention_mask with a column of zeros (new_zeros) instead of ones for every "
          "new token, so the generated tokens are treated as padding and masked out of attention",
          {SG: patch(SAMPLE, ("mask.new_ones(batch, 1)", "mask.new_zeros(batch, 1)"))},
          (SG,)),
    Entry("07-sg-mask-extended-on-left", "single",
          "sample_generate prepends the new column of ones to attention_mask (cat([ones, mask])) instead of "
          "appending it, so the mask is shifted by one position per step and left padding lands on real tokens",
          {SG: patch(SAMPLE, ("torch.cat([mask, mask.new_ones(batch, 1)], dim=-1)",
                              "torch.cat([mask.new_ones(batch, 1), mask], dim=-1)"))},
          (SG,)),
    Entry("07-sg-fresh-generator-each-step", "single",
          "sample_generate draws every step from a fresh torch.Generator seeded with generator.initial_seed(), "
          "so each step reuses the same first random numbers and the caller's generator is never advanced",
          {SG: patch(SAMPLE, ("token = torch.multinomial(probs, 1, generator=generator)",
                              "token = torch.multinomial(probs, 1, generator=torch.Generator().manual_seed(generator.initial_seed()))"))},
          (SG,)),
    Entry("07-sg-draws-all-at-once", "single",
          "sample_generate runs the model once on the prompt and draws all max_new_tokens tokens at once from "
          "that single next-token distribution (multinomial with max_new_tokens samples) instead of feeding each "
          "drawn token back and sampling step by step",
          {SG: '''
def sample_generate(model, input_ids: torch.Tensor, max_new_tokens: int, generator: torch.Generator,
                    attention_mask: torch.Tensor | None = None, **sampling) -> torch.Tensor:
    """Sampled continuation of input_ids; returns [B, max_new_tokens]."""
    caches = [KVCache() for _ in model.layers]
    with torch.no_grad():
        logits = model(input_ids, attention_mask=attention_mask, caches=caches)
    probs = sampling_probs(logits[:, -1], **sampling)
    return torch.multinomial(probs, max_new_tokens, replacement=True, generator=generator)
'''},
          (SG,)),
    Entry("07-sg-one-shared-cache", "single",
          "sample_generate builds its caches as [KVCache()] * len(model.layers), one cache object shared by "
          "every layer, so each layer appends its keys and values to the same cache as the others",
          {SG: patch(SAMPLE, ("caches = [KVCache() for _ in range(len(model.layers))]",
                              "caches = [KVCache()] * len(model.layers)"))},
          (SG,)),
    Entry("07-sg-feeds-growing-sequence-with-cache", "single",
          "sample_generate feeds the whole sequence so far (prompt plus drawn tokens) at every step while also "
          "using the KV cache, so positions already in the cache are appended to it again",
          {SG: patch(SAMPLE, ("            feed = token\n", "            feed = torch.cat([feed, token], dim=1)\n"))},
          (SG,)),
    Entry("07-sg-returns-prompt-too", "single",
          "sample_generate returns the prompt followed by the new tokens, [B, T + max_new_tokens], instead of "
          "only the new tokens",
          {SG: patch(SAMPLE, ("    return out\n", "    return torch.cat([input_ids, out], dim=1)\n"))},
          (SG,)),
    Entry("07-sg-temperature-twice", "single",
          "sample_generate divides the logits by the temperature itself and then also passes temperature on to "
          "sampling_probs, so the temperature is applied twice (logits / T²)",
          {SG: patch(SAMPLE, ("probs = sampling_probs(logits[:, -1], **sampling)",
                              "probs = sampling_probs(logits[:, -1] / sampling.get(\"temperature\", 1.0), **sampling)"))},
          (SG,)),
    # A held-out set, written from the notebooks alone.
    Entry("07-ho-sp-vocab-from-batch-dim", "cascade",
          "sampling_probs reads the vocabulary size as probs.shape[0] (the batch size) instead of probs.shape[-1], "
          "so top-k is skipped whenever top_k >= B: with a single row (as in sample_generate on one prompt) top-k "
          "never removes anything",
          {SP: patch(SAMPLING_PROBS, ("vocab = probs.shape[-1]", "vocab = probs.shape[0]"))},
          (SP, SG)),
    Entry("07-ho-sp-topp-renormalise-by-p", "single",
          "sampling_probs renormalises after top-p by dividing by top_p (taking the kept mass to be exactly p) "
          "instead of by the kept probabilities' sum, so the rows no longer sum to 1 (torch.multinomial "
          "rescales each row itself, so the sampled tokens are unaffected)",
          {SP: patch(SAMPLING_PROBS, (
              "        probs = probs.masked_fill(~keep, 0.0)\n        probs = probs / probs.sum(dim=-1, keepdim=True)\n"
              "    return",
              "        probs = probs.masked_fill(~keep, 0.0)\n        probs = probs / top_p\n    return"))},
          (SP,)),
    Entry("07-ho-sp-topp-cumsum-over-batch", "cascade",
          "sampling_probs accumulates the sorted probabilities for top-p with cumsum(dim=0), down the batch, "
          "instead of cumsum(dim=-1) along each row, so the mass 'before' a token is the other rows' probabilities "
          "at the same rank; with a single row nothing is ever removed",
          {SP: patch(SAMPLING_PROBS, ("before = ranked.double().cumsum(dim=-1) - ranked.double()",
                                      "before = ranked.double().cumsum(dim=0) - ranked.double()"))},
          (SP, SG)),
    Entry("07-ho-greedy-new-caches-every-step", "raises",
          "greedy_generate builds its list of KVCache objects inside the loop, so every step starts from empty "
          "caches: after the prompt the model sees only the one token fed at that step and none of the earlier "
          "positions, and with an attention_mask the extended mask (prompt + generated columns) no longer matches "
          "the single cached position, so the attention raises a shape error",
          {GG: patch(GREEDY, ("    caches = [KVCache() for _ in model.layers]\n", ""),
                     ("        for _ in range(max_new_tokens):\n",
                      "        for _ in range(max_new_tokens):\n            caches = [KVCache() for _ in model.layers]\n"))},
          (GG,)),
    Entry("07-ho-greedy-argmax-without-dim", "raises",
          "greedy_generate calls argmax(keepdim=True) on logits[:, -1, :] without dim=-1, so the argmax is taken "
          "over the flattened [B * vocab] tensor and one [1, 1] index comes back for the whole batch: right for "
          "B = 1, but a batch of several prompts fails (the index can exceed the vocabulary and the batch shrinks "
          "to 1)",
          {GG: patch(GREEDY, ("logits[:, -1, :].argmax(dim=-1, keepdim=True)", "logits[:, -1, :].argmax(keepdim=True)"))},
          (GG,)),
    Entry("07-ho-sg-float-output", "single",
          "sample_generate preallocates its output with torch.zeros(batch, max_new_tokens) without dtype=torch.long, "
          "so the drawn token ids are returned as float32 instead of int64",
          {SG: patch(SAMPLE, ("out = torch.zeros(batch, max_new_tokens, dtype=torch.long)",
                              "out = torch.zeros(batch, max_new_tokens)"))},
          (SG,)),
    Entry("07-ho-sg-logits-batch-index", "raises",
          "sample_generate takes logits[-1] (the last sequence of the batch, [T, vocab]) instead of logits[:, -1] "
          "(the last position of every sequence, [B, vocab]), so after a prompt of T > 1 tokens it draws T tokens "
          "for one row and storing them in the [B] column of the output raises",
          {SG: patch(SAMPLE, ("probs = sampling_probs(logits[:, -1], **sampling)", "probs = sampling_probs(logits[-1], **sampling)"))},
          (SG,)),
]
