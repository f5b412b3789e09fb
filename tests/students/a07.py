"""Student code for 07_real_model: correct answers and seeded mistakes, written independently of
``solutions/`` and of the graders' mistake catalogue."""
from tests.students import a01, a03, a04, notebook

ASSIGNMENT = "07_real_model"

# The notebook provides the answers of 01-04 that 07 builds on; here a student's own answers stand in.
HEADER = ("import math\nimport torch\nfrom torch import nn\n" + "\n".join(a01.CORRECT.values()) + a03.READY
          + a03.CORRECT["KVCache"] + a03.CORRECT["repeat_kv"]
          + a04.CORRECT["rope_cos_sin"] + a04.CORRECT["apply_rope"])

_INIT = '''
class LlamaAttention(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.n_q = config.num_attention_heads
        self.n_kv = config.num_key_value_heads
        self.d = config.head_dim
        self.theta = config.rope_theta
        self.groups = self.n_q // self.n_kv
        h = config.hidden_size
        self.q_proj = nn.Linear(h, self.n_q * self.d, bias=False)
        self.k_proj = nn.Linear(h, self.n_kv * self.d, bias=False)
        self.v_proj = nn.Linear(h, self.n_kv * self.d, bias=False)
        self.o_proj = nn.Linear(self.n_q * self.d, h, bias=False)

    def forward(self, x, attention_mask=None, cache=None):
        B, T, _ = x.shape
'''

# The body of forward, in pieces that the seeded mistakes replace one at a time.
_PIECES = {
    "tables": '''
        past = len(cache) if cache is not None else 0
        cos, sin = rope_cos_sin(torch.arange(past, past + T), self.d, self.theta)
''',
    "project": '''
        q = self.q_proj(x).view(B, T, self.n_q, self.d).transpose(1, 2)
        k = self.k_proj(x).view(B, T, self.n_kv, self.d).transpose(1, 2)
        v = self.v_proj(x).view(B, T, self.n_kv, self.d).transpose(1, 2)
''',
    "rope": '''
        q = apply_rope(q, cos, sin)
        k = apply_rope(k, cos, sin)
''',
    "cache": '''
        if cache is not None:
            k, v = cache.update(k, v)
        k = repeat_kv(k, self.groups)
        v = repeat_kv(v, self.groups)
        L = k.shape[2]
''',
    "mask": '''
        mask = causal_mask(T, L)
        if attention_mask is not None:
            mask = mask & padding_mask(attention_mask)
''',
    "scores": '''
        scores = torch.matmul(q, k.transpose(2, 3)) / math.sqrt(self.d)
''',
    "finish": '''
        probs = masked_softmax(scores, mask)
        out = torch.matmul(probs, v).transpose(1, 2).reshape(B, T, self.n_q * self.d)
        return self.o_proj(out), cache
''',
}


def _llama(**replace: str) -> str:
    return _INIT + "".join(replace.get(name, piece) for name, piece in _PIECES.items())


_GENERATE = '''
def greedy_generate(model, input_ids, max_new_tokens, attention_mask=None):
    caches = [KVCache() for _ in range(len(model.layers))]
    tokens = []
    feed = input_ids
    for _ in range(max_new_tokens):
        logits = model(feed, attention_mask=attention_mask, caches=caches)
        feed = torch.argmax(logits[:, -1, :], dim=-1).unsqueeze(-1)
        tokens.append(feed)
        if attention_mask is not None:
            attention_mask = torch.cat([attention_mask, torch.ones_like(feed)], dim=-1)
    return torch.cat(tokens, dim=-1)
'''

# Sampling written the way Hugging Face's logits warpers do it: filter the logits with −inf, one softmax at the
# end, top-p by an ascending cumulative sum (drop what the least likely tokens add up to, at most 1 − p).
_SAMPLING = '''
def sampling_probs(logits, temperature=1.0, top_k=None, top_p=None):
    z = logits / temperature
    if top_k is not None and top_k < z.shape[-1]:
        cutoff = torch.topk(z, top_k, dim=-1).values[:, -1:]
        z = z.masked_fill(z < cutoff, float("-inf"))
    if top_p is not None:
        rising, where = torch.sort(torch.softmax(z, dim=-1), dim=-1)
        drop = torch.cumsum(rising, dim=-1) <= 1 - top_p
        drop[:, -1] = False
        z = z.masked_fill(torch.zeros_like(drop).scatter(1, where, drop), float("-inf"))
    return torch.softmax(z, dim=-1)
'''

