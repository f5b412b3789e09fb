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
# # 作业 09：FlashAttention-2，从前向到反向
#
# 作业 01 的练习 6 已经写过 FlashAttention 的核心：key 一块一块地读进来，用 running max 和 running sum 把各块的 softmax 接起来，
# 从不存整张分数表。可那只是前向，而且只切了 key。训练时还要反向传播：普通的注意力在前向里存下 $T \times T$ 的概率矩阵 $P$，
# 反向时读回来用。FlashAttention 连 $P$ 也不存，反向时从 $Q$、$K$ 和一个每行一个数的 **log-sum-exp** 重新算出来。
#
# 这次作业把它写完整：
#
# | 节 | 内容 | 练习 |
# |---|---|---|
# | 1 | query 也切块：一块分数是 `[block_q, block_k]`；只存 log-sum-exp | |
# | 2 | 前向 | `flash_attention_forward` |
# | 3 | 因果注意力：整块在对角线上方的块直接跳过 | |
# | 4 | 反向的推导：$D = \mathrm{rowsum}(dO \circ O)$ 从哪里来 | |
# | 5 | 反向 | `flash_attention_backward` |
# | 6 | 接进 autograd | `FlashAttention` |
# | 7 | 省下了什么：存下的内存、多出来的 FLOPs，以及为什么在 GPU 上反而更快 | |
#
# 最后是三道思考题。
#
# 资料来源：算法来自 FlashAttention（Dao 等 2022）和 FlashAttention-2（Dao 2023）两篇论文；H100 的算力和带宽来自 NVIDIA 的产品规格。
#
# > **本课程的约定**
# >
# > - `q [..., Tq, D]`、`k [..., Tk, D]`、`v [..., Tk, Dv]`，前面的维（batch、头）三者相同；分数是 $q k^\top / \sqrt D$。
# >   这次只用 float32 和 float64：低精度的问题留给思考题 2。
# > - `causal=True` 的规则和作业 01 的 `causal_mask` 一样：query $i$ 的绝对位置是 $T_k - T_q + i$，它能看见位置不超过它的 key。
# >   $T_q > T_k$ 时，前 $T_q - T_k$ 个 query 一个 key 也看不见：它们的输出是 0，log-sum-exp 是 $-\infty$。
# > - 作业 01 的 `attention` 和 `causal_mask` 在导入单元后面的「已给出」单元里（参考答案），用来对照。
# > - **评分规则**：评分程序只读取你的 `import`、函数和类的定义，以及全大写的常量；演示单元不会被评分程序执行。
# >   所以函数和类里不要用演示单元里的变量，也不要改名字和参数。
# > - **「运行全部」（Run All）**：练习还没写的时候，它会停在第一个练习后面的检查单元，报 `NotImplementedError`——
# >   这是正常的，不是你弄坏了什么。从上往下做：写完一个练习，运行它和它后面的检查，再往下走。
# >
# > 做练习时，把 `raise NotImplementedError()` 换成你的代码。检查单元先跑一个看得见的小检查，评分时还会用更多的形状、
# > 块的大小和边界情况来检验，并且盯着每一次矩阵乘法：一次算出比一块大的分数表，或者因果时没跳过该跳过的块，都会停下来告诉你。
# > 每个练习标了难度（🔴 越多越难）和大致用时；提示折叠在「提示」里，先自己想一想再点开。

# %%
import math
import time

import matplotlib.pyplot as plt
import torch
from torch.utils.flop_counter import FlopCounterMode

from course.tools import plotting

torch.set_printoptions(precision=4, sci_mode=False)
torch.set_num_threads(1)  # small tiles in a Python loop: one thread is faster, and the timings in section 7 steadier
plotting.use_chinese_font()

# %% tags=["provided:attention_scores", "provided:causal_mask", "provided:masked_softmax", "provided:attention"]
# course-release fills this cell with the answers of assignment 01.

