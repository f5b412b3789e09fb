"""Reference for 07_real_model: Llama's attention (grouped-query attention with a KV cache and RoPE over
the whole head), greedy generation through one KV cache per layer of a real model, and sampling: the filtered
next-token distribution (temperature, top-k, top-p), generation that draws from it with a given generator, the
repetition, frequency and presence penalties on the logits, and min-p's filter.

Shapes: hidden states ``[B, T, hidden]``; queries ``[B, H, T, D]``; keys and values ``[B, Hkv, T, D]``;
token ids ``[B, T]``. Built from the references of 01 (masks, attention), 02 (heads), 03 (``repeat_kv``,
``KVCache``) and 04 (``rope_cos_sin``, ``apply_rope``).
"""
import torch

from solutions.attention_basics import attention
from solutions.gqa_kv_cache import GroupedQueryAttention, KVCache, repeat_kv
from solutions.multi_head import attention_mask_for, merge_heads, split_heads
from solutions.rope_mla import apply_rope, rope_cos_sin


class LlamaAttention(GroupedQueryAttention):
    """Llama's attention: ``q_proj, k_proj, v_proj, o_proj`` (bias-free) as in 03, with rotate-half RoPE on
    every dim of each query and key head at positions ``len(cache) + arange(T)``.

    ``config`` has Hugging Face's Llama names: ``hidden_size, num_attention_heads, num_key_value_heads,
    head_dim, rope_theta``.
    """

    def __init__(self, config):
        super().__init__(config.hidden_size, config.num_attention_heads, config.num_key_value_heads,
                         config.head_dim)
        self.rope_theta = config.rope_theta

    def rope_tables(self, x: torch.Tensor, cache: KVCache | None):
        """``cos, sin [T, D]`` of the new positions, which follow the ``len(cache)`` cached ones."""
        start = 0 if cache is None else len(cache)
        return rope_cos_sin(torch.arange(start, start + x.shape[1]), self.head_dim, self.rope_theta)

    def forward(self, x: torch.Tensor, attention_mask: torch.Tensor | None = None,
                cache: KVCache | None = None) -> tuple[torch.Tensor, KVCache | None]:
        """``x [B, T, hidden]`` (the new positions), ``attention_mask [B, T_cached + T]`` of 0/1 or None.

        Returns ``(out [B, T, hidden], cache)``; the cache receives the rotated keys and the values of the
        ``num_key_value_heads`` heads.
        """
        cos, sin = self.rope_tables(x, cache)
        q = apply_rope(split_heads(self.q_proj(x), self.num_heads), cos, sin)
        k = apply_rope(split_heads(self.k_proj(x), self.num_kv_heads), cos, sin)
        v = split_heads(self.v_proj(x), self.num_kv_heads)
        if cache is not None:
            k, v = cache.update(k, v)
        mask = attention_mask_for(x.shape[1], k.shape[-2], attention_mask)
        n_rep = self.num_heads // self.num_kv_heads
        out, _ = attention(q, repeat_kv(k, n_rep), repeat_kv(v, n_rep), mask)
        return self.o_proj(merge_heads(out)), cache


def greedy_generate(model, input_ids: torch.Tensor, max_new_tokens: int,
                    attention_mask: torch.Tensor | None = None) -> torch.Tensor:
    """The ``max_new_tokens`` tokens ``[B, max_new_tokens]`` a model picks one by one, each the most
    likely next token, decoding through one ``KVCache`` per layer.

    ``model(ids, attention_mask=..., caches=...)`` returns logits ``[B, T, vocab]`` (``course.llama``);
    ``input_ids [B, T]`` is the prompt, ``attention_mask [B, T]`` of 0/1 marks left padding (or None).
    """
    caches = [KVCache() for _ in model.layers]
    step, mask, chosen = input_ids, attention_mask, []
    for _ in range(max_new_tokens):
        logits = model(step, attention_mask=mask, caches=caches)
        step = logits[:, -1].argmax(dim=-1, keepdim=True)  # [B, 1]: fed back in on the next round
        chosen.append(step)
        if mask is not None:
            mask = torch.cat([mask, torch.ones_like(step, dtype=mask.dtype)], dim=1)
    return torch.cat(chosen, dim=1)


def sampling_probs(logits: torch.Tensor, temperature: float = 1.0, top_k: int | None = None,
                   top_p: float | None = None) -> torch.Tensor:
    """The distribution a sampler draws the next token from: ``logits [B, V]`` → ``probs [B, V]``, same dtype.

    In this order, each step on what the one before left (renormalised):
    1. temperature: ``softmax(logits / temperature)``;
    2. top-k: keep the ``top_k`` most likely tokens (all when ``top_k ≥ V``);
    3. top-p (nucleus): sort the kept tokens from most to least likely and keep each one whose probability
       mass *before* it is still below ``top_p``: the smallest set that reaches ``top_p``, including the token
       that crosses it; the most likely token is always kept, ``top_p = 1`` keeps every token.
    Removed tokens are exactly 0 and each row sums to 1. ``None`` switches a filter off. Ties at the top-k or
    top-p boundary are not defined by this contract (the cases have none).
    """
    if not temperature > 0:
        raise ValueError(f"temperature must be > 0, got {temperature}")
    if top_k is not None and top_k < 1:
        raise ValueError(f"top_k must be at least 1, got {top_k}")
    if top_p is not None and not 0 < top_p <= 1:
        raise ValueError(f"top_p must be in (0, 1], got {top_p}")
    probs = torch.softmax(logits / temperature, dim=-1)
    if top_k is not None and top_k < probs.shape[-1]:
        kth = probs.topk(top_k, dim=-1).values[..., -1:]
        probs = probs.masked_fill(probs < kth, 0.0)
        probs = probs / probs.sum(dim=-1, keepdim=True)
    if top_p is not None and top_p < 1:
        ranked, order = probs.sort(dim=-1, descending=True)
        before = ranked.cumsum(dim=-1) - ranked  # the mass of the more likely tokens
        keep = torch.zeros_like(probs, dtype=torch.bool).scatter(-1, order, before < top_p)
        probs = probs.masked_fill(~keep, 0.0)
    return probs / probs.sum(dim=-1, keepdim=True)


