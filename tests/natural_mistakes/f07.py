"""07_real_model: sampling_probs and sample_generate (plus one mistake of LlamaAttention). The provided answers of
01-04, LlamaAttention and greedy_generate are in CORRECT because the probes run a tiny randomly initialised
course.llama.LlamaModel built with CORRECT's LlamaAttention as the stand-in model.
Conventions assumed: top-k keeps exactly the k largest (topk indices); top-p keeps token i iff the mass of the more
likely tokens is < p; each filter renormalises; sample_generate returns int64 [B, 0] for max_new_tokens = 0.
Kind "cascade" here marks a single mistake in sampling_probs (or LlamaAttention) that also fails sample_generate."""
from . import a07, f02, f03
from .entry import Entry, patch

ASSIGNMENT = "07_real_model"
HEADER = '''import math\nimport torch\nfrom torch import nn\nfrom torch.nn import functional as F\n'''

CORRECT = {
    **{name: f03.CORRECT[name] for name in (*f02.FROM_01, "split_heads", "merge_heads", "KVCache")},  # as in 03
    "repeat_kv": '''def repeat_kv(x: torch.Tensor, n_rep: int) -> torch.Tensor:
    """[B, Hkv, T, D] -> [B, Hkv*n_rep, T, D]: query head h reads KV head h // n_rep."""
    if n_rep == 1:
        return x
    batch, kv_heads, seq, dim = x.shape
    copies = x[:, :, None].expand(batch, kv_heads, n_rep, seq, dim)
    return copies.reshape(batch, kv_heads * n_rep, seq, dim)
''',
    "rope_cos_sin": '''def rope_cos_sin(positions: torch.Tensor, rotary_dim: int, theta: float) -> tuple[torch.Tensor, torch.Tensor]:
    exponents = torch.arange(0, rotary_dim, 2, dtype=torch.float32) / rotary_dim
    inv_freq = theta ** (-exponents)
    freqs = torch.outer(positions.float(), inv_freq)
    angles = torch.cat([freqs, freqs], dim=-1)
    return angles.cos(), angles.sin()
''',
    "apply_rope": '''def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    cos, sin = cos.to(x.dtype), sin.to(x.dtype)
    x1, x2 = x.chunk(2, dim=-1)
    return x * cos + torch.cat([-x2, x1], dim=-1) * sin
''',
    "LlamaAttention": '''class LlamaAttention(nn.Module):
    """GQA with a KVCache and rotate-half RoPE over the whole head, Hugging Face Llama names."""

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
        cos, sin = rope_cos_sin(torch.arange(start, start + seq), self.head_dim, self.rope_theta)
        q = apply_rope(split_heads(self.q_proj(x), self.num_heads), cos, sin)
        k = apply_rope(split_heads(self.k_proj(x), self.num_kv_heads), cos, sin)
        v = split_heads(self.v_proj(x), self.num_kv_heads)
        if cache is not None:
            k, v = cache.update(k, v)
        mask = causal_mask(seq, k.shape[2])
        if attention_mask is not None:
            mask = mask & padding_mask(attention_mask)
        n_rep = self.num_heads // self.num_kv_heads
        out, _ = attention(q, repeat_kv(k, n_rep), repeat_kv(v, n_rep), mask)
        return self.o_proj(merge_heads(out)), cache
''',
    "greedy_generate": '''def greedy_generate(model, input_ids: torch.Tensor, max_new_tokens: int,
                    attention_mask: torch.Tensor | None = None) -> torch.Tensor:
    """Greedy decoding through one KVCache per layer; returns the new tokens [B, max_new_tokens]."""
    caches = [KVCache() for _ in model.layers]
    ids, mask, new = input_ids, attention_mask, []
    for _ in range(max_new_tokens):
        logits = model(ids, attention_mask=mask, caches=caches)
        ids = logits[:, -1].argmax(dim=-1, keepdim=True)
        new.append(ids)
        if mask is not None:
            mask = torch.cat([mask, mask.new_ones(mask.shape[0], 1)], dim=1)
    if not new:
        return input_ids.new_zeros(input_ids.shape[0], 0)
    return torch.cat(new, dim=1)
''',
    "sampling_probs": '''def sampling_probs(logits: torch.Tensor, temperature: float = 1.0, top_k: int | None = None,
                   top_p: float | None = None) -> torch.Tensor:
    """logits [B, V] -> probs [B, V]: temperature, then top-k, then top-p (keeping the crossing token)."""
    probs = torch.softmax(logits / temperature, dim=-1)
    if top_k is not None and top_k < probs.shape[-1]:
        keep = torch.zeros_like(probs, dtype=torch.bool).scatter(-1, probs.topk(top_k, dim=-1).indices, True)
        probs = probs.masked_fill(~keep, 0.0)
        probs = probs / probs.sum(dim=-1, keepdim=True)
    if top_p is not None:
        sorted_probs, order = probs.sort(dim=-1, descending=True)
        before = sorted_probs.cumsum(dim=-1) - sorted_probs  # mass of the more likely tokens
        keep = torch.zeros_like(probs, dtype=torch.bool).scatter(-1, order, before < top_p)
        probs = probs.masked_fill(~keep, 0.0)
        probs = probs / probs.sum(dim=-1, keepdim=True)
    return probs
''',
    "sample_generate": '''def sample_generate(model, input_ids: torch.Tensor, max_new_tokens: int, generator: torch.Generator,
                    attention_mask: torch.Tensor | None = None, **sampling) -> torch.Tensor:
    """Sampled decoding through one KVCache per layer, one torch.multinomial draw per step."""
    caches = [KVCache() for _ in model.layers]
    ids, mask, new = input_ids, attention_mask, []
    for _ in range(max_new_tokens):
        logits = model(ids, attention_mask=mask, caches=caches)
        probs = sampling_probs(logits[:, -1], **sampling)
        ids = torch.multinomial(probs, 1, generator=generator)
        new.append(ids)
        if mask is not None:
            mask = torch.cat([mask, mask.new_ones(mask.shape[0], 1)], dim=1)
    if not new:
        return input_ids.new_zeros(input_ids.shape[0], 0)
    return torch.cat(new, dim=1)
''',
}
C = CORRECT
SP, SG = C["sampling_probs"], C["sample_generate"]
BOTH = ("sampling_probs", "sample_generate")

