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
# # 作业 03：GQA 与 KV cache
#
# 语言模型生成文本时一次只吐出一个 token。这次作业看清楚生成时注意力层里发生了什么：为什么要把 K 和 V 存起来
# （KV cache），为什么 Q 不用存；这份缓存有多大；以及 MQA、GQA 怎样让多个 query 头共用一组 K、V，把缓存缩小好几倍。
# 你会实现五样东西：`KVCache`、`repeat_kv`、把 MHA / GQA / MQA 装进同一个模块的 `GroupedQueryAttention`、
# 计算缓存大小的 `kv_cache_bytes`，以及数一层注意力要多少次浮点运算的 `attention_flops`。
#
# 路线：
#
# 1. 生成时每一步在算什么：为什么缓存 K、V 而不缓存 Q；
# 2. 练习 1：`KVCache`；
# 3. MHA → GQA → MQA：让 query 头共享 K、V；练习 2：`repeat_kv`；
# 4. 练习 3：`GroupedQueryAttention`；
# 5. 验证：带缓存逐个 token 解码，和整句一次算出的结果一样；
# 6. 缓存有多大：练习 4 `kv_cache_bytes`，Qwen3.5-0.8B 的账，滑动窗口能省多少；
# 7. 算一算：练习 5 `attention_flops`，prefill 和 decode 各花多少 FLOPs，为什么 decode 卡在显存带宽上；
# 8. 量一量：有缓存和没缓存，每个 token 要花多少时间；
# 9. 小结和思考题。
#
# > **本课程的约定**
# >
# > - 注意力里的张量形状是 `[batch, heads, seq, head_dim]`，下文简写为 `[B, H, T, D]`；K、V 只有 $H_{kv}$ 个头时是
# >   `[B, Hkv, T, D]`。进出注意力层的 hidden states 是 `[B, T, hidden]`。
# > - 符号：$B$ batch，$T$ 序列长度，$L$ 缓存里的位置数，$N_{\text{layer}}$ 层数，$d$ = `hidden_size`，
# >   $H$、$H_{kv}$ 是 query 头数和 KV 头数，$D$ = `head_dim`。
# > - 掩码是 `torch.bool`，**True 表示"可以看"**。模块的 `attention_mask` 参数是 tokenizer 给的 `[B, k_len]`，
# >   1 = 真实 token，0 = padding，覆盖缓存里的位置和新来的位置；模块自己加因果掩码。
# > - 线性层是 `nn.Linear(..., bias=False)`，名字叫 `q_proj`、`k_proj`、`v_proj`、`o_proj`。
# > - **评分规则**：评分程序只读取你的 `import`、函数和类的定义，以及全大写的常量；演示单元不会被评分程序执行。
# > - **「运行全部」（Run All）**：练习还没写的时候，它会停在第一个练习后面的检查单元，报 `NotImplementedError`——
# >   这是正常的，不是你弄坏了什么。从上往下做：写完一个练习，运行它和它后面的检查，再往下走。
# > - 每个练习标着难度（🔴 越多越难，最多五个）和大约要花的时间；提示收在「提示」里，卡住了再点开。
# >
# > 作业 01 的函数和作业 02 的 `split_heads`、`merge_heads` 在导入单元后面的「已给出」单元里（前两次作业的参考答案），运行一下就能用。

# %%
import math
import time

import matplotlib.pyplot as plt
import torch
from torch import nn

from course.qwen35_weights import load_config
from course.tools import plotting

torch.set_printoptions(precision=3, sci_mode=False)
plotting.use_chinese_font()  # Chinese titles and labels in every figure below


# %% tags=["provided:attention_scores", "provided:causal_mask", "provided:padding_mask", "provided:masked_softmax", "provided:attention", "provided:split_heads", "provided:merge_heads"]
# course-release fills this cell with the answers of assignments 01 and 02.

# %% [markdown]
# ## 1. 生成时每一步在算什么
#
# 生成是一个循环：模型读入目前为止的全部 token，预测下一个，把它接到末尾，再读一遍。如果每一步都把整句重新算一遍，
# 第 $t$ 步要处理 $t$ 个 token，越往后越慢。可是大部分计算其实是重复的。
#
# 看注意力层里位置 $t$ 的输出：
#
# $$
# o_t = \sum_{j \le t} \operatorname{softmax}_j\!\left(\frac{q_t \cdot k_j}{\sqrt D}\right) v_j
# $$
#
# 式子里只出现了**一个** query，就是新 token 自己的 $q_t$；key 和 value 却要用到 $k_1 \dots k_t$、$v_1 \dots v_t$ 全部。
#
# - **旧的 Q 用不上了。** $q_j$ 只在算位置 $j$ 的输出时出现过一次。因果掩码保证前面的位置看不到后面的 token，
#   所以它们的输出在之后每一步都一模一样，不用重算，它们的 query 也就没人再要。
# - **旧的 K、V 每一步都要。** 每个新 token 都要拿自己的 query 去和所有旧 key 比，再把所有旧 value 加权取回。
#   而旧 token 的 $k_j$、$v_j$ 只取决于它自己（和它前面的 token），算一次就够。
#
# 所以生成时把每一层的 K、V 存起来，这就是 **KV cache**；每一步只为新 token 算一次 $q$、$k$、$v$，把 $k$、$v$ 接到缓存后面，
# 用 $q$ 和缓存里的全部 K、V 做一次注意力。
#
# 用几行代码验证这两点：

# %%
torch.manual_seed(0)
q, k, v = torch.randn(3, 1, 1, 6, 8).unbind(0)  # one sentence, one head, 6 positions, D = 8
full, _ = attention(q, k, v, causal_mask(6))

newest, _ = attention(q[..., -1:, :], k, v)  # only the newest query, against every key
print("只用最新的 query，结果和整句算的最后一行一样：", torch.allclose(newest[..., 0, :], full[..., -1, :]))

other_queries = q.clone()
other_queries[..., :-1, :] = torch.randn(5, 8)  # replace every old query
changed, _ = attention(other_queries, k, v, causal_mask(6))
print("换掉所有旧的 query，最后一个位置的输出不变：", torch.allclose(changed[..., -1, :], full[..., -1, :]))

first_five, _ = attention(q[..., :5, :], k[..., :5, :], v[..., :5, :], causal_mask(5))
print("多来一个 token，前五个位置的输出不变：    ", torch.allclose(first_five, full[..., :5, :]))