def sample_generate(model, input_ids: torch.Tensor, max_new_tokens: int, generator: torch.Generator,
                    attention_mask: torch.Tensor | None = None, **sampling) -> torch.Tensor:
    """Like ``greedy_generate``, but each new token is drawn at random: ``[B, max_new_tokens]``.

    Each step draws once, ``torch.multinomial(probs, 1, generator=generator)``, from
    ``probs = sampling_probs(logits[:, -1], **sampling)`` (``[B, V]``, float32 as the model returns it), and
    nothing else draws from ``generator``: the same seed gives the same tokens. ``sampling`` holds
    ``temperature``, ``top_k``, ``top_p``.
    """
    caches = [KVCache() for _ in model.layers]
    step, mask, chosen = input_ids, attention_mask, []
    for _ in range(max_new_tokens):
        logits = model(step, attention_mask=mask, caches=caches)
        step = torch.multinomial(sampling_probs(logits[:, -1], **sampling), 1, generator=generator)  # [B, 1]
        chosen.append(step)
        if mask is not None:
            mask = torch.cat([mask, torch.ones_like(step, dtype=mask.dtype)], dim=1)
    return torch.cat(chosen, dim=1)


def apply_penalties(logits: torch.Tensor, generated: torch.Tensor, repetition_penalty: float = 1.0,
                    frequency_penalty: float = 0.0, presence_penalty: float = 0.0) -> torch.Tensor:
    """``logits [B, V]`` lowered for the tokens already in ``generated [B, n]`` (token ids, int64; ``n`` may be 0),
    as a new tensor of the logits' dtype; each row counts only its own tokens. In this order:

    1. repetition penalty ``r`` (CTRL's, as Hugging Face applies it): a token that appears in its row at all has
       its logit divided by ``r`` when positive and multiplied by ``r`` otherwise, once however often it appears;
    2. frequency penalty: minus ``frequency_penalty`` times the number of times the token appears in its row;
    3. presence penalty: minus ``presence_penalty`` once for every token that appears in its row.

    The defaults change nothing; the other tokens' logits are returned exactly as they were.
    """
    if not repetition_penalty > 0:
        raise ValueError(f"repetition_penalty must be > 0, got {repetition_penalty}")
    counts = torch.zeros(logits.shape, dtype=torch.int64).scatter_add_(-1, generated, torch.ones_like(generated))
    seen = counts > 0
    lowered = torch.where(logits > 0, logits / repetition_penalty, logits * repetition_penalty)
    penalized = torch.where(seen, lowered, logits)
    return penalized - frequency_penalty * counts.to(logits.dtype) - presence_penalty * seen.to(logits.dtype)


def min_p_filter(probs: torch.Tensor, min_p: float) -> torch.Tensor:
    """min-p sampling's filter: ``probs [B, V]`` (each row a distribution) → ``[B, V]``, same dtype, keeping in each
    row the tokens whose probability is at least ``min_p`` times that row's largest, renormalised; removed tokens
    exactly 0. ``min_p = 0`` keeps every token, ``min_p = 1`` only the most likely (and any tied with it)."""
    if not 0 <= min_p <= 1:
        raise ValueError(f"min_p must be in [0, 1], got {min_p}")
    kept = probs.masked_fill(probs < min_p * probs.amax(dim=-1, keepdim=True), 0.0)
    return kept / kept.sum(dim=-1, keepdim=True)


def beam_search(next_log_probs, input_ids: torch.Tensor, num_beams: int, max_new_tokens: int):
    """Beam search without an end token: ``next_log_probs(ids [N, L]) -> [N, V]`` gives the log-probabilities of the
    next token after each of N sequences; ``input_ids [T]`` is one prompt. At each step every live beam is extended
    by every token, a candidate scored by its beam's score plus the token's log-probability, and the ``num_beams``
    best candidates over all beams are kept (the first step expands the prompt alone, so no two beams are the same).
    Returns ``(tokens [num_beams, max_new_tokens] int64, scores [num_beams])``: each beam's new tokens and the sum of
    their log-probabilities, best first."""
    beams = input_ids.reshape(1, -1)
    scores = None
    new = torch.empty(1, 0, dtype=torch.int64)
    for _ in range(max_new_tokens):
        log_probs = next_log_probs(beams)
        candidates = log_probs if scores is None else scores[:, None] + log_probs  # [beams, V]
        scores, flat = candidates.flatten().topk(num_beams)
        parent, token = flat // log_probs.shape[-1], flat % log_probs.shape[-1]
        beams = torch.cat([beams[parent], token[:, None]], dim=-1)
        new = torch.cat([new[parent], token[:, None]], dim=-1)
    return new, scores