# %% [markdown]
# ## 1. query 也切块
#
# 作业 01 的 online softmax 每一步算的是 `[Tq, block_size]` 的分数：key 切了块，query 没切。$T_q$ 很长时（训练时 $T_q = T_k = T$），
# 这一块照样和 $T$ 成正比。GPU 上还有一层理由：一个流式多处理器（SM）的片上高速内存（SRAM）只有两三百 KB，放得下的是
# 一块 $128 \times 128$ 的分数，放不下 $T \times 128$。
#
# 好在 softmax 是**按行**做的：每个 query 的输出只和它自己那一行分数有关。所以 query 也可以切成块，每一块 query 各自跑一遍 online softmax，
# 互不相干（在 GPU 上，它们就是并行的不同线程块）。两层循环：
#
# ```
# for 每一块 query Q_i（block_q 行）:
#     m = −∞，ℓ = 0，acc = 0          # 每行一个 m、一个 ℓ；acc 是 [block_q, Dv]
#     for 每一块 key K_j、value V_j（block_k 行）:
#         S = Q_i K_jᵀ / √D             # [block_q, block_k]：任何时候只有这一块分数
#         m′ = max(m, S 每行的最大值)
#         P̃ = exp(S − m′)                # m′ 还是 −∞ 的行按 0 平移，见下
#         ℓ = ℓ·exp(m − m′) + P̃ 每行的和
#         acc = acc·exp(m − m′) + P̃ V_j
#         m = m′
#     O_i = acc / ℓ
#     lse_i = m + log ℓ
# ```
#
# 和作业 01 的 $z$、$a$ 一样，这里的 $\ell$ 是 running sum，`acc` 是还没除以 $\ell$ 的输出（这一次用论文的记号 $\ell$）。
# 这就是 FlashAttention-2 的前向。它和第一版 FlashAttention 有三处不同，都是为了少做非矩阵乘法的运算、少读写显存：
#
# - 第一版外层循环 key、内层循环 query，每处理一块 key 就要把每块输出读出来、改完再写回显存；第二版把两层循环对调，一块 query 的输出从头到尾留在片上。
# - 第一版每一步都把输出除以 $\ell$ 归一化；第二版只在最后除一次。
# - 第一版为反向存下 $m$ 和 $\ell$ 两个数；第二版只存一个：**log-sum-exp**
#
# $$
# \mathrm{lse}_i = \log \sum_j e^{s_{ij}} = m_i + \log \ell_i ,
# $$
#
# 因为 $\ell_i = \sum_j e^{s_{ij} - m_i}$，取对数再加回 $m_i$ 就是整行的 $\log\sum_j e^{s_{ij}}$。有了它，整行 softmax 的概率一步就能算出来：
#
# $$
# P_{ij} = \frac{e^{s_{ij}}}{\sum_k e^{s_{ik}}} = e^{\,s_{ij} - \mathrm{lse}_i} .
# $$
#
# 反向传播就靠这个式子重算 $P$：每行只存一个数，而不是 $T_k$ 个。
#
# 一个 key 也看不见的行（只会在 `causal=True` 且 $T_q > T_k$ 时出现）：$\ell = 0$，输出 0，$\mathrm{lse} = \log 0 = -\infty$。
# 和作业 01 一样，$m'$ 还是 $-\infty$ 时按 0 来平移，避免 $e^{-\infty - (-\infty)}$ 的 NaN。

# %% [markdown]
# ## 2. 前向
#
# ### 练习 1：`flash_attention_forward(q, k, v, causal=False, block_q=16, block_k=16)`
#
# 难度：🔴🔴🔴⚪⚪ · 约 25 分钟
#
# 按上面的两层循环，返回 `(o, lse)`：`o [..., Tq, Dv]` 等于 softmax 注意力的输出，`lse [..., Tq]` 是每行分数的 log-sum-exp，
# dtype 都和 `q` 相同。任何时候最多只算一块 `[block_q, block_k]` 的分数；$T_q$、$T_k$ 不一定是块大小的倍数，最后一块可以短一些。
#
# `causal=True` 时，对角线**上方**整块都被遮住的 key 块要跳过（第 3 节细说）：条件是这一块 key 的第一个位置在这一块 query 的
# **最后一个** query 的位置之后，即 `k_start > (Tk − Tq) + q_end − 1`，后面的 key 块也一样，直接 `break`。
# 没被跳过的块里，位置在 query 之后的 key 把分数填成 $-\infty$。评分会数你算了多少块。
#
# <details><summary>提示</summary>
#
# - 先建好 `o = q.new_zeros(*q.shape[:-1], v.shape[-1])` 和 `lse = q.new_full(q.shape[:-1], float("-inf"))`，
#   每块 query 算完，写进 `o[..., q_start:q_end, :]`、`lse[..., q_start:q_end]`（这是你自己新建的张量，不是输入，可以原地写）。
# - 这次 $m$、$\ell$ 用 `[..., block_q]` 的形状（不带 keepdim），用到时再 `unsqueeze(-1)`；用 `[..., block_q, 1]` 也行，最后记得 lse 是 `[..., Tq]`。
# - 因果的 mask：`rows = torch.arange(q_start, q_end)[:, None] + (Tk − Tq)`，`cols = torch.arange(k_start, k_end)`，
#   `cols > rows` 的位置填 `float("-inf")`。
# - 看不见任何 key 的行：`torch.where(l > 0, acc / l, 0)`（分母先把 0 换成 1，免得 0/0），lse 在这些行是 `-inf`。
#
# </details>

