"""Check of ``GroupedQueryAttention(hidden_size, num_heads, num_kv_heads, head_dim=None)``:
``forward(x, attention_mask=None, cache=None) → (out, cache)``, as MHA, GQA and MQA, on whole sequences and
decoding through a cache in chunks, with padding and three dtypes."""
import torch

from autograder.engine.checks import ATTENTION_BASICS
from autograder.engine.inputs import modules
from autograder.engine.inputs.seeded import dtype_name, generator, randn, shape
from autograder.engine.model import Exercise, Mistake, public
from course.protocols import Case, call_decoder
from solutions.attention_basics import attention, causal_mask, padding_mask

# The mistakes below decode with the KVCache found among this module's names (protocols.neighbour).
from solutions.gqa_kv_cache import GroupedQueryAttention, KVCache, repeat_kv  # noqa: F401
from solutions.multi_head import merge_heads, split_heads

OUTPUT_NAMES = ("输出（各步的 out 沿序列维拼起来）", "解码完之后的 len(cache)", "每次交给 cache.update 的 k、v 的形状（各是 [B, 头数, T, D]）")


def _kind(heads, kv_heads):
    return "MHA" if kv_heads == heads else "MQA" if kv_heads == 1 else "GQA"


def _case(gen, hidden, heads, kv_heads, batch, seq, head_dim=None, dtype=torch.float32, attention_mask=None,
          steps=None, note="") -> Case:
    dim = head_dim or hidden // heads
    weights = modules.linear_weights(gen, {"q_proj": (heads * dim, hidden), "k_proj": (kv_heads * dim, hidden),
                                           "v_proj": (kv_heads * dim, hidden), "o_proj": (hidden, heads * dim)}, dtype)
    x = randn(gen, batch, seq, hidden, dtype=dtype)
    label = (f"{note}{_kind(heads, kv_heads)}：hidden {hidden}，{heads} 个 query 头，{kv_heads} 个 KV 头，head_dim {dim}"
             f"{'（构造时给出）' if head_dim else ''}，x {shape(x)}，{dtype_name(dtype)}")
    forward, said = modules.forward_arguments(attention_mask, steps)
    label += said
    return Case(label, ((hidden, heads, kv_heads, head_dim), weights, x), forward)


def cases() -> list[Case]:
    gen = generator(33)
    right_pad = torch.tensor([[1, 1, 1, 1, 1, 1], [1, 1, 1, 1, 0, 0]])
    left_pad = torch.tensor([[0, 0, 1, 1, 1, 1], [1, 1, 1, 1, 1, 1]])
    return public([
        _case(gen, 16, 4, 2, 1, 4, note="小例子，"),
        _case(gen, 32, 4, 2, 2, 5),
        _case(gen, 32, 4, 4, 2, 5),
        _case(gen, 32, 4, 1, 2, 6, attention_mask=right_pad),
        _case(gen, 24, 4, 2, 2, 6, head_dim=8, attention_mask=left_pad, note="H·D ≠ hidden，左侧 padding，"),
        _case(gen, 16, 4, 2, 2, 1, note="只有一个 token，"),
        _case(gen, 32, 4, 2, 2, 5, steps=(3, 1, 1)),
        _case(gen, 24, 2, 1, 1, 5, head_dim=12, steps=(2, 3)),
        _case(gen, 32, 4, 2, 2, 6, attention_mask=left_pad, steps=(4, 1, 1)),
        _case(gen, 32, 8, 8, 2, 4, steps=(1, 1, 1, 1), note="从空缓存开始逐个 token，"),
        _case(gen, 1024, 8, 2, 1, 4, head_dim=256, steps=(3, 1), note="Qwen3.5 的形状（随机权重），"),
        _case(gen, 32, 8, 2, 2, 5, dtype=torch.float64, attention_mask=right_pad[:, 1:], steps=(3, 2)),
        _case(gen, 64, 4, 2, 2, 6, dtype=torch.bfloat16, attention_mask=right_pad, steps=(4, 1, 1)),
    ], 0, 4, 7, 11, 12)