# %% [markdown]
# ## 2. 练习 1：`KVCache`
#
# 难度：🔴🔴⚪⚪⚪ · 约 10 分钟
#
# 一层注意力的缓存。约定：
#
# - `KVCache()` 创建一个空缓存，`len(cache)` 是 0；
# - `cache.update(k, v)`：`k`、`v` 的形状是 `[B, Hkv, T_new, D]`（新来的 $T_{new}$ 个位置），把它们**沿序列维**（`dim=2`）
#   接到缓存的后面，然后返回缓存里**全部**的 `(k, v)`，形状 `[B, Hkv, T_cached, D]`；
# - `len(cache)`：缓存里有多少个位置（序列维的长度）。
#
# 一次 `update` 可以放进好几个位置：生成开始时整段提示词一次算完（prefill），之后每步放进 1 个。
#
# > **别的代码里的缓存布局。** MiniMind 把缓存存成 `[B, T, Hkv, D]`（序列维在头的前面）：它在 `view` 成
# > `[B, T, Hkv, D]` 之后、`transpose` 之前就接缓存，所以沿 `dim=1` 拼接，取出来以后再 `transpose(1, 2)` 去算注意力，
# > 它的 `repeat_kv` 也相应地在 `dim=2` 上复制头。本课程和 Hugging Face 的 `DynamicCache` 一样存 `[B, Hkv, T, D]`，
# > 在 `transpose` 之后接缓存，沿 `dim=2` 拼接，取出来直接就是注意力要的形状。两种都对，因为拼接只让**序列那一维**变长，
# > 每个位置、每个头的向量原样不动；要紧的只有一件事：拼接的那一维必须是序列维，而读缓存的代码和写缓存的代码对布局的理解一致。
# > 从一种代码搬到另一种时，改的就是拼接的 `dim` 和 `transpose` 放在缓存前还是缓存后。
#
# <details><summary>提示</summary>
#
# 缓存一开始是空的。先想好怎样表示"还没有东西"，以及第一次 `update` 和之后的 `update` 有什么不同。
# 把两个张量沿某一维首尾相接，用 `torch.cat`；接在哪一维，看上面的约定。`len(...)` 调用的是类的 `__len__` 方法，
# 空缓存也要能回答。
#
# </details>

