"""Check of ``MultiHeadLatentAttention(config)``'s ``forward(x, attention_mask=None, cache=None) → (out, cache)``:
DeepSeek-V2's MLA with and without query compression, with padding, decoding through the student's own
``LatentKVCache`` in chunks, in three dtypes. The cases and most mistakes serve ``forward_absorbed`` too."""
import math
from types import SimpleNamespace

import torch

from autograder.engine.checks import ATTENTION_BASICS
from autograder.engine.checks import apply_rope as apply_rope_check
from autograder.engine.inputs import modules
from autograder.engine.inputs.seeded import dtype_name, generator, randn, shape
from autograder.engine.model import Exercise, Mistake, public
from course.protocols import Case, call_latent_decoder
from solutions.attention_basics import masked_softmax

# The mistakes below decode with the LatentKVCache found among this module's names (protocols.neighbour).
from solutions.rope_mla import LatentKVCache, MultiHeadLatentAttention, apply_rope, rope_cos_sin  # noqa: F401

OUTPUT_NAMES = ("输出（各步的 out 沿序列维拼起来）", "解码完之后的 len(cache)",
                "每次交给 cache.update 的两样东西的形状（latent [B, T, kv_lora_rank] 和 k_rope [B, T, rope]）",
                "交给 cache.update 的值：做过 kv_a_layernorm 的 latent 和转过的 k_rope，按位置拼起来")


def config(hidden, heads, rank, nope, rope, v, q_rank=None, theta=10_000.0, eps=1e-6):
    """A configuration with Hugging Face's DeepSeek attribute names."""
    return SimpleNamespace(hidden_size=hidden, num_attention_heads=heads, q_lora_rank=q_rank, kv_lora_rank=rank,
                           qk_nope_head_dim=nope, qk_rope_head_dim=rope, v_head_dim=v, rope_theta=theta,
                           rms_norm_eps=eps)


def random_weights(cfg, gen, dtype) -> dict:
    """A state dict with DeepSeek-V3's keys: projections scaled so activations stay O(1), norms near 1."""
    heads, hidden = cfg.num_attention_heads, cfg.hidden_size
    query_width = heads * (cfg.qk_nope_head_dim + cfg.qk_rope_head_dim)
    shapes = {"kv_a_proj_with_mqa": (cfg.kv_lora_rank + cfg.qk_rope_head_dim, hidden),
              "kv_b_proj": (heads * (cfg.qk_nope_head_dim + cfg.v_head_dim), cfg.kv_lora_rank),
              "o_proj": (hidden, heads * cfg.v_head_dim)}
    if cfg.q_lora_rank is None:
        shapes["q_proj"] = (query_width, hidden)
    else:
        shapes |= {"q_a_proj": (cfg.q_lora_rank, hidden), "q_b_proj": (query_width, cfg.q_lora_rank)}
    weights = modules.linear_weights(gen, shapes, dtype)
    norms = {"kv_a_layernorm": cfg.kv_lora_rank} | ({} if cfg.q_lora_rank is None else {"q_a_layernorm": cfg.q_lora_rank})
    for name, dim in norms.items():
        weights[f"{name}.weight"] = (1 + randn(gen, dim, dtype=torch.float64, scale=0.2)).to(dtype)
    return weights


def _case(gen, cfg, batch, seq, dtype=torch.float32, attention_mask=None, steps=None, note="") -> Case:
    x = randn(gen, batch, seq, cfg.hidden_size, dtype=dtype)
    query = "q_proj" if cfg.q_lora_rank is None else f"q_lora_rank {cfg.q_lora_rank}"
    label = (f"{note}hidden {cfg.hidden_size}，{cfg.num_attention_heads} 个头，kv_lora_rank {cfg.kv_lora_rank}，"
             f"nope {cfg.qk_nope_head_dim} + rope {cfg.qk_rope_head_dim}，v {cfg.v_head_dim}，{query}，"
             f"x {shape(x)}，{dtype_name(dtype)}")
    forward, said = modules.forward_arguments(attention_mask, steps)
    label += said
    return Case(label, ((cfg,), random_weights(cfg, gen, dtype), x), forward)