_TEMP_MUL = ("probs = torch.softmax(logits / temperature, dim=-1)", "probs = torch.softmax(logits * temperature, dim=-1)")
_P_STRICT = ("keep = torch.zeros_like(probs, dtype=torch.bool).scatter(-1, order, before < top_p)",
             "keep = torch.zeros_like(probs, dtype=torch.bool).scatter(-1, order, sorted_probs.cumsum(dim=-1) < top_p)")
_K_NO_RENORM = ("        probs = probs.masked_fill(~keep, 0.0)\n        probs = probs / probs.sum(dim=-1, keepdim=True)\n"
                "    if top_p is not None:",
                "        probs = probs.masked_fill(~keep, 0.0)\n    if top_p is not None:")
_PROMPT_TOO = ("    return torch.cat(new, dim=1)", "    return torch.cat([input_ids, *new], dim=1)")
_RESEED = ("        probs = sampling_probs(logits[:, -1], **sampling)",
           "        generator.manual_seed(generator.initial_seed())  # same seed every step: reproducible\n"
           "        probs = sampling_probs(logits[:, -1], **sampling)")
_NO_MASK_EXT = ("        if mask is not None:\n            mask = torch.cat([mask, mask.new_ones(mask.shape[0], 1)], dim=1)\n", "")

_TEMP_LAST = patch(SP,
    ("probs = torch.softmax(logits / temperature, dim=-1)", "probs = torch.softmax(logits, dim=-1)"),
    ("    return probs", "    probs = probs ** (1.0 / temperature)  # temperature last, on what is left\n"
                       "    return probs / probs.sum(dim=-1, keepdim=True)"))