# %% tags=["solution:KVCache"]
class KVCache:
    """Keys and values of every position seen so far, [B, Hkv, T_cached, D] each, for one layer."""

    def __init__(self):
        ### BEGIN SOLUTION
        self.keys = None
        self.values = None
        ### END SOLUTION

    def update(self, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Append k, v [B, Hkv, T_new, D] along the sequence dim; return all cached (k, v)."""
        ### BEGIN SOLUTION
        if self.keys is not None:
            k = torch.cat([self.keys, k], dim=2)
            v = torch.cat([self.values, v], dim=2)
        self.keys, self.values = k, v
        return k, v
        ### END SOLUTION

    def __len__(self) -> int:
        """The number of cached positions."""
        ### BEGIN SOLUTION
        return 0 if self.keys is None else self.keys.shape[2]
        ### END SOLUTION


# %% tags=["tests:KVCache"]
from course.checking import check
check("KVCache")

### BEGIN HIDDEN TESTS
from autograder.instructor.hidden_cells import grade
grade("KVCache")
### END HIDDEN TESTS

# %% [markdown]
# ## 3. 让 query 头共享 K、V：MHA、GQA、MQA
#
# 作业 02 的多头注意力（MHA）里，每个 query 头都有自己的 K、V 头。缓存要为**每个 KV 头**存一份，头越多，缓存越大。
# 但 query 头多是有用的（多个视角），K、V 头多却未必那么必要。于是有了两种省法：
#
# ```
# MHA  H = 8, Hkv = 8   q0  q1  q2  q3  q4  q5  q6  q7      每个 query 头有自己的 K/V
#                        k0  k1  k2  k3  k4  k5  k6  k7
#
# GQA  H = 8, Hkv = 2   q0  q1  q2  q3 | q4  q5  q6  q7     每 4 个 query 头一组，组内共用一份 K/V
#                        ------k0------ | ------k1------
#
# MQA  H = 8, Hkv = 1   q0  q1  q2  q3  q4  q5  q6  q7      所有 query 头共用一份 K/V
#                        --------------k0--------------
# ```
#
# | | MHA | GQA | MQA |
# |---|---|---|---|
# | KV 头数 $H_{kv}$ | $H$ | $1 < H_{kv} < H$ | 1 |
# | 每组 query 头数 $H / H_{kv}$ | 1 | 介于两者之间 | $H$ |
# | 每层每个 token 缓存的数 $2 H_{kv} D$ | 最多 | 居中 | 最少 |
# | 效果 | 最好 | 接近 MHA | 有时明显变差 |
# | 例子 | GPT-2、BERT | Llama 2 70B、Llama 3 各尺寸、Qwen3.5 的全注意力层 | PaLM |
#
# MQA（Shazeer，2019）一步到位，但把 K、V 压得太狠，有的任务上质量会掉；GQA（Ainslie 等，2023）是折中，
# 近两年发布的开源大模型多数用它。同一个模型家族里也可能两种都有：Llama 1 和 Llama 2 的 7B、13B 都是普通的 MHA，
# Llama 2 公开的尺寸里只有 70B 用了 GQA，到 Llama 3 才是各个尺寸都用 GQA。所以说某个模型"用 GQA"时，最好连版本和尺寸一起说。
# Qwen3.5-0.8B 的全注意力层用 8 个 query 头配 2 个 KV 头：每 4 个 query 头共用一组 K、V。
#
# 共享也有代价：同组的 query 头只能从同一份 K、V 里取信息，自由度比 MHA 小。换来的是缓存小了 $H / H_{kv}$ 倍，
# 读写缓存的显存带宽也省了同样的倍数，生成长文本时这往往才是瓶颈。顺带 `k_proj`、`v_proj` 也变小了：
# 它们只输出 $H_{kv} \cdot D$ 维。
#
# ### 计算时怎样对齐：`repeat_kv`
#
# 算注意力时，每个 query 头仍然需要一份和它配对的 K、V。`repeat_kv` 把 `[B, Hkv, T, D]` 的每个 KV 头复制
# $n_{rep} = H / H_{kv}$ 份，得到 `[B, H, T, D]`，让 query 头 $h$ 拿到 KV 头 $\lfloor h / n_{rep} \rfloor$。
# 它只是把同一份 K、V 复制给同组的每个 query 头，让形状对上，没有产生任何新东西。**缓存里存的仍然是 $H_{kv}$ 个头**，
# `repeat_kv` 在取出缓存之后才做。
#
# 复制的**顺序**很要紧：同一个 KV 头的副本必须挨在一起（0, 0, 0, 0, 1, 1, 1, 1），这是 `repeat_interleave` 的做法；
# `repeat` 会整体重复（0, 1, 0, 1, ……），query 头就配错了 KV 头。形状完全一样，程序不会报错，只是结果错了。

# %%
kv_head_of = torch.arange(2)[None, :, None, None]  # [B=1, Hkv=2, T=1, D=1]: KV head j holds the number j
by_interleave = kv_head_of.repeat_interleave(4, dim=1).flatten()
by_repeat = kv_head_of.repeat(1, 4, 1, 1).flatten()
print("repeat_interleave：query 头 0..7 读 KV 头", by_interleave.tolist())
print("repeat           ：query 头 0..7 读 KV 头", by_repeat.tolist())

fig, axes = plt.subplots(1, 2, figsize=(7, 4))
for ax, (title, reads) in zip(axes, [("repeat_interleave（正确）", by_interleave), ("repeat（错误）", by_repeat)]):
    ax.imshow(torch.nn.functional.one_hot(reads, 2), cmap="Blues", vmin=0, vmax=1, aspect="auto")
    ax.set_xticks(range(2), labels=["KV 头 0", "KV 头 1"])
    ax.set_yticks(range(8), labels=[f"query 头 {h}" for h in range(8)])
    ax.set_title(title)
fig.suptitle("8 个 query 头、2 个 KV 头：每个 query 头读哪个 KV 头")
fig.tight_layout()
plt.show()

# %% [markdown]
# 左图是训练时的分组：头 0–3 读 KV 头 0，头 4–7 读 KV 头 1。真实模型的权重就是按这个分组训练出来的，
# 用 `repeat` 去跑，头 1 会读到本该给头 4–7 的 K、V。

# %% [markdown]
# ### 练习 2：`repeat_kv(x, n_rep)`
#
# 难度：🔴🔴⚪⚪⚪ · 约 10 分钟
#
# 输入 `[B, Hkv, T, D]`，返回 `[B, Hkv·n_rep, T, D]`，输出的第 $h$ 个头等于输入的第 $\lfloor h / n_{rep} \rfloor$ 个头。
# `n_rep = 1` 时（MHA）原样返回即可。
#
# <details><summary>提示</summary>
#
# 上面的演示已经告诉你该用哪一种复制顺序，PyTorch 里有一个按这种顺序复制的方法；别忘了指定在哪一维上复制。
# 想更省内存的话，也可以不真的复制：先插入一个长度为 1 的新维，用 `expand` 把它"看成" $n_{rep}$ 份，
# 再把这一维和头那一维合并。新维插在哪里，决定了副本是挨在一起还是整体重复。
#
# </details>

# %% tags=["solution:repeat_kv"]
def repeat_kv(x: torch.Tensor, n_rep: int) -> torch.Tensor:
    """[B, Hkv, T, D] -> [B, Hkv*n_rep, T, D]: query head h reads KV head h // n_rep."""
    ### BEGIN SOLUTION
    if n_rep == 1:
        return x
    batch, kv_heads, seq, dim = x.shape
    copies = x[:, :, None].expand(batch, kv_heads, n_rep, seq, dim)  # a view: no memory copied yet
    return copies.reshape(batch, kv_heads * n_rep, seq, dim)
    ### END SOLUTION


# %% tags=["tests:repeat_kv"]
from course.checking import check
check("repeat_kv")

### BEGIN HIDDEN TESTS
from autograder.instructor.hidden_cells import grade
grade("repeat_kv")
### END HIDDEN TESTS

# %% [markdown]
# ## 4. 练习 3：`GroupedQueryAttention(hidden_size, num_heads, num_kv_heads, head_dim=None)`
#
# 难度：🔴🔴🔴🔴⚪ · 约 25 分钟
#
# 一个模块覆盖三种注意力：`num_kv_heads == num_heads` 是 MHA，`num_kv_heads == 1` 是 MQA，介于两者之间是 GQA。
# 它是解码器里的自注意力，**总是**加因果掩码。
#
# **`__init__`**：`head_dim` 不给时取 `hidden_size // num_heads`（给出时可以和它不同，Qwen3.5-0.8B 就是 hidden 1024、
# 8 个头 × 256 维）。四个 `bias=False` 的线性层：
#
# | 名字 | 输入 → 输出 |
# |---|---|
# | `q_proj` | `hidden_size` → `num_heads * head_dim` |
# | `k_proj`、`v_proj` | `hidden_size` → `num_kv_heads * head_dim` |
# | `o_proj` | `num_heads * head_dim` → `hidden_size` |
#
# **`forward(x, attention_mask=None, cache=None)`**，返回 `(out, cache)`：
#
# 1. `x` 是**新来的** $T$ 个位置 `[B, T, hidden]`。投影后用 `split_heads` 拆头：q 拆成 `num_heads` 个，k、v 拆成 `num_kv_heads` 个。
# 2. 有缓存时，把新的 k、v 交给缓存，之后改用缓存返回的**全部** k、v，长度记作 $k_{len}$；没有缓存时 $k_{len} = T$。
#    **先进缓存，再 `repeat_kv`**：缓存里只存 $H_{kv}$ 个头，省显存靠的就是这个。
# 3. 掩码：新来的 $T$ 个 query 排在 $k_{len}$ 个位置的最后，第 $i$ 个在位置 $k_{len} - T + i$。
#    作业 01 的 `causal_mask` 正是为这种情况准备了第二个参数；只按 $T$ 造一个从左上角开始的下三角是错的。
#    `attention_mask` 不是 `None` 时，它的形状是 `[B, k_len]`（覆盖缓存和新位置），用 `padding_mask` 转换后和因果掩码合并。
# 4. `repeat_kv` 把 k、v 展开到 `num_heads` 个头，`attention`，`merge_heads`，`o_proj`。
# 5. 返回 `(out, cache)`：`cache` 就是传进来的那个对象（没有传就是 `None`）。
#
# 调用方式：
#
# ```python
# out, _ = attn(x)                                  # whole sequence, no cache
# cache = KVCache()
# out, cache = attn(prompt, cache=cache)            # prefill: the prompt's K/V go into the cache
# out, cache = attn(next_token, cache=cache)        # one generated token, [B, 1, hidden]
# ```
#
# <details><summary>提示</summary>
#
# 先不管缓存，写出 `cache=None` 时的版本，让检查单元的前几条通过；再加缓存。缓存返回的 k、v 比新来的长，
# $k_{len}$ 要从它们的形状里读，不能用 $T$。每一步都可以打印形状对照上面的第 1–4 步：q 是 `[B, H, T, D]`，
# 缓存返回的 k、v 是 `[B, Hkv, k_len, D]`，`repeat_kv` 之后是 `[B, H, k_len, D]`，掩码能广播到 `[B, H, T, k_len]`。
#
# </details>

# %% tags=["solution:GroupedQueryAttention"]
class GroupedQueryAttention(nn.Module):
    """Causal self-attention in which groups of query heads share key/value heads (MHA, GQA or MQA)."""

    def __init__(self, hidden_size: int, num_heads: int, num_kv_heads: int, head_dim: int | None = None):
        super().__init__()
        ### BEGIN SOLUTION
        self.num_heads = num_heads
        self.num_kv_heads = num_kv_heads
        self.head_dim = hidden_size // num_heads if head_dim is None else head_dim
        self.q_proj = nn.Linear(hidden_size, num_heads * self.head_dim, bias=False)
        self.k_proj = nn.Linear(hidden_size, num_kv_heads * self.head_dim, bias=False)
        self.v_proj = nn.Linear(hidden_size, num_kv_heads * self.head_dim, bias=False)
        self.o_proj = nn.Linear(num_heads * self.head_dim, hidden_size, bias=False)
        ### END SOLUTION

    def forward(self, x: torch.Tensor, attention_mask: torch.Tensor | None = None,
                cache: KVCache | None = None) -> tuple[torch.Tensor, KVCache | None]:
        """x: [B, T, hidden], the new positions; attention_mask: [B, k_len] of 0/1 over cached and new positions.

        Returns (out [B, T, hidden], cache), the cache now holding the new keys and values too.
        """
        ### BEGIN SOLUTION
        new = x.shape[1]
        q = split_heads(self.q_proj(x), self.num_heads)     # [B, H, T, D]
        k = split_heads(self.k_proj(x), self.num_kv_heads)  # [B, Hkv, T, D]
        v = split_heads(self.v_proj(x), self.num_kv_heads)
        if cache is not None:
            k, v = cache.update(k, v)                       # [B, Hkv, k_len, D]: cache before repeat_kv
        k_len = k.shape[2]
        mask = causal_mask(new, k_len)                      # the new queries are the last positions
        if attention_mask is not None:
            mask = mask & padding_mask(attention_mask)
        group = self.num_heads // self.num_kv_heads
        out, _ = attention(q, repeat_kv(k, group), repeat_kv(v, group), mask)
        return self.o_proj(merge_heads(out)), cache
        ### END SOLUTION


# %% tags=["tests:GroupedQueryAttention"]
from course.checking import check
check("GroupedQueryAttention")

### BEGIN HIDDEN TESTS
from autograder.instructor.hidden_cells import grade
grade("GroupedQueryAttention")
### END HIDDEN TESTS

# %% [markdown]
# ## 5. 逐个 token 解码 = 整句一次算
#
# 检查单元已经验证过一次，这里把它做成生成时的样子：一个 batch 里两句话，第二句短，左侧补 3 个 pad；
# 先把前 4 个位置作为提示词一次放进缓存（prefill），再一个 token 一个 token 地往后走，`attention_mask` 随之变长。
# 每一步的输出都和整句一次算出的那一行比较。

# %%
torch.manual_seed(0)
gqa = GroupedQueryAttention(64, 8, 2)
tokens = torch.randn(2, 10, 64)
mask_full = torch.tensor([[1] * 10, [0] * 3 + [1] * 7])
whole, _ = gqa(tokens, attention_mask=mask_full)

cache = KVCache()
prefill, cache = gqa(tokens[:, :4], attention_mask=mask_full[:, :4], cache=cache)
print(f"prefill 4 个位置：最大差 {(prefill - whole[:, :4]).abs().max():.1e}，len(cache) = {len(cache)}")
for t in range(4, 10):
    step, cache = gqa(tokens[:, t:t + 1], attention_mask=mask_full[:, :t + 1], cache=cache)
    print(f"位置 {t}：最大差 {(step[:, 0] - whole[:, t]).abs().max():.1e}，len(cache) = {len(cache)}")

# %% [markdown]
# 差别在 $10^{-7}$ 左右，这是 float32 的舍入误差：两种算法在数学上完全相同，只是矩阵乘法里加法的分组不同。
# 换成 float64，差别就降到 $10^{-16}$ 量级：

# %%
gqa64 = gqa.double()
whole64, _ = gqa64(tokens.double(), attention_mask=mask_full)
cache = KVCache()
pieces = [gqa64(tokens[:, :4].double(), attention_mask=mask_full[:, :4], cache=cache)[0]]
for t in range(4, 10):
    pieces.append(gqa64(tokens[:, t:t + 1].double(), attention_mask=mask_full[:, :t + 1], cache=cache)[0])
print(f"float64：最大差 {(torch.cat(pieces, dim=1) - whole64).abs().max():.1e}")

# %% [markdown]
# 这个等式正是 KV cache 敢用的理由：它不是近似，而是同一个计算换一种顺序来做。它也依赖两个细节：
# 因果掩码按绝对位置偏移（新 query 在序列最后），以及 `attention_mask` 覆盖缓存里的位置（左侧的 pad 一直被遮住）。

# %% [markdown]
# ## 6. KV cache 有多大
#
# 每一层、每个位置、每个 KV 头都要存一个 key 向量和一个 value 向量，各 $D$ 个数。batch 里 $B$ 条序列、每条 $T$ 个位置、
# $N_{\text{layer}}$ 层：
#
# $$
# \text{bytes} = 2 \times B \times T \times N_{\text{layer}} \times H_{kv} \times D \times \text{bytes\_per\_elem}
# $$
#
# 前面的 2 是 K 和 V 两份；`bytes_per_elem` 是每个数占的字节数（float32 是 4，bf16 是 2）。
#
# ### 练习 4：`kv_cache_bytes(batch, seq_len, num_layers, num_kv_heads, head_dim, bytes_per_elem)`
#
# 难度：🔴⚪⚪⚪⚪ · 约 5 分钟
#
# 按上式返回一个 Python `int`（`seq_len` 是 $T$，`num_layers` 是 $N_{\text{layer}}$）。
#
# <details><summary>提示</summary>
#
# 字节数是整数：全用整数相乘，不要用 `/`，也不要写成 `2.0` 这样的浮点数，否则返回的是 `float`。
#
# </details>

# %% tags=["solution:kv_cache_bytes"]
def kv_cache_bytes(batch: int, seq_len: int, num_layers: int, num_kv_heads: int, head_dim: int,
                   bytes_per_elem: int) -> int:
    """Bytes of a KV cache: one key and one value vector per position, KV head and layer."""
    ### BEGIN SOLUTION
    numbers = 2 * batch * seq_len * num_layers * num_kv_heads * head_dim  # K and V
    return numbers * bytes_per_elem
    ### END SOLUTION


# %% tags=["tests:kv_cache_bytes"]
from course.checking import check
check("kv_cache_bytes")

### BEGIN HIDDEN TESTS
from autograder.instructor.hidden_cells import grade
grade("kv_cache_bytes")
### END HIDDEN TESTS

# %% [markdown]
# ### 先算一个小例子
#
# 一篇讲 MHA/MQA/GQA/MLA 的教程用过这样一个模型：$d = 256$、8 个头、每头 $D = 32$。
# 一层、一个 token 要缓存多少个数（`bytes_per_elem = 1` 就是按个数算）？

# %%
for name, kv_heads in [("MHA", 8), ("GQA", 2), ("MQA", 1)]:
    print(f"{name}（{kv_heads} 个 KV 头）：{kv_cache_bytes(1, 1, 1, kv_heads, 32, 1):>4} 个数 / token / 层")

# %% [markdown]
# MHA 要存 $8 \times 32 \times 2 = 512$ 个数，MQA 只要 $1 \times 32 \times 2 = 64$ 个，只有 MHA 的 1/8；两个 KV 头的 GQA 在中间，128 个。
#
# ### Qwen3.5-0.8B 的账
#
# Qwen3.5-0.8B 有 24 层，但只有每 4 层里的 1 层（第 3、7、11、15、19、23 层）是全注意力；另外 18 层是线性注意力，
# 它们只保留一个大小固定的状态，不会随上下文变长，所以不算在 KV cache 里。全注意力层有 8 个 query 头、2 个 KV 头，
# head_dim 256，权重和缓存都是 bf16（2 字节）：
#
# - 一层、一个 token：$2 \times 2 \times 256 = 1{,}024$ 个数；要是 8 个 KV 头（MHA），就是 $4{,}096$ 个；
# - 整个模型、一个 token：$1{,}024 \times 6 \text{ 层} \times 2 \text{ 字节} = 12{,}288$ 字节 = 12 KiB。
#
# 这些尺寸都从模型的 `config.json` 里读（`load_config()` 读课程附带的那份，机器上有真的 Qwen3.5-0.8B 时读它的）。
# 下面用你的 `kv_cache_bytes` 把三种做法放在同一个模型尺寸下比较（batch = 1）：

# %%
config = load_config()  # Qwen3.5-0.8B's config.json
qwen_layers = len(config.full_attention_layers)  # only these layers keep a KV cache
qwen_heads, qwen_kv_heads, qwen_head_dim = config.num_attention_heads, config.num_key_value_heads, config.head_dim
bf16_bytes = torch.bfloat16.itemsize
print(f"全注意力层 {config.full_attention_layers}：{qwen_heads} 个 query 头，{qwen_kv_heads} 个 KV 头，"
      f"head_dim {qwen_head_dim}，hidden {config.hidden_size}，{config.dtype}（每个数 {bf16_bytes} 字节）")

variants = {f"MHA（{qwen_heads} 个 KV 头）": qwen_heads, f"GQA（{qwen_kv_heads} 个 KV 头，Qwen3.5 的做法）": qwen_kv_heads,
            "MQA（1 个 KV 头）": 1}
MIB = 1024**2

for name, kv_heads in variants.items():
    per_layer = kv_cache_bytes(1, 1, 1, kv_heads, qwen_head_dim, 1)
    per_token = kv_cache_bytes(1, 1, qwen_layers, kv_heads, qwen_head_dim, bf16_bytes)
    at_32k, at_256k = (kv_cache_bytes(1, n, qwen_layers, kv_heads, qwen_head_dim, bf16_bytes) / MIB
                       for n in (32 * 1024, 256 * 1024))
    print(f"{name}\n    每层每个 token {per_layer:,} 个数；每个 token {per_token:,} 字节（{per_token / 1024:g} KiB）；"
          f"32K token {at_32k:,.0f} MiB；256K token {at_256k:,.0f} MiB")

# %%
context = [2**n for n in range(10, 19)]  # 1K ... 256K tokens
fig, ax = plt.subplots(figsize=(8, 5))
for name, kv_heads in variants.items():
    sizes = [kv_cache_bytes(1, n, qwen_layers, kv_heads, qwen_head_dim, bf16_bytes) / MIB for n in context]
    ax.plot(context, sizes, marker="o", label=name)
ax.set_xscale("log", base=2)
ax.set_yscale("log", base=2)
ax.set_xticks(context, labels=[f"{n // 1024}K" for n in context])
size_ticks = [16, 64, 256, 1024, 4096, 16384]  # MiB
ax.set_yticks(size_ticks, labels=[f"{mib} MiB" if mib < 1024 else f"{mib // 1024} GiB" for mib in size_ticks])
ax.set_xlabel("上下文长度（token）")
ax.set_ylabel("KV cache 的大小（对数坐标）")
ax.set_title(f"Qwen3.5-0.8B 的尺寸（{qwen_layers} 个全注意力层，head_dim {qwen_head_dim}，bf16，batch 1）")
ax.grid(True, which="both", alpha=0.3)
ax.legend()
plt.show()

# %% [markdown]
# 三条线都是直线：缓存和上下文长度成正比，每翻一倍就多一倍。线和线之间的距离是固定的倍数：GQA 只有 MHA 的 1/4
# （$2 / 8$），MQA 再少一半。256K 个 token 时，MHA 要 12 GiB，GQA 要 3 GiB——对一个只有 0.8B 参数
# （bf16 下约 1.6 GB）的模型，缓存比模型本身还大。batch 里有几条序列，还要再乘几倍。这就是为什么新模型大多要想办法压缩
# KV cache：多数用 GQA，DeepSeek-V2、V3 用作业 04 要讲的 MLA；Qwen3.5 在 GQA 之外更进一步，让 24 层里只有 6 层需要 KV cache。
#
# ### 滑动窗口：一层只留最后 $w$ 个位置
#
# 还有一种省法是让一部分层只看最近的 token。**滑动窗口注意力**（sliding-window attention）里，每个 query 只看离它最近的
# $w$ 个位置（包括它自己）。更早的 K、V 这一层再也用不上，可以从缓存里扔掉，所以这一层的缓存最多只有 $w$ 个位置，
# 上下文再长也不会变大。代价是这一层看不到更远的 token，所以模型一般把它和普通的全局注意力层搭配着用：Gemma 3
# 每 5 个窗口为 1024 的局部层配 1 个全局层。
#
# 拿 Qwen3.5 的 6 个全注意力层算一笔账：假如把它们换成 Gemma 3 那样的 5 个局部层加 1 个全局层（只是算账，Qwen3.5
# 并没有这样做），缓存有多大？局部层按 $\min(T, w)$ 个位置算，全局层按 $T$ 个：

# %%
local_per_global, window = 5, 1024  # Gemma 3's pattern and window
global_layers = qwen_layers // (local_per_global + 1)
local_layers = qwen_layers - global_layers
for n in (4 * 1024, 32 * 1024, 256 * 1024):
    all_global = kv_cache_bytes(1, n, qwen_layers, qwen_kv_heads, qwen_head_dim, bf16_bytes)
    mixed = (kv_cache_bytes(1, n, global_layers, qwen_kv_heads, qwen_head_dim, bf16_bytes)
             + kv_cache_bytes(1, min(n, window), local_layers, qwen_kv_heads, qwen_head_dim, bf16_bytes))
    print(f"{n // 1024:>3}K token：{qwen_layers} 层全局 {all_global / MIB:6,.0f} MiB；"
          f"{local_layers} 层窗口 {window} + {global_layers} 层全局 {mixed / MIB:4,.0f} MiB（{mixed / all_global:.0%}）")

# %% [markdown]
# 上下文越长，局部层那部分就越无足轻重：256K 时只剩原来的 17%，再长下去逼近 1/6，也就是只剩全局层的那一份。
# 实现上，局部层的缓存常做成一个长度为 $w$ 的环形缓冲区，新位置覆盖最旧的位置。

# %% [markdown]
# ## 7. 算一算：一层注意力要多少次浮点运算
#
# 上一节数的是字节，这一节数运算。单位是 FLOP（一次浮点加法或乘法）。矩阵乘法 $[m, n] \times [n, p]$ 的每个输出要做
# $n$ 次乘加，一共 $m n p$ 次乘加；一次乘加是一次乘法加一次加法，所以记作 $2mnp$ 个 FLOP。
#
# 一层注意力处理 $q_{len}$ 个**新** token，它们要看 $k_{len}$ 个位置（缓存里的加上新来的，$k_{len} \ge q_{len}$）。
# 把其中的矩阵乘法一项项数出来：
#
# | 步骤 | 每条序列的矩阵乘法 | FLOPs |
# |---|---|---|
# | `q_proj` | $[q_{len}, d] \times [d, H D]$ | $2B\, q_{len}\, d\, H D$ |
# | `k_proj`、`v_proj` | 各一个 $[q_{len}, d] \times [d, H_{kv} D]$ | $2 \times 2B\, q_{len}\, d\, H_{kv} D$ |
# | $Q K^\top$ | 每个头 $[q_{len}, D] \times [D, k_{len}]$ | $2BH\, q_{len}\, k_{len}\, D$ |
# | 权重 · $V$ | 每个头 $[q_{len}, k_{len}] \times [k_{len}, D]$ | $2BH\, q_{len}\, k_{len}\, D$ |
# | `o_proj` | $[q_{len}, H D] \times [H D, d]$ | $2B\, q_{len}\, H D\, d$ |
#
# 合起来：
#
# $$
# \text{FLOPs} = \underbrace{2B\, q_{len}\, d D\,(2H + 2H_{kv})}_{\text{四个投影}}
# + \underbrace{4BH\, q_{len}\, k_{len}\, D}_{Q K^\top\ \text{和}\ \text{权重} \cdot V}
# $$
#
# 几点说明：
#
# - 投影只对新来的 $q_{len}$ 个 token 做：缓存里的位置在它们刚来的那一步就投影过了，K、V 就存在缓存里。
# - $Q K^\top$ 和权重 · $V$ 按 $H$ 个 query 头算：`repeat_kv` 之后，每个 query 头都要和自己那份 K、V 算一遍。
#   GQA 省下的是 `k_proj`、`v_proj` 和缓存，不是这两项。
# - softmax、掩码、除以 $\sqrt D$ 不算：它们每个分数只有几次运算，而两次矩阵乘法每个分数要 $4D$ 次。
# - 分数表按整张 $q_{len} \times k_{len}$ 算，也包括被因果掩码遮住的那一半：普通的实现确实先算出来再遮掉。
#   FlashAttention 一类的实现会跳过整块都被遮住的部分，能省下 prefill 时 $T^2$ 项的将近一半。
#
# ### 练习 5：`attention_flops(batch, q_len, k_len, hidden_size, num_heads, num_kv_heads, head_dim)`
#
# 难度：🔴🔴⚪⚪⚪ · 约 10 分钟
#
# 按上式返回一个 Python `int`。FLOPs 很快就大得惊人：超过 $2^{53}$ 以后，float 已经不能精确表示每一个整数，所以只能用整数算。
#
# <details><summary>提示</summary>
#
# 照着上表一项一项写，每项写成"一条序列的乘加次数"，最后统一乘 $2B$。数投影时想清楚：过投影的是哪些 token？
# `k_proj`、`v_proj` 输出几个头？数分数表时想清楚：新 query 要和多少个 key 比？只用整数的 `*` 和 `+`，
# 不要 `/`，也不要 `2.0`、`math.pow` 这些会变成 float 的写法。
#
# </details>

# %% tags=["solution:attention_flops"]
def attention_flops(batch: int, q_len: int, k_len: int, hidden_size: int, num_heads: int, num_kv_heads: int,
                    head_dim: int) -> int:
    """FLOPs of one attention layer on q_len new tokens attending to k_len positions, 2 per multiply-add."""
    ### BEGIN SOLUTION
    projections = q_len * hidden_size * head_dim * (2 * num_heads + 2 * num_kv_heads)  # q, o; k, v
    scores_and_sum = 2 * num_heads * q_len * k_len * head_dim  # Q·Kᵀ and weights·V, per head
    return 2 * batch * (projections + scores_and_sum)
    ### END SOLUTION


# %% tags=["tests:attention_flops"]
from course.checking import check
check("attention_flops")

### BEGIN HIDDEN TESTS
from autograder.instructor.hidden_cells import grade
grade("attention_flops")
### END HIDDEN TESTS

# %% [markdown]
# ### 投影和 $T^2$ 项，谁更大
#
# 看每个新 token 的份额：四个投影是 $2dD(2H + 2H_{kv})$，和上下文无关；分数和加权是 $4H\, k_{len} D$，随上下文变长。
# 两者相等时 $k_{len} = d\,(H + H_{kv}) / H$。prefill 整段提示词时 $q_{len} = k_{len} = T$，后一项就是 $4BHT^2D$，
# 这就是常说的"注意力是 $T^2$ 的"。
#
# 下图用 Qwen3.5-0.8B 全注意力层的尺寸（从上面的 `config` 读），画 prefill 时 $T^2$ 项占这一层 FLOPs 的比例。
# Qwen3.5 的 `q_proj` 还多输出一份门（作业 05），这里按普通的 GQA 层算，不计门。
# 取 $T^2$ 项用了一个小办法：`attention_flops` 对 $k_{len}$ 是线性的，$k_{len}$ 从 $T$ 变成 $2T$，多出来的正好是一份 $T^2$ 项。

# %%
qwen = dict(hidden_size=config.hidden_size, num_heads=qwen_heads, num_kv_heads=qwen_kv_heads, head_dim=qwen_head_dim)


def quadratic_share(t: int) -> float:
    """The share of Q·Kᵀ and weights·V in one layer's FLOPs when prefilling t tokens."""
    total = attention_flops(1, t, t, **qwen)
    return (attention_flops(1, t, 2 * t, **qwen) - total) / total  # t more keys add one more copy of the T² terms


balance = config.hidden_size * (qwen_heads + qwen_kv_heads) // qwen_heads
prompt_lengths = [2**n for n in range(7, 19)]  # 128 ... 256K tokens
shares = [quadratic_share(t) for t in prompt_lengths]
print(f"T = d·(H + H_kv) / H = {balance:,} 时两者相等：T² 项占 {quadratic_share(balance):.0%}")
for t in (4 * 1024, 32 * 1024, 256 * 1024):
    print(f"T = {t // 1024:>3}K：T² 项占 {quadratic_share(t):.1%}")

fig, ax = plt.subplots(figsize=(8, 4.5))
ax.plot(prompt_lengths, [100 * s for s in shares], marker="o")
ax.axvline(balance, color="gray", linestyle="--", linewidth=1)
ax.text(balance * 1.1, 10, f"T = {balance:,}：各占一半", color="gray")
ax.set_xscale("log", base=2)
ax.set_xticks(prompt_lengths, labels=[f"{t // 1024}K" if t >= 1024 else str(t) for t in prompt_lengths])
ax.set_ylim(0, 100)
ax.set_xlabel("prefill 的长度 T（token）")
ax.set_ylabel("Q·Kᵀ 和权重·V 占的比例（%）")
ax.set_title(f"Qwen3.5-0.8B 一个全注意力层（hidden {config.hidden_size}，{qwen_heads} 个 query 头，"
             f"{qwen_kv_heads} 个 KV 头，head_dim {qwen_head_dim}）")
ax.grid(True, which="both", alpha=0.3)
plt.show()

# %% [markdown]
# 短的提示词里，注意力层的运算大多花在四个投影上；$T$ 过了 1,280，$T^2$ 项就占了多数，4K 时约 76%，32K 时超过 96%。
# 这说的只是注意力层本身：整个模型里还有 MLP，它每个 token 的运算也和上下文无关，所以放到整个模型上，
# $T^2$ 项要到更长的上下文才占多数。长上下文时要对付的正是这一项：FlashAttention 不改变它的数量级，但让它少读写显存，
# 上面的滑动窗口把 $k_{len}$ 限制在 $w$ 以内，Qwen3.5 的 18 个线性注意力层干脆没有它。
#
# ### prefill 和 decode
#
# 生成分两个阶段。**prefill**：整段提示词一次送进去，$q_{len} = k_{len} = T$。**decode**：之后每步只送 1 个新 token，
# 它要看缓存里的全部位置加上它自己，$q_{len} = 1$，$k_{len}$ 是到它为止的长度。拿 Qwen3.5 的一层比一比，decode 的那一步
# 取 $k_{len} = T$，和 prefill 的最后一个 token 看到的一样多：

# %%
prompt = 4096
prefill_flops = attention_flops(1, prompt, prompt, **qwen)
decode_flops = attention_flops(1, 1, prompt, **qwen)
print(f"prefill {prompt:,} 个 token：{prefill_flops / 1e9:.1f} GFLOP，平均每个 token {prefill_flops / prompt / 1e6:.2f} MFLOP")
print(f"decode 1 个 token（k_len = {prompt:,}）：{decode_flops / 1e6:.2f} MFLOP")

# %% [markdown]
# 按这种数法，prefill 平均每个 token 的 FLOPs 和 decode 一个 token 的一模一样：都是 $2dD(2H + 2H_{kv}) + 4H\,T D$。
# 可是在 GPU 上，prefill 几千个 token 只要一次前向，decode 却要一个 token 一次前向，每个 token 慢得多。差别不在运算，在搬数据。
#
# ### 为什么 decode 卡在显存带宽上
#
# GPU 每算一步，都要把用到的权重和 KV cache 从显存读进计算单元。一个计算每读 1 个字节能做多少次 FLOP，叫它的
# **算术强度**（arithmetic intensity）。GPU 也有这样一个比值：每秒能做的 FLOP 除以每秒能读的字节。
# 按英伟达公布的 H100 SXM 规格，bf16 稠密矩阵乘法约 989 TFLOP/s，显存带宽约 3.35 TB/s。
# 算术强度低于这个比值的计算，算得再快也得等数据（受限于显存带宽，memory-bound）；高于它的，才是在等运算（compute-bound）。
#
# decode 一步、一层要读的字节：这一层全部的权重（每步都要读一遍），加上这一层全部的 KV cache（用上一节的 `kv_cache_bytes`）。
# prefill 也读一遍权重、写一遍缓存，但这些字节分摊给了 $T$ 个 token：

# %%
h100_flops_per_s, h100_bytes_per_s = 989e12, 3.35e12  # NVIDIA's H100 SXM figures: dense bf16, HBM3 bandwidth
machine = h100_flops_per_s / h100_bytes_per_s
layer_params = sum(p.numel() for p in GroupedQueryAttention(**qwen).parameters())
weight_bytes = layer_params * bf16_bytes


def intensity(batch: int, q_len: int, k_len: int) -> float:
    """FLOPs per byte read: the layer's weights once, the batch's cache of k_len positions once."""
    read = weight_bytes + kv_cache_bytes(batch, k_len, 1, qwen_kv_heads, qwen_head_dim, bf16_bytes)
    return attention_flops(batch, q_len, k_len, **qwen) / read


print(f"H100 SXM：每读 1 字节能做 {machine:.0f} 次 FLOP")
print(f"这一层的权重：{layer_params:,} 个参数，{weight_bytes / MIB:.0f} MiB")
print(f"prefill {prompt:,} 个 token：{intensity(1, prompt, prompt):,.0f} FLOP / 字节")
for batch in (1, 8, 64, 512):
    print(f"decode，batch {batch:>3}，L = {prompt:,}：{intensity(batch, 1, prompt):.1f} FLOP / 字节")
cache_only = (attention_flops(1, 1, 2 * prompt, **qwen) - decode_flops) / kv_cache_bytes(
    1, prompt, 1, qwen_kv_heads, qwen_head_dim, bf16_bytes)  # Q·Kᵀ and weights·V per byte of cache
print(f"其中 Q·Kᵀ 和权重·V 对缓存：{cache_only:.0f} FLOP / 字节（H / H_kv = {qwen_heads // qwen_kv_heads}）")

# %% [markdown]
# prefill 每读 1 字节做近一万次 FLOP，远高于 295：GPU 忙着算。decode 在 batch 1 时只有 2 次多，差了上百倍：GPU 大部分时间在等数据，
# 这一步花多久，几乎只看要读多少字节。
#
# 加大 batch 有用，但有上限：权重读一次可以给 batch 里所有序列共用，可每条序列的 KV cache 是它自己的，读一次只服务它自己。
# 所以 batch 再大，算术强度也停在 5 左右。其中的大头是 $Q K^\top$ 和权重 · $V$ 对缓存的那部分，它和 batch 无关：
# 缓存里每个位置的一对 K、V 向量被同组的 $H / H_{kv}$ 个 query 头共用，每读 1 字节正好做 $H / H_{kv}$ 次 FLOP。
# MHA 是 1，Qwen3.5 的 GQA 是 4。
# 这是 GQA 和 MQA 的另一半好处：不只缓存小了，读进来的每个字节也多用了几次。这也解释了下一节为什么有缓存时每一步的时间
# 还会随 $L$ 慢慢变长：每一步都要把整个缓存读一遍。

# %% [markdown]
# ## 8. 量一量：有缓存和没缓存
#
# 最后实际计时。模型取 hidden 256、8 个 query 头、2 个 KV 头。对每个上下文长度 $L$，测"生成第 $L+1$ 个 token"要多久：
#
# - **没有缓存**：把 $L + 1$ 个 token 整个送进去，只用最后一个位置的输出；
# - **有缓存**：前 $L$ 个位置已经在缓存里（这一步不计时），只送进 1 个新 token。
#
# 每个长度测几次，取最快的一次（别的程序抢 CPU 只会让某一次变慢，不会让它变快）。具体的毫秒数取决于你的机器，
# 要看的是两条线的走势。

# %%
torch.manual_seed(0)
timed = GroupedQueryAttention(256, 8, 2)
lengths = [32, 64, 128, 256, 512, 1024]
text = torch.randn(1, lengths[-1] + 8, 256)


def fastest_ms(run, repeats=5):
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    return 1000 * min(times)


without_cache, with_cache = [], []
threads = torch.get_num_threads()
torch.set_num_threads(1)  # on a busy machine, waiting for a second thread adds random delays to single runs
with torch.no_grad():
    for length in lengths:
        without_cache.append(fastest_ms(lambda: timed(text[:, :length + 1])))
        cache = KVCache()
        timed(text[:, :length], cache=cache)  # prefill, not timed
        # Each timed step appends one more position; a handful more than `length` changes nothing.
        with_cache.append(fastest_ms(lambda: timed(text[:, length:length + 1], cache=cache)))
torch.set_num_threads(threads)

for length, slow, fast in zip(lengths, without_cache, with_cache):
    flops_ratio = attention_flops(1, length + 1, length + 1, 256, 8, 2, 32) / attention_flops(1, 1, length + 1, 256, 8, 2, 32)
    print(f"上下文 {length:>4} 个 token：没有缓存 {slow:8.2f} ms，有缓存 {fast:5.2f} ms；"
          f"时间之比 {slow / fast:5.1f}，FLOPs 之比 {flops_ratio:,.0f}")

fig, ax = plt.subplots(figsize=(8, 5))
ax.plot(lengths, without_cache, marker="o", label="没有缓存：每步重算整句")
ax.plot(lengths, with_cache, marker="o", label="有 KV cache：每步只算新 token")
ax.set_xscale("log", base=2)
ax.set_yscale("log")
ax.set_xticks(lengths, labels=[str(n) for n in lengths])
ax.set_xlabel("上下文长度（已有的 token 数）")
ax.set_ylabel("生成一个 token 的时间（ms，对数坐标）")
ax.set_title("一层 GQA（hidden 256，8 个 query 头，2 个 KV 头）")
ax.grid(True, which="both", alpha=0.3)
ax.legend()
plt.show()

# %% [markdown]
# 没有缓存时，每一步要为全部 $L + 1$ 个 token 重做投影（正比于 $L$），再算一张 $(L+1) \times (L+1)$ 的分数表（正比于 $L^2$），
# 上下文一长，时间就跟着往上翻。有缓存时，每一步只投影 1 个 token，分数表只有 $1 \times (L+1)$ 一行，
# 时间在这个范围里几乎是平的（它也会随 $L$ 慢慢增长：新 query 要和所有缓存的 key 比一遍，还要把缓存读一遍）。
#
# 上一节的数法说，没有缓存的一步正好是有缓存的一步的 $L + 1$ 倍 FLOPs（prefill 每个 token 和 decode 一个 token 一样多）。
# 量出来的时间之比和它对不上（看上面打印的数）。上下文短时，时间之比小得多：只算一个 token 时矩阵太小，时间主要花在读权重、
# 读缓存和每次调用的固定开销上，而不是运算上。上下文长了，时间之比却涨得比 FLOPs 之比快（看 512 到 1024 这一步：FLOPs 之比
# 翻一倍，时间之比涨得更多），在有的机器上还会反超：没有缓存的那一步还要建一张 $(L+1) \times (L+1)$ 的掩码，在整张表上做
# `masked_fill` 和 softmax，这些都不在 FLOPs 的数法里，整张表还要在内存里来回读写好几遍。FLOPs 只是时间的一部分。
#
# 生成 $N$ 个 token 的总时间，前者大约随 $N^2$ 到 $N^3$ 增长，后者大约随 $N$ 到 $N^2$。代价就是第 6 节算的那份显存：
# KV cache 是用空间换时间，GQA 和 MQA 则让这份空间小一些。

# %% [markdown]
# ## 小结
#
# | 名字 | 做什么 | 要守住的细节 |
# |---|---|---|
# | `KVCache` | 存下所有位置的 K、V | 沿序列维（`dim=2`）追加；返回全部；`len()` 数位置 |
# | `repeat_kv` | 把 $H_{kv}$ 个 KV 头展开给 $H$ 个 query 头 | `repeat_interleave`：头 $h$ 读 KV 头 $h // n_{rep}$ |
# | `GroupedQueryAttention` | MHA / GQA / MQA 一个模块 | 先缓存再 `repeat_kv`；`causal_mask(T, k_len)`；mask 覆盖缓存 |
# | `kv_cache_bytes` | 缓存的字节数 | $2 \times B \times T \times N_{\text{layer}} \times H_{kv} \times D \times$ 字节数 |
# | `attention_flops` | 一层注意力的 FLOPs | 每次乘加 2 个；投影只算新 token；分数表 $q_{len} \times k_{len}$；K、V 投影用 $H_{kv}$ |
#
# - prefill 时 $T^2$ 项随上下文变成大头；decode 每个 token 的 FLOPs 不多，却要把权重和整个缓存读一遍，所以受限于显存带宽。
# - 缓存越小、每个字节被越多的 query 头共用，decode 就越快：这是 GQA、MQA、滑动窗口和 MLA 共同的出发点。
#
# 缓存里存的是每个头完整的 K、V。下一次作业（作业 04）的后半部分是 MLA（多头潜在注意力），它换了个思路：
# 只缓存一个低维的"潜在向量"，用的时候再把 K、V 展开出来，缓存还能再小很多。

# %% [markdown]
# ### 思考题
#
# 1. Qwen3.5 的 GQA 把 KV cache 缩小到 MHA 的 1/4。decode 会因此快 4 倍吗？什么时候接近 4 倍，什么时候差得远？

# %% [markdown] tags=["answer:gqa_decode_speedup"]
# ### BEGIN SOLUTION
# 不一定。decode 一步的时间主要看要读多少字节，而读的是两样东西：权重和 KV cache。GQA 只让缓存（以及 `k_proj`、`v_proj`）
# 变小，`q_proj`、`o_proj` 和 MLP 的权重一点没少。上下文短、batch 小时，读权重占大头，GQA 省下的那部分不多；
# 上下文很长或 batch 很大时，读缓存占大头，时间才接近缩短到 1/4。第 7 节的算术强度也说明了这一点：缓存那部分的强度从
# MHA 的 1 提高到 4，但仍远低于 GPU 的约 295，所以它依然受限于带宽，省下的字节就是省下的时间。
# 另外，缓存小了，同样的显存能放下更大的 batch 或更长的上下文，这往往比单条序列快多少更重要。
# ### END SOLUTION

# %% [markdown]
# 2. 为什么每一层都要有自己的 KV cache，不能所有层共用一份？

# %% [markdown] tags=["answer:cache_per_layer"]
# ### BEGIN SOLUTION
# 第 $\ell$ 层的 K、V 是这一层的 `k_proj`、`v_proj` 作用在**这一层的输入**上得到的，而每一层的输入是前面各层层层加工过的
# 残差流，层与层之间不一样；投影矩阵也是每层各一套。所以同一个 token 在不同层的 K、V 是不同的向量，缓存只能每层各存一份，
# 这正是 `kv_cache_bytes` 里乘 $N_{\text{layer}}$ 的原因。
#
# 也有模型专门为此改了结构，让相邻几层共用同一份 K、V（跨层共享 KV），缓存就再小几倍；但那是训练时就这样设计的，
# 不能拿一个普通模型直接这样用。
# ### END SOLUTION

# %% [markdown]
# 3. 手上有一个训练好的 MHA 模型（8 个 KV 头），想把它改成 2 个 KV 头的 GQA 来省缓存。`k_proj`、`v_proj` 的新权重从哪里来？
#    改完能直接用吗？

# %% [markdown] tags=["answer:mha_to_gqa"]
# ### BEGIN SOLUTION
# `k_proj` 的权重是 $H \cdot D$ 行，每 $D$ 行属于一个头。要 2 个 KV 头，就把每组 4 个头的那几块行取平均，
# 得到 $H_{kv} \cdot D$ 行（`v_proj` 同理）；`q_proj` 和 `o_proj` 不动。分组要和 `repeat_kv` 的顺序一致：头 0–3 平均成 KV 头 0，
# 头 4–7 平均成 KV 头 1。
#
# 改完以后模型能跑，但质量会掉：原来每个 query 头配的是自己的 key，现在配的是组内的平均。GQA 的论文就是这样做的，
# 再用原来预训练约 5% 的计算量接着训练一阵（uptraining），质量就接近原来的 MHA 了。
# ### END SOLUTION