# The same filters in probability space, in pieces that the seeded mistakes replace one at a time.
_PROB_PIECES = {
    "head": '''
def sampling_probs(logits, temperature=1.0, top_k=None, top_p=None):
''',
    "temperature": '''
    probs = torch.softmax(logits / temperature, dim=-1)
''',
    "top_k": '''
    if top_k is not None and top_k < probs.shape[-1]:
        kth = probs.topk(top_k, dim=-1).values[:, top_k - 1:top_k]
        probs = probs * (probs >= kth)
        probs = probs / probs.sum(-1, keepdim=True)
''',
    "top_p": '''
    if top_p is not None:
        ordered, order = probs.sort(dim=-1, descending=True)
        keep = ordered.cumsum(-1) - ordered < top_p
        probs = probs * torch.zeros_like(keep).scatter(-1, order, keep)
''',
    "end": '''
    return probs / probs.sum(-1, keepdim=True)
''',
}


# top-k that leaves the renormalising to the end, and an end that renormalises only after top-p.
_TOP_K_KEPT = _PROB_PIECES["top_k"].replace("        probs = probs / probs.sum(-1, keepdim=True)\n", "")
_END_AFTER_TOP_P = '''
    return probs / probs.sum(-1, keepdim=True) if top_p is not None else probs
'''


def _probs(**replace: str) -> str:
    return "".join(replace.get(name, piece) for name, piece in _PROB_PIECES.items())


_SAMPLE = '''
def sample_generate(model, input_ids, max_new_tokens, generator, attention_mask=None, **sampling):
    caches = [KVCache() for _ in range(len(model.layers))]
    feed, out = input_ids, []
    for _ in range(max_new_tokens):
        last = model(feed, attention_mask=attention_mask, caches=caches)[:, -1, :]
        feed = torch.multinomial(sampling_probs(last, **sampling), num_samples=1, generator=generator)
        out.append(feed)
        if attention_mask is not None:
            attention_mask = torch.cat([attention_mask, torch.ones_like(feed)], dim=-1)
    return torch.cat(out, dim=-1)
'''

_PENALTIES = '''
def apply_penalties(logits, generated, repetition_penalty=1.0, frequency_penalty=0.0, presence_penalty=0.0):
    counts = torch.zeros_like(logits, dtype=torch.long)
    counts.scatter_add_(1, generated, torch.ones_like(generated))
    used = counts > 0
    out = torch.where(used & (logits > 0), logits / repetition_penalty, logits)
    out = torch.where(used & (logits <= 0), logits * repetition_penalty, out)
    out = out - frequency_penalty * counts
    return (out - presence_penalty * used.float()).to(logits.dtype)
'''

_MIN_P = '''
def min_p_filter(probs, min_p):
    top = probs.max(dim=-1, keepdim=True).values
    keep = probs >= top * min_p
    out = torch.where(keep, probs, torch.zeros_like(probs))
    return out / out.sum(dim=-1, keepdim=True)
'''

_BEAM = '''
def beam_search(next_log_probs, input_ids, num_beams, max_new_tokens):
    seqs = input_ids.unsqueeze(0)
    total = torch.zeros(1)
    out = input_ids.new_zeros(1, 0)
    for step in range(max_new_tokens):
        lp = next_log_probs(seqs)
        total = total.to(lp.dtype)
        cand = (total.unsqueeze(1) + lp).reshape(-1)
        order = torch.sort(cand, descending=True).indices[:num_beams]
        src = torch.div(order, lp.size(1), rounding_mode="floor")
        tok = order - src * lp.size(1)
        total = cand[order]
        seqs = torch.cat((seqs[src], tok.unsqueeze(1)), 1)
        out = torch.cat((out[src], tok.unsqueeze(1)), 1)
    return out, total
'''