_P_FIRST = patch(SP, ("""    if top_k is not None and top_k < probs.shape[-1]:
        keep = torch.zeros_like(probs, dtype=torch.bool).scatter(-1, probs.topk(top_k, dim=-1).indices, True)
        probs = probs.masked_fill(~keep, 0.0)
        probs = probs / probs.sum(dim=-1, keepdim=True)
    if top_p is not None:
        sorted_probs, order = probs.sort(dim=-1, descending=True)
        before = sorted_probs.cumsum(dim=-1) - sorted_probs  # mass of the more likely tokens
        keep = torch.zeros_like(probs, dtype=torch.bool).scatter(-1, order, before < top_p)
        probs = probs.masked_fill(~keep, 0.0)
        probs = probs / probs.sum(dim=-1, keepdim=True)
""", """    if top_p is not None:
        sorted_probs, order = probs.sort(dim=-1, descending=True)
        before = sorted_probs.cumsum(dim=-1) - sorted_probs
        keep = torch.zeros_like(probs, dtype=torch.bool).scatter(-1, order, before < top_p)
        probs = probs.masked_fill(~keep, 0.0)
        probs = probs / probs.sum(dim=-1, keepdim=True)
    if top_k is not None and top_k < probs.shape[-1]:
        keep = torch.zeros_like(probs, dtype=torch.bool).scatter(-1, probs.topk(top_k, dim=-1).indices, True)
        probs = probs.masked_fill(~keep, 0.0)
        probs = probs / probs.sum(dim=-1, keepdim=True)
"""))
_K_ZERO_LOGIT = patch(SP,
    ("""    probs = torch.softmax(logits / temperature, dim=-1)
    if top_k is not None and top_k < probs.shape[-1]:
        keep = torch.zeros_like(probs, dtype=torch.bool).scatter(-1, probs.topk(top_k, dim=-1).indices, True)
        probs = probs.masked_fill(~keep, 0.0)
        probs = probs / probs.sum(dim=-1, keepdim=True)
""", """    scaled = logits / temperature
    if top_k is not None and top_k < scaled.shape[-1]:
        keep = torch.zeros_like(scaled, dtype=torch.bool).scatter(-1, scaled.topk(top_k, dim=-1).indices, True)
        scaled = scaled.masked_fill(~keep, 0.0)  # drop the others before the softmax
    probs = torch.softmax(scaled, dim=-1)
"""))