def cases() -> list[Case]:
    gen = generator(43)
    small, compressed = config(32, 2, 8, 4, 4, 6), config(48, 4, 16, 8, 4, 8, q_rank=12)
    right_pad = torch.tensor([[1, 1, 1, 1, 1, 1], [1, 1, 1, 1, 0, 0]])
    left_pad = torch.tensor([[0, 0, 1, 1, 1, 1], [1, 1, 1, 1, 1, 1]])
    return public([
        _case(gen, small, 1, 5, note="小配置，"),
        _case(gen, compressed, 2, 6, note="query 也压缩，"),
        _case(gen, compressed, 2, 6, attention_mask=right_pad, note="右侧 padding，"),
        _case(gen, small, 2, 6, attention_mask=left_pad, note="左侧 padding（pad 的 query 整行被遮住），"),
        _case(gen, small, 1, 1, note="只有一个 token，"),
        _case(gen, small, 2, 6, steps=(3, 1, 1, 1), note="先 prefill 3 个，再逐个解码，"),
        _case(gen, compressed, 2, 6, attention_mask=left_pad, steps=(4, 1, 1), note="左侧 padding，"),
        _case(gen, config(64, 4, 32, 16, 8, 16, theta=1_000_000.0), 1, 5, steps=(1, 1, 1, 1, 1),
              note="从空缓存开始逐个 token，"),
        _case(gen, compressed, 2, 5, dtype=torch.float64, attention_mask=right_pad[:, 1:], steps=(3, 2)),
        _case(gen, small, 2, 6, dtype=torch.bfloat16, attention_mask=right_pad, steps=(4, 1, 1)),
        _case(gen, config(512, 8, 128, 32, 16, 32, q_rank=96), 1, 4, steps=(3, 1), note="大一些的形状，"),
    ], 0, 3, 8, 9)


class _Variant(MultiHeadLatentAttention):
    """The reference with one step replaced (see each mistake)."""

    def __init__(self, cfg):
        super().__init__(cfg)
        self.scale = self.rescale()

    def rescale(self):
        return self.scale


def _variant(**steps):
    return type("Mistake", (_Variant,), steps)


def _rotated_elsewhere(whole_head: bool):
    """A forward that rotates the nope parts (``whole_head``: the whole head) instead of the rope parts."""
    def forward(self, x, attention_mask=None, cache=None):
        start = 0 if cache is None else len(cache)
        q_nope, q_rope = self.query(x)
        latent, k_rope = self.kv_a_proj_with_mqa(x).split([self.kv_lora_rank, self.rope], dim=-1)
        latent = self.kv_a_layernorm(latent)
        if cache is not None:
            latent, k_rope = cache.update(latent, k_rope)
        keys = latent.shape[1]
        kv = self.kv_b_proj(latent).unflatten(-1, (self.num_heads, self.nope + self.v_head_dim)).transpose(1, 2)
        k_nope, value = kv.split([self.nope, self.v_head_dim], dim=-1)
        q = torch.cat([q_nope, q_rope], dim=-1) if whole_head else q_nope
        k = torch.cat([k_nope, k_rope[:, None].expand(-1, self.num_heads, -1, -1)], dim=-1) if whole_head else k_nope
        width = q.shape[-1]
        q = apply_rope(q, *rope_cos_sin(torch.arange(start, start + x.shape[1]), width, self.rope_theta))
        k = apply_rope(k, *rope_cos_sin(torch.arange(keys), width, self.rope_theta))
        scores = q @ k.transpose(-2, -1)
        if not whole_head:
            scores = scores + q_rope @ k_rope[:, None].transpose(-2, -1)
        weights = masked_softmax(scores * self.scale, self.mask(x.shape[1], keys, attention_mask))
        return self.finish(weights @ value), cache
    return forward