CORRECT = {"LlamaAttention": _llama(), "greedy_generate": _GENERATE, "sampling_probs": _SAMPLING,
           "sample_generate": _SAMPLE, "apply_penalties": _PENALTIES, "min_p_filter": _MIN_P, "beam_search": _BEAM}

_INTERLEAVED = '''
        def turn_pairs(t):
            c, s = cos[:, : self.d // 2].to(t.dtype), sin[:, : self.d // 2].to(t.dtype)
            a, b = t[..., ::2], t[..., 1::2]
            return torch.stack((a * c - b * s, a * s + b * c), dim=-1).reshape(t.shape)
        q = turn_pairs(q)
        k = turn_pairs(k)
'''

MISTAKES = [
    ("LlamaAttention", "解码时 RoPE 的位置从 0 重新开始", _llama(tables='''
        cos, sin = rope_cos_sin(torch.arange(T), self.d, self.theta)
''')),
    ("LlamaAttention", "KV 头重复成了 0, 1, 0, 1 的顺序", _llama(cache='''
        if cache is not None:
            k, v = cache.update(k, v)
        k = k.repeat(1, self.groups, 1, 1)
        v = v.repeat(1, self.groups, 1, 1)
        L = k.shape[2]
''')),
    ("LlamaAttention", "带缓存解码时因果掩码没有偏移", _llama(mask='''
        mask = torch.tril(torch.ones(T, L, dtype=torch.bool))
        if attention_mask is not None:
            mask = mask & padding_mask(attention_mask)
''')),
    ("LlamaAttention", "RoPE 按相邻两维配对（交错式）", _llama(rope=_INTERLEAVED)),
    ("LlamaAttention", "分数除以了 head_dim 而不是 √head_dim", _llama(scores='''
        scores = torch.matmul(q, k.transpose(2, 3)) / self.d
''')),
    ("LlamaAttention", "分数没有除以 √head_dim", _llama(scores='''
        scores = torch.matmul(q, k.transpose(2, 3))
''')),
    ("LlamaAttention", "忽略了 attention_mask", _llama(mask='''
        mask = causal_mask(T, L)
''')),
    ("LlamaAttention", "key 没有做 RoPE", _llama(rope='''
        q = apply_rope(q, cos, sin)
''')),
    ("LlamaAttention", "value 也做了 RoPE", _llama(rope='''
        q, k, v = (apply_rope(t, cos, sin) for t in (q, k, v))
''')),
    ("LlamaAttention", "缓存里放的是 repeat_kv 之后的 K/V", _llama(cache='''
        k = repeat_kv(k, self.groups)
        v = repeat_kv(v, self.groups)
        if cache is not None:
            k, v = cache.update(k, v)
        L = k.shape[2]
''')),
    ("LlamaAttention", "没有加因果掩码", _llama(mask='''
        mask = None
        if attention_mask is not None:
            mask = padding_mask(attention_mask)
''')),
    ("greedy_generate", "返回的 token 里包括了提示词", _GENERATE.replace(
        "return torch.cat(tokens, dim=-1)", "return torch.cat([input_ids] + tokens, dim=-1)")),
    ("greedy_generate", "所有层共用了一个 KVCache", _GENERATE.replace(
        "caches = [KVCache() for _ in range(len(model.layers))]", "caches = [KVCache()] * len(model.layers)")),
    ("greedy_generate", "整个序列又送了一遍", '''
def greedy_generate(model, input_ids, max_new_tokens, attention_mask=None):
    caches = [KVCache() for _ in model.layers]
    seq = input_ids
    for _ in range(max_new_tokens):
        logits = model(seq, attention_mask=attention_mask, caches=caches)
        seq = torch.cat([seq, logits[:, -1].argmax(-1, keepdim=True)], dim=1)
        if attention_mask is not None:
            attention_mask = torch.cat([attention_mask, attention_mask.new_ones(seq.shape[0], 1)], dim=1)
    return seq[:, input_ids.shape[1]:]
'''),
    ("greedy_generate", "模型的缓存里没有前文", '''
def greedy_generate(model, input_ids, max_new_tokens, attention_mask=None):
    feed, out = input_ids, []
    for _ in range(max_new_tokens):
        logits = model(feed, attention_mask=attention_mask)
        feed = logits[:, -1].argmax(-1, keepdim=True)
        out.append(feed)
        attention_mask = None
    return torch.cat(out, dim=1)
'''),
    ("greedy_generate", "取了第一个位置的 logits", _GENERATE.replace("logits[:, -1, :]", "logits[:, 0, :]")),
    ("greedy_generate", "没有靠 KV cache", '''
def greedy_generate(model, input_ids, max_new_tokens, attention_mask=None):
    seq = input_ids
    for _ in range(max_new_tokens):
        logits = model(seq, attention_mask=attention_mask)
        nxt = logits[:, -1].argmax(dim=-1, keepdim=True)
        seq = torch.cat([seq, nxt], dim=1)
        if attention_mask is not None:
            attention_mask = torch.cat([attention_mask, torch.ones_like(nxt)], dim=1)
    return seq[:, input_ids.shape[1]:]
'''),
    ("sampling_probs", "softmax 做在了 batch 那一维", _probs(temperature='''
    probs = torch.softmax(logits / temperature, dim=0)
''')),
    ("sampling_probs", "温度没有起作用", _probs(temperature='''
    probs = torch.softmax(logits, dim=-1) / temperature
    probs = probs / probs.sum(-1, keepdim=True)
''')),
    ("sampling_probs", "温度乘在了 logits 上", _probs(temperature='''
    probs = torch.softmax(logits * temperature, dim=-1)
''')),
    ("sampling_probs", "top-k 留下了 k + 1 个 token", _probs(top_k='''
    if top_k is not None and top_k + 1 < probs.shape[-1]:
        kth = probs.topk(top_k + 1, dim=-1).values[:, -1:]
        probs = probs * (probs >= kth)
        probs = probs / probs.sum(-1, keepdim=True)
''')),
    ("sampling_probs", "top-k 少留了一个 token", _probs(top_k='''
    if top_k is not None and top_k < probs.shape[-1]:
        kth = probs.topk(top_k, dim=-1).values[:, -1:]
        probs = probs * (probs > kth)
        probs = probs / probs.sum(-1, keepdim=True)
''')),
    ("sampling_probs", "top-k 做在了 batch 那一维", _probs(top_k='''
    if top_k is not None and top_k < probs.shape[-1]:
        kth = probs.topk(top_k, dim=0).values[-1:]
        probs = probs * (probs >= kth)
        probs = probs / probs.sum(-1, keepdim=True)
''')),
    ("sampling_probs", "top-p 丢掉了越过 p 的那个 token", _probs(top_p='''
    if top_p is not None:
        ordered, order = probs.sort(dim=-1, descending=True)
        keep = ordered.cumsum(-1) < top_p
        probs = probs * torch.zeros_like(keep).scatter(-1, order, keep)
''')),
    ("sampling_probs", "只保底留下了最可能的一个", _probs(top_p='''
    if top_p is not None:
        ordered, order = probs.sort(dim=-1, descending=True)
        keep = ordered.cumsum(-1) <= top_p
        keep[:, 0] = True
        probs = probs * torch.zeros_like(keep).scatter(-1, order, keep)
''')),
    ("sampling_probs", "温度除了两次", _probs(temperature='''
    logits = logits / temperature
    probs = torch.softmax(logits / temperature, dim=-1)
''')),
    ("sampling_probs", "只在 top-p 里重新归一化了", _probs(top_k=_TOP_K_KEPT, end=_END_AFTER_TOP_P)),
    ("sampling_probs", "top-p 丢掉了越过 p 的那个 token；只在 top-p 里重新归一化了",  # two at once
     _probs(top_k=_TOP_K_KEPT, end=_END_AFTER_TOP_P, top_p='''
    if top_p is not None:
        ordered, order = probs.sort(dim=-1, descending=True)
        keep = ordered.cumsum(-1) < top_p
        probs = probs * torch.zeros_like(keep).scatter(-1, order, keep)
''')),
    ("sampling_probs", "top-p 累加前没有按概率从大到小排序", _probs(top_p='''
    if top_p is not None:
        probs = probs * (probs.cumsum(-1) - probs < top_p)
''')),
    ("sampling_probs", "top-p 用的是 top-k 之前的概率", _probs(top_k='''
    if top_k is not None and top_k < probs.shape[-1]:
        kth = probs.topk(top_k, dim=-1).values[:, -1:]
        probs = probs * (probs >= kth)
''')),
    ("sampling_probs", "top-p 做在了加温度之前", '''
def sampling_probs(logits, temperature=1.0, top_k=None, top_p=None):
    probs = torch.softmax(logits, dim=-1)
    if top_k is not None and top_k < probs.shape[-1]:
        probs = probs * (probs >= probs.topk(top_k, dim=-1).values[:, -1:])
        probs = probs / probs.sum(-1, keepdim=True)
    if top_p is not None:
        ordered, order = probs.sort(dim=-1, descending=True)
        keep = ordered.cumsum(-1) - ordered < top_p
        probs = probs * torch.zeros_like(keep).scatter(-1, order, keep)
    tempered = torch.softmax(logits / temperature, dim=-1) * (probs > 0)
    return tempered / tempered.sum(-1, keepdim=True)
'''),
    ("sampling_probs", "没有重新归一化", _probs(top_k='''
    if top_k is not None and top_k < probs.shape[-1]:
        probs = probs * (probs >= probs.topk(top_k, dim=-1).values[:, -1:])
''', end='''
    return probs
''')),
    ("sample_generate", "用了 argmax，没有采样", _SAMPLE.replace(
        "torch.multinomial(sampling_probs(last, **sampling), num_samples=1, generator=generator)",
        "sampling_probs(last, **sampling).argmax(-1, keepdim=True)")),
    ("sample_generate", "在按概率从大到小排好序的分布上采样", _SAMPLE.replace(
        "        feed = torch.multinomial(sampling_probs(last, **sampling), num_samples=1, generator=generator)\n",
        "        ranked, where = torch.sort(sampling_probs(last, **sampling), dim=-1, descending=True)\n"
        "        feed = torch.gather(where, -1, torch.multinomial(ranked, num_samples=1, generator=generator))\n")),
    ("sample_generate", "返回的是名次而不是 token id", _SAMPLE.replace(
        "        feed = torch.multinomial(sampling_probs(last, **sampling), num_samples=1, generator=generator)\n",
        "        ranked, where = torch.sort(sampling_probs(last, **sampling), dim=-1, descending=True)\n"
        "        feed = torch.multinomial(ranked, num_samples=1, generator=generator)\n")),
    ("sample_generate", "attention_mask 接上的是 0", _SAMPLE.replace(
        "torch.cat([attention_mask, torch.ones_like(feed)], dim=-1)", "torch.cat([attention_mask, torch.zeros_like(feed)], dim=-1)")),
    ("sample_generate", "所有层共用了一个 KVCache", _SAMPLE.replace(
        "caches = [KVCache() for _ in range(len(model.layers))]", "caches = [KVCache()] * len(model.layers)")),
    ("sample_generate", "温度除了两次", _SAMPLE.replace(
        "sampling_probs(last, **sampling)", "sampling_probs(last / sampling.get('temperature', 1.0), **sampling)")),
    ("sample_generate", "采样时没有用给的 generator", _SAMPLE.replace(", generator=generator)", ")")),
    ("sample_generate", "每一步都重新给 generator 播种", _SAMPLE.replace(
        "        feed = torch.multinomial(", "        generator.manual_seed(generator.initial_seed())\n"
        "        feed = torch.multinomial(")),
    ("sample_generate", "没有把 temperature、top_k、top_p 交给 sampling_probs", _SAMPLE.replace(
        "sampling_probs(last, **sampling)", "sampling_probs(last)")),
    ("apply_penalties", "负的 logit 也除以了 repetition_penalty", _PENALTIES.replace(
        "    out = torch.where(used & (logits > 0), logits / repetition_penalty, logits)\n"
        "    out = torch.where(used & (logits <= 0), logits * repetition_penalty, out)\n",
        "    out = torch.where(used, logits / repetition_penalty, logits)\n")),
    ("apply_penalties", "frequency penalty 没有按出现次数算", _PENALTIES.replace(
        "counts.scatter_add_(1, generated, torch.ones_like(generated))", "counts.scatter_(1, generated, 1)")),
    ("apply_penalties", "整个 batch 的 token 一起计数了", _PENALTIES.replace(
        "    counts = torch.zeros_like(logits, dtype=torch.long)\n"
        "    counts.scatter_add_(1, generated, torch.ones_like(generated))\n",
        "    counts = torch.bincount(generated.flatten(), minlength=logits.shape[-1]).expand(logits.shape[0], -1)\n")),
    ("beam_search", "一样的提示词", _BEAM.replace("    seqs = input_ids.unsqueeze(0)\n    total = torch.zeros(1)\n"
                                                 "    out = input_ids.new_zeros(1, 0)\n",
                                                 "    seqs = input_ids.repeat(num_beams, 1)\n    total = torch.zeros(num_beams)\n"
                                                 "    out = input_ids.new_zeros(num_beams, 0)\n")),
    ("beam_search", "没有加上 beam 已有的分数", _BEAM.replace("cand = (total.unsqueeze(1) + lp).reshape(-1)", "cand = lp.reshape(-1)")),
    ("beam_search", "没有接在它的父 beam 后面", _BEAM.replace("        seqs = torch.cat((seqs[src], tok.unsqueeze(1)), 1)",
                                                       "        if step == 0:\n            seqs, out = seqs[src], out[src]\n"
                                                       "        seqs = torch.cat((seqs, tok.unsqueeze(1)), 1)").replace(
        "        out = torch.cat((out[src], tok.unsqueeze(1)), 1)", "        out = torch.cat((out, tok.unsqueeze(1)), 1)")),
    ("beam_search", "带着提示词", _BEAM.replace("    return out, total", "    return seqs, total")),
    ("beam_search", "概率的乘积", _BEAM.replace("    return out, total", "    return out, total.exp()")),
    ("min_p_filter", "门槛是 min_p 本身", _MIN_P.replace("keep = probs >= top * min_p", "keep = probs >= min_p")),
    ("min_p_filter", "最大概率取的是整个 batch 的", _MIN_P.replace(
        "top = probs.max(dim=-1, keepdim=True).values", "top = probs.max()")),
    ("min_p_filter", "门槛用了 >", _MIN_P.replace("keep = probs >= top * min_p", "keep = probs > top * min_p")),
    ("min_p_filter", "没有重新归一化", _MIN_P.replace("    return out / out.sum(dim=-1, keepdim=True)\n", "    return out\n")),
    ("apply_penalties", "先减了 frequency / presence penalty", '''
def apply_penalties(logits, generated, repetition_penalty=1.0, frequency_penalty=0.0, presence_penalty=0.0):
    counts = torch.zeros_like(logits, dtype=torch.long)
    counts.scatter_add_(1, generated, torch.ones_like(generated))
    used = counts > 0
    shifted = logits - frequency_penalty * counts - presence_penalty * used.float()
    out = torch.where(used & (shifted > 0), shifted / repetition_penalty, shifted)
    return torch.where(used & (shifted <= 0), shifted * repetition_penalty, out).to(logits.dtype)
'''),
    ("sample_generate", "取了第一个位置的 logits", _SAMPLE.replace("[:, -1, :]", "[:, 0, :]")),
    ("sample_generate", "返回的 token 里包括了提示词", _SAMPLE.replace(
        "return torch.cat(out, dim=-1)", "return torch.cat([input_ids, *out], dim=-1)")),
    ("sample_generate", "没有靠 KV cache", '''
def sample_generate(model, input_ids, max_new_tokens, generator, attention_mask=None, **sampling):
    seq = input_ids
    for _ in range(max_new_tokens):
        probs = sampling_probs(model(seq, attention_mask=attention_mask)[:, -1], **sampling)
        nxt = torch.multinomial(probs, 1, generator=generator)
        seq = torch.cat([seq, nxt], dim=1)
        if attention_mask is not None:
            attention_mask = torch.cat([attention_mask, torch.ones_like(nxt)], dim=1)
    return seq[:, input_ids.shape[1]:]
'''),
]