# %% tags=["solution:flash_attention_forward"]
def flash_attention_forward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False,
                            block_q: int = 16, block_k: int = 16) -> tuple[torch.Tensor, torch.Tensor]:
    """Softmax attention, one [block_q, block_k] tile of scores at a time.

    q: [..., Tq, D], k: [..., Tk, D], v: [..., Tk, Dv]. With causal=True query i sits at position Tk - Tq + i
    and the key tiles wholly after a query tile's last position are skipped. Returns o [..., Tq, Dv] and
    lse [..., Tq] (the log-sum-exp of each row's scores), in q's dtype; rows that see no key: o = 0, lse = -inf.
    """
    ### BEGIN SOLUTION
    q_len, k_len = q.shape[-2], k.shape[-2]
    offset = k_len - q_len
    scale = 1 / math.sqrt(q.shape[-1])
    o = q.new_zeros(*q.shape[:-1], v.shape[-1])
    lse = q.new_full(q.shape[:-1], float("-inf"))
    for q_start in range(0, q_len, block_q):
        q_end = min(q_start + block_q, q_len)
        q_i = q[..., q_start:q_end, :]
        m = q.new_full(q_i.shape[:-1], float("-inf"))
        l = q.new_zeros(q_i.shape[:-1])  # noqa: E741 - the papers' name
        acc = q.new_zeros(*q_i.shape[:-1], v.shape[-1])
        for k_start in range(0, k_len, block_k):
            if causal and k_start > offset + q_end - 1:
                break  # this tile and every later one lie after the last query of the tile
            k_end = min(k_start + block_k, k_len)
            s = q_i @ k[..., k_start:k_end, :].mT * scale
            if causal:
                rows = torch.arange(q_start, q_end)[:, None] + offset
                s = s.masked_fill(torch.arange(k_start, k_end) > rows, float("-inf"))
            m_new = torch.maximum(m, s.amax(dim=-1))
            shift = m_new.masked_fill(m_new == float("-inf"), 0.0)
            p = torch.exp(s - shift[..., None])
            rescale = torch.exp(m - shift)
            l = l * rescale + p.sum(dim=-1)  # noqa: E741
            acc = acc * rescale[..., None] + p @ v[..., k_start:k_end, :]
            m = m_new
        seen = l > 0
        o[..., q_start:q_end, :] = torch.where(seen[..., None], acc / l.masked_fill(~seen, 1.0)[..., None], 0.0)
        lse[..., q_start:q_end] = torch.where(seen, m + torch.log(l), float("-inf"))
    return o, lse
    ### END SOLUTION


# %% tags=["tests:flash_attention_forward"]
from course.checking import check
check("flash_attention_forward")

### BEGIN HIDDEN TESTS
from autograder.instructor.hidden_cells import grade
grade("flash_attention_forward")
### END HIDDEN TESTS

# %% [markdown]
# ## 3. 因果注意力：哪些块不用算
#
# `causal=True` 时，一块 query 和一块 key 的关系只有三种：
#
# - key 块整个都在这块 query 的**最后一个** query 之后：每一对都被遮住，这一块**不用算**；
# - key 块整个都不晚于这块 query 的**第一个** query：每一对都看得见，不用 mask；
# - 其余的块跨在对角线上，要 mask。
#
# 画出来（$T_q = T_k = 128$，块 $16 \times 16$；再看带缓存的预填充，$T_q = 48$、$T_k = 128$）。深色的块每一对都看得见，
# 浅色的块要 mask，白色的块跳过：

# %%
def tile_kinds(q_len, k_len, block_q, block_k):
    """0 = skipped, 1 = straddles the diagonal (masked), 2 = every pair visible; one entry per tile."""
    offset = k_len - q_len
    kinds = torch.zeros(math.ceil(q_len / block_q), math.ceil(k_len / block_k))
    for i, q_start in enumerate(range(0, q_len, block_q)):
        q_end = min(q_start + block_q, q_len)
        for j, k_start in enumerate(range(0, k_len, block_k)):
            k_end = min(k_start + block_k, k_len)
            if k_start > offset + q_end - 1:
                kinds[i, j] = 0
            elif k_end - 1 <= offset + q_start:
                kinds[i, j] = 2
            else:
                kinds[i, j] = 1
    return kinds


fig, axes = plt.subplots(1, 2, figsize=(10, 4))
for ax, (q_len, k_len) in zip(axes, [(128, 128), (48, 128)]):
    kinds = tile_kinds(q_len, k_len, 16, 16)
    ax.imshow(kinds, cmap="Blues", vmin=0, vmax=2.5)
    computed = int((kinds > 0).sum())
    ax.set_title(f"Tq = {q_len}，Tk = {k_len}：算 {computed} / {kinds.numel()} 块")
    ax.set_xlabel("key 块")
    ax.set_ylabel("query 块")
    ax.set_xticks(range(kinds.shape[1]))
    ax.set_yticks(range(kinds.shape[0]))
    for (i, j), kind in zip(torch.cartesian_prod(torch.arange(kinds.shape[0]), torch.arange(kinds.shape[1])).tolist(),
                            kinds.flatten().tolist()):
        ax.text(j, i, ["跳过", "mask", ""][int(kind)], ha="center", va="center", fontsize=6)
