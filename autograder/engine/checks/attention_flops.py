"""Check of ``attention_flops(batch, q_len, k_len, hidden_size, num_heads, num_kv_heads, head_dim)`` → int."""
import math

from autograder.engine.combined import variants
from autograder.engine.model import Exercise, Mistake, public
from course.output_rules import flops_as_int
from course.protocols import Case
from solutions.gqa_kv_cache import attention_flops

_ARGS = ("batch", "q_len", "k_len", "hidden_size", "num_heads", "num_kv_heads", "head_dim")


def _case(note: str, *args: int) -> Case:
    named = "，".join(f"{name}={value}" for name, value in zip(_ARGS, args))
    return Case(f"{note}：{named}", args)


def cases() -> list[Case]:
    return public([
        _case("手算的小例子：一个头，一个 token", 1, 1, 1, 4, 1, 1, 4),
        _case("MHA，整句一次算（q_len = k_len）", 1, 6, 6, 64, 8, 8, 8),
        _case("GQA：8 个 query 头，2 个 KV 头，batch 2", 2, 5, 5, 64, 8, 2, 8),
        _case("MQA：1 个 KV 头", 1, 4, 4, 64, 8, 1, 8),
        _case("解码一步：q_len = 1，缓存里共 100 个位置（Qwen3.5-0.8B 全注意力层的尺寸）", 1, 1, 100, 1024, 8, 2, 256),
        _case("k_len > q_len：3 个新 token 接在 7 个缓存位置后面，head_dim 不等于 hidden / H", 2, 3, 10, 64, 8, 2, 16),
        _case("MHA 解码一步，batch 4", 4, 1, 33, 96, 6, 6, 16),
        # Beyond 2^53, where a float can no longer hold every integer, and beyond int32: exact only as an int.
        _case("很大的数（SmolLM2-135M 的尺寸，batch 1001，一百万个 token）：超过 2⁵³，float 已经存不准，只有 Python 的 int 是精确的",
              1001, 1000001, 1000001, 576, 9, 3, 64),
    ], 0, 5, 7)


def _counted(batch, q_len, k_len, hidden_size, num_heads, num_kv_heads, head_dim, *, per_mac=2, o_proj=True,
             kv_heads=None, kv_projections=2, score_heads=None, score_cols=None, weights_v=True, projected=None,
             batches=None, pairs=None, query_width=1) -> int:
    """attention_flops with one part counted wrongly: ``kv_heads`` heads for K/V, ``kv_projections`` of them,
    ``score_heads`` score tables of ``q_len × score_cols``, ``projected`` tokens through the projections,
    ``batches`` sequences, ``pairs(q_len, k_len)`` (query, key) pairs per score table (each None: the right one),
    ``query_width`` times H·D outputs of q_proj (2: Qwen3.5's query and gate)."""
    kv_heads = num_kv_heads if kv_heads is None else kv_heads
    score_heads = num_heads if score_heads is None else score_heads
    batch = batch if batches is None else batches
    score_cols = k_len if score_cols is None else score_cols
    projected = q_len if projected is None else projected
    weights = hidden_size * head_dim * (num_heads * (query_width + (1 if o_proj else 0)) + kv_projections * kv_heads)
    products = 2 if weights_v else 1  # Q·Kᵀ, weights·V
    table = q_len * score_cols if pairs is None else pairs(q_len, k_len)
    return per_mac * batch * (projected * weights + products * score_heads * table * head_dim)


def _visible(q_len: int, k_len: int) -> int:
    """The (query, key) pairs a causal mask lets through: query i sees k_len − q_len + i + 1 keys."""
    return q_len * (k_len - q_len) + q_len * (q_len + 1) // 2


def _softmax_counted(case: Case, got) -> bool:
    """The right count plus a few FLOPs (1 to 8) for every score of every head: the softmax (and the scaling)
    counted too."""
    batch, q_len, k_len, _, num_heads, _, _ = case.args
    extra, scores = (got - attention_flops(*case.args)) if type(got) is int else 0, batch * num_heads * q_len * k_len
    return extra > 0 and extra % scores == 0 and extra // scores <= 8