ENTRIES = [
    # ---------------- sampling_probs ----------------
    Entry("f07-probs-temperature-on-probs", "cascade",
          "Temperature divides the probabilities after the softmax (softmax(z) / tau, then renormalised) instead "
          "of the logits, so it cancels out and has no effect at all.",
          {"sampling_probs": patch(SP, ("probs = torch.softmax(logits / temperature, dim=-1)",
                                        "probs = torch.softmax(logits, dim=-1) / temperature\n"
                                        "    probs = probs / probs.sum(dim=-1, keepdim=True)"))}, BOTH),
    Entry("f07-probs-temperature-multiplies", "cascade",
          "The logits are multiplied by the temperature (z * tau) instead of divided (z / tau), so tau < 1 flattens "
          "the distribution and tau > 1 sharpens it.",
          {"sampling_probs": patch(SP, _TEMP_MUL)}, BOTH),
    Entry("f07-probs-top-p-drops-crossing-token", "cascade",
          "top-p keeps the tokens whose inclusive cumulative probability is below p (cumsum < p) instead of those "
          "whose more likely tokens sum to less than p: the token that makes the sum cross p is dropped (and if the "
          "top token alone exceeds p the whole row is removed, giving NaN).",
          {"sampling_probs": patch(SP, _P_STRICT)}, BOTH),
    Entry("f07-probs-top-p-before-top-k", "cascade",
          "The filters run in the wrong order: top-p first on the full distribution, then top-k; top-p must run on "
          "the renormalised top-k distribution, where it may keep fewer tokens.",
          {"sampling_probs": _P_FIRST}, BOTH),
    Entry("f07-probs-temperature-last", "cascade",
          "The temperature is applied last (llama.cpp order): top-k and top-p filter softmax(z) at temperature 1 and "
          "only the kept probabilities are then sharpened/flattened (p^(1/tau)), so top-p keeps a different set "
          "than after softmax(z / tau).",
          {"sampling_probs": _TEMP_LAST}, BOTH),
    Entry("f07-probs-top-k-keeps-k-plus-1", "cascade",
          "top-k takes its threshold as the sorted value at index top_k (the (k+1)-th largest, 0-based indexing "
          "slip) and keeps probs >= threshold, so k + 1 tokens survive.",
          {"sampling_probs": patch(SP, ("keep = torch.zeros_like(probs, dtype=torch.bool).scatter(-1, probs.topk(top_k, dim=-1).indices, True)",
                                        "threshold = probs.sort(dim=-1, descending=True).values[..., top_k, None]\n"
                                        "        keep = probs >= threshold"))}, BOTH),
    Entry("f07-probs-no-renorm-after-top-k", "cascade",
          "The distribution is not renormalised after top-k (only after top-p), so top-p accumulates the "
          "un-renormalised top-k probabilities and keeps too many tokens (and with top-k alone rows do not sum to 1).",
          {"sampling_probs": patch(SP, _K_NO_RENORM)}, BOTH),
    Entry("f07-probs-never-renormalised", "cascade",
          "Removed tokens are zeroed but the remaining probabilities are never renormalised after top-k or top-p, "
          "so filtered rows sum to less than 1 and top-p runs on the un-renormalised top-k mass.",
          {"sampling_probs": patch(SP, ("        probs = probs.masked_fill(~keep, 0.0)\n        probs = probs / probs.sum(dim=-1, keepdim=True)\n    if top_p",
                                        "        probs = probs.masked_fill(~keep, 0.0)\n    if top_p"),
                                   ("        probs = probs.masked_fill(~keep, 0.0)\n        probs = probs / probs.sum(dim=-1, keepdim=True)\n    return",
                                    "        probs = probs.masked_fill(~keep, 0.0)\n    return"))}, BOTH),
    Entry("f07-probs-top-k-larger-than-vocab", "raises",
          "No guard for top_k >= V: probs.topk(top_k) raises (selected index k out of range) when top_k exceeds the "
          "vocabulary size, where it should remove nothing.",
          {"sampling_probs": patch(SP, ("if top_k is not None and top_k < probs.shape[-1]:", "if top_k is not None:"))},
          ("sampling_probs",)),
    Entry("f07-probs-top-p-mask-not-scattered", "cascade",
          "The top-p keep mask is computed in sorted order but applied to the unsorted probabilities (no scatter "
          "back through the sort indices), so it keeps the first positions of the vocabulary instead of the most "
          "likely tokens.",
          {"sampling_probs": patch(SP, ("keep = torch.zeros_like(probs, dtype=torch.bool).scatter(-1, order, before < top_p)",
                                        "keep = before < top_p"))}, BOTH),
    Entry("f07-probs-top-p-ascending-sort", "cascade",
          "For top-p the probabilities are sorted in ascending order (sort() without descending=True), so the "
          "nucleus is filled from the least likely tokens.",
          {"sampling_probs": patch(SP, ("sorted_probs, order = probs.sort(dim=-1, descending=True)",
                                        "sorted_probs, order = probs.sort(dim=-1)"))}, BOTH),
    Entry("f07-probs-top-k-logits-filled-with-zero", "cascade",
          "top-k is done on the logits, but the removed logits are set to 0 instead of -inf before the softmax, so "
          "removed tokens keep a nonzero probability exp(0) / sum.",
          {"sampling_probs": _K_ZERO_LOGIT}, BOTH),
    Entry("f07-probs-softmax-over-batch", "cascade",
          "The softmax is taken over dim=0 (the batch) instead of the vocabulary dim -1, so rows do not sum to 1 "
          "and each token's probability depends on the other rows.",
          {"sampling_probs": patch(SP, ("probs = torch.softmax(logits / temperature, dim=-1)",
                                        "probs = torch.softmax(logits / temperature, dim=0)"))}, BOTH),
    Entry("f07-probs-float32-out", "single",
          "The logits are cast to float32 for a stable softmax and the result is never cast back: bfloat16 or "
          "float16 logits give float32 probabilities instead of the input dtype.",
          {"sampling_probs": patch(SP, ("probs = torch.softmax(logits / temperature, dim=-1)",
                                        "probs = torch.softmax(logits.float() / temperature, dim=-1)"))},
          ("sampling_probs",)),

    # ---------------- sample_generate ----------------
    Entry("f07-sample-reseeds-each-step", "single",
          "The generator is re-seeded with its initial seed before every draw, so every step uses the same random "
          "number instead of continuing the caller's stream.",
          {"sample_generate": patch(SG, _RESEED)}, ("sample_generate",)),
    Entry("f07-sample-global-rng", "single",
          "torch.multinomial is called without generator=generator, so the draws come from the global RNG and do "
          "not follow the seeded generator.",
          {"sample_generate": patch(SG, ("ids = torch.multinomial(probs, 1, generator=generator)",
                                         "ids = torch.multinomial(probs, 1)"))}, ("sample_generate",)),
    Entry("f07-sample-first-position-logits", "single",
          "The distribution is taken from logits[:, 0] (the first position) instead of logits[:, -1]; after the "
          "prompt step this samples the token that follows the first prompt token.",
          {"sample_generate": patch(SG, ("probs = sampling_probs(logits[:, -1], **sampling)",
                                         "probs = sampling_probs(logits[:, 0], **sampling)"))}, ("sample_generate",)),
    Entry("f07-sample-mask-not-extended", "raises",
          "attention_mask is not extended with a column of ones after each new token, so from the second step on it "
          "covers fewer positions than the cache holds and the padding mask no longer broadcasts against the "
          "causal mask.",
          {"sample_generate": patch(SG, _NO_MASK_EXT)}, ("sample_generate",)),
    Entry("f07-sample-refeeds-whole-sequence", "single",
          "Every step feeds the whole sequence so far (prompt + all new tokens) while still passing the caches, so "
          "the caches get the old positions appended again: the keys/positions are wrong (and with an attention_mask "
          "the mask no longer matches the cache length).",
          {"sample_generate": patch(SG, ("        ids = torch.multinomial(probs, 1, generator=generator)\n        new.append(ids)\n",
                                         "        step = torch.multinomial(probs, 1, generator=generator)\n        new.append(step)\n"
                                         "        ids = torch.cat([input_ids, *new], dim=1)\n"))},
          ("sample_generate",)),
    Entry("f07-sample-fresh-caches-each-step", "single",
          "A new list of KVCaches is created inside the loop, so after the prompt each step runs the single new "
          "token with an empty cache and the model forgets the context (with an attention_mask the mask no longer "
          "matches either).",
          {"sample_generate": patch(SG, ("    caches = [KVCache() for _ in model.layers]\n", ""),
                                    ("        logits = model(ids, attention_mask=mask, caches=caches)",
                                     "        caches = [KVCache() for _ in model.layers]\n"
                                     "        logits = model(ids, attention_mask=mask, caches=caches)"))},
          ("sample_generate",)),
    Entry("f07-sample-options-not-passed", "single",
          "sampling_probs is called without **sampling, so temperature, top_k and top_p are ignored and every step "
          "samples from softmax(logits).",
          {"sample_generate": patch(SG, ("probs = sampling_probs(logits[:, -1], **sampling)",
                                         "probs = sampling_probs(logits[:, -1])"))}, ("sample_generate",)),
    Entry("f07-sample-returns-prompt-too", "single",
          "Returns the prompt followed by the new tokens, [B, T + max_new_tokens], instead of only the new tokens "
          "[B, max_new_tokens].",
          {"sample_generate": patch(SG, _PROMPT_TOO)}, ("sample_generate",)),
    Entry("f07-sample-mask-extended-with-zeros", "single",
          "The attention_mask is extended with a column of zeros instead of ones for each new token, so the "
          "generated tokens are treated as padding and never attended to.",
          {"sample_generate": patch(SG, ("mask = torch.cat([mask, mask.new_ones(mask.shape[0], 1)], dim=1)",
                                         "mask = torch.cat([mask, mask.new_zeros(mask.shape[0], 1)], dim=1)"))},
          ("sample_generate",)),
    Entry("f07-sample-inverse-cdf", "single",
          "Samples by inverse CDF with torch.rand(B, 1, generator=generator) and searchsorted on the cumulative "
          "probabilities instead of one torch.multinomial(probs, 1, generator=generator) draw, so the tokens do "
          "not match the rule for the same seed.",
          {"sample_generate": patch(SG, ("ids = torch.multinomial(probs, 1, generator=generator)",
                                         "u = torch.rand(probs.shape[0], 1, generator=generator, dtype=probs.dtype)\n"
                                         "        ids = torch.searchsorted(probs.cumsum(dim=-1), u).clamp(max=probs.shape[-1] - 1)"))},
          ("sample_generate",)),
    Entry("f07-sample-keeps-position-dim", "raises",
          "The last position is sliced as logits[:, -1:] (keeping the length-1 position dim), so the probabilities "
          "are [B, 1, V] and torch.multinomial rejects a 3-D input.",
          {"sample_generate": patch(SG, ("probs = sampling_probs(logits[:, -1], **sampling)",
                                         "probs = sampling_probs(logits[:, -1:], **sampling)"))}, ("sample_generate",)),
    Entry("f07-llama-rope-positions-restart", "single",
          "LlamaAttention builds the RoPE table for positions arange(T) every call instead of len(cache) + arange(T), "
          "so with a KV cache each new token is rotated as if it were at position 0.",
          {"LlamaAttention": patch(C["LlamaAttention"], ("start = 0 if cache is None else len(cache)", "start = 0"))},
          ("LlamaAttention",)),

    # ---------------- doubles ----------------
    Entry("f07-double-top-p-crossing-and-no-renorm", "double",
          "(1) top-p keeps only tokens whose inclusive cumulative probability is below p, dropping the token that "
          "crosses p; (2) the distribution is not renormalised after top-k, so top-p accumulates un-renormalised "
          "probabilities.",
          {"sampling_probs": patch(SP, _P_STRICT, _K_NO_RENORM)}, BOTH),
    Entry("f07-double-temp-multiplies-and-prompt-returned", "double",
          "(1) sampling_probs multiplies the logits by the temperature instead of dividing; (2) sample_generate "
          "returns the prompt followed by the new tokens instead of only the new tokens.",
          {"sampling_probs": patch(SP, _TEMP_MUL), "sample_generate": patch(SG, _PROMPT_TOO)}, BOTH),
    Entry("f07-double-reseed-and-mask-not-extended", "double",
          "(1) sample_generate re-seeds the generator with its initial seed before every draw; (2) it never "
          "extends attention_mask with a column of ones for the new tokens (fails once a mask is given).",
          {"sample_generate": patch(SG, _RESEED, _NO_MASK_EXT)}, ("sample_generate",)),
]

# The definitions this writer did not write are the first writer's (a07), so that the notebook is whole.
HEADER = a07.HEADER + "".join(line + "\n" for line in HEADER.splitlines() if line not in a07.HEADER.splitlines())
CORRECT = {**a07.CORRECT, **CORRECT}