def _query_unnormalised(self, x):
    """The query of a compressed-query config without its q_a_layernorm."""
    q = self.q_proj(x) if hasattr(self, "q_proj") else self.q_b_proj(self.q_a_proj(x))
    return q.unflatten(-1, (self.num_heads, self.nope + self.rope)).transpose(1, 2).split([self.nope, self.rope], dim=-1)


def _rotated_head_start(self, x, attention_mask=None, cache=None):
    """Qwen-style partial RoPE on the query: its first d_rope dims (nope dims) turn, q_rope stays put."""
    cos, sin = self.positions(x, cache)
    q_nope, q_rope = self.query(x)
    turned = torch.cat([apply_rope(q_nope[..., :self.rope], cos, sin), q_nope[..., self.rope:]], dim=-1)
    latent, k_rope = self.compress(x, cos, sin)
    if cache is not None:
        latent, k_rope = cache.update(latent, k_rope)
    kv = self.kv_b_proj(latent).unflatten(-1, (self.num_heads, self.nope + self.v_head_dim)).transpose(1, 2)
    k_nope, value = kv.split([self.nope, self.v_head_dim], dim=-1)
    scores = (turned @ k_nope.transpose(-2, -1) + q_rope @ k_rope[:, None].transpose(-2, -1)) * self.scale
    return self.finish(masked_softmax(scores, self.mask(x.shape[1], latent.shape[1], attention_mask)) @ value), cache


def _keys_then_values(self, x, attention_mask=None, cache=None):
    q_nope, q_rope, latent, k_rope, mask = self.prepare(x, attention_mask, cache)
    keys, values = self.kv_b_proj(latent).split([self.num_heads * self.nope, self.num_heads * self.v_head_dim], -1)
    k_nope = keys.unflatten(-1, (self.num_heads, self.nope)).transpose(1, 2)
    value = values.unflatten(-1, (self.num_heads, self.v_head_dim)).transpose(1, 2)
    scores = (q_nope @ k_nope.transpose(-2, -1) + q_rope @ k_rope[:, None].transpose(-2, -1)) * self.scale
    return self.finish(masked_softmax(scores, mask) @ value), cache


def _rope_then_nope(self, x):
    q = self.q_proj(x) if hasattr(self, "q_proj") else self.q_b_proj(self.q_a_layernorm(self.q_a_proj(x)))
    q_rope, q_nope = q.unflatten(-1, (self.num_heads, self.nope + self.rope)).transpose(1, 2).split(
        [self.rope, self.nope], dim=-1)
    return q_nope, q_rope


def _unrotated_key(self, x, cos, sin):
    latent, k_rope = self.kv_a_proj_with_mqa(x).split([self.kv_lora_rank, self.rope], dim=-1)
    return self.kv_a_layernorm(latent), k_rope


def _unnormalised(self, x, cos, sin):
    latent, k_rope = self.kv_a_proj_with_mqa(x).split([self.kv_lora_rank, self.rope], dim=-1)
    return latent, apply_rope(k_rope, cos, sin)