@variants
def _wrong(**part):
    """attention_flops with ``part`` counted wrongly; a setting given as an argument's name, or a sum of names
    ("k_len + q_len"), takes that argument's value in each call."""
    def fn(*args):
        given = dict(zip(_ARGS, args))
        return _counted(*args, **{key: sum(given[name] for name in value.split(" + ")) if isinstance(value, str)
                                  else value for key, value in part.items()})
    return fn


MISTAKES = (
    Mistake("返回了 float 而不是 int", "FLOPs 是整数：全用整数相乘，不要用 / 或浮点数（超过 2⁵³ 以后 float 就存不准了）。",
            matches=lambda case, got: isinstance(got, float)
            and math.isclose(got, attention_flops(*case.args), rel_tol=1e-9)),
    Mistake("每次乘加只算了 1 个 FLOP", "一次乘加（multiply-add）是一次乘法加一次加法，算 2 个 FLOP：矩阵乘法 [m, n] × [n, p] 是 2·m·n·p。",
            _wrong(per_mac=1)),
    Mistake("漏了 o_proj", "注意力层有四个投影：q_proj、k_proj、v_proj，还有最后的 o_proj（H·D → hidden）。",
            _wrong(o_proj=False)),
    Mistake("k_proj、v_proj 按 num_heads 个头算了", "k_proj、v_proj 只输出 num_kv_heads · head_dim 维：GQA、MQA 省下的正是这部分。",
            _wrong(kv_heads="num_heads")),
    Mistake("K 和 V 的投影只算了一份", "k_proj 和 v_proj 是两个投影，各是 hidden × Hkv·D：两份都要算，"
            "就像 KV cache 里 K 和 V 各存一份。", _wrong(kv_projections=1)),
    Mistake("Q·Kᵀ 和 weights·V 按 num_kv_heads 个头算了", "KV 头共享的只是 K、V 本身：打分和加权求和每个 query 头都要各做一遍，"
            "是 num_heads 份。", _wrong(score_heads="num_kv_heads")),
    Mistake("忘了乘 batch", "batch 里每个序列都要各算一遍：整个结果乘 batch。", _wrong(batches=1)),
    Mistake("分数表按 q_len × q_len 算了", "每个新 query 要和全部 k_len 个 key 比：分数表是 q_len × k_len，"
            "解码时 q_len = 1，k_len 是缓存里的全部位置。",
            _wrong(score_cols="q_len")),
    Mistake("漏了 weights · V", "打完分还要用权重给 V 加权求和：weights [q_len, k_len] × V [k_len, D]，和 Q·Kᵀ 一样多。",
            _wrong(weights_v=False)),
    Mistake("只数了因果掩码看得见的那些分数", "这门课按整张 q_len × k_len 的分数表算：稠密的矩阵乘法把被遮住的位置也算了"
            "（之后才被 mask 去掉）。只数看得见的一半左右，是 Megatron-LM 等估算训练成本时的另一种约定。",
            _wrong(pairs=_visible)),
    Mistake("把 softmax（或缩放、mask）也算进了 FLOPs", "这门课只数矩阵乘法（投影、Q·Kᵀ、weights·V）的 FLOPs，"
            "每次乘加算 2：softmax 这类逐元素运算不计入，它们和矩阵乘法比起来很少。", matches=_softmax_counted),
    Mistake("q_proj 按 Qwen3.5 带门的宽度（2·H·D）算了", "这一题的注意力层是普通的 GQA：q_proj 只输出 H·D 维。Qwen3.5 的 "
            "q_proj 输出 2·H·D（一半是 query，一半是门），那是作业 05、06 的层。", _wrong(query_width=2)),
    Mistake("分数表按 q_len × (k_len + q_len) 算了", "k_len 已经包括了这一步新来的 q_len 个 token（缓存里的加上新来的）："
            "分数表是 q_len × k_len，不用再加 q_len。", _wrong(score_cols="k_len + q_len")),
    Mistake("投影按全部 k_len 个 token 算了", "缓存里的位置早就投影过了（K、V 存在缓存里）：这一步只为 q_len 个新 token 做投影。",
            _wrong(projected="k_len")),
)

EXERCISE = Exercise("attention_flops", 1, attention_flops, cases, MISTAKES, verify=flops_as_int)