plt.tight_layout()
plt.show()

# %% [markdown]
# $T_q = T_k = T$、块数 $n = T / B$ 时，要算的块是 $n(n+1)/2$，占全部 $n^2$ 的 $\frac{n+1}{2n}$：块越小越接近一半，
# 因果注意力的 FLOPs 也就省下将近一半。要 mask 的只有对角线上那 $n$ 块（块大小不一样时会多一些），其余的块不用碰 mask。
#
# 跳过的条件只看块的位置，不看数：`k_start > (Tk − Tq) + q_end − 1`。写成 `k_start > (Tk − Tq) + q_start`（用这一块**第一个** query）
# 会把跨在对角线上的块也跳掉，后面几个 query 就少看了几个 key；写成 `k_start > q_end − 1`（忘了 $T_k - T_q$）在带缓存的预填充时会跳过看得见的块。
# 用你的函数数一数 FLOPs：

# %%
torch.manual_seed(1)
for q_len, k_len in [(128, 128), (48, 128), (512, 512)]:
    q_d, k_d, v_d = torch.randn(1, 1, q_len, 64), torch.randn(1, 1, k_len, 64), torch.randn(1, 1, k_len, 64)
    counts = {}
    for causal in (False, True):
        with FlopCounterMode(display=False) as counter:
            flash_attention_forward(q_d, k_d, v_d, causal)
        counts[causal] = counter.get_total_flops()
    kinds = tile_kinds(q_len, k_len, 16, 16)
    print(f"Tq = {q_len:>3}，Tk = {k_len:>3}：causal 的 FLOPs 是不带 causal 的 {counts[True] / counts[False]:.1%}，"
          f"要算的块占 {(kinds > 0).float().mean():.1%}")

# %% [markdown]
# 两列应该一样：每一块的矩阵乘法一样大，FLOPs 正比于算了多少块。

# %% [markdown]
# ## 4. 反向：只存 lse，重算 $P$
#
# 前向是（一行一个 query，$P$ 的每一行是一个 softmax）：
#
# $$
# S = \frac{Q K^\top}{\sqrt D}, \qquad P = \mathrm{softmax}(S), \qquad O = P V .
# $$
#
# 给定损失对输出的梯度 $dO$（和 $O$ 一样是 `[Tq, Dv]`），一步一步往回推：
#
# - $O = PV$：$\;dV = P^\top dO,\quad dP = dO\, V^\top$。
# - softmax 的雅可比：$P_{ij} = e^{s_{ij}} / \sum_k e^{s_{ik}}$，对 $s_{ij}$ 求导，得到
#   $$dS_{ij} = P_{ij}\Big(dP_{ij} - \sum_k P_{ik}\, dP_{ik}\Big) = P_{ij}\,(dP_{ij} - D_i).$$
# - $S = QK^\top/\sqrt D$：$\;dQ = dS\, K / \sqrt D,\quad dK = dS^\top Q / \sqrt D$。
#
# 麻烦在 $D_i = \sum_k P_{ik}\, dP_{ik}$：它要对**整行**求和，可整行的 $P$ 从来不在手上。把 $dP_{ik} = dO_i \cdot V_k$ 代进去：
#
# $$
# D_i = \sum_k P_{ik}\,(dO_i \cdot V_k) = dO_i \cdot \Big(\sum_k P_{ik} V_k\Big) = dO_i \cdot O_i .
# $$
#
# 所以 $D = \mathrm{rowsum}(dO \circ O)$：前向存下的 $O$ 和传进来的 $dO$ 逐元素相乘、每行求和，`[Tq]`，循环之前算一次就好。
#
# 剩下的都能按块做。FlashAttention-2 的反向把 **key 块放在外层**：
#
# ```
# D = rowsum(dO ∘ O)
# for 每一块 key K_j、value V_j:
#     dK_j = 0，dV_j = 0
#     for 每一块 query Q_i（因果时跳过整块被遮住的）:
#         S = Q_i K_jᵀ / √D（因果时 mask）
#         P = exp(S − lse_i)               # 重算，不是读回来
#         dV_j += Pᵀ dO_i
#         dP = dO_i V_jᵀ
#         dS = P ∘ (dP − D_i)
#         dQ_i += dS K_j / √D
#         dK_j += dSᵀ Q_i / √D
# ```
#
# $dK_j$、$dV_j$ 在内层循环里一直累加在片上，外层每一步写回一次；$dQ_i$ 则从每一块 key 都收到一份，在 GPU 上要用原子加写回显存（思考题 1）。
# 看不见任何 key 的行 $\mathrm{lse} = -\infty$，它的分数也全是 $-\infty$：先把这些行的 lse 换成 0，$P = e^{-\infty} = 0$，不会出 NaN。