# DeepSeek's own RoPE: adjacent dims (2i, 2i + 1) turned together by frequency i (the course uses rotate-half).
_ADJACENT = apply_rope_check.interleaved(lambda table: table[..., :table.shape[-1] // 2])


def _adjacent_compress(self, x, cos, sin):
    latent, k_rope = self.kv_a_proj_with_mqa(x).split([self.kv_lora_rank, self.rope], dim=-1)
    return self.kv_a_layernorm(latent), _ADJACENT(k_rope, cos, sin)


def _adjacent_prepare(self, x, attention_mask, cache):
    cos, sin = self.positions(x, cache)
    q_nope, q_rope = self.query(x)
    latent, k_rope = self.compress(x, cos, sin)
    if cache is not None:
        latent, k_rope = cache.update(latent, k_rope)
    return q_nope, _ADJACENT(q_rope, cos, sin), latent, k_rope, self.mask(x.shape[1], latent.shape[1], attention_mask)


def _values_then_keys(self, x, attention_mask=None, cache=None):
    """Each head's slice of kv_b_proj read as [value | key] instead of [key | value]."""
    q_nope, q_rope, latent, k_rope, mask = self.prepare(x, attention_mask, cache)
    kv = self.kv_b_proj(latent).unflatten(-1, (self.num_heads, self.nope + self.v_head_dim)).transpose(1, 2)
    value, k_nope = kv.split([self.v_head_dim, self.nope], dim=-1)
    scores = (q_nope @ k_nope.transpose(-2, -1) + q_rope @ k_rope[:, None].transpose(-2, -1)) * self.scale
    return self.finish(masked_softmax(scores, mask) @ value), cache


def _without_rope_term(self, x, attention_mask=None, cache=None):
    """Scores from the nope (or latent) part alone: the q_rope · k_rope term left out."""
    q_nope, q_rope, latent, k_rope, mask = self.prepare(x, attention_mask, cache)
    kv = self.kv_b_proj(latent).unflatten(-1, (self.num_heads, self.nope + self.v_head_dim)).transpose(1, 2)
    k_nope, value = kv.split([self.nope, self.v_head_dim], dim=-1)
    return self.finish(masked_softmax(q_nope @ k_nope.transpose(-2, -1) * self.scale, mask) @ value), cache


def _positions_from_zero(self, x, cache):
    return rope_cos_sin(torch.arange(x.shape[1]), self.rope, self.rope_theta)


def _top_left_mask(self, q_len, k_len, attention_mask):
    mask = torch.ones(q_len, k_len, dtype=torch.bool).tril()
    return mask if attention_mask is None else mask & (attention_mask != 0)[:, None, None, :]


def _expanded_cache(case: Case, got) -> bool:
    """The module handed the cache per-head tensors ([B, H, T, ·], two 4-D shapes) instead of the latents."""
    return (isinstance(got, tuple) and len(got) == 4 and isinstance(got[2], torch.Tensor) and got[2].ndim == 2
            and got[2].shape[-1] == 8)


SCALE_HINT = ("点积是在 nope + rope 这么多维上求和的，缩放就是 (qk_nope_head_dim + qk_rope_head_dim)^(−1/2)，"
              "和普通注意力除以 √D 同一个道理。")
SHARED = (  # mistakes both forward and forward_absorbed can make
    Mistake("用了 1/(√d + √d_rope) 缩放（教程里的写法）", SCALE_HINT + "√d + √d_rope 比 √(d + d_rope) 大，分数被压得太平。",
            _variant(rescale=lambda self: 1 / (math.sqrt(self.nope) + math.sqrt(self.rope)))),
    Mistake("只用 √qk_nope_head_dim 缩放", SCALE_HINT, _variant(rescale=lambda self: self.nope ** -0.5)),
    Mistake("分数没有缩放", SCALE_HINT, _variant(rescale=lambda self: 1.0)),
    Mistake("分数里漏了 q_rope · k_rope 这一项", "分数是两部分之和：内容部分（q_nope · k_nope，吸收后是 q_latent · latent）"
            "加上位置部分 q_rope · k_rope，少了后者，位置信息就没了。",
            _variant(forward=_without_rope_term, forward_absorbed=_without_rope_term)),
    Mistake("缩放乘反了：乘了 √(nope + rope)", SCALE_HINT + "缩放是把分数变小。",
            _variant(rescale=lambda self: (self.nope + self.rope) ** 0.5)),
    Mistake("RoPE 按相邻两维一组旋转（DeepSeek 原版代码的交错式），不是 rotate-half", "本课程的 apply_rope 是 rotate-half："
            "第 i 维和第 i + rope/2 维配成一对。DeepSeek 官方代码把相邻两维配对，换到这里的权重和约定就对不上了；"
            "q_rope 和 k_rope 都用你的 apply_rope。", _variant(compress=_adjacent_compress, prepare=_adjacent_prepare)),
    Mistake("每个头各有一个 rope key", "rope key 是所有头共用的一份：kv_a_proj_with_mqa 输出 kv_lora_rank + qk_rope_head_dim 维，"
            "缓存里每个位置也只多存这 qk_rope_head_dim 个数。", error=r"kv_a_proj_with_mqa\.weight 的形状应是"),
    Mistake("rope key 没有旋转", "query 的 rope 部分和共用的 rope key 都要在各自的位置上转过：apply_rope(k_rope, cos, sin)，"
            "缓存里存的就是转过的 rope key。", _variant(compress=_unrotated_key)),
    Mistake("latent 没有做 RMSNorm", "kv_a_proj_with_mqa 切出来的 latent 先过 kv_a_layernorm，再进缓存、再升维。",
            _variant(compress=_unnormalised)),
    Mistake("query 压缩时漏了 q_a_layernorm", "q_lora_rank 不为 None 时，query 也走一条低秩路：q_b_proj(q_a_layernorm(q_a_proj(x)))，"
            "中间的 RMSNorm 和 latent 的 kv_a_layernorm 一样不能省。",
            _variant(query=_query_unnormalised)),
    Mistake("query 按 [rope | nope] 切开了", "每个头的 query 是 [nope | rope]：前 qk_nope_head_dim 维不转，后 qk_rope_head_dim 维转。",
            _variant(query=_rope_then_nope)),
    Mistake("解码时位置从 0 重新开始", "新来的第 i 个 token 在位置 len(cache) + i：rope_cos_sin(len(cache) + arange(T), ...)。"
            "从 0 开始的话，新 token 和缓存里的 token 像是站在同一个位置上。", _variant(positions=_positions_from_zero)),
    Mistake("带缓存解码时因果掩码没有偏移", "新来的 T 个 query 排在最后：用 causal_mask(T, k_len)，不是从左上角开始的下三角。",
            _variant(mask=_top_left_mask)),
    Mistake("缓存里存的是展开后的每头 K/V", "MLA 省缓存靠的就是只存 latent（kv_lora_rank 维）和一个 rope key："
            "cache.update(latent, k_rope)，每个头的 K、V 用的时候再从 latent 升维出来。", matches=_expanded_cache),
)

MISTAKES = SHARED + (
    *(Mistake("RoPE 转在了 nope 部分", "每个头的 query 是 [nope | rope]：只转后 qk_rope_head_dim 维和共用的 rope key；"
              "nope 部分不转，它才能被吸收进 query。", _variant(forward=forward))
      for forward in (_rotated_elsewhere(whole_head=False), _rotated_head_start)),
    Mistake("RoPE 转了整个头", "只转 query 的后 qk_rope_head_dim 维和共用的 rope key；转了整个头，nope 部分就没法被吸收进 query。",
            _variant(forward=_rotated_elsewhere(whole_head=True))),
    Mistake("每个头的 kv_b_proj 输出按 [value | key] 切开了", "每个头自己的那一段里，前 qk_nope_head_dim 维是 key、"
            "后 v_head_dim 维是 value：kv.split([nope, v], dim=-1)。", _variant(forward=_values_then_keys)),
    Mistake("kv_b_proj 的输出按 [所有头的 key | 所有头的 value] 切开了", "kv_b_proj 的输出按头排：先 view 成 "
            "[B, T, H, nope + v]，每个头自己的那一段里前 nope 维是 key、后 v 维是 value。", _variant(forward=_keys_then_values)),
)

EXERCISE = Exercise("MultiHeadLatentAttention", 6, MultiHeadLatentAttention, cases, MISTAKES, output_names=OUTPUT_NAMES,
                    call=call_latent_decoder,
                    free=lambda case: modules.padding_query_rows(case.kwargs.get("attention_mask")),
                    uses=("rope_cos_sin", "apply_rope", "LatentKVCache", "split_heads", "merge_heads", *ATTENTION_BASICS))
