# ---
# jupyter:
#   jupytext:
#     text_representation:
#       extension: .py
#       format_name: percent
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # 作业 01：注意力的基本功
#
# 这次作业从三个 token 的纸笔计算开始，最后写出一个完整的注意力函数。你会亲手实现五个小函数：
# 打分、因果掩码（带滑动窗口）、padding 掩码、带掩码的 softmax，以及把它们串起来的 `attention`。
# 后面几次作业里的多头注意力、GQA 与 KV cache、RoPE 与 MLA、Qwen3.5 的门控注意力，全都搭在这五块积木上。
# 最后一个练习是进阶题：不存整张分数表、一块一块地算 softmax 的 online softmax，FlashAttention 的核心。
#
# 路线：
#
# 1. 手算三个 token 的注意力，再用几行 PyTorch 核对；
# 2. 把手算写成矩阵公式，弄清为什么要除以 $\sqrt D$；
# 3. 五个练习；
# 4. 把注意力权重画成热力图：先看因果掩码，再看一个带 padding 的 batch；
# 5. 看清 softmax 为什么没法"弃权"；
# 6. 滑动窗口：它对热力图和 KV cache 做了什么；
# 7. online softmax（练习 6），以及 bf16 的精度丢在哪里；
# 8. 三道思考题。
#
# > **本课程的约定**
# >
# > - 注意力里的张量形状是 `[batch, heads, seq, head_dim]`，下文简写为 `[B, H, T, D]`。
# >   本作业的函数只在最后两维上计算，前面有几维都可以。
# > - 掩码是 `torch.bool`，**True 表示"可以看"**（和 `torch.nn.functional.scaled_dot_product_attention` 相同），
# >   形状能广播到 `[batch, heads, q_len, k_len]` 即可。
# > - **评分规则**：评分程序只读取你的 `import`、函数和类的定义，以及全大写的常量（如 `EPS = 1e-6`）；
# >   演示单元不会被评分程序执行。所以函数里不要用演示单元里的变量，也不要改函数名和参数。
# > - **「运行全部」（Run All）**：练习还没写的时候，它会停在第一个练习后面的检查单元，报 `NotImplementedError`——
# >   这是正常的，不是你弄坏了什么。从上往下做：写完一个练习，运行它和它后面的检查，再往下走。
# >
# > 做练习时，把每个练习里的 `raise NotImplementedError()` 换成你的代码。练习后面的检查单元先跑一个看得见的小检查；
# > 评分时还会用更多的形状、dtype 和边界情况来检验你的函数。
# >
# > 每个练习标了难度（🔴 越多越难）和大致用时；提示折叠在「提示」里，先自己想一想再点开。

# %%
import math

import matplotlib.pyplot as plt
import torch

from course import toy
from course.tools import plotting

torch.set_printoptions(precision=3, sci_mode=False)

# %% [markdown]
# ## 1. 三个 token，手算一遍
#
# 在注意力层里，每个 token 都会算出三个向量：
#
# - **query**：这个 token 此刻想找什么；
# - **key**：这个 token 亮给别人比对的标签；
# - **value**：别人选中它之后，从它这里取走的内容。
#
# 一个 token 的输出分三步得到：拿自己的 query 依次和每个 key 求点积，每个 key 换来一个分数；softmax 再把这些分数换算成非负、
# 总和为 1 的权重；再按这些权重把各个 token 的 value 加起来。
#
# 用二维向量算一遍。句子是「今天 / 天气 / 不错」：
#
# | token | key | value |
# |---|---|---|
# | 今天 | $(1,\ 0)$ | $(2,\ 0)$ |
# | 天气 | $(0,\ 1)$ | $(0,\ 2)$ |
# | 不错 | $(0.5,\ 0.5)$ | $(1,\ 1)$ |
#
# 看「不错」这个位置。它是一句评价，要找的是"评价的对象"。它的 query 是 $q = (0,\ 4)$：
# 只关心 key 的第二个分量，而第二个分量最大的 key 正是「天气」的。
#
# **第一步，打分。** $q$ 和三个 key 的点积分别是 $0$、$4$、$2$。向量的维数 $D = 2$，再都除以 $\sqrt 2$：
#
# $$
# s = \left(\frac{0}{\sqrt 2},\ \frac{4}{\sqrt 2},\ \frac{2}{\sqrt 2}\right) \approx (0,\ 2.83,\ 1.41)
# $$
#
# **第二步，softmax。** 每个分数取指数，再除以它们的和：
#
# $$
# \left(e^{0},\ e^{2.83},\ e^{1.41}\right) \approx (1,\ 16.9,\ 4.1), \qquad
# w = \frac{(1,\ 16.9,\ 4.1)}{22.0} \approx (0.045,\ 0.768,\ 0.187)
# $$
#
# **第三步，加权求和。**
#
# $$
# o = 0.045 \cdot (2,\ 0) + 0.768 \cdot (0,\ 2) + 0.187 \cdot (1,\ 1) = (0.277,\ 1.723)
# $$
#
# 「不错」把四分之三以上的注意力给了「天气」，所以它的输出很接近「天气」的 value $(0,\ 2)$，
# 只掺进了一点「今天」和它自己的内容。
#
# 三步各管一件事：**打分**决定看谁，**softmax** 决定各看多少，**乘 $V$** 才真正把内容取回来。
# 前两步只是算出一份"注意力预算"的分配方案，第三步之前，「不错」的向量还一点没变。下面让 PyTorch 再算一次：

# %%
keys = toy.keys()      # [3, 2]: one row per token
values = toy.values()  # [3, 2]
q_bucuo = toy.query()  # [2]: the query of 不错

scores = q_bucuo @ keys.T / math.sqrt(q_bucuo.shape[-1])  # one score per key
weights = torch.softmax(scores, dim=-1)                    # non-negative, sums to 1
output = weights @ values                                  # mix the value rows by weight

print(toy.words())
print("scores :", scores)
print("weights:", weights, " sum =", round(weights.sum().item(), 6))
print("output :", output)