# Other right ways to write the code, which the grader must accept too.
OTHER_CORRECT = [
    ("beam_search", "each beam's own top num_beams first, then the best of those", '''
def beam_search(next_log_probs, input_ids, num_beams, max_new_tokens):
    beams = [(0.0, input_ids.tolist(), [])]
    for _ in range(max_new_tokens):
        ids = torch.tensor([b[1] for b in beams])
        lp = next_log_probs(ids)
        pool = []
        for (score, seq, new), row in zip(beams, lp):
            top = row.topk(min(num_beams, row.numel()))
            for value, token in zip(top.values.tolist(), top.indices.tolist()):
                pool.append((score + value, seq + [token], new + [token]))
        beams = sorted(pool, key=lambda b: b[0], reverse=True)[:num_beams]
    return torch.tensor([b[2] for b in beams]), torch.tensor([b[0] for b in beams], dtype=lp.dtype)
'''),
    ("greedy_generate", "one model call more than needed, at the end", '''
def greedy_generate(model, input_ids, max_new_tokens, attention_mask=None):
    caches = [KVCache() for _ in model.layers]
    mask = attention_mask
    logits = model(input_ids, attention_mask=mask, caches=caches)
    picked = []
    for _ in range(max_new_tokens):
        token = logits[:, -1].argmax(-1)[:, None]
        picked.append(token)
        if mask is not None:
            mask = torch.cat([mask, torch.ones_like(token)], 1)
        logits = model(token, attention_mask=mask, caches=caches)
    return torch.cat(picked, 1)
'''),
    ("greedy_generate", "the prompt fed one token at a time", '''
def greedy_generate(model, input_ids, max_new_tokens, attention_mask=None):
    caches = [KVCache() for _ in model.layers]
    for t in range(input_ids.shape[1]):
        mask = None if attention_mask is None else attention_mask[:, :t + 1]
        logits = model(input_ids[:, t:t + 1], attention_mask=mask, caches=caches)
    out = []
    for step in range(max_new_tokens):
        token = logits[:, -1:].argmax(-1)
        out.append(token)
        if step + 1 < max_new_tokens:
            if attention_mask is not None:
                attention_mask = torch.cat([attention_mask, torch.ones_like(token)], 1)
            logits = model(token, attention_mask=attention_mask, caches=caches)
    return torch.cat(out, 1)
'''),
    ("LlamaAttention", "scaled_dot_product_attention with its own GQA", _INIT + '''
        past = 0 if cache is None else len(cache)
        cos, sin = rope_cos_sin(torch.arange(past, past + T), self.d, self.theta)
        q = apply_rope(self.q_proj(x).unflatten(-1, (self.n_q, self.d)).transpose(1, 2), cos, sin)
        k = apply_rope(self.k_proj(x).unflatten(-1, (self.n_kv, self.d)).transpose(1, 2), cos, sin)
        v = self.v_proj(x).unflatten(-1, (self.n_kv, self.d)).transpose(1, 2)
        if cache is not None:
            k, v = cache.update(k, v)
        allowed = causal_mask(T, k.shape[2])
        if attention_mask is not None:
            allowed = allowed & padding_mask(attention_mask)
        out = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=allowed, enable_gqa=True)
        return self.o_proj(out.nan_to_num(0.0).transpose(1, 2).flatten(2)), cache
'''),
    ("sampling_probs", "temperature as a power of the probabilities, renormalised", '''
def sampling_probs(logits, temperature=1.0, top_k=None, top_p=None):
    probs = torch.softmax(logits.double(), dim=-1) ** (1 / temperature)
    probs = probs / probs.sum(-1, keepdim=True)
    if top_k is not None:
        keep = torch.zeros_like(probs, dtype=torch.bool)
        keep.scatter_(-1, probs.topk(min(top_k, probs.shape[-1]), dim=-1).indices, True)
        probs = torch.where(keep, probs, 0.0)
        probs = probs / probs.sum(-1, keepdim=True)
    if top_p is not None:
        rows = []
        for row in probs:
            order = row.argsort(descending=True)
            mass, kept = 0.0, torch.zeros_like(row, dtype=torch.bool)
            for i in order.tolist():
                kept[i] = True
                mass += row[i].item()
                if mass >= top_p:
                    break
            rows.append(torch.where(kept, row, 0.0))
        probs = torch.stack(rows)
    return (probs / probs.sum(-1, keepdim=True)).to(logits.dtype)
'''),
    ("min_p_filter", "sorted, the cut found by searchsorted on the ascending probabilities", '''
def min_p_filter(probs, min_p):
    ascending, order = probs.sort(dim=-1)
    cut = torch.searchsorted(ascending.contiguous(), ascending[:, -1:] * min_p)  # the first index at or above
    positions = torch.arange(probs.shape[-1]).expand_as(probs)
    kept_sorted = torch.where(positions >= cut, ascending, torch.zeros_like(ascending))
    kept = torch.zeros_like(probs).scatter(-1, order, kept_sorted)
    return kept / kept.sum(-1, keepdim=True)
'''),
    ("apply_penalties", "a loop over the rows with bincount, the penalties as a sign-aware factor", '''
def apply_penalties(logits, generated, repetition_penalty=1.0, frequency_penalty=0.0, presence_penalty=0.0):
    rows = []
    for row, ids in zip(logits, generated):
        count = torch.bincount(ids, minlength=row.shape[0]).to(row.dtype)
        seen = count > 0
        factor = torch.where(row > 0, 1 / repetition_penalty, repetition_penalty)
        row = torch.where(seen, row * factor.to(row.dtype), row)
        rows.append(row - count * frequency_penalty - seen.to(row.dtype) * presence_penalty)
    return torch.stack(rows)
'''),
    ("sample_generate", "the sampling options as named parameters, the prompt fed once", '''
def sample_generate(model, input_ids, max_new_tokens, generator, attention_mask=None, temperature=1.0, top_k=None,
                    top_p=None):
    caches = [KVCache() for _ in model.layers]
    logits = model(input_ids, attention_mask=attention_mask, caches=caches)
    tokens = []
    while len(tokens) < max_new_tokens:
        probs = sampling_probs(logits[:, -1], temperature=temperature, top_k=top_k, top_p=top_p)
        tokens.append(torch.multinomial(probs, 1, generator=generator))
        if attention_mask is not None:
            attention_mask = torch.cat([attention_mask, torch.ones_like(tokens[-1])], 1)
        if len(tokens) < max_new_tokens:
            logits = model(tokens[-1], attention_mask=attention_mask, caches=caches)
    return torch.cat(tokens, 1)
'''),
]