# %% [markdown]
# ## 5. 反向
#
# ### 练习 2：`flash_attention_backward(q, k, v, o, lse, do, causal=False, block_q=16, block_k=16)`
#
# 难度：🔴🔴🔴🔴⚪ · 约 30 分钟
#
# `o`、`lse` 是前向的输出，`do` 是损失对 `o` 的梯度（形状和 `o` 一样）。返回 `(dq, dk, dv)`，形状分别和 `q`、`k`、`v` 一样，
# 等于 autograd 对 softmax 注意力求出来的梯度。按上面的两层循环写：每一块的 $P$ 用 `lse` 重算，任何时候最多只有一块
# `[block_q, block_k]` 的 $S$、$P$、$dP$、$dS$；因果时跳过的块和前向一样。评分同样会数你算了多少块（每块两次矩阵乘法得到
# `[block_q, block_k]` 的表：$S$ 和 $dP$）。
#
# <details><summary>提示</summary>
#
# - `dq, dk, dv = torch.zeros_like(q), torch.zeros_like(k), torch.zeros_like(v)`，再按块 `+=` 进去（这些是你自己新建的张量）。
# - `D = (do * o).sum(dim=-1)`，`[..., Tq]`；用到第 i 块时取 `D[..., q_start:q_end, None]`。
# - `shift = lse.masked_fill(lse == float("-inf"), 0.0)`，然后 `p = torch.exp(s - shift[..., q_start:q_end, None])`。
# - `.mT` 交换最后两维：`p.mT @ do_i` 是 $P^\top dO_i$。
# - 跳过整块被遮住的块时，内层循环用 `continue`（后面的 query 块可能还看得见这块 key）。
#
# </details>