# %% [markdown]
# ## 2. 从一行到一张表：矩阵形式
#
# 把每个 token 的 query、key、value 分别当作一行叠起来，得到矩阵 $Q$、$K$、$V$（第 $i$ 行属于第 $i$ 个 token）。
# 一个头的注意力写成
#
# $$
# \operatorname{Attention}(Q, K, V) = \operatorname{softmax}\!\left(\frac{QK^\top}{\sqrt D} + M\right) V
# $$
#
# - $QK^\top$ 的第 $i$ 行第 $j$ 列是 query $i$ 和 key $j$ 的点积：一次矩阵乘法算出整张 $T_q \times T_k$ 的分数表。
#   **行是提问的 token，列是被看的 token**，本课程所有的热力图都这样摆。
# - softmax 按行做：每一行是一个 query 的权重，和为 1。
# - 乘上 $V$：第 $i$ 行的权重把 $V$ 的各行加权相加，得到 token $i$ 的输出。
# - $M$ 是**因果掩码**。语言模型边读边预测下一个 token，位置 $i$ 不许偷看它后面的 token。
#   $M$ 在允许的位置是 $0$，在"未来"的位置是 $-\infty$：
#
# $$
# M_{ij} = \begin{cases} 0, & j \le i \\ -\infty, & j > i \end{cases}
# \qquad\text{例如 } T = 3:\quad
# M = \begin{pmatrix} 0 & -\infty & -\infty \\ 0 & 0 & -\infty \\ 0 & 0 & 0 \end{pmatrix}
# $$
#
# 因为 $e^{-\infty} = 0$，未来位置在 softmax 之后的权重正好是 0。代码里我们不存这张加法用的矩阵，
# 而是存一个布尔掩码（True = 可以看），在 softmax 之前用它挑出要屏蔽的分数；练习 4 会说明为什么这样更稳妥。
#
# 现在给三个 token 各配一个 query——「今天」$(0,\ 0)$、「天气」$(3,\ 0)$、「不错」$(0,\ 4)$——三行一起算：

# %%
queries = toy.queries()  # [3, 2]: row i is the query of token i
table = queries @ keys.T / math.sqrt(queries.shape[-1])  # [3, 3] scores, rows = queries, columns = keys

positions = torch.arange(3)
future = positions[None, :] > positions[:, None]  # True where the key comes after the query
table = table.masked_fill(future, float("-inf"))

table_weights = torch.softmax(table, dim=-1)
print(table_weights)
print(table_weights @ values)

# %% [markdown]
# 逐行读：
#
# - 「今天」是第一个 token，除了自己什么都看不见，权重只能是 $(1,\ 0,\ 0)$，输出就是它自己的 value $(2,\ 0)$。
# - 「天气」的 query $(3,\ 0)$ 对准「今天」的 key，在它看得见的两个 token 里，给了「今天」0.893、自己 0.107。
# - 「不错」能看见全部三个 token，这一行就是第 1 节手算的 $(0.045,\ 0.768,\ 0.187)$。

# %% [markdown]
# ### 为什么要除以 $\sqrt D$
#
# 假设 $q$ 和 $k$ 的每个分量都是均值 0、方差 1 的独立随机数。点积 $q \cdot k = \sum_{i=1}^{D} q_i k_i$
# 是 $D$ 个方差为 1 的项之和，方差是 $D$，标准差是 $\sqrt D$。$D = 2$ 时无关紧要，但真实模型的 head_dim
# 是 64、128，Qwen3.5 是 256：不缩放的话分数动辄十几，$e^{16}$ 是 $e^{0}$ 的近九百万倍，softmax
# 的每一行几乎都变成 one-hot（一个 1，其余全是 0）。这时 softmax 的梯度几乎为 0，模型很难学动。
# 除以 $\sqrt D$ 把分数的标准差拉回 1 附近。用 $D = 256$ 的随机向量量一下：

# %%
torch.manual_seed(0)
dim = 256
random_q = torch.randn(1000, dim)  # 1000 random queries
random_k = torch.randn(8, dim)     # against 8 random keys
raw_scores = random_q @ random_k.T

for label, s in [("不缩放   ", raw_scores), ("除以 √D ", raw_scores / math.sqrt(dim))]:
    top_weight = torch.softmax(s, dim=-1).max(dim=-1).values.mean()
    print(f"{label}分数的标准差 {s.std():5.1f}，每行最大权重的平均值 {top_weight:.2f}")

# %% [markdown]
# 不缩放时，8 个 key 里最大的那个平均分走了几乎全部权重；缩放以后，权重分布在好几个 key 上。

# %% [markdown]
# ## 3. 五个练习
#
# ### 练习 1：`attention_scores(q, k)`
#
# 难度：🔴⚪⚪⚪⚪ · 约 5 分钟
#
# 输入 `q` 的形状是 `[..., Tq, D]`，`k` 是 `[..., Tk, D]`；返回 `[..., Tq, Tk]` 的分数 $QK^\top / \sqrt D$。
# `...` 代表任意个前导维（batch、heads……），两边相同或能广播。
#
# <details><summary>提示</summary>
#
# - `@`（即 `torch.matmul`）只把最后两维当矩阵相乘，前面的维度当作一批彼此独立的矩阵。
# - 要让 `k` 的最后两维对调、前面的维度保持不动。`k.T` 在多于两维的张量上会把**所有**维倒过来，不是你想要的；
#   去 `torch.Tensor` 的文档里找一个能指定"交换哪两维"的方法。
# - $D$ 从 `q` 的形状里读。除数用 Python 的数（`math` 模块算出来的就是），结果会保持输入的 dtype
#   （float32、float64、bfloat16 都一样）。
#
# </details>