class Variant(GroupedQueryAttention):
    """Grouped-query attention written out step by step; ``_variant`` replaces one step with a mistake.
    07's ``LlamaAttention`` mistakes build on it through two more steps: ``positioned`` (RoPE) and ``attend``."""

    share = staticmethod(repeat_kv)
    share_before_cache = False
    uses_cached_kv = True
    offset_causal = True
    causal = True
    use_padding = True
    project_out = True

    def forward(self, x, attention_mask=None, cache=None):
        seq, n_rep = x.shape[1], self.num_heads // self.num_kv_heads
        q = split_heads(self.q_proj(x), self.num_heads)
        k, v = (split_heads(proj(x), self.num_kv_heads) for proj in (self.k_proj, self.v_proj))
        q, k, v = self.positioned(q, k, v, x, cache)
        if self.share_before_cache:
            k, v = self.share(k, n_rep), self.share(v, n_rep)
        if cache is not None:
            cached = cache.update(k, v)
            k, v = cached if self.uses_cached_kv else (k, v)
        if not self.share_before_cache:
            k, v = self.share(k, n_rep), self.share(v, n_rep)
        k_len = k.shape[-2]
        mask = None
        if self.causal:
            mask = causal_mask(seq, k_len) if self.offset_causal else causal_mask(k_len)[:seq]
        if attention_mask is not None and self.use_padding:
            keys = padding_mask(attention_mask)
            mask = keys if mask is None else mask & keys
        out = merge_heads(self.attend(q, k, v, mask))
        return (self.o_proj(out) if self.project_out else out), cache

    def positioned(self, q, k, v, x, cache):
        """``q, k, v`` with their positions in them: as they are here (no RoPE in 03)."""
        return q, k, v

    def attend(self, q, k, v, mask):
        """The heads' outputs ``[B, H, T, D]``."""
        return attention(q, k, v, mask)[0]


def variant(base: type, **steps) -> type:
    """``base`` with the given steps replaced (functions become static methods)."""
    return type("Mistake", (base,), {name: staticmethod(s) if callable(s) else s for name, s in steps.items()})


def _variant(**steps):
    return variant(Variant, **steps)


MISTAKES = (
    Mistake("KV 头重复成了 0, 1, 0, 1 的顺序（整组平铺，像 repeat），应是 0, 0, 1, 1",
            "query 头 h 读 KV 头 h // n_rep：KV 头要挨着重复（0, 0, 1, 1），repeat 给的是 (0, 1, 0, 1)。",
            _variant(share=lambda t, n: t.repeat(1, n, 1, 1))),
    Mistake("忽略了 attention_mask（padding 掩码没有生效）",
            "用 padding_mask(attention_mask) 转成 [B, 1, 1, k_len]，和因果掩码用 & 合并。自己写 masked_fill 的话要接住"
            "它的返回值：scores = scores.masked_fill(...)，masked_fill 不会原地修改 scores。",
            _variant(use_padding=False)),
    Mistake("一个 mask 也没起作用（因果掩码和 padding 都没用上）", "masked_fill 不会原地修改 scores：要写成 "
            "scores = scores.masked_fill(...)，接住它的返回值；否则因果掩码和 padding 掩码都白算了。",
            _variant(causal=False, use_padding=False)),
    Mistake("没有加因果掩码", "这个模块总要自己加因果掩码：query 只能看它自己和它之前的位置。"
            "自己写 masked_fill 的话要接住它的返回值，它不会原地修改。", _variant(causal=False)),
    Mistake("带缓存解码时因果掩码没有偏移",
            "缓存里已有 k_len − T 个位置时，新来的第 i 个 query 在位置 k_len − T + i：用 causal_mask(T, k_len)，"
            "而不是从左上角开始的下三角。", _variant(offset_causal=False)),
    Mistake("调用了 cache.update，却没有用它返回的完整 K/V", "k, v = cache.update(k, v)：新 token 要看缓存里的全部位置。",
            _variant(uses_cached_kv=False)),
    Mistake("缓存里放的是 repeat_kv 之后的 K/V", "先 cache.update 再 repeat_kv：缓存只存 num_kv_heads 个头，GQA 省显存靠的就是这个。",
            _variant(share_before_cache=True)),
    Mistake("忘了 o_proj", "各头拼接成 [B, T, H·D] 之后还要过 o_proj 回到 hidden_size。", _variant(project_out=False)),
)

EXERCISE = Exercise("GroupedQueryAttention", 5, GroupedQueryAttention, cases, MISTAKES, output_names=OUTPUT_NAMES,
                    call=call_decoder,
                    free=lambda case: modules.padding_query_rows(case.kwargs.get("attention_mask")),
                    uses=("repeat_kv", "KVCache", "split_heads", "merge_heads", *ATTENTION_BASICS))