# %% tags=["solution:flash_attention_backward"]
def flash_attention_backward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, o: torch.Tensor, lse: torch.Tensor,
                             do: torch.Tensor, causal: bool = False, block_q: int = 16,
                             block_k: int = 16) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Gradients of o = softmax(q kᵀ/√D) v for the upstream gradient do [..., Tq, Dv], tile by tile.

    o, lse: the forward's outputs. Each tile's probabilities are recomputed as exp(S - lse); D = rowsum(do ∘ o).
    Returns (dq [..., Tq, D], dk [..., Tk, D], dv [..., Tk, Dv]); never holds more than one [block_q, block_k] tile.
    """
    ### BEGIN SOLUTION
    q_len, k_len = q.shape[-2], k.shape[-2]
    offset = k_len - q_len
    scale = 1 / math.sqrt(q.shape[-1])
    delta = (do * o).sum(dim=-1)
    shift = lse.masked_fill(lse == float("-inf"), 0.0)
    dq, dk, dv = torch.zeros_like(q), torch.zeros_like(k), torch.zeros_like(v)
    for k_start in range(0, k_len, block_k):
        k_end = min(k_start + block_k, k_len)
        k_j, v_j = k[..., k_start:k_end, :], v[..., k_start:k_end, :]
        for q_start in range(0, q_len, block_q):
            q_end = min(q_start + block_q, q_len)
            if causal and k_start > offset + q_end - 1:
                continue
            q_i, do_i = q[..., q_start:q_end, :], do[..., q_start:q_end, :]
            s = q_i @ k_j.mT * scale
            if causal:
                rows = torch.arange(q_start, q_end)[:, None] + offset
                s = s.masked_fill(torch.arange(k_start, k_end) > rows, float("-inf"))
            p = torch.exp(s - shift[..., q_start:q_end, None])
            dv[..., k_start:k_end, :] += p.mT @ do_i
            dp = do_i @ v_j.mT
            ds = p * (dp - delta[..., q_start:q_end, None])
            dq[..., q_start:q_end, :] += ds @ k_j * scale
            dk[..., k_start:k_end, :] += ds.mT @ q_i * scale
    return dq, dk, dv
    ### END SOLUTION


# %% tags=["tests:flash_attention_backward"]
from course.checking import check
check("flash_attention_backward")

### BEGIN HIDDEN TESTS
from autograder.instructor.hidden_cells import grade
grade("flash_attention_backward")
### END HIDDEN TESTS

# %% [markdown]
# ## 6. 接进 autograd
#
# PyTorch 让你给一段计算指定自己的反向：继承 `torch.autograd.Function`，写两个静态方法。
#
# - `forward(ctx, q, k, v, causal=False)`：算出输出，把反向要用的张量用 `ctx.save_for_backward(...)` 存起来，别的（比如 `causal`）
#   直接挂在 `ctx` 上；只返回 `o`。
# - `backward(ctx, do)`：用 `ctx.saved_tensors` 取回存下的张量，**按 forward 参数的顺序**为每个参数返回一个梯度；
#   不是张量的参数（`causal`）返回 `None`。
#
# 用的时候写 `FlashAttention.apply(q, k, v, causal)`。FlashAttention 存的是 $Q, K, V, O$ 和 lse，一共 $O(T \cdot D)$ 个数；
# 普通的注意力让 autograd 自己记，它会存下 $T \times T$ 的 $P$（第 7 节量一量）。
#
# ### 练习 3：`FlashAttention`
#
# 难度：🔴🔴⚪⚪⚪ · 约 10 分钟
#
# 用你的 `flash_attention_forward` 和 `flash_attention_backward`（块大小用默认的 16）写出这个 `torch.autograd.Function`。
# 检查之后，再用 `torch.autograd.gradcheck` 在 float64 里拿有限差分核对你的反向。检查和评分时，`FlashAttention` 的前向和反向
# 各自在块的监视下运行（默认的 16 × 16 块）：里面不能出现整张分数表，因果时同样要跳过该跳过的块。

# %% tags=["solution:FlashAttention"]
class FlashAttention(torch.autograd.Function):
    """FlashAttention.apply(q, k, v, causal=False) -> o; saves q, k, v, o and lse, recomputes P in backward."""

    @staticmethod
    def forward(ctx, q, k, v, causal=False):
        ### BEGIN SOLUTION
        o, lse = flash_attention_forward(q, k, v, causal)
        ctx.save_for_backward(q, k, v, o, lse)
        ctx.causal = causal
        return o
        ### END SOLUTION

    @staticmethod
    def backward(ctx, do):
        ### BEGIN SOLUTION
        q, k, v, o, lse = ctx.saved_tensors
        dq, dk, dv = flash_attention_backward(q, k, v, o, lse, do, ctx.causal)
        return dq, dk, dv, None
        ### END SOLUTION


# %% tags=["tests:FlashAttention"]
from course.checking import check
check("FlashAttention")

### BEGIN HIDDEN TESTS
from autograder.instructor.hidden_cells import grade
grade("FlashAttention")
### END HIDDEN TESTS

# %%
torch.manual_seed(0)
q_g, k_g, v_g = (torch.randn(1, 2, 20, 4, dtype=torch.float64, requires_grad=True) for _ in range(3))
for causal in (False, True):
    passed = torch.autograd.gradcheck(lambda q, k, v: FlashAttention.apply(q, k, v, causal), (q_g, k_g, v_g),
                                      raise_exception=False)
    print(f"causal={causal}：gradcheck {'通过，有限差分和你的反向一致' if passed else '没有通过：你的反向和有限差分不一致'}")

# %% [markdown]
# `gradcheck` 把每个输入的每个元素挪一点点，用 $\frac{f(x + \varepsilon) - f(x - \varepsilon)}{2\varepsilon}$ 估出数值梯度，
# 再和你的 `backward` 比。它要 float64：float32 里 $\varepsilon$ 太小就被舍入吃掉，太大又不再是导数。

# %% [markdown]
# ## 7. 省下了什么，多花了什么
#
# ### 反向要存的东西
#
# autograd 为反向存下的张量，用 `torch.autograd.graph.saved_tensors_hooks` 一个个数出来（一个头，$D = 64$，float32）：

# %%
def saved_bytes(run):
    """The bytes of the tensors autograd keeps for the backward pass while ``run()`` builds the graph."""
    kept = {}

    def pack(t):
        kept[(t.untyped_storage().data_ptr(), t.dtype, tuple(t.shape))] = t.numel() * t.element_size()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = run()
    return sum(kept.values()), out


lengths = [256, 512, 1024, 2048]
naive_mib, flash_mib = [], []
for length in lengths:
    q_m, k_m, v_m = (torch.randn(1, 1, length, 64, requires_grad=True) for _ in range(3))
    mask_m = causal_mask(length)
    naive_mib.append(saved_bytes(lambda: attention(q_m, k_m, v_m, mask_m)[0])[0] / 2**20)
    flash_mib.append(saved_bytes(lambda: FlashAttention.apply(q_m, k_m, v_m, True))[0] / 2**20)
    print(f"T = {length:>4}：普通注意力存 {naive_mib[-1]:7.2f} MiB，FlashAttention 存 {flash_mib[-1]:5.2f} MiB")

fig, ax = plt.subplots(figsize=(6, 4))
ax.plot(lengths, naive_mib, marker="o", label="普通注意力（autograd 自己记）")
ax.plot(lengths, flash_mib, marker="o", label="FlashAttention（q、k、v、o、lse）")
ax.set_xscale("log", base=2)
ax.set_yscale("log", base=2)
ax.set_xlabel("序列长度 T")
ax.set_ylabel("为反向存下的张量（MiB，一个头）")
ax.set_title("反向要存多少：T² 对 T")
ax.grid(True, which="both", alpha=0.3)
ax.legend()
plt.show()

# %% [markdown]
# 普通注意力存下的主要是 $T \times T$ 的表（softmax 的输出 $P$，还有 mask 之后的分数之类），和 $T^2$ 成正比；
# FlashAttention 只存 $Q, K, V, O$ 和每行一个 lse，和 $T$ 成正比。

# %% [markdown]
# ### 多出来的 FLOPs
#
# 代价是反向里重算 $S = QK^\top$：每一块多一次矩阵乘法。数一数前向加反向的矩阵乘法 FLOPs（$T = 512$，不带 causal，才好和公式比）：

# %%
torch.manual_seed(2)
length, dim = 512, 64
q_f, k_f, v_f = (torch.randn(1, 1, length, dim, requires_grad=True) for _ in range(3))
do_f = torch.randn(1, 1, length, dim)
flops = {}
for label, run in [("普通注意力", lambda: attention(q_f, k_f, v_f)[0]),
                   ("FlashAttention", lambda: FlashAttention.apply(q_f, k_f, v_f, False))]:
    with FlopCounterMode(display=False) as forward_count:
        out_f = run()
    with FlopCounterMode(display=False) as backward_count:
        out_f.backward(do_f)
    flops[label] = (forward_count.get_total_flops(), backward_count.get_total_flops())
    print(f"{label}：前向 {flops[label][0] / 1e6:6.1f} MFLOP，反向 {flops[label][1] / 1e6:6.1f} MFLOP")
print(f"一次 T×T×D 的矩阵乘法是 2·T²·D = {2 * length**2 * dim / 1e6:.1f} MFLOP："
      f"反向是前向的 {flops['FlashAttention'][1] / flops['FlashAttention'][0]:.2f} 倍（普通注意力 "
      f"{flops['普通注意力'][1] / flops['普通注意力'][0]:.2f} 倍）")

# %% [markdown]
# 前向两次矩阵乘法（$S = QK^\top$ 和 $PV$），一样多。普通注意力的反向四次（$dV, dP, dQ, dK$），FlashAttention 五次：多了重算 $S$ 那一次，
# FLOPs 多了四分之一。（这里不算 exp、减法这些逐元素的运算，它们只和 $T^2$ 成正比，不乘 $D$。）
#
# ### 为什么多算了反而更快
#
# 因为在 GPU 上，注意力的瓶颈往往不在算，而在搬数据。拿 H100（SXM）的规格算一笔账：bf16 的稠密矩阵乘法约 989 TFLOP/s，
# 显存（HBM3）带宽约 3.35 TB/s。一个头，$T = 4096$、$D = 128$、bf16：

# %%
H100_BF16_FLOPS = 989e12  # dense bf16 Tensor Core FLOP/s, H100 SXM
H100_HBM_BYTES = 3.35e12  # HBM3 bytes/s, H100 SXM
length, dim, bf16_bytes = 4096, 128, 2
recompute_flops = 2 * length**2 * dim  # S = Q Kᵀ once more, in the backward pass
p_bytes = length**2 * bf16_bytes  # P written once in the forward pass, read once in the backward pass
print(f"重算一次 S：{recompute_flops / 1e9:.2f} GFLOP，在 H100 上约 {recompute_flops / H100_BF16_FLOPS * 1e6:.1f} µs")
print(f"P 有 {p_bytes / 2**20:.0f} MiB：写一次加读一次，约 {2 * p_bytes / H100_HBM_BYTES * 1e6:.1f} µs")
print(f"H100 每读写一个字节，要做约 {H100_BF16_FLOPS / H100_HBM_BYTES:.0f} 次运算才算喂饱了算力")

# %% [markdown]
# 重算整张 $S$ 约 4 µs，把 $P$ 写出去再读回来约 20 µs：多算比多搬便宜好几倍。而普通注意力的反向搬的还不止 $P$：$dP$、$dS$ 也是 $T \times T$ 的，
# 也要写出去、读回来。FlashAttention 的每一块都在片上算完就丢，显存只读写 $Q, K, V, O, dO$、lse 这些 $O(T \cdot D)$ 的张量。
# 算力比带宽快几百倍时，"多算一点，少搬很多"是划算的：FlashAttention 省的是**显存读写**，不是 FLOPs。
#
# 在 CPU 上的这份 Python 实现正好相反：每一块都要启动好几个小运算，循环本身的开销比算的还多。量一量：

# %%
def timed(run, repeats=3):
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        run()
        best = min(best, time.perf_counter() - start)
    return best


torch.manual_seed(3)
q_t, k_t, v_t = (torch.randn(1, 4, 512, 64, requires_grad=True) for _ in range(3))
do_t = torch.randn(1, 4, 512, 64)
naive_s = timed(lambda: attention(q_t, k_t, v_t, causal_mask(512))[0].backward(do_t))
flash_s = timed(lambda: FlashAttention.apply(q_t, k_t, v_t, True).backward(do_t))
print(f"T = 512，4 个头，前向 + 反向：普通注意力 {naive_s * 1e3:.0f} ms，你的 FlashAttention（16 × 16 的块）{flash_s * 1e3:.0f} ms")

# %% [markdown]
# CPU 的缓存有几 MB 到几十 MB，这么大的表本来就放得下，搬数据不是瓶颈；一块只有 $16 \times 16$，每次矩阵乘法太小，时间都花在 Python 和
# 启动运算上了。真正的 FlashAttention 是一个 CUDA kernel：一块 query 交给一个线程块，整个两层循环在片上跑完，分数块从不离开 SRAM。
# 你写的是同一个算法，慢在了"怎么跑"上，而不是"算什么"上。

# %% [markdown]
# ## 思考题
#
# 三道题不计分，把你的推理写下来就好。
#
# **思考题 1.** FlashAttention-2 的反向把 key 块放在外层、query 块放在内层。如果反过来（query 块在外层），哪个梯度要跨外层循环累加？
# 在 GPU 上，不同的外层块由不同的线程块并行处理，这意味着什么？

# %% [markdown] tags=["answer:backward_loop_order"]
# ### BEGIN SOLUTION
# key 块在外层时，$dK_j$、$dV_j$ 只由第 $j$ 块 key 的这一次外层循环写，在片上累加完写回一次；$dQ_i$ 则从每一块 key 都收到一份贡献，
# 不同的线程块会同时往同一个 $dQ_i$ 上加，要用原子加（FlashAttention-2 就是这么做的）。
#
# 反过来，query 块在外层时，$dQ_i$ 留在片上，可 $dK_j$、$dV_j$ 从每一块 query 都收到贡献，要原子加的变成了两个张量，
# 而且 $dK$、$dV$ 各有 $T_k \times D$ 个数。把 key 放在外层，需要跨线程块相加的只剩 $dQ$ 一个。
# ### END SOLUTION

# %% [markdown]
# **思考题 2.** 输入是 bf16 时，lse 应该用什么 dtype 存？分数上千时（比如没有 QK-Norm 的模型里出现的大分数），把 lse 舍入成 bf16
# 会让重算出来的 $P = e^{S - \mathrm{lse}}$ 错多少？

# %% [markdown] tags=["answer:lse_dtype"]
# ### BEGIN SOLUTION
# 用 float32（FlashAttention 的 lse 一直是 float32）。$P = e^{S - \mathrm{lse}}$ 对 lse 的误差是指数放大的：lse 差 $\delta$，
# $P$ 就整体乘上 $e^{-\delta}$，相对误差约 $\delta$。bf16 只有 8 位有效二进制位，1000 附近相邻两个 bf16 数差 4：lse 的舍入误差可以到 2，
# $P$ 就差了 $e^{2} \approx 7$ 倍，梯度全错。float32 在 1000 附近的间隔约 $6 \times 10^{-5}$，$P$ 的相对误差也就是这个量级。
# 同样的道理，$S$ 也要在 float32 里算出来再减（矩阵乘法在 float32 里累加），这和作业 01 第 8 节量出来的结论一样。
# ### END SOLUTION

# %% [markdown]
# **思考题 3.** 作业 01 的滑动窗口：query 在位置 $p$ 只看 $p - w < j \le p$。在因果跳块之外，哪些块还能跳过？写出一块 key 整块都看不见的条件。

# %% [markdown] tags=["answer:window_tiles"]
# ### BEGIN SOLUTION
# 除了对角线上方的块，窗口**左边**太远的块也整块看不见：这一块 key 的最后一个位置 $k_{\text{end}} - 1$，如果连这一块**第一个** query
# （位置 $T_k - T_q + q_{\text{start}}$）的窗口都够不着，即 $k_{\text{end}} - 1 \le T_k - T_q + q_{\text{start}} - w$，
# 这一块里每一对都被窗口遮住（这块 query 里后面的 query 位置更大，离得更远），可以跳过。于是每块 query 只算窗口附近大约
# $(w + B_q) / B_k + 1$ 块 key，
# 注意力的计算量从 $T^2$ 降到 $T \cdot w$，和作业 01 里滑动窗口把 KV cache 限制在 $w$ 个位置是同一回事。
# ### END SOLUTION

# %% [markdown]
# ## 小结
#
# - FlashAttention-2 的前向：query、key 都切块，两层循环，每块 query 各自做 online softmax，最后除以 $\ell$ 一次，只存 $\mathrm{lse} = m + \log \ell$。
# - 因果时对角线上方的块整块跳过，FLOPs 省下将近一半；只有跨在对角线上的块要 mask。
# - 反向：$D = \mathrm{rowsum}(dO \circ O)$ 代替了对整行 $P$ 的求和；$P = e^{S - \mathrm{lse}}$ 按块重算，不存 $T \times T$ 的任何东西。
# - 多算一次 $QK^\top$（反向 FLOPs 多四分之一），换来显存读写从 $O(T^2)$ 降到 $O(T \cdot D)$；在 GPU 上这笔买卖划算，因为瓶颈是搬数据。