# %% tags=["solution:attention_scores"]
def attention_scores(q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    """Scaled dot-product scores.

    q: [..., Tq, D], k: [..., Tk, D] (leading dims equal or broadcastable).
    Returns [..., Tq, Tk]: entry (i, j) is q_i . k_j / sqrt(D), in the dtype of q.
    """
    ### BEGIN SOLUTION
    head_dim = q.shape[-1]
    return q @ k.transpose(-2, -1) / math.sqrt(head_dim)
    ### END SOLUTION


# %% tags=["tests:attention_scores"]
from course.checking import check
check("attention_scores")

### BEGIN HIDDEN TESTS
from autograder.instructor.hidden_cells import grade
grade("attention_scores")
### END HIDDEN TESTS

# %% [markdown]
# ### 练习 2：`causal_mask(q_len, k_len=None, window=None)`
#
# 难度：🔴🔴⚪⚪⚪ · 约 15 分钟
#
# 返回布尔矩阵 `[Tq, Tk]`：第 $i$ 行第 $j$ 列为 True，表示 query $i$ 可以看 key $j$。
#
# 最常见的情况是 $T_q = T_k = T$（训练时整句一起算）。第 $i$ 个 query 就是句子里的第 $i$ 个 token，
# 能看 key $0 \dots i$，矩阵是带对角线的下三角：
#
# ```
# Tq = Tk = 4    key: 0  1  2  3
#     query 0         T  F  F  F
#     query 1         T  T  F  F
#     query 2         T  T  T  F
#     query 3         T  T  T  T
# ```
#
# 逐个生成 token 时就不一样了（作业 03 的 KV cache）：前面 token 的 key、value 已经存在缓存里，
# 这一步只为**新来的** token 算 query。比如缓存里已有 4 个 token，再来 1 个：$T_q = 1$，$T_k = 5$。
# 这个唯一的 query 是整句的第 5 个 token（位置 4），应当看见**全部** 5 个 key。
# 要是照搬"第 $i$ 行看到 key $i$ 为止"，它只能看见 key 0，模型生成时就只看得到句子的第一个 token。
#
# 所以要按**绝对位置**算。新的 query 总排在序列的最后面，query $i$ 的绝对位置是
# $p_i = T_k - T_q + i$，它能看见所有 $j \le p_i$ 的 key：
#
# ```
# Tq = 2, Tk = 5        key: 0  1  2  3  4
#     query 0 (位置 3)       T  T  T  T  F
#     query 1 (位置 4)       T  T  T  T  T
# ```
#
# `k_len` 不给时等于 `q_len`，此时 $p_i = i$，回到下三角。
#
# **滑动窗口。** 有些模型（Mistral 7B，Gemma 2、Gemma 3 的一部分层）让每个 query 只看**最近的 $w$ 个** token，
# 自己也算在内。`window=w` 时，位置 $p$ 的 query 能看的 key 是
#
# $$
# p - w < j \le p
# $$
#
# 也就是在因果掩码上再加一个条件。`window=None`（默认）时没有这个条件，就是上面的因果掩码。$T = 5$、`window=2`：
#
# ```
# T = 5, window = 2   key: 0  1  2  3  4
#     query 0              T  F  F  F  F
#     query 1              T  T  F  F  F
#     query 2              F  T  T  F  F
#     query 3              F  F  T  T  F
#     query 4              F  F  F  T  T
# ```
#
# 带缓存时两条边都按绝对位置 $p_i = T_k - T_q + i$ 算。第 7 节看它对热力图和 KV cache 做了什么。
#
# <details><summary>提示</summary>
#
# 用 `torch.arange` 造出 query 位置（一列）和 key 位置（一行），靠广播一比较就得到整张表；
# 也可以看看 `torch.tril`、`torch.triu` 的 `diagonal` 参数。窗口就是再比较一次，用 `&` 和因果的条件合起来。
#
# </details>

# %% tags=["solution:causal_mask"]
def causal_mask(q_len: int, k_len: int | None = None, window: int | None = None) -> torch.Tensor:
    """Causal mask, bool [q_len, k_len], True = may attend.

    k_len defaults to q_len. The queries are the last q_len positions of the sequence, so query i
    sits at absolute position p = k_len - q_len + i and may see every key j <= p. With a sliding
    window (window=w), only the last w of them: p - w < j <= p.
    """
    ### BEGIN SOLUTION
    if k_len is None:
        k_len = q_len
    query_positions = torch.arange(q_len).unsqueeze(1) + (k_len - q_len)  # [Tq, 1]
    key_positions = torch.arange(k_len).unsqueeze(0)                      # [1, Tk]
    visible = key_positions <= query_positions
    if window is not None:
        visible = visible & (key_positions > query_positions - window)
    return visible
    ### END SOLUTION


# %% tags=["tests:causal_mask"]
from course.checking import check
check("causal_mask")

### BEGIN HIDDEN TESTS
from autograder.instructor.hidden_cells import grade
grade("causal_mask")
### END HIDDEN TESTS

# %% [markdown]
# ### 练习 3：`padding_mask(attention_mask)`
#
# 难度：🔴⚪⚪⚪⚪ · 约 5 分钟
#
# 一个 batch 里的句子长短不一，短句要在后面补上 padding token，凑成一样长。Hugging Face 的 tokenizer
# 会同时返回 `attention_mask`：形状 `[B, Tk]`，真实 token 是 1，padding 是 0。
#
# ```
# 句子 0：今天  天气  不错   ，     →  attention_mask[0] = [1, 1, 1, 1]
# 句子 1：明天  下雨  <pad> <pad>   →  attention_mask[1] = [1, 1, 0, 0]
# ```
#
# padding 只是占位符，任何 query 都不该看它。所以这个掩码只管**列**（key），和是哪个 query、哪个头都无关。
# 练习要求把它变成布尔掩码，形状 `[B, 1, 1, Tk]`。
#
# 为什么是这个形状？广播从最右边一维开始对齐，长度为 1 的维会被铺开：
#
# ```
# 分数              [B,  H, Tq, Tk]
# [B, 1, 1, Tk]     [B,  1,  1, Tk]   ✓  B 对 B；1 铺满 H 个头；1 铺满 Tq 行；Tk 对 Tk
# [B, 1, Tk]            [B,  1, Tk]   ✗  右对齐之后，B 落在了 H 的位置上
# ```
#
# 用 `[B, 1, Tk]` 的话，本该是 batch 的那一维对上了 heads。$B \ne H$ 时一般会报错，这还算幸运；
# **$B = H$ 时不报错**：第 $h$ 个头用的是第 $h$ 句话的掩码，batch 里每句话都套用这一整套，结果悄悄错了；
# 只有一个头（$H = 1$）时也不报错，结果会悄悄多出一维，变成 `[B, B, Tq, Tk]`。
# 直接拿 `[B, Tk]` 去广播也一样，$B$ 会对上 $T_q$。
#
# 因果掩码 `[Tq, Tk]` 右对齐时正好对上最后两维，所以两个掩码可以直接用 `&` 合并：
# `padding_mask(am) & causal_mask(T)` 的形状是 `[B, 1, T, T]`，两个条件都满足的位置才能看。

# %% tags=["solution:padding_mask"]
def padding_mask(attention_mask: torch.Tensor) -> torch.Tensor:
    """Key-padding mask, True = may attend.

    attention_mask: [B, Tk] of 0/1 as a Hugging Face tokenizer returns it (1 = real token).
    Returns bool [B, 1, 1, Tk], which broadcasts over heads and query rows of [B, H, Tq, Tk].
    """
    ### BEGIN SOLUTION
    return attention_mask.bool()[:, None, None, :]
    ### END SOLUTION


# %% tags=["tests:padding_mask"]
from course.checking import check
check("padding_mask")

### BEGIN HIDDEN TESTS
from autograder.instructor.hidden_cells import grade
grade("padding_mask")
### END HIDDEN TESTS

# %% [markdown]
# ### 练习 4：`masked_softmax(scores, mask=None)`
#
# 难度：🔴🔴🔴⚪⚪ · 约 15 分钟
#
# 在最后一维上做 softmax；被遮住（mask 为 False）的位置权重必须**正好是 0**，其余权重加起来是 1。
# `mask=None` 时就是普通的 softmax。
#
# 看起来只要把被遮住的分数换成 $-\infty$ 再 softmax 就行，大多数行也确实如此。麻烦出在**整行都被遮住**的时候。
# 这种行在实践中真会出现：比如 padding 放在句子左边时，padding 位置的 query 在因果掩码下只看得见别的 padding
# （第 5 节有演示）。看看两种常见写法碰上这种行会怎样：

# %%
row = torch.tensor([1.0, 2.0, 3.0])
sees_nothing = torch.tensor([False, False, False])

# -inf everywhere: softmax subtracts the row maximum, and -inf - (-inf) is NaN.
print(torch.softmax(row.masked_fill(~sees_nothing, float("-inf")), dim=-1))
# A big negative number everywhere: all entries tie, so the row comes out uniform.
print(torch.softmax(row.masked_fill(~sees_nothing, -1e9), dim=-1))

# %% [markdown]
# - **填 $-\infty$**：softmax 会先减去这一行的最大值，而最大值本身就是 $-\infty$，$-\infty - (-\infty)$ 得 NaN。
#   NaN 会沿着后面的每一次乘法传下去，batch 里一行出事，整个 loss 都会变成 NaN。
# - **填 $-10^9$**：没有 NaN 了，可所有位置一样大，softmax 给出均匀的 $1/3$：这个 query 假装平均地看了它本不该看的
#   token，也是错的。另外 $-10^9$ 超出了 float16 的范围（最大只到 65504），在 float16 的张量里根本填不进去。
#
# 还有顺序：**先遮住，再 softmax**。如果先 softmax、再把被遮住的权重清零，剩下的权重加起来就不到 1 了——
# 被遮住的 token 已经在分母里分走了一份。
#
# 你的 `masked_softmax` 要做到：
#
# 1. 被遮住的位置权重正好是 0，其余每行和为 1；
# 2. 整行被遮住时输出全 0（这一行什么也不取），既不是 NaN，也不是均匀分布；
# 3. 分数大到 $\pm 10^4$ 时结果仍然有限（别自己写 `exp`：`torch.softmax` 内部已经减去了最大值）；
# 4. 输出的 dtype 和 `scores` 相同；`mask` 只要能和 `scores` 广播即可。
#
# <details><summary>提示</summary>
#
# `torch.where(mask, a, b)` 按掩码逐元素在两者之间挑选，还会自动广播；`torch.finfo(scores.dtype).min`
# 是当前 dtype 能表示的最小有限数。想一想：softmax 之前填什么、softmax 之后再做一步什么，能同时满足 1 和 2？
#
# </details>

# %% tags=["solution:masked_softmax"]
def masked_softmax(scores: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
    """Softmax over the last dim in which masked entries get exactly zero weight.

    scores: [..., Tq, Tk]. mask: bool, broadcastable to scores, True = may attend (None = no mask).
    Returns weights of the broadcast shape and the dtype of scores. Each row sums to 1, except a
    fully masked row, which is all zeros (never NaN).
    """
    ### BEGIN SOLUTION
    if mask is None:
        return torch.softmax(scores, dim=-1)
    # The lowest finite value (not -inf) keeps a fully masked row free of NaN.
    lowest = torch.finfo(scores.dtype).min
    weights = torch.softmax(torch.where(mask, scores, lowest), dim=-1)
    # Masked entries of a row with visible keys are already ~0; this makes them exactly 0 and
    # turns a fully masked row, uniform after the softmax above, into zeros.
    return torch.where(mask, weights, 0.0)
    ### END SOLUTION


# %% tags=["tests:masked_softmax"]
from course.checking import check
check("masked_softmax")

### BEGIN HIDDEN TESTS
from autograder.instructor.hidden_cells import grade
grade("masked_softmax")
### END HIDDEN TESTS

# %% [markdown]
# ### 练习 5：`attention(q, k, v, mask=None)`
#
# 难度：🔴⚪⚪⚪⚪ · 约 5 分钟
#
# 把前面的积木串起来：打分 → 带掩码的 softmax → 乘 $V$。返回两个张量 `(output, weights)`：
# `output` 的形状是 `[..., Tq, Dv]`，`weights` 是 `[..., Tq, Tk]`。`v` 的最后一维 $D_v$ 可以和 q、k 的 $D$ 不同
# （作业 04 的 MLA 就是这样）。权重一起返回，是为了画图和检查。
#
# 请调用你自己的 `attention_scores` 和 `masked_softmax`，`mask` 原样传下去，不要再写一遍。

# %% tags=["solution:attention"]
def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
              mask: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Scaled dot-product attention.

    q: [..., Tq, D], k: [..., Tk, D], v: [..., Tk, Dv]; mask: bool broadcastable to
    [..., Tq, Tk], True = may attend (None = attend everywhere).
    Returns (output [..., Tq, Dv], weights [..., Tq, Tk]), both in the dtype of the inputs.
    """
    ### BEGIN SOLUTION
    weights = masked_softmax(attention_scores(q, k), mask)
    return weights @ v, weights
    ### END SOLUTION


# %% tags=["tests:attention"]
from course.checking import check
check("attention")

### BEGIN HIDDEN TESTS
from autograder.instructor.hidden_cells import grade
grade("attention")
### END HIDDEN TESTS

# %% [markdown]
# ## 4. 把注意力画出来
#
# 手算的例子只有二维。换一句长一点的话：「今天 / 天气 / 不错 / ， / 我们 / 去 / 公园」（这里手工切分；
# 真正的 tokenizer 在作业 06 登场）。`toy.sentence_qkv` 给每个 token 造一组固定的 q、k、v：
# 先按 token 的文字生成一个固定的随机向量，再乘三个固定的随机矩阵。这些数字没有语言学含义，
# 但足以看清掩码的形状。
#
# 热力图里行是 query，列是 key，格子里是权重，颜色越深权重越大；正好为 0 的格子标成 `0`，
# 很小但不为 0 的标成 `0.00`。下面用的是**你写的** `attention` 和 `causal_mask`。

# %%
sentence = ["今天", "天气", "不错", "，", "我们", "去", "公园"]
q_s, k_s, v_s = toy.sentence_qkv(sentence)  # each [7, 8]
out_s, weights_s = attention(q_s, k_s, v_s, mask=causal_mask(len(sentence)))

plotting.attention_heatmap(weights_s, sentence, title="因果注意力（一个头）")
plt.show()

# %% [markdown]
# - 对角线右上方全是 `0`：每个 token 只看自己和前面的 token。
# - 第一行只有一个 1：「今天」前面什么都没有，只能把全部注意力给自己。
# - 每一行加起来都是 1；越往下，能分到注意力的 token 越多。

# %% [markdown]
# ## 5. 一个带 padding 的 batch
#
# 把两句长短不同的话放进同一个 batch：句子 0 是上面那句（7 个 token）；句子 1 是「明天 / 可能 / 下雨」，
# 只有 3 个 token，在右边补 4 个 `<pad>`。先造出 Hugging Face 风格的 0/1 `attention_mask`，
# 再把 padding 掩码和因果掩码用 `&` 合并：

# %%
sentences = [sentence, ["明天", "可能", "下雨"]]
pad_token = "<pad>"
seq_len = max(len(tokens) for tokens in sentences)

padded = [tokens + [pad_token] * (seq_len - len(tokens)) for tokens in sentences]
hf_attention_mask = torch.tensor([[1] * len(tokens) + [0] * (seq_len - len(tokens)) for tokens in sentences])
print("attention_mask:\n", hf_attention_mask)

# Stack the sentences into [B, T, D] and add a heads dim of size 1: [B, 1, T, D].
per_sentence = [toy.sentence_qkv(tokens) for tokens in padded]
q_b, k_b, v_b = [torch.stack(parts).unsqueeze(1) for parts in zip(*per_sentence)]

mask_b = padding_mask(hf_attention_mask) & causal_mask(seq_len)  # [2, 1, 1, 7] & [7, 7] -> [2, 1, 7, 7]
out_b, weights_b = attention(q_b, k_b, v_b, mask=mask_b)
print("mask:", tuple(mask_b.shape), " output:", tuple(out_b.shape), " weights:", tuple(weights_b.shape))

fig, axes = plt.subplots(1, 2, figsize=(12, 5))
for b, ax in enumerate(axes):
    plotting.attention_heatmap(weights_b[b, 0], padded[b], ax=ax, title=f"句子 {b}")
fig.tight_layout()
plt.show()

# %% [markdown]
# 右图最后四列全是 `0`：没有任何 query 看 `<pad>`。注意 `<pad>` 自己的那几行并不是 0——它们作为 query
# 照样去看前面的真实 token（这四行一模一样，因为玩具向量里没有位置信息，四个 `<pad>` 的 query 完全相同）。
# 这些行的输出没有用，算 loss 时会被 `attention_mask` 丢掉；要紧的是，
# 真实 token 的输出完全不受 padding 影响。验证一下：句子 1 单独算，结果应该和 batch 里它的前三行一样。

# %%
alone_out, _ = attention(*toy.sentence_qkv(sentences[1]), mask=causal_mask(3))
print(torch.allclose(alone_out, out_b[1, 0, :3]))

# %% [markdown]
# 批量生成文本时，padding 常放在**左边**，好让每句话的最后一个 token 对齐。这时 `<pad>` 在最前面，
# 而它们作为 query 在因果掩码下只看得见更前面的 `<pad>`：整行都被遮住。这就是练习 4 要求输出全 0 的原因。

# %%
left_padded = [pad_token] * 4 + sentences[1]
left_mask = padding_mask(torch.tensor([[0, 0, 0, 0, 1, 1, 1]])) & causal_mask(len(left_padded))
q_l, k_l, v_l = [t[None, None] for t in toy.sentence_qkv(left_padded)]  # each [1, 1, 7, 8]
out_l, weights_l = attention(q_l, k_l, v_l, mask=left_mask)                # weights [1, 1, 7, 7]

print("权重里有 NaN：", weights_l.isnan().any().item())
plotting.attention_heatmap(weights_l, left_padded, title="左侧 padding：前四行整行被遮住")
plt.show()

# %% [markdown]
# 前四行全是 `0`，没有 NaN；后三行和右侧 padding 时句子 1 的前三行一模一样。

# %% [markdown]
# ## 6. softmax 不会"弃权"
#
# 回到三个 token。假设这个头这一次什么都不想找，它的 query 是零向量 $(0,\ 0)$。和每个 key 的点积都是 0，
# 分数完全一样；softmax 只能给出均匀的 $\tfrac13, \tfrac13, \tfrac13$，输出就是三个 value 的平均：
#
# $$
# \tfrac13 (2,\ 0) + \tfrac13 (0,\ 2) + \tfrac13 (1,\ 1) = (1,\ 1)
# $$
#
# 权重必须加起来等于 1，所以 softmax 注意力**总要**交出 value 的某种加权平均，哪怕这个头这次无话可说。
# 这份"没人要的平均值"会被加进残差流，成了噪声。

# %%
silent_query = torch.zeros(1, 2)  # [Tq=1, D=2]: this head is looking for nothing
out_0, weights_0 = attention(silent_query, toy.keys(), toy.values())
print("weights:", weights_0)
print("output :", out_0)

gate = torch.sigmoid(torch.tensor(-6.0))
gated = (out_0 * gate)[0]
print(f"门 = sigmoid(-6) = {gate.item():.4f}  →  乘过门的输出：({gated[0]:.4f}, {gated[1]:.4f})")

# %% [markdown]
# 没有别的出路时，训练出来的模型会自己凑合：把第一个 token（因果掩码下每个 query 都看得见它）的 value
# 学得几乎为零，没事可做的头就把注意力全堆到它身上，取回来的约等于 0。这叫 attention sink（注意力的"汇点"，像水流汇进的洼地；《动手学深度学习》里的"注意力汇聚"说的是另一回事，attention pooling）。
#
# Qwen3.5 用了更直接的办法：在每个头的输出上逐维乘一个 sigmoid **门**，门的分数由当前 token 自己算出。
# 分数是 $-6$ 时，$\operatorname{sigmoid}(-6) \approx 0.0025$，上面的输出 $(1,\ 1)$ 变成约 $(0.0025,\ 0.0025)$，
# 这个头就真的"没发言"。Qwen 团队做过只差一个门的对照实验：有了门，落在第一个 token 上的注意力由 46.7% 减到 4.8%。
# 作业 05_output_gate 会实现这个门，并用梯度下降把它学出来。

# %% [markdown]
# ## 7. 滑动窗口：只看最近的 $w$ 个 token
#
# 还是那句「今天天气不错，我们去公园」，这次 `window=3`：每个 token 只看自己和前面两个。

# %%
windowed = causal_mask(len(sentence), window=3)
_, weights_window = attention(q_s, k_s, v_s, mask=windowed)

plotting.attention_heatmap(weights_window, sentence, title="滑动窗口 window=3（一个头）")
plt.show()

# %% [markdown]
# 每行最多三个非零格子，沿对角线排成一条带子。窗口外的 token 并没有彻底消失：某一层位置 $p$ 的输出混进了
# $p-2 \dots p$ 的信息，而这几个位置在上一层又各自看过它们前面的两个。一层层叠上去，$N_{\text{layer}}$ 层之后，
# 最后一层能"间接"够到的范围是 $N_{\text{layer}}\,(w - 1) + 1$ 个 token。
#
# 它真正省下的是 **KV cache**（作业 03 的主题）。生成时，窗口之外的 key、value 再也不会被任何 query 用到，
# 可以直接扔掉：滑动窗口层的缓存最多存 $w$ 个位置，不管上下文有多长。缓存里已有 $L = 9$ 个位置，再来一个 token：

# %%
cached = 9  # L: positions already in the cache; the new query sits at position 9
decode_window = causal_mask(1, cached + 1, window=4)
print("新 query 能看的 key：", decode_window.nonzero()[:, 1].tolist())

# %% [markdown]
# 只有最后 4 个位置还用得上。真实的模型：Mistral 7B 每层都用 4096 的窗口；Gemma 2 一层滑动窗口（4096）、
# 一层全局注意力交替；Gemma 3 是 5 层滑动窗口（1024）配 1 层全局。按 Gemma 3 的比例算一下缓存：

# %%
window, local_layers, global_layers = 1024, 5, 1
for context in (4096, 32768, 131072):
    share = (local_layers * min(window, context) + global_layers * context) / ((local_layers + global_layers) * context)
    print(f"上下文 {context:>6} 个 token：缓存只有全部用全局注意力时的 {share:.1%}")

# %% [markdown]
# 上下文越长，省得越多，最后趋向 $1/6$：只剩全局层的那一份。代价是局部层看不到远处，远距离的信息只能靠那几层全局注意力来传。

# %% [markdown]
# ## 8. 一块一块地做 softmax：online softmax
#
# `attention` 一次算出整张 $T_q \times T_k$ 的分数表。$T = 32768$ 时，一个头的这张表有 $2^{30}$ 个数，float32 要 4 GiB。
# FlashAttention 的核心想法是：**不存这张表**。把 key 切成一块一块（每块 `block_size` 个），一块块地读进来，
# 边读边把结果累加起来。难点在 softmax：它的分母要用到一整行的分数，可我们一次只看得到一块。
#
# 先看一行，也就是一个 query。记它对各个 key 的分数为 $s_j$，输出是
#
# $$
# o = \frac{\sum_j e^{s_j - m}\, v_j}{\sum_j e^{s_j - m}}
# $$
#
# 这里的 $m$ 可以是**任何**数：分子分母同乘 $e^{m}$，结果不变。取 $m = \max_j s_j$，是为了让每个 $e^{s_j - m} \le 1$，
# 不会溢出（`torch.softmax` 内部就是这么做的）。online softmax 一边往前走，一边维护三样东西：
#
# - $m$：目前见过的最大分数（running max），从 $-\infty$ 开始；
# - $z$：目前的 $\sum_j e^{s_j - m}$（running sum），从 0 开始；
# - $a$：目前的 $\sum_j e^{s_j - m}\, v_j$，还没除以 $z$ 的输出，从 0 开始。
#
# （FlashAttention 的论文把 $z$ 写作 $\ell$；本课程的 $\ell$ 留给"第几层"。）来了新的一块分数 $s_j$（$j$ 在这一块里）：
#
# $$
# m' = \max\!\big(m,\ \max_j s_j\big),\qquad
# z' = z\, e^{m - m'} + \sum_j e^{s_j - m'},\qquad
# a' = a\, e^{m - m'} + \sum_j e^{s_j - m'}\, v_j
# $$
#
# 旧的 $z$ 和 $a$ 都是按旧的 $m$ 平移过的；最大值变大了，就都乘上 $e^{m - m'} \le 1$，换到新的基准上。所有块走完，
# 输出是 $a / z$。整个过程里，分数一次只存一块：$T_q \times$ `block_size` 个数，而不是 $T_q \times T_k$。
#
# 两个边界要小心：
#
# - 整行都被遮住的 query，$m$ 一直是 $-\infty$，而 $e^{-\infty - (-\infty)}$ 是 NaN。在 $m'$ 还是 $-\infty$ 的地方按 0 来平移
#   （这时 $e^{s_j - 0} = e^{-\infty} = 0$），最后 $z = 0$ 的行输出 0，和 `masked_softmax` 的约定一样。
# - $T_k$ 不一定是 `block_size` 的倍数，最后一块可以短一些。

# %% [markdown]
# ### 练习 6：`online_softmax_attention(q, k, v, mask=None, block_size=16)`
#
# 难度：🔴🔴🔴🔴⚪ · 约 25 分钟
#
# 返回和 `attention(q, k, v, mask)[0]` 一样的输出（只要输出，不要权重），形状 `[..., Tq, Dv]`，但要按上面的办法一块一块地算：
# 每一步只算 `block_size` 个 key 的分数。`mask` 和 `attention` 里的一样，能广播到 `[..., Tq, Tk]`，要跟着 key 一起切块。
# 评分时会盯着每一次矩阵乘法：一旦有一次算出了超过 `block_size` 个 key 的分数，就会停在那一行告诉你。
# 评分时还有一个 notebook 里看不到的长用例（几万个 key）：整张分数表有几百 MiB，评分的沙盒只让这次运行多占其中一小部分内存，
# 而且是在你的进程之外量的。一块一块地算放得下；把所有块的分数一起留着，或者一次算整张表，就放不下。
#
# <details><summary>提示</summary>
#
# - `for start in range(0, Tk, block_size)`，配上切片 `k[..., start:start + block_size, :]`，最后一块自动变短。
#   mask 的最后一维是 key，也这样切；`mask.expand(*mask.shape[:-1], Tk)` 先把可能为 1 的最后一维铺开。
# - 每一块的分数用你的 `attention_scores`，被遮住的位置填 $-\infty$。
# - $m$、$z$ 的形状是 `[..., Tq, 1]`，$a$ 是 `[..., Tq, Dv]`：`amax`、`sum` 用 `keepdim=True`，就能直接和分数块广播。
# - `torch.maximum` 逐元素取大；`m_new.masked_fill(m_new == float("-inf"), 0.0)` 得到安全的平移量。
# - 低精度输入（bfloat16）时，把 $m$、$z$、$a$ 放在 float32 里累加，最后再转回输入的 dtype，FlashAttention 也是这么做的。
#
# </details>

# %% tags=["solution:online_softmax_attention"]
def online_softmax_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None = None,
                             block_size: int = 16) -> torch.Tensor:
    """attention(q, k, v, mask)[0], computed over blocks of block_size keys.

    q: [..., Tq, D], k: [..., Tk, D], v: [..., Tk, Dv]; mask: bool broadcastable to [..., Tq, Tk],
    True = may attend. Holds the scores of one block ([..., Tq, block_size]) at a time, with a running
    max m and sum z per query ([..., Tq, 1]). Returns [..., Tq, Dv] in q's dtype; fully masked rows are 0.
    """
    ### BEGIN SOLUTION
    k_len = k.shape[-2]
    work = torch.promote_types(q.dtype, torch.float32)  # running statistics in at least float32
    rows = (q @ k[..., :1, :].mT).shape[:-1]  # [..., Tq]: the leading dims of q and k broadcast
    m = torch.full((*rows, 1), float("-inf"), dtype=work)
    z = torch.zeros(*rows, 1, dtype=work)
    a = torch.zeros(*rows, v.shape[-1], dtype=work)
    if mask is not None:
        mask = mask.expand(*mask.shape[:-1], k_len)
    for start in range(0, k_len, block_size):
        block = slice(start, start + block_size)
        s = attention_scores(q.to(work), k[..., block, :].to(work))  # [..., Tq, block]
        if mask is not None:
            s = s.masked_fill(~mask[..., block], float("-inf"))
        m_new = torch.maximum(m, s.amax(dim=-1, keepdim=True))
        shift = m_new.masked_fill(m_new == float("-inf"), 0.0)     # rows that have seen no key yet
        p = torch.exp(s - shift)
        rescale = torch.exp(m - shift)
        z = z * rescale + p.sum(dim=-1, keepdim=True)
        a = a * rescale + p @ v[..., block, :].to(work)
        m = m_new
    out = torch.where(z > 0, a / z.clamp_min(torch.finfo(work).tiny), 0.0)
    return out.to(q.dtype)
    ### END SOLUTION


# %% tags=["tests:online_softmax_attention"]
from course.checking import check
check("online_softmax_attention")

### BEGIN HIDDEN TESTS
from autograder.instructor.hidden_cells import grade
grade("online_softmax_attention")
### END HIDDEN TESTS

# %% [markdown]
# ### 省下了什么
#
# 一次算完时，一个头要存 $T_q \times T_k$ 个分数；online softmax 只存 $T_q \times$ `block_size` 个。训练时 $T_q = T_k = T$：

# %%
lengths = [2**n for n in range(8, 16)]
block = 128
fig, ax = plt.subplots(figsize=(6, 4))
ax.plot(lengths, [t * t * 4 / 2**20 for t in lengths], marker="o", label="整张分数表")
ax.plot(lengths, [t * block * 4 / 2**20 for t in lengths], marker="o", label=f"一块（block_size = {block}）")
ax.set_xscale("log", base=2)
ax.set_yscale("log", base=2)
ax.set_xlabel("序列长度 T")
ax.set_ylabel("一个头的分数占用（MiB，float32）")
ax.set_title("整张分数表和一块分数各占多少内存")
ax.grid(True, which="both", alpha=0.3)
ax.legend()
plt.show()

# %% [markdown]
# 一条随 $T^2$ 涨，一条随 $T$ 涨。这里的 Python 循环比一次算完**慢**得多：每一块都要启动好几个小运算。
# FlashAttention 快，是因为它在 GPU 上把整个循环写进一个 kernel，分数块始终待在芯片上的小块高速内存（SRAM）里，
# 从不写回显存；它省的是内存读写，FLOPs 一点没少。

# %% [markdown]
# ### bf16 的精度丢在哪里
#
# bfloat16 只有 8 位有效二进制位（约 2～3 位十进制有效数字）。注意力里最吃亏的是分数 $QK^\top$：它先被舍入到 bf16，
# 再进 exp，误差被放大。放到 float32 里的是哪一步，差别很大：Hugging Face 的 eager 注意力在 bf16 里乘出分数，
# **之后**才转成 float32 做 softmax；FlashAttention 的分数从乘出来起就是 float32（矩阵乘在 float32 里累加，不先舍入成 bf16），
# $m$、$z$、$a$ 也留在 float32。你的 online softmax 是后一种。量一量：同样的 bf16 输入，以 float64 的结果为准：

# %%
torch.manual_seed(0)
q_h, k_h, v_h = torch.randn(1, 4, 64, 64) * 1.5, torch.randn(1, 4, 256, 64) * 1.5, torch.randn(1, 4, 256, 64)
mask_h = causal_mask(64, 256)
exact, _ = attention(q_h.double(), k_h.double(), v_h.double(), mask_h)
q_b, k_b, v_b = q_h.bfloat16(), k_h.bfloat16(), v_h.bfloat16()

rounded_inputs_only, _ = attention(q_b.double(), k_b.double(), v_b.double(), mask_h)
all_bf16, _ = attention(q_b, k_b, v_b, mask_h)
scores_b = q_b @ k_b.transpose(-2, -1) / math.sqrt(q_b.shape[-1])  # multiplied out in bf16, as Hugging Face does
softmax_in_float32 = torch.softmax(scores_b.float().masked_fill(~mask_h, float("-inf")), dim=-1).to(v_b.dtype) @ v_b
scores_in_float32 = online_softmax_attention(q_b, k_b, v_b, mask_h, block_size=64)
for label, result in [("只把输入舍入成 bf16，其余精确", rounded_inputs_only), ("全程 bf16", all_bf16),
                      ("分数在 bf16 里乘出，softmax 用 float32（Hugging Face）", softmax_in_float32),
                      ("online softmax（分数和 m、z、a 用 float32，FlashAttention）", scores_in_float32)]:
    print(f"{label}：最大误差 {(result.double() - exact).abs().max().item():.4f}")

# %% [markdown]
# 输入本身舍入成 bf16 的那份误差谁也躲不掉；在这之上，全程 bf16 又多出一截，主要来自分数的舍入。只把 softmax 换成
# float32 救不回这一截：分数在乘出来的时候已经舍入过了。分数从一开始就留在 float32 时，误差才回到只舍入输入的水平。（你的练习 6 如果全程用 bf16 累加，评分也能通过：
# 评分的容差是按 bf16 的舍入定的。）

# %% [markdown]
# ## 思考题
#
# 三道题不计分，也没有标准格式：把你的推理写下来就好。
#
# **思考题 1.** 一个 24 层的模型，每层都用 `window=1024` 的滑动窗口。最后一层位置 $p$ 的输出，最远能受到多早的 token 影响？
# 既然这样也能"看得很远"，为什么 Gemma 3 还要每 6 层留 1 层全局注意力？

# %% [markdown] tags=["answer:window_reach"]
# ### BEGIN SOLUTION
# 每过一层，能够到的范围向前延伸 $w - 1$ 个位置：24 层之后是 $24 \times 1023 + 1 = 24553$ 个 token，位置 $p - 24552$
# 的 token 还能影响 $p$。
#
# 但这种"间接"很弱。远处的信息要一层一层地转手，每一层都要有头恰好把它搬到窗口的前沿，还要和窗口里其他 token 抢权重；
# 走得越远，越被稀释。模型想直接回看几千个 token 前的某句话（比如复制一个名字），局部层做不到。全局注意力层给了这条直达的路；
# 只留少数几层，缓存仍然主要由便宜的局部层决定。
# ### END SOLUTION

# %% [markdown]
# **思考题 2.** online softmax 里的 $m$ 一定要是"目前见过的最大分数"吗？如果事先知道所有分数都不超过某个上界 $M$，
# 一开始就用 $M$ 平移、以后不再更新，行不行？有什么风险？

# %% [markdown] tags=["answer:fixed_shift"]
# ### BEGIN SOLUTION
# 数学上行：$m$ 可以是任何数，分子分母同乘 $e^{m}$，结果不变；用固定的 $M$ 平移，就不用在最大值变大时重缩放了。
#
# 风险在数值上。$M$ 比真实的最大值大很多时，$e^{s_j - M}$ 全部下溢成 0，$z = 0$，得到 0/0；
# float32 里 $s_j - M$ 小于大约 $-87$ 就下溢（bf16 的指数范围和 float32 一样）。上界定得太松，输出就坏掉；定得太紧，又可能有分数超过它而溢出。
# running max 保证 $e^{s_j - m} \le 1$，而且每一行至少有一项正好是 1，既不上溢也不会整行下溢；重缩放是为此付的一点代价。
# ### END SOLUTION

# %% [markdown]
# **思考题 3.** 第 6 节说 softmax 不会"弃权"。如果在每一行的 key 里多加一个"虚拟 token"：它的分数恒为 0、value 恒为零向量，
# 会发生什么？权重还加起来等于 1 吗？这和 attention sink 有什么关系？

# %% [markdown] tags=["answer:virtual_sink"]
# ### BEGIN SOLUTION
# 真实 token 的权重变成 $e^{s_j} / \big(1 + \sum_k e^{s_k}\big)$：分母里多了一个 $e^0 = 1$。所有分数都很低时，几乎全部权重落到虚拟 token 上，
# 而它的 value 是 0，于是输出接近零向量，这个头就真的"没发言"；真实 token 的权重加起来小于 1。
#
# 这正是训练出来的模型用第一个 token 凑合出来的东西：一个人人看得见、value 几乎为 0 的 sink。把它显式地写进 softmax，
# 就不必再占用一个真实 token（有人把这种写法叫 softmax₁，off-by-one softmax；gpt-oss 给每个头学一个 sink 的分数，
# 也是这个思路）。Qwen3.5 走的是另一条路：作业 05 的输出门。
# ### END SOLUTION

# %% [markdown]
# ## 小结
#
# | 函数 | 做什么 | 要守住的细节 |
# |---|---|---|
# | `attention_scores` | $QK^\top/\sqrt D$ | 只转置最后两维；别忘了 $\sqrt D$ |
# | `causal_mask` | 不许看未来；`window` 只看最近 $w$ 个 | 按绝对位置 $T_k - T_q + i$ 算，带缓存时才对；窗口是 $p - w < j \le p$ |
# | `padding_mask` | 不许看 padding | 形状 `[B, 1, 1, Tk]`，广播才不会错位 |
# | `masked_softmax` | 分数 → 权重 | 先遮再 softmax；遮住的位置正好是 0；整行被遮住时全 0 |
# | `attention` | 权重 × $V$ | 返回 `(output, weights)` |
# | `online_softmax_attention` | 一块一块地算 softmax | running max 变大时 $z$、$a$ 都乘 $e^{m - m'}$；整行被遮住时输出 0 |
#
# 下一次作业把一个头扩成多个头：拆分、合并，以及 `o_proj`。