STUBS = {
    "LlamaAttention": '''
class LlamaAttention(nn.Module):
    def __init__(self, config):
        super().__init__()
        raise NotImplementedError()

    def forward(self, x, attention_mask=None, cache=None):
        raise NotImplementedError()
''',
    "greedy_generate": "def greedy_generate(model, input_ids, max_new_tokens, attention_mask=None):\n"
                       "    raise NotImplementedError()\n",
    "sampling_probs": "def sampling_probs(logits, temperature=1.0, top_k=None, top_p=None):\n"
                      "    raise NotImplementedError()\n",
    "sample_generate": "def sample_generate(model, input_ids, max_new_tokens, generator, attention_mask=None, **sampling):\n"
                       "    raise NotImplementedError()\n",
    "apply_penalties": "def apply_penalties(logits, generated, repetition_penalty=1.0, frequency_penalty=0.0,\n"
                       "                    presence_penalty=0.0):\n"
                       "    raise NotImplementedError()\n",
    "min_p_filter": "def min_p_filter(probs, min_p):\n    raise NotImplementedError()\n",
    "beam_search": "def beam_search(next_log_probs, input_ids, num_beams, max_new_tokens):\n    raise NotImplementedError()\n",
}


def layout(replace: dict[str, str] | None = None) -> list[notebook.Piece]:
    """The student's notebook, cell by cell (``tests/students/notebook.py``), with some answers replaced."""
    return notebook.layout(HEADER, notebook.answers(CORRECT, replace))


def cells(replace: dict[str, str] | None = None) -> list[notebook.Cell]:
    """The cells the grader reads from the student's notebook, with some answers replaced."""
    return notebook.cells(layout(replace))


def source(replace: dict[str, str] | None = None) -> str:
    """The same code as one cell's source, every import at the top (what ``autograder.grade_code`` takes)."""
    return HEADER + "\n".join(notebook.answers(CORRECT, replace).values())
