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
# # 作业 08：Gated DeltaNet——Qwen3.5 另外四分之三的层
#
# Qwen3.5-0.8B 有 24 层，作业 06 写的全注意力只占其中 6 层。另外 18 层是**线性注意力**，具体说是 Gated DeltaNet：
# 它不存每个 token 的 K 和 V，而是把读过的内容压进一张固定大小的"记忆表"，上下文再长，这张表也不变大。
# 论文和代码里它叫**状态**（state）或状态矩阵，记作 $S$；这门课两个名字都用，说的是同一张 $D_k \times D_v$ 的表。
# 作业 06 的第 3 层之所以只能拿词嵌入当输入，就是因为前三层线性注意力还没写。这次把它们写出来，最后用你自己的代码
# 把 Qwen3.5 的第 0～3 层从头跑一遍。
#
# 路线：
#
# | 节 | 内容 | 练习 |
# |---|---|---|
# | 1 | softmax 为什么是 $T^2$；去掉 softmax，注意力变成一个状态大小固定的 RNN | `linear_attention`、`linear_attention_recurrent` |
# | 2 | 联想记忆：存 $N$ 对 key→value 再读回来，$N$ 接近 key 的维数时普通线性注意力被淹没 | |
# | 3 | delta 规则：只写"修正量"，一步在线最小二乘，能覆盖旧值 | `delta_rule` |
# | 4 | 门：写之前先把记忆乘上 $e^{g}$，学出来的遗忘速度 | `gated_delta_rule` |
# | 5 | 分块形式：块内的递推变成矩阵乘法（UT 变换），长输入快得多 | `chunked_gated_delta_rule` |
# | 6 | Qwen3.5 的 Gated DeltaNet 层：因果卷积、L2 归一化、$\beta$ 和 $g$、带门的 RMSNorm、缓存 | `causal_conv1d`、`Qwen35GatedDeltaNet` |
# | 7 | 在 CPU 上几秒钟训练三个小模型，比较三种规则的记忆力 | |
# | 8 | 用你自己的代码跑 Qwen3.5 的第 0～3 层 | |
# | 9 | 整个模型的账：参数，和生成一个 token 的计算量随上下文怎么长 | |
#
# 最后是小结和四道思考题。
#
# 资料来源：Qwen3.5 的结构和数字来自它的 `config.json` 和 Hugging Face transformers 的实现（`Qwen3_5GatedDeltaNet`）；
# 线性注意力、delta 规则和 Gated DeltaNet 来自它们各自的论文（Katharopoulos 等 2020；Schlag 等 2021；Yang 等 2024）；
# 门的写法来自 Mamba-2 的论文；"前面三层线性注意力还没写"是一本讲 Qwen3.5 的书里门控注意力那一章的原话。
#
# > **先说清楚：本课程附带的权重是替身。** 第 8 节用的第 0～3 层权重不是训练好的 Qwen3.5-0.8B，而是按固定种子生成的随机数，
# > 键名、形状和 dtype 与真模型一样。用替身时画出来的模式没有任何含义；运行 `course-weights qwen35 --layers 0-3`
# > 取来真实权重（或设好 `QWEN35_PATH`），重新运行这个 notebook 即可，不用改代码。第 7 节的小模型则是真的在这里训练出来的。
#
# > **本课程的约定**
# >
# > - 注意力里的张量形状是 `[batch, heads, seq, head_dim]`，简写为 `[B, H, T, D]`；层的输入输出是 `[B, T, d]`，$d$ 是 `hidden_size`。
# >   这次 key 和 value 的维数可以不同，记作 $D_k$、$D_v$。
# > - 线性注意力的状态（记忆表）是 `[B, H, Dk, Dv]`，位置 $t$ 读出 $o_t = q_t S_t$（$q_t$ 是 $D_k$ 维的行向量）；
# >   `g`、`beta` 是 `[B, H, T]`。这和 Hugging Face 的 `torch_recurrent_gated_delta_rule` 的布局一样。
# > - `attention_mask` 参数是 tokenizer 给的 `[B, L + T]` 的 0/1（1 = 真实 token），$L$ 是缓存里已有的位置数。
# > - 作业 01～06 的函数和类（`attention`、`causal_mask`、`rope_cos_sin`、`ZeroCenteredRMSNorm`、`Qwen35Attention`……）
# >   在导入单元后面的「已给出」单元里（前几次作业的参考答案），运行一下就能用。
# > - **评分规则**：评分程序只读取你的 `import`、函数和类的定义，以及全大写的常量；演示单元不会被评分程序执行。
# >   所以函数和类里不要用演示单元里的变量，也不要改名字和参数。
# > - **「运行全部」（Run All）**：练习还没写的时候，它会停在第一个练习后面的检查单元，报 `NotImplementedError`——
# >   这是正常的，不是你弄坏了什么。从上往下做：写完一个练习，运行它和它后面的检查，再往下走。
# >
# > 做练习时，把 `raise NotImplementedError()` 换成你的代码。检查单元先跑一个看得见的小检查，评分时还会用更多的形状、
# > dtype 和边界情况来检验。每个练习标了难度（🔴 越多越难）和大致用时；提示折叠在「提示」里，先自己想一想再点开。

# %%
import dataclasses
import math
import time

import matplotlib.pyplot as plt
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

from course.llama import SwiGLU
from course.qwen35_weights import find_checkpoint, load_config, load_embedding_rows, load_layer, submodule_state
from course.tools import plotting
from course.tools.tokenizer import load_tokenizer, token_pieces

torch.set_printoptions(precision=4, sci_mode=False)
torch.set_num_threads(1)  # the tensors here are small: one thread is faster, and the timings in section 5 steadier
plotting.use_chinese_font()

# %% tags=["provided:attention_scores", "provided:causal_mask", "provided:padding_mask", "provided:masked_softmax", "provided:attention", "provided:repeat_kv", "provided:kv_cache_bytes", "provided:rope_cos_sin", "provided:apply_rope", "provided:split_query_gate", "provided:apply_output_gate", "provided:ZeroCenteredRMSNorm", "provided:apply_partial_rope", "provided:Qwen35Attention"]
# course-release fills this cell with the answers of assignments 01, 03, 04, 05 and 06.

# %% [markdown]
# ## 1. softmax 的 $T^2$，和去掉 softmax 之后
#
# 先看 Qwen3.5 的 config 里线性注意力层的几个数：

# %%
config = load_config()
linear_layers = [i for i, kind in enumerate(config.layer_types) if kind != "full_attention"]
print(f"{config.num_hidden_layers} 层里，线性注意力（Gated DeltaNet）{len(linear_layers)} 层，"
      f"全注意力 {len(config.full_attention_layers)} 层：{list(config.full_attention_layers)}")
print(f"每个线性注意力层：{config.linear_num_key_heads} 个 key 头，{config.linear_num_value_heads} 个 value 头，"
      f"D_k = {config.linear_key_head_dim}，D_v = {config.linear_value_head_dim}，卷积核 {config.linear_conv_kernel_dim}")

# %% [markdown]
# ### softmax 注意力的账
#
# 作业 01 的注意力，位置 $t$ 的输出是
#
# $$
# o_t = \sum_{j \le t} \frac{\exp(q_t \cdot k_j / \sqrt D)}{\sum_{i \le t} \exp(q_t \cdot k_i / \sqrt D)}\, v_j .
# $$
#
# 位置 $t$ 要和前面**所有** $t$ 个 key 各算一次点积，整句 $T$ 个位置一共 $T(T+1)/2$ 次，和 $T^2$ 成正比；
# 生成的时候，每个 token 的 K、V 都得留在 KV cache 里，缓存和 $T$ 成正比（作业 03 第 6 节）。
# 麻烦出在 softmax：分母把 $q_t$ 和所有 key 绑在一起，不算完所有点积，就不知道任何一个权重。
#
# ### 去掉 softmax
#
# 把权重换成点积本身（不做 softmax，也不除以 $\sqrt D$），输出变成
#
# $$
# o_t = \sum_{j \le t} (q_t \cdot k_j)\, v_j = q_t \sum_{j \le t} k_j^\top v_j = q_t S_t,
# \qquad S_t = \sum_{j \le t} k_j^\top v_j \in \mathbb{R}^{D_k \times D_v} .
# $$
#
# 只是换了一下括号：先把所有 $k_j^\top v_j$（一个 $D_k \times D_v$ 的外积）加起来，再用 $q_t$ 去读。
# $S_t$ 可以一步一步地更新：
#
# $$
# S_t = S_{t-1} + k_t^\top v_t, \qquad o_t = q_t S_t .
# $$
#
# 这就是一个 RNN：状态 $S$ 的大小是 $D_k \times D_v$，和读过多少个 token 无关；每一步的计算量也是固定的 $O(D_k D_v)$。
# 这种注意力叫**线性注意力**（计算量和 $T$ 成线性关系）。这里是它最简的样子：Katharopoulos 等（2020）的原版还先给 $q$、$k$
# 套一个特征映射 $\phi$（他们用 $\operatorname{elu}(x) + 1$，让"权重"非负），再除以归一化项 $\phi(q_t) \sum_{j \le t} \phi(k_j)^\top$，
# 让每行权重加起来是 1，像 softmax 那样。这门课跟着 DeltaNet 和 Qwen3.5 的做法，两样都不要：key 和 query 先做 L2 归一化
# （第 6 节），不再除以权重之和。同一个计算有两种写法：
#
# - **并行形式**：把 $T \times T$ 的分数矩阵 $Q K^\top$ 的上三角置零（因果），再乘 $V$。训练时一次算完整段；
# - **递推形式**：一个位置一个位置地更新 $S$。生成时每步只碰一张固定大小的表。
#
# 注意 $S_t$ 里**包括**位置 $t$ 自己：先写入 $k_t^\top v_t$，再读。

# %% [markdown]
# ### 练习 1：`linear_attention(q, k, v)`
#
# 难度：🔴⚪⚪⚪⚪ · 约 5 分钟
#
# 并行形式。`q`、`k` 是 `[B, H, T, Dk]`，`v` 是 `[B, H, T, Dv]`，返回 `o [B, H, T, Dv]`，
# $o_t = \sum_{j \le t} (q_t \cdot k_j)\, v_j$。没有 softmax，也不除以 $\sqrt{D_k}$。
#
# <details><summary>提示</summary>
#
# - 分数矩阵是 `q @ k.transpose(-2, -1)`，形状 `[B, H, T, T]`。
# - 因果：位置 $t$ 只能用 $j \le t$ 的 key，对角线**保留**。`torch.ones(T, T, dtype=torch.bool).tril()` 是下三角（含对角线）；
#   `masked_fill` 把其余位置填成 0（不是 $-\infty$：这里没有 softmax）。
#
# </details>

# %% tags=["solution:linear_attention"]
def linear_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """Causal linear attention, parallel form: o_t = sum_{j<=t} (q_t . k_j) v_j.

    q, k: [B, H, T, Dk]; v: [B, H, T, Dv]. Returns o: [B, H, T, Dv]. No softmax, no 1/sqrt(Dk).
    """
    ### BEGIN SOLUTION
    seq = q.shape[-2]
    causal = torch.ones(seq, seq, dtype=torch.bool, device=q.device).tril()
    return (q @ k.transpose(-2, -1)).masked_fill(~causal, 0.0) @ v
    ### END SOLUTION


# %% tags=["tests:linear_attention"]
from course.checking import check
check("linear_attention")

### BEGIN HIDDEN TESTS
from autograder.instructor.hidden_cells import grade
grade("linear_attention")
### END HIDDEN TESTS

# %% [markdown]
# ### 练习 2：`linear_attention_recurrent(q, k, v, state=None)`
#
# 难度：🔴🔴⚪⚪⚪ · 约 10 分钟
#
# 递推形式，返回 `(o, state)`：
#
# - `state` 是 `[B, H, Dk, Dv]`，`None` 时从全零开始；
# - 对 $t = 0, 1, \dots, T-1$：$S \leftarrow S + k_t^\top v_t$（外积），然后 $o_t = q_t S$；
# - 返回所有位置的输出 `[B, H, T, Dv]` 和最后的状态。
#
# 从返回的状态接着算下一段，必须和一次算完整段一样——生成时就是这样用的。
# 输入是 bfloat16 / float16 时，状态要加很多步，在 float32 里累加，最后把 `o` 转回 `q` 的 dtype；`state` 转回 `q` 的
# dtype 也行，像 Hugging Face 那样一直留在 float32 也行（下一段从它接着算，float32 更准）。
#
# <details><summary>提示</summary>
#
# - 外积 $k_t^\top v_t$：`k[..., t, :, None] * v[..., t, None, :]` 是 `[B, H, Dk, Dv]`。
# - 读出 $q_t S$：`(q[..., t, :, None] * S).sum(-2)`，或者 `q[..., t, None, :] @ S` 再去掉那一维。
# - 每步的输出放进一个列表，最后 `torch.stack(..., dim=-2)`。
# - 工作精度：`torch.promote_types(q.dtype, torch.float32)` 对 float64 还是 float64，对 bfloat16 是 float32。
#
# </details>

# %% tags=["solution:linear_attention_recurrent"]
def linear_attention_recurrent(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                               state: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Causal linear attention as an RNN: S_t = S_{t-1} + k_t^T v_t, o_t = q_t S_t.

    q, k: [B, H, T, Dk]; v: [B, H, T, Dv]; state: [B, H, Dk, Dv] or None (zeros).
    Returns (o [B, H, T, Dv], state [B, H, Dk, Dv]) in q's dtype; sums run in float32 at least.
    """
    ### BEGIN SOLUTION
    work = torch.promote_types(q.dtype, torch.float32)
    qw, kw, vw = q.to(work), k.to(work), v.to(work)
    S = qw.new_zeros(*q.shape[:-2], q.shape[-1], v.shape[-1]) if state is None else state.to(work)
    outputs = []
    for t in range(q.shape[-2]):
        S = S + kw[..., t, :, None] * vw[..., t, None, :]
        outputs.append((qw[..., t, :, None] * S).sum(-2))
    return torch.stack(outputs, dim=-2).to(q.dtype), S.to(q.dtype)
    ### END SOLUTION


# %% tags=["tests:linear_attention_recurrent"]
from course.checking import check
check("linear_attention_recurrent")

### BEGIN HIDDEN TESTS
from autograder.instructor.hidden_cells import grade
grade("linear_attention_recurrent")
### END HIDDEN TESTS

# %% [markdown]
# 两种形式在一段长一点的随机输入上比一比，再看状态的大小随 $T$ 怎么变：

# %%
torch.manual_seed(1)
for seq in (16, 256, 1024):
    q_long, k_long, v_long = (torch.randn(1, 2, seq, 32, dtype=torch.float64) / 32**0.5 for _ in range(3))
    o_parallel = linear_attention(q_long, k_long, v_long)
    o_steps, state_long = linear_attention_recurrent(q_long, k_long, v_long)
    print(f"T = {seq:>4}：两种形式最多差 {(o_parallel - o_steps).abs().max():.1e}；"
          f"并行形式的分数矩阵 {seq}×{seq} = {seq * seq:>9,} 个数，递推形式的状态 {tuple(state_long.shape[-2:])} = "
          f"{state_long[0, 0].numel():,} 个数")

# %% [markdown]
# 并行形式要一张 $T \times T$ 的分数矩阵，递推形式从头到尾只有一张 $32 \times 32$ 的表。
#
# ### 记忆表和 KV cache 放在一起
#
# 作业 03 算过 Qwen3.5-0.8B 的 KV cache：6 个全注意力层，每层每个 token 存 $2 \times H_{kv} \times D$ 个数
# （下面用作业 03 的 `kv_cache_bytes` 再算一遍）。线性注意力层存的是**状态**，不随 $T$ 变：
#
# - 记忆表：每个 value 头一张 $D_k \times D_v$，共 $H_v \times D_k \times D_v$ 个数；
# - 卷积的状态（第 6 节）：每个通道最近 $K - 1$ 个输入（$K = 4$ 是短卷积的核长），共 $(2 H_k D_k + H_v D_v) \times (K-1)$ 个数。
#
# 字节数按 Hugging Face 的存法算：记忆表是 float32（这张表要累加成千上万步），卷积状态和 KV cache 是 bf16。

# %%
bf16_bytes, fp32_bytes = torch.bfloat16.itemsize, torch.float32.itemsize
heads_k, heads_v = config.linear_num_key_heads, config.linear_num_value_heads
dim_k, dim_v, kernel = config.linear_key_head_dim, config.linear_value_head_dim, config.linear_conv_kernel_dim
conv_channels = 2 * heads_k * dim_k + heads_v * dim_v
memory_numbers = heads_v * dim_k * dim_v
conv_numbers = conv_channels * (kernel - 1)
state_bytes = len(linear_layers) * (memory_numbers * fp32_bytes + conv_numbers * bf16_bytes)
full_layers = len(config.full_attention_layers)
kv_per_token = kv_cache_bytes(1, 1, full_layers, config.num_key_value_heads, config.head_dim, bf16_bytes)
MIB = 1024**2
print(f"每个线性注意力层：记忆表 {heads_v}×{dim_k}×{dim_v} = {memory_numbers:,} 个数，卷积状态 "
      f"{conv_channels}×{kernel - 1} = {conv_numbers:,} 个数")
print(f"{len(linear_layers)} 个线性注意力层的状态一共 {state_bytes:,} 字节 ≈ {state_bytes / MIB:.1f} MiB，和上下文长度无关")
print(f"{full_layers} 个全注意力层的 KV cache：每层每个 token "
      f"{kv_cache_bytes(1, 1, 1, config.num_key_value_heads, config.head_dim, 1):,} 个数，全部 {full_layers} 层每个 token {kv_per_token:,} 字节；"
      f"256K 个 token 时 {kv_cache_bytes(1, 256 * 1024, full_layers, 2, config.head_dim, bf16_bytes) / MIB:,.0f} MiB")
print(f"上下文超过 {state_bytes / kv_per_token:,.0f} 个 token 以后，KV cache 就比全部线性注意力层的状态还大")

context = [2**n for n in range(8, 19)]  # 256 ... 256K tokens
all_full = [kv_cache_bytes(1, n, config.num_hidden_layers, config.num_key_value_heads, config.head_dim, bf16_bytes) / MIB
            for n in context]
qwen_kv = [kv_cache_bytes(1, n, full_layers, config.num_key_value_heads, config.head_dim, bf16_bytes) / MIB for n in context]
fig, ax = plt.subplots(figsize=(8, 4.8))
ax.plot(context, all_full, marker="o", label=f"假如 {config.num_hidden_layers} 层都是全注意力：KV cache")
ax.plot(context, qwen_kv, marker="o", label=f"Qwen3.5 的 {full_layers} 个全注意力层：KV cache")
ax.plot(context, [state_bytes / MIB] * len(context), marker="o", label=f"Qwen3.5 的 {len(linear_layers)} 个线性注意力层：状态")
ax.set_xscale("log", base=2)
ax.set_yscale("log", base=2)
ax.set_xticks(context, labels=[f"{n // 1024}K" if n >= 1024 else str(n) for n in context])
ax.set_xlabel("上下文长度 T（token）")
ax.set_ylabel("MiB（对数坐标）")
ax.set_title("缓存随上下文的增长（batch 1）")
ax.grid(True, which="both", alpha=0.3)
ax.legend()
plt.show()

# %% [markdown]
# KV cache 的线是斜的，状态的线是平的。Qwen3.5 的取舍就在这张图里：18 层用固定大小的状态，只留 6 层全注意力存 KV，
# 长上下文时的缓存主要是这 6 层的。（上面的卷积状态按它真正要用的 $K - 1 = 3$ 列算，交叉点是 1,590 个 token；Hugging Face
# 的实现每个通道存 $K = 4$ 列，多留的一列用不到，按它的存法算是 1,608 个 token。）代价是什么？一张 $D_k \times D_v$ 的表能记住的东西是有限的，下一节就来量一量。

# %% [markdown]
# ## 2. 联想记忆：线性注意力为什么会"淹没"
#
# 把状态当成一张**联想记忆**：写入 $N$ 对 (key, value)，再用 key 把 value 读回来。读 $k_i$ 得到
#
# $$
# k_i S = \sum_j (k_i \cdot k_j)\, v_j = \underbrace{\lVert k_i \rVert^2 v_i}_{\text{要的}}
# + \underbrace{\sum_{j \ne i} (k_i \cdot k_j)\, v_j}_{\text{串扰}} .
# $$
#
# 如果 key 两两正交，串扰是 0，读出来的就是原来的 value。可是 $D_k$ 维空间里最多只有 $D_k$ 个两两正交的方向；
# 随机的单位向量之间的点积大约是 $\pm 1/\sqrt{D_k}$，$N - 1$ 项串扰加起来，长度大约是 $\sqrt{(N-1)/D_k}$。
# 线性注意力**什么都不忘**，每一对都原样加进去，$N$ 接近 $D_k$ 时，串扰就和信号一样大了。
#
# 做个实验：$D_k = D_v = 32$，key 和 value 都是随机的单位向量，写入 $N$ 对，再逐个读回来，量读出的误差
# $\lVert k_i S - v_i \rVert$（value 的长度是 1，误差 1 就是"和信号一样大"）。每个 $N$ 做 200 次取平均。

# %%
RECALL_DIM = 32


def random_pairs(n_pairs: int, trials: int, seed: int):
    """`trials` independent sets of `n_pairs` random unit keys and values: [trials, 1, n_pairs, 32] each."""
    gen = torch.Generator().manual_seed(seed)
    keys = F.normalize(torch.randn(trials, 1, n_pairs, RECALL_DIM, generator=gen), dim=-1)
    values = F.normalize(torch.randn(trials, 1, n_pairs, RECALL_DIM, generator=gen), dim=-1)
    return keys, values


def recall_error(write, n_pairs: int, passes: int = 1, trials: int = 200, seed: int = 0) -> float:
    """Write the pairs `passes` times with `write(keys, values) -> state`, read every key back; mean |k_i S − v_i|."""
    keys, values = random_pairs(n_pairs, trials, seed)
    state = write(keys.repeat(1, 1, passes, 1), values.repeat(1, 1, passes, 1))
    return (keys @ state - values).norm(dim=-1).mean().item()


def write_linear(keys, values):
    return linear_attention_recurrent(keys, keys, values)[1]


pair_counts = [2, 4, 8, 16, 24, 32, 48, 64]
linear_errors = [recall_error(write_linear, n) for n in pair_counts]
for n, error in zip(pair_counts, linear_errors):
    print(f"N = {n:>2}：线性注意力读回的平均误差 {error:.2f}（串扰的估计 √((N−1)/D_k) = {math.sqrt((n - 1) / RECALL_DIM):.2f}）")

# %% [markdown]
# 误差和估计的 $\sqrt{(N-1)/D_k}$ 几乎一样：$N$ 从 2 起误差就在涨，$N = 32 = D_k$ 时误差约等于 1，读出来的东西一半是噪声。
# 问题不在于表太小，而在于写法：每次写入都是**加**，旧的串扰永远留着，同一个 key 写两次还会把两个 value 加在一起。
# 能不能写得聪明一点？

# %% [markdown]
# ## 3. delta 规则：只写修正量
#
# 换个角度看"写入"。我们希望状态 $S$ 满足 $k_t S \approx v_t$，也就是让
#
# $$
# \mathcal{L}_t(S) = \tfrac12 \lVert k_t S - v_t \rVert^2
# $$
#
# 尽量小。它对 $S$ 的梯度是 $k_t^\top (k_t S - v_t)$。从 $S_{t-1}$ 出发，以学习率 $\beta_t$ 走一步梯度下降：
#
# $$
# S_t = S_{t-1} - \beta_t\, k_t^\top (k_t S_{t-1} - v_t) = S_{t-1} + k_t^\top \big(\beta_t (v_t - k_t S_{t-1})\big) .
# $$
#
# 这就是 **delta 规则**（Widrow–Hoff 规则；DeltaNet 把它用在线性注意力上）。和线性注意力比，只多了一项 $- k_t S_{t-1}$：
# 先用 $k_t$ 读出状态里**已经有**的 $k_t S_{t-1}$，只把差值 $v_t - k_t S_{t-1}$（乘以 $\beta_t$）写进去。
#
# - $\beta_t = 1$、$\lVert k_t \rVert = 1$ 时，写完之后 $k_t S_t = v_t$ 正好成立：同一个 key 的旧 value 被**覆盖**了；
# - $\beta_t \in (0, 1)$ 是"这一次改多少"，它也由模型从输入算出来（第 6 节：$\beta = \operatorname{sigmoid}(b)$）；
# - 反复对同一组 (key, value) 这样写，就是对 $\sum_i \tfrac12\lVert k_i S - v_i \rVert^2$ 做随机梯度下降：这是一步
#   **在线最小二乘**。$N \le D_k$ 对、key 线性无关时，它收敛到每一对都读得回来的解；$N > D_k$ 时没有这样的解，
#   步长 $\beta$ 固定的话，它也不会停在最小二乘解上，而是在它附近来回打转（最后写的那几对记得最准）。
#
# 读出还是 $o_t = q_t S_t$，在写入**之后**。

# %% [markdown]
# ### 练习 3：`delta_rule(q, k, v, beta, state=None)`
#
# 难度：🔴🔴⚪⚪⚪ · 约 10 分钟
#
# 和练习 2 一样的递推，多一个 `beta [B, H, T]`。每一步：
#
# 1. 用 $k_t$ 读出状态里已有的：$m = k_t S$（`[B, H, Dv]`）；
# 2. 修正量 $\delta = \beta_t (v_t - m)$；
# 3. 写入 $S \leftarrow S + k_t^\top \delta$；
# 4. 读出 $o_t = q_t S$。
#
# 返回 `(o [B, H, T, Dv], state [B, H, Dk, Dv])`；`state`、dtype 的规矩和练习 2 一样。
#
# <details><summary>提示</summary>
#
# - $k_t S$：`(k[..., t, :, None] * S).sum(-2)`，和练习 2 的读出一样，只是用 `k` 代替 `q`。
# - `beta[..., t, None]` 是 `[B, H, 1]`，能和 `[B, H, Dv]` 相乘。$\beta$ 乘的是**整个**括号 $(v_t - m)$。
#
# </details>

# %% tags=["solution:delta_rule"]
def delta_rule(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, beta: torch.Tensor,
               state: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """The delta rule: S_t = S_{t-1} + k_t^T (beta_t (v_t - k_t S_{t-1})), o_t = q_t S_t.

    q, k: [B, H, T, Dk]; v: [B, H, T, Dv]; beta: [B, H, T]; state: [B, H, Dk, Dv] or None (zeros).
    Returns (o [B, H, T, Dv], state [B, H, Dk, Dv]) in q's dtype; sums run in float32 at least.
    """
    ### BEGIN SOLUTION
    work = torch.promote_types(q.dtype, torch.float32)
    qw, kw, vw, bw = q.to(work), k.to(work), v.to(work), beta.to(work)
    S = qw.new_zeros(*q.shape[:-2], q.shape[-1], v.shape[-1]) if state is None else state.to(work)
    outputs = []
    for t in range(q.shape[-2]):
        k_t = kw[..., t, :]
        delta = bw[..., t, None] * (vw[..., t, :] - (k_t[..., :, None] * S).sum(-2))
        S = S + k_t[..., :, None] * delta[..., None, :]
        outputs.append((qw[..., t, :, None] * S).sum(-2))
    return torch.stack(outputs, dim=-2).to(q.dtype), S.to(q.dtype)
    ### END SOLUTION


# %% tags=["tests:delta_rule"]
from course.checking import check
check("delta_rule")

### BEGIN HIDDEN TESTS
from autograder.instructor.hidden_cells import grade
grade("delta_rule")
### END HIDDEN TESTS

# %% [markdown]
# 回到第 2 节的实验。同样的 key 和 value，用 delta 规则写（$\beta = 1$）：写一遍，以及把同一组 (key, value) 反复写 10 遍
# （"在线最小二乘"多走几步）：

# %%
def write_delta(keys, values):
    return delta_rule(keys, keys, values, torch.ones(keys.shape[:-1]))[1]


delta_errors = [recall_error(write_delta, n) for n in pair_counts]
delta_errors_10 = [recall_error(write_delta, n, passes=10) for n in pair_counts]
for n, lin, once, ten in zip(pair_counts, linear_errors, delta_errors, delta_errors_10):
    print(f"N = {n:>2}：线性注意力 {lin:.2f}，delta 规则写一遍 {once:.2f}，写 10 遍 {ten:.3f}")

fig, ax = plt.subplots(figsize=(7.5, 4.2))
ax.plot(pair_counts, linear_errors, marker="o", label="线性注意力")
ax.plot(pair_counts, delta_errors, marker="o", label="delta 规则，写一遍")
ax.plot(pair_counts, delta_errors_10, marker="o", label="delta 规则，同一组写 10 遍")
ax.axvline(RECALL_DIM, color="gray", linestyle="--")
ax.text(RECALL_DIM + 1, 0.05, "N = D_k", color="gray")
ax.set_xlabel("写入的 (key, value) 对数 N")
ax.set_ylabel("读回的平均误差 |k_i S − v_i|")
ax.set_title(f"联想记忆，D_k = D_v = {RECALL_DIM}，随机单位向量")
ax.grid(alpha=0.3)
ax.legend()
plt.show()

# %% [markdown]
# 三条线说的是三件事：
#
# - delta 规则写一遍，每个 $N$ 的误差都比线性注意力小：每次写入只补差值，不会把串扰越堆越高；
# - 同一组写 10 遍，$N \le 16$（$D_k$ 的一半）时误差降到接近 0：梯度下降在向最小二乘解收敛，而 $N \le D_k$ 个线性无关的 key
#   原则上都能被精确记住；$N$ 接近 $D_k$ 时方程组越来越病态，10 遍不够；$N > D_k$ 时无论写多少遍都不可能全部记住；
# - 线性注意力写 10 遍只是把 $S$ 乘以 10：信号和串扰一起放大 10 倍，两者的比例一点没变。
#
# 看得最清楚的是"覆盖"：同一个 key 先写 $v_1$ 再写 $v_2$。

# %%
key_unit = F.normalize(torch.randn(1, 1, 1, RECALL_DIM, generator=torch.Generator().manual_seed(3)), dim=-1)
old_value, new_value = random_pairs(1, 1, seed=4)[1], random_pairs(1, 1, seed=5)[1]
keys_rewrite, values_rewrite = key_unit.repeat(1, 1, 2, 1), torch.cat([old_value, new_value], dim=2)
for name, state in [("线性注意力", write_linear(keys_rewrite, values_rewrite)),
                    ("delta 规则", write_delta(keys_rewrite, values_rewrite))]:
    read = key_unit @ state
    print(f"{name}：读出和旧值的距离 {(read - old_value).norm():.2f}，和新值的距离 {(read - new_value).norm():.2f}")

# %% [markdown]
# 线性注意力读出的是 $v_1 + v_2$，离两个值都不近；delta 规则读出的正好是新值 $v_2$。

# %% [markdown]
# ## 4. 门：学出来的遗忘
#
# delta 规则会覆盖同一个 key 的旧值，但对不再需要的**其他**内容无能为力：上一段文章留下的 (key, value) 一直占着位置，
# 和新的内容串扰。办法是每一步写入之前，先把整张表乘一个 0～1 之间的数：
#
# $$
# S \leftarrow e^{g_t} S, \qquad g_t \le 0 .
# $$
#
# $g_t$ 是"衰减的对数"：$g_t = 0$ 时不忘，$g_t \to -\infty$ 时整张表清零。它每一步、每个头各有一个，由当前 token 算出来，
# 所以模型可以在一段话的开头大幅遗忘、在中间几乎不忘。这就是 **Gated DeltaNet**（Yang、Kautz、Hatamizadeh 2024）：
# Mamba-2 的门加上 delta 规则。
#
# 门的形状来自 Mamba-2。Mamba-2 的每个头有一个负数 $A = -e^{A_{\log}}$ 和一个由输入算出的步长
# $\Delta_t = \operatorname{softplus}(a_t + \text{dt\_bias}) > 0$，衰减是 $e^{\Delta_t A}$。写成对数，
#
# $$
# g_t = -e^{A_{\log}} \cdot \operatorname{softplus}(a_t + \text{dt\_bias}) .
# $$
#
# $e^{A_{\log}} > 0$、$\operatorname{softplus} > 0$，所以 $g_t < 0$ 永远成立：不管网络输出什么，状态只会缩小、不会放大。
# Qwen3.5 的 checkpoint 里存的就是 `A_log` 和 `dt_bias`，第 6 节会用到。
#
# 完整的一步（Hugging Face 的 `torch_recurrent_gated_delta_rule` 的顺序）：
#
# $$
# S \leftarrow e^{g_t} S, \qquad
# \delta = \beta_t (v_t - k_t S), \qquad
# S \leftarrow S + k_t^\top \delta, \qquad
# o_t = q_t S .
# $$
#
# **先衰减**，之后的读（$k_t S$）和写都用衰减过的 $S$。
#
# 用第 3 节的眼光再看一遍：delta 规则是对 $\tfrac12\lVert k_t S - v_t \rVert^2$ 走一步梯度下降，门在这一步之前把 $S$ 乘上 $e^{g_t}$，
# 就是优化里的**权重衰减**（weight decay）：每步先把参数往 0 拉一点，再沿梯度走。把整个递推看成一个在线学习的过程——每读一个
# token，就拿它的 (key, value) 把记忆表训练一步——$\beta_t$ 是这一步的学习率，$1 - e^{g_t}$ 是这一步的衰减率，两者都由当前 token
# 算出来：模型自己决定这一步学多少、忘多少。

# %% [markdown]
# ### 练习 4：`gated_delta_rule(q, k, v, g, beta, state=None)`
#
# 难度：🔴🔴⚪⚪⚪ · 约 10 分钟
#
# 在练习 3 的每一步最前面加上 $S \leftarrow e^{g_t} S$。`g [B, H, T]` 是衰减的对数；返回值和规矩同练习 3。
#
# <details><summary>提示</summary>
#
# - `g[..., t, None, None].exp()` 是 `[B, H, 1, 1]`，能乘到 `[B, H, Dk, Dv]` 上。
# - 乘的是 $e^{g_t}$，不是 $g_t$ 本身；$e^{g_t}$ 在 0 和 1 之间。
# - 顺序：衰减 → 读 $k_t S$ → 写修正量 → 读 $o_t$。
#
# </details>

# %% tags=["solution:gated_delta_rule"]
def gated_delta_rule(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, g: torch.Tensor, beta: torch.Tensor,
                     state: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """The gated delta rule: S <- exp(g_t) S; delta = beta_t (v_t - k_t S); S <- S + k_t^T delta; o_t = q_t S.

    q, k: [B, H, T, Dk]; v: [B, H, T, Dv]; g (log of the decay, <= 0), beta: [B, H, T];
    state: [B, H, Dk, Dv] or None (zeros). Returns (o [B, H, T, Dv], state [B, H, Dk, Dv]) in q's dtype.
    """
    ### BEGIN SOLUTION
    work = torch.promote_types(q.dtype, torch.float32)
    qw, kw, vw, gw, bw = q.to(work), k.to(work), v.to(work), g.to(work), beta.to(work)
    S = qw.new_zeros(*q.shape[:-2], q.shape[-1], v.shape[-1]) if state is None else state.to(work)
    outputs = []
    for t in range(q.shape[-2]):
        S = S * gw[..., t, None, None].exp()
        k_t = kw[..., t, :]
        delta = bw[..., t, None] * (vw[..., t, :] - (k_t[..., :, None] * S).sum(-2))
        S = S + k_t[..., :, None] * delta[..., None, :]
        outputs.append((qw[..., t, :, None] * S).sum(-2))
    return torch.stack(outputs, dim=-2).to(q.dtype), S.to(q.dtype)
    ### END SOLUTION


# %% tags=["tests:gated_delta_rule"]
from course.checking import check
check("gated_delta_rule")

### BEGIN HIDDEN TESTS
from autograder.instructor.hidden_cells import grade
grade("gated_delta_rule")
### END HIDDEN TESTS

# %% [markdown]
# 衰减是乘法，会一步步累积：$t$ 步以前写进去的内容，现在只剩 $e^{g_1 + \dots + g_t}$。$g$ 固定时，"半衰期"是 $\ln 2 / |g|$ 步：

# %%
fig, ax = plt.subplots(figsize=(7, 3.6))
steps = torch.arange(0, 101)
for decay in (0.99, 0.95, 0.8):
    g_const = math.log(decay)
    print(f"exp(g) = {decay}（g = {g_const:.3f}）：半衰期 {math.log(2) / -g_const:.1f} 步，100 步后剩 {decay**100:.2g}")
    ax.plot(steps, torch.exp(g_const * steps), label=f"exp(g) = {decay}")
ax.set_xlabel("写入之后又过了多少步")
ax.set_ylabel("还剩多少")
ax.set_title("每步乘 exp(g)：记忆按指数衰减")
ax.grid(alpha=0.3)
ax.legend()
plt.show()

# %% [markdown]
# 门更有用的地方在于它可以**忽大忽小**：一段话里 $g$ 接近 0，记忆长久保留；遇到新话题时 $g$ 很负，一步就把旧内容清掉。
# 第 7 节训练出来的小模型会自己学会这一招。

# %% [markdown]
# ## 5. 分块形式：把递推变成矩阵乘法
#
# 练习 4 是一个 $T$ 步的 Python 循环，每步只做很小的运算。训练时 $T$ 动辄几千，这样太慢；而并行形式（练习 1）
# 又要 $T \times T$ 的矩阵。折中的办法是**分块**：每 $C$ 个位置一块（Qwen3.5 的实现用 $C = 64$），块与块之间照样递推
# （只传一个状态），块内的 $C$ 步一次用矩阵乘法算完。
#
# ### 块内的推导
#
# 看一块，块开始时的状态是 $S_0$，块内位置记作 $1, \dots, C$。令 $\gamma_t = g_1 + \dots + g_t$（块内的累计衰减，
# 对数），$e^{\gamma_t - \gamma_j}$ 就是从位置 $j$ 到 $t$ 累积的衰减。把每步的修正量记作 $\delta_t$（行向量，$D_v$ 维），递推展开：
#
# $$
# S_t = e^{\gamma_t} S_0 + \sum_{j \le t} e^{\gamma_t - \gamma_j}\, k_j^\top \delta_j .
# $$
#
# 代回 $\delta_t = \beta_t (v_t - k_t \cdot e^{g_t} S_{t-1})$，而 $e^{g_t} S_{t-1} = e^{\gamma_t} S_0 + \sum_{j<t} e^{\gamma_t - \gamma_j} k_j^\top \delta_j$：
#
# $$
# \delta_t + \sum_{j < t} \beta_t\, e^{\gamma_t - \gamma_j} (k_t \cdot k_j)\, \delta_j = \beta_t \big(v_t - e^{\gamma_t} k_t S_0\big) .
# $$
#
# 把 $C$ 个 $\delta_t$ 排成 $C \times D_v$ 的矩阵 $\Delta$，这是**一个下三角线性方程组**：
#
# $$
# (I + A)\, \Delta = \operatorname{diag}(\beta)\big(V - \operatorname{diag}(e^{\gamma}) K S_0\big), \qquad
# A_{tj} = \beta_t\, e^{\gamma_t - \gamma_j} (k_t \cdot k_j) \ \ (j < t), \quad \text{其余为 } 0 .
# $$
#
# $I + A$ 是对角线全为 1 的下三角矩阵，用前代法（`torch.linalg.solve_triangular`）一次解出所有 $\delta$。
# 这种把一串"减去已写内容"的更新合成一个三角方程组的做法叫 **UT 变换**；把 $C$ 个 $(I - \beta_t k_t^\top k_t)$ 的连乘写成
# "单位矩阵减一个低秩乘积"的 **WY 表示**（来自 Householder 矩阵的连乘）是同一个思路的另一种写法。
# 有了 $\Delta$，输出和块末的状态也都是矩阵乘法：
#
# $$
# O = \operatorname{diag}(e^{\gamma})\, Q S_0 + \big(Q K^\top \odot M\big) \Delta, \qquad M_{tj} = e^{\gamma_t - \gamma_j}\ (j \le t),\ \text{其余为 } 0,
# $$
#
# $$
# S_C = e^{\gamma_C} S_0 + \big(\operatorname{diag}(e^{\gamma_C - \gamma})\, K\big)^\top \Delta .
# $$
#
# 第一项是"读块开始时的状态"，第二项是"块内的线性注意力"（带衰减的因果掩码 $M$ 包括对角线，和练习 1 一样）。
# 每块的运算量是 $O(C^2 D_k + C D_k D_v)$，块间的循环只有 $T / C$ 步。
#
# 数值上要小心一点：$e^{\gamma_t - \gamma_j}$ 要先算差再取 exp。$\gamma$ 可能是 $-1000$，单独算 $e^{-\gamma_j}$ 会溢出成 inf；
# 上三角（$j > t$）的差是正数，要在 exp **之前**遮掉（填 $-\infty$，exp 之后正好是 0）。

# %% [markdown]
# ### 练习 5：`chunked_gated_delta_rule(q, k, v, g, beta, chunk_size=64, state=None)`
#
# 难度：🔴🔴🔴🔴🔴 · 约 30 分钟
#
# 输入、输出和 `gated_delta_rule` 完全一样，结果也要一样（到浮点误差），对任何 $T$ 都成立：$T$ 不是 `chunk_size`
# 的整数倍时，最后一块短一些；$T = 1$ 也要能算。在 float32 里算（bfloat16 的输入先转过来），返回 `q` 的 dtype。
#
# 只在块与块之间循环：块内的 $c$ 个位置用矩阵乘法一起算，状态每块只更新一次。评分时会数你的代码算出了多少个
# 状态形状 $[B, H, D_k, D_v]$ 的张量：逐个位置更新状态的循环（比如每块调用一次 `gated_delta_rule`）结果一样，
# 但不是分块算法，不得分。
#
# 每一块（`q[..., s:s+C, :]` 等，$c$ 是这一块的实际长度）：
#
# 1. `gamma = g.cumsum(-1)`；`decay[t, j] = exp(gamma[t] − gamma[j])`，$j > t$ 的位置先填 $-\infty$ 再 exp；
# 2. $A = \beta_t (k_t \cdot k_j) \cdot$ `decay`，只留严格下三角（`tril(-1)`），解 $(I + A)\Delta = \beta \odot (V - e^{\gamma} K S_0)$；
# 3. $O = e^{\gamma} Q S_0 + (Q K^\top \odot \text{decay}) \Delta$（`decay` 含对角线）；
# 4. $S \leftarrow e^{\gamma_c} S_0 + (e^{\gamma_c - \gamma} K)^\top \Delta$。
#
# <details><summary>提示</summary>
#
# - 块的循环：`for start in range(0, T, chunk_size)`，`part = slice(start, start + chunk_size)`；切片超出末尾会自动截短。
# - 下三角掩码：`torch.ones(c, c, dtype=torch.bool).tril()`；`(gamma[..., :, None] - gamma[..., None, :]).masked_fill(~lower, float("-inf")).exp()`。
# - `torch.linalg.solve_triangular(I_plus_A, rhs, upper=False, unitriangular=True)` 解 $(I + A) X = \text{rhs}$，
#   `rhs` 是 `[B, H, c, Dv]`。
# - "乘 $\operatorname{diag}(e^{\gamma})$"就是每行乘一个数：`gamma.exp()[..., None] * q`。
# - $\gamma_c$ 是每块最后一个位置：`gamma[..., -1]`。
# - 写不对时，先拿 `chunk_size=1` 和 `gated_delta_rule` 比（每块一个位置，$A = 0$），再试 `chunk_size=2`。
#
# </details>

# %% tags=["solution:chunked_gated_delta_rule"]
def chunked_gated_delta_rule(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, g: torch.Tensor, beta: torch.Tensor,
                             chunk_size: int = 64, state: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """gated_delta_rule, chunk_size positions at a time: matrix products inside a chunk (the UT transform),
    the state carried from chunk to chunk. Any T (the last chunk may be shorter).

    q, k: [B, H, T, Dk]; v: [B, H, T, Dv]; g, beta: [B, H, T]; state: [B, H, Dk, Dv] or None (zeros).
    Returns (o [B, H, T, Dv], state [B, H, Dk, Dv]) in q's dtype, computed in float32 at least.
    """
    ### BEGIN SOLUTION
    work = torch.promote_types(q.dtype, torch.float32)
    qw, kw, vw, gw, bw = q.to(work), k.to(work), v.to(work), g.to(work), beta.to(work)
    S = qw.new_zeros(*q.shape[:-2], q.shape[-1], v.shape[-1]) if state is None else state.to(work)
    outputs = []
    for start in range(0, q.shape[-2], chunk_size):
        part = slice(start, start + chunk_size)
        qc, kc, vc, gc, bc = qw[..., part, :], kw[..., part, :], vw[..., part, :], gw[..., part], bw[..., part]
        size = qc.shape[-2]
        gamma = gc.cumsum(-1)
        lower = torch.ones(size, size, dtype=torch.bool, device=q.device).tril()
        decay = (gamma[..., :, None] - gamma[..., None, :]).masked_fill(~lower, float("-inf")).exp()
        strictly_lower = (bc[..., :, None] * (kc @ kc.transpose(-2, -1)) * decay).tril(-1)
        system = strictly_lower + torch.eye(size, dtype=work, device=q.device)
        rhs = bc[..., None] * (vc - (gamma.exp()[..., None] * kc) @ S)
        delta = torch.linalg.solve_triangular(system, rhs, upper=False, unitriangular=True)
        outputs.append((gamma.exp()[..., None] * qc) @ S + ((qc @ kc.transpose(-2, -1)) * decay) @ delta)
        to_end = (gamma[..., -1:] - gamma).exp()
        S = gamma[..., -1, None, None].exp() * S + (to_end[..., None] * kc).transpose(-2, -1) @ delta
    return torch.cat(outputs, dim=-2).to(q.dtype), S.to(q.dtype)
    ### END SOLUTION


# %% tags=["tests:chunked_gated_delta_rule"]
from course.checking import check
check("chunked_gated_delta_rule")

### BEGIN HIDDEN TESTS
from autograder.instructor.hidden_cells import grade
grade("chunked_gated_delta_rule")
### END HIDDEN TESTS

# %% [markdown]
# 比一比两种写法的速度。4 个头、$D_k = D_v = 64$，$T$ 从 128 到 2048（每种跑 3 次，取最快的一次）：

# %%
def seconds(rule, *args, repeats: int = 3) -> float:
    """Wall-clock seconds of the fastest of `repeats` calls rule(*args) (the others met a busier machine)."""
    best = math.inf
    for _ in range(repeats):
        start = time.perf_counter()
        rule(*args)
        best = min(best, time.perf_counter() - start)
    return best


torch.manual_seed(4)
lengths = [128, 256, 512, 1024, 2048]
recurrent_times, chunked_times = [], []
for seq in lengths:
    q_t, v_t = torch.randn(1, 4, seq, 64), torch.randn(1, 4, seq, 64)
    k_t = F.normalize(torch.randn(1, 4, seq, 64), dim=-1)
    g_t, beta_t = -0.1 * torch.rand(1, 4, seq), torch.rand(1, 4, seq)
    o_loop, _ = gated_delta_rule(q_t, k_t, v_t, g_t, beta_t)
    o_blocks, _ = chunked_gated_delta_rule(q_t, k_t, v_t, g_t, beta_t)
    recurrent_times.append(seconds(gated_delta_rule, q_t, k_t, v_t, g_t, beta_t))
    chunked_times.append(seconds(chunked_gated_delta_rule, q_t, k_t, v_t, g_t, beta_t))
    print(f"T = {seq:>4}：逐步 {recurrent_times[-1] * 1e3:7.1f} ms，分块 {chunked_times[-1] * 1e3:6.1f} ms，"
          f"快 {recurrent_times[-1] / chunked_times[-1]:4.1f} 倍；两者最多差 {(o_loop - o_blocks).abs().max():.1e}")

fig, ax = plt.subplots(figsize=(7, 4))
ax.plot(lengths, [1e3 * s for s in recurrent_times], marker="o", label="gated_delta_rule（逐步）")
ax.plot(lengths, [1e3 * s for s in chunked_times], marker="o", label="chunked_gated_delta_rule（C = 64）")
ax.set_xscale("log", base=2)
ax.set_yscale("log")
ax.set_xticks(lengths, labels=[str(n) for n in lengths])
ax.set_xlabel("序列长度 T")
ax.set_ylabel("用时（ms，对数坐标）")
ax.set_title("同一个计算的两种写法（本机 CPU，单线程）")
ax.grid(True, which="both", alpha=0.3)
ax.legend()
plt.show()

# %% [markdown]
# 两种写法的计算量都和 $T$ 成正比：逐步形式循环 $T$ 次，每次只做很小的运算，时间大多花在 Python 循环和调度上；
# 分块形式只循环 $T / C$ 次，每次做的是 $64 \times 64$ 的矩阵乘法和一次三角求解。具体快多少倍看上面打印的数，
# 它和机器、线程数有关，机器忙的时候计时也有噪声。训练用分块形式；生成时每次只来一个 token，一块只有一个位置，两种写法是同一个计算。

# %% [markdown]
# ### 另一条推导：WY 表示，和 Hugging Face 的"伪 value"
#
# 读 Hugging Face 的 `torch_chunk_gated_delta_rule` 会看到 `value`、`k_cumdecay`、`v_new` 这些名字，和上面的推导对不上号。
# 它们来自另一条推导：**WY 表示**。结果和练习 5 一样，只是计算的顺序不同。
#
# 先看不带门的一块（$g = 0$）。思考题 2 的提示把一步 delta 规则写成 $S_t = (I - \beta_t k_t^\top k_t) S_{t-1} + \beta_t k_t^\top v_t$，
# 所以一块走完是
#
# $$
# S_C = P_C S_0 + H_C, \qquad P_C = (I - \beta_C k_C^\top k_C) \cdots (I - \beta_1 k_1^\top k_1) .
# $$
#
# $P_C$ 是 $C$ 个"单位矩阵减一个秩一矩阵"的连乘（$\beta = 2$、$\lVert k \rVert = 1$ 时每个因子正是 Householder 反射）。
# WY 表示说，这样的连乘总能写成单位矩阵减一个秩不超过 $C$ 的乘积：
#
# $$
# P_t = I - \sum_{j \le t} k_j^\top w_j, \qquad H_t = \sum_{j \le t} k_j^\top u_j,
# $$
#
# $$
# w_t = \beta_t \Big(k_t - \sum_{j < t} (k_t \cdot k_j)\, w_j\Big), \qquad
# u_t = \beta_t \Big(v_t - \sum_{j < t} (k_t \cdot k_j)\, u_j\Big) .
# $$
#
# **用归纳法证明。** $t = 1$ 时 $P_1 = I - k_1^\top (\beta_1 k_1) = I - k_1^\top w_1$，$H_1 = k_1^\top (\beta_1 v_1) = k_1^\top u_1$。
# 设 $t - 1$ 时成立。由归纳假设 $k_t P_{t-1} = k_t - \sum_{j<t} (k_t \cdot k_j) w_j$，于是
#
# $$
# P_t = P_{t-1} - k_t^\top \beta_t\, (k_t P_{t-1})
#     = I - \sum_{j < t} k_j^\top w_j - k_t^\top \beta_t \Big(k_t - \sum_{j<t} (k_t \cdot k_j) w_j\Big)
#     = I - \sum_{j \le t} k_j^\top w_j .
# $$
#
# $H_t = H_{t-1} + k_t^\top \beta_t (v_t - k_t H_{t-1})$，而 $k_t H_{t-1} = \sum_{j<t} (k_t \cdot k_j) u_j$，同样得证。∎
#
# 把 $w_t$、$u_t$ 排成矩阵 $W$（$C \times D_k$）、$U$（$C \times D_v$），两个递推是**同一个**下三角方程组，只是右边不同：
#
# $$
# (I + A)\, W = \operatorname{diag}(\beta)\, K, \qquad (I + A)\, U = \operatorname{diag}(\beta)\, V,
# $$
#
# $A$ 就是练习 5 的那个（$g = 0$ 时 $A_{tj} = \beta_t (k_t \cdot k_j)$）。记 $T = (I + A)^{-1} \operatorname{diag}(\beta)$，
# 它同时作用在 $K$ 和 $V$ 上：$W = TK$，$U = TV$，这就是 **UT 变换**这个名字的来历。于是
#
# $$
# S_C = S_0 - K^\top W S_0 + K^\top U = S_0 + K^\top (U - W S_0) .
# $$
#
# 对照练习 5 的 $S_C = S_0 + K^\top \Delta$：$\Delta = U - W S_0$。确实，$(I + A)(U - W S_0) = \operatorname{diag}(\beta)(V - K S_0)$，
# 正是练习 5 的方程组。带门时只多两处衰减：$A$ 里带 $e^{\gamma_t - \gamma_j}$（和练习 5 一样），$W$ 的右边是
# $\operatorname{diag}(\beta)\operatorname{diag}(e^{\gamma}) K$，仍然有 $\Delta = U - W S_0$。
#
# $U$ 可以读成"假如块开始时记忆表是空的，每个位置该写入的修正量"，所以叫**伪 value**。Hugging Face 的写法在块间循环
# **之前**，就对所有块一次算好 $T$（逐行前代）、$U$（它叫 `value`）和 $W$（它叫 `k_cumdecay`）；循环里只剩
# $\Delta = U - W S_0$（它叫 `v_new`）和读写状态。练习 5 把三角方程组放在循环里解，因为右边含 $S_0$；WY 的写法把所有
# 不依赖 $S_0$ 的东西挪出了循环，循环里只剩一次矩阵乘法 $W S_0$。下面在一个小块上核对这两条推导：

# %%
torch.manual_seed(9)
chunk, key_dim, value_dim = 8, 6, 5
k_c = F.normalize(torch.randn(1, 1, chunk, key_dim), dim=-1)
v_c, q_c = torch.randn(1, 1, chunk, value_dim), torch.randn(1, 1, chunk, key_dim)
beta_c, g_c = torch.rand(1, 1, chunk), -0.3 * torch.rand(1, 1, chunk)
state_0 = torch.randn(1, 1, key_dim, value_dim)


def wy_chunk_state(keys, values, beta, g, start_state):
    """The state [Dk, Dv] after one chunk (keys [C, Dk], values [C, Dv], beta and g [C]), the WY way: W and U from
    one triangular matrix, then the decayed start_state plus the decayed keys' transpose times U - W start_state."""
    length = keys.shape[0]
    gamma = g.cumsum(0)
    later = torch.ones(length, length, dtype=torch.bool).triu(1)
    decay = (gamma[:, None] - gamma[None, :]).masked_fill(later, float("-inf")).exp()
    lower = torch.eye(length) + (beta[:, None] * (keys @ keys.T) * decay).tril(-1)  # I + A
    w = torch.linalg.solve_triangular(lower, (beta * gamma.exp())[:, None] * keys, upper=False)
    u = torch.linalg.solve_triangular(lower, beta[:, None] * values, upper=False)  # the pseudo-values
    return gamma[-1].exp() * start_state + ((gamma[-1] - gamma).exp()[:, None] * keys).T @ (u - w @ start_state)


_, state_loop = gated_delta_rule(q_c, k_c, v_c, g_c, beta_c, state=state_0)
state_wy = wy_chunk_state(k_c[0, 0], v_c[0, 0], beta_c[0, 0], g_c[0, 0], state_0[0, 0])
print(f"带门：WY 写法的块末状态和你的 gated_delta_rule 逐步算的最多差 {(state_wy - state_loop[0, 0]).abs().max():.1e}")

keys_c, betas = k_c[0, 0], beta_c[0, 0]
w_no_gate = torch.linalg.solve_triangular(torch.eye(chunk) + (betas[:, None] * (keys_c @ keys_c.T)).tril(-1),
                                          betas[:, None] * keys_c, upper=False)
product = torch.eye(key_dim)
for t in range(chunk):
    product = (torch.eye(key_dim) - betas[t] * torch.outer(keys_c[t], keys_c[t])) @ product
print(f"不带门：{chunk} 个 (I − β k^T k) 的连乘，和 I − K^T W 最多差 "
      f"{(product - (torch.eye(key_dim) - keys_c.T @ w_no_gate)).abs().max():.1e}")

# %% [markdown]
# ## 6. Qwen3.5 的 Gated DeltaNet 层
#
# ### 一个短卷积
#
# 在 q、k、v 进入 delta 规则之前，Qwen3.5 先让它们过一个**因果的深度卷积**（depthwise causal conv1d），核长 $K = 4$，
# 然后过 SiLU。"深度"是说每个通道各有自己的 4 个权重、只看自己这个通道；"因果"是说位置 $t$ 只看 $t-3, \dots, t$：
#
# $$
# y_{c,t} = \sum_{j=0}^{K-1} w_{c,j}\, x_{c,\,t-(K-1)+j} \qquad (t - (K-1) + j < 0 \text{ 的项按 0 算}) .
# $$
#
# 为什么要它？delta 规则每一步只能看当前 token 的 $k_t$ 和 $v_t$。有了这个短卷积，$k_t$ 里可以掺进前几个 token 的信息，
# 比如"前一个词是什么"，模型就能把"前一个词 → 这个词"这样的配对写进记忆。卷积的参数很少（每通道 4 个）。
#
# 生成时每次只来一个 token，它要用到前 $K - 1 = 3$ 个输入，所以缓存里要存每个通道最近 3 个输入：这就是**卷积状态**。

# %% [markdown]
# ### 练习 6：`causal_conv1d(x, weight, conv_state=None)`
#
# 难度：🔴🔴⚪⚪⚪ · 约 10 分钟
#
# - `x` 是 `[B, C, T]`，`weight` 是 `[C, 1, K]`（`nn.Conv1d(C, C, K, groups=C)` 的权重形状）。这里的 $C$ 是通道数、$K$ 是核长，
#   和第 5 节的块大小 $C$、key 矩阵 $K$ 无关（沿用 PyTorch 文档的写法）；
# - `conv_state` 是 `[B, C, K−1]`：`x` 之前的 $K-1$ 个输入，`None` 时当作全 0；
# - 返回 `(y [B, C, T], conv_state [B, C, K−1])`，新的 `conv_state` 是把旧状态和 `x` 接起来之后的**最后** $K-1$ 列；
# - 不加激活函数（SiLU 在层里做），输出和 `x` 同 dtype。从返回的状态接着算，要和一次算完整段一样。
#
# <details><summary>提示</summary>
#
# - 把 `conv_state` 接在 `x` 前面（`torch.cat(..., dim=-1)`），左边就有了 $K-1$ 列，再用
#   `F.conv1d(full, weight, groups=C)`（不加 padding）正好得到 $T$ 个输出。
# - `F.conv1d` 做的是互相关：`weight[c, 0, K−1]` 乘的是当前位置，`weight[c, 0, 0]` 乘的是最早的那个。
# - 也可以用 `padding=K−1`，但它在**两边**各补 $K-1$ 个 0，输出有 $T + K - 1$ 个，只有前 $T$ 个是因果的；取错一头
#   （或者用 "same" 式的对称 padding），位置 $t$ 就会看到后面的 token。接上 `conv_state` 的写法更简单，也正好能接着算。
# - $T < K - 1$ 时，新状态里还有一部分旧状态：取接起来之后的最后 $K-1$ 列就对了。
#
# </details>

# %% tags=["solution:causal_conv1d"]
def causal_conv1d(x: torch.Tensor, weight: torch.Tensor,
                  conv_state: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Depthwise causal conv, no activation: y[b, c, t] = sum_j weight[c, 0, j] * x[b, c, t - (K-1) + j].

    x: [B, C, T]; weight: [C, 1, K]; conv_state: [B, C, K-1], the K-1 inputs before x (zeros when None).
    Returns (y [B, C, T], conv_state [B, C, K-1]), the last K-1 inputs, so continuing from it equals one run.
    """
    ### BEGIN SOLUTION
    channels, _, width = weight.shape
    past = x.new_zeros(x.shape[0], channels, width - 1) if conv_state is None else conv_state.to(x.dtype)
    full = torch.cat([past, x], dim=-1)
    return F.conv1d(full, weight.to(x.dtype), groups=channels), full[..., full.shape[-1] - (width - 1):]
    ### END SOLUTION


# %% tags=["tests:causal_conv1d"]
from course.checking import check
check("causal_conv1d")

### BEGIN HIDDEN TESTS
from autograder.instructor.hidden_cells import grade
grade("causal_conv1d")
### END HIDDEN TESTS

# %% [markdown]
# ### 整层：数据怎么流
#
# 一次前向（$d$ = `hidden_size`；$H_k, H_v$ 是 key 头和 value 头的个数；括号里是 Qwen3.5-0.8B 的数）：
#
# | 步骤 | 形状 | 说明 |
# |---|---|---|
# | 输入 `x` | `[B, T, d]` (1024) | 已过这一层的 `input_layernorm`；`attention_mask` 里是 0 的位置先置零 |
# | `in_proj_qkv(x)` | `[B, T, 2 H_k D_k + H_v D_v]` (6144) | q、k、v 拼在一起：前 $H_k D_k$ 个是 q，接着 $H_k D_k$ 个 k，最后 $H_v D_v$ 个 v |
# | `causal_conv1d` + SiLU | 同上 | 练习 6，用 `conv1d.weight` `[6144, 1, 4]`；转成 `[B, C, T]` 再转回来 |
# | 拆成头 | q、k `[B, H_k, T, D_k]` (16, 128)，v `[B, H_v, T, D_v]` (16, 128) | |
# | q、k 的 L2 归一化 | 形状不变 | 每个头的向量长度变成 1：$x / \sqrt{\sum x^2 + 10^{-6}}$ |
# | q 乘 $D_k^{-1/2}$ | 形状不变 | 相当于 softmax 注意力里的 $1/\sqrt D$ |
# | key 头复制给 value 头 | q、k `[B, H_v, T, D_k]` | $H_v > H_k$ 时，value 头 $h$ 用 key 头 $h \,/\!/\, (H_v / H_k)$（`repeat_interleave`，和 GQA 一样） |
# | $\beta = \operatorname{sigmoid}(b)$ | `[B, H_v, T]` | `b = in_proj_b(x)` |
# | $g = -e^{A_{\log}} \operatorname{softplus}(a + \text{dt\_bias})$ | `[B, H_v, T]` | `a = in_proj_a(x)`；在 float32 里算 |
# | 门控 delta 规则 | `o [B, H_v, T, D_v]`，状态 `[B, H_v, D_k, D_v]` | 练习 5，从缓存的状态开始 |
# | 带门的 RMSNorm | `[B, T, H_v, D_v]` | 每个 value 头：$\operatorname{RMSNorm}(o) \cdot w \cdot \operatorname{SiLU}(z)$，`z = in_proj_z(x)` |
# | 合并头、`out_proj` | `[B, T, d]` | |
#
# 几点要注意：
#
# - **为什么 L2 归一化？** 有了 $\lVert k_t \rVert = 1$，delta 规则那一步 $S \leftarrow (I - \beta_t k_t^\top k_t) S + \dots$ 里的矩阵
#   特征值在 $[1 - \beta_t, 1]$ 之间，状态不会越滚越大（思考题 2）。q 也归一化，读出的尺度就固定了，再乘 $D_k^{-1/2}$。
#   这几个函数（练习 3～5）不做缩放，缩放在层里做。
# - **输出的 norm 是普通 RMSNorm**：`norm.weight` 从 1 开始，乘 $w$，不是作业 06 的 $(1 + w)$；在 float32 里算。
#   它后面乘的门是 **SiLU**（$z \cdot \operatorname{sigmoid}(z)$），不是作业 05 的 sigmoid。
# - **value 头可以比 key 头多**：config 里 `linear_num_value_heads` 可以是 `linear_num_key_heads` 的整数倍，
#   几个 value 头共用同一个 key 头的 q、k，各有各的 v、$\beta$、$g$ 和状态。0.8B 里两者都是 16（第 1 节打印的）。
# - **padding**：`attention_mask` 为 0 的位置，输入先乘 0（Hugging Face 也这样做）。这样左侧 padding 时，
#   pad 位置的 k、v 都是 0，什么也写不进状态，真实 token 的结果和没有 padding 时一样。
#   `attention_mask` 是 `[B, L + T]`，覆盖缓存里的和这一次的位置，这一次用它的最后 $T$ 列。
#
# ### 缓存
#
# 这一层的缓存只有两样东西，**都不随 $T$ 增长**：卷积状态 `[B, 6144, 3]` 和记忆表 `[B, H_v, D_k, D_v]`。
# 下面这个类已经写好了：`update(conv_state, recurrent_state)` 把两样都换成新的。

# %%
class GatedDeltaNetCache:
    """What one Gated DeltaNet layer carries from one call to the next, in place of a growing K/V.

    conv_state [B, conv_dim, K-1]: the last K-1 inputs of the conv; recurrent_state [B, Hv, Dk, Dv]: the delta
    rule's state. Both None in a new cache; update() replaces them.
    """

    def __init__(self):
        self.conv_state = None
        self.recurrent_state = None

    def update(self, conv_state: torch.Tensor, recurrent_state: torch.Tensor) -> None:
        self.conv_state, self.recurrent_state = conv_state, recurrent_state


# %% [markdown]
# ### 练习 7：`Qwen35GatedDeltaNet(config)`
#
# 难度：🔴🔴🔴🔴⚪ · 约 30 分钟
#
# `__init__(config)`：从 config 读 `hidden_size`、`linear_num_key_heads`、`linear_num_value_heads`、`linear_key_head_dim`、
# `linear_value_head_dim`、`linear_conv_kernel_dim`、`rms_norm_eps`，建下面这些子模块和参数，**名字必须一字不差**
# （和 Hugging Face 的 `Qwen3_5GatedDeltaNet` 一样，checkpoint 的 `linear_attn` 权重才能直接装进来）：
#
# | 名字 | 类型 | 形状 |
# |---|---|---|
# | `in_proj_qkv` | `nn.Linear(d, 2 H_k D_k + H_v D_v, bias=False)` | `[conv_dim, d]` |
# | `in_proj_z` | `nn.Linear(d, H_v D_v, bias=False)` | `[H_v D_v, d]` |
# | `in_proj_b`、`in_proj_a` | `nn.Linear(d, H_v, bias=False)` | `[H_v, d]` |
# | `conv1d` | `nn.Conv1d(conv_dim, conv_dim, K, groups=conv_dim, padding=K − 1, bias=False)` | weight `[conv_dim, 1, K]` |
# | `dt_bias` | `nn.Parameter(torch.ones(H_v))` | `[H_v]` |
# | `A_log` | `nn.Parameter(torch.zeros(H_v))` | `[H_v]` |
# | `norm` | 你写的 `GatedRMSNorm(D_v, rms_norm_eps)`（见下） | weight `[D_v]` |
# | `out_proj` | `nn.Linear(H_v D_v, d, bias=False)` | `[d, H_v D_v]` |
#
# （`conv1d` 的 `padding` 只是为了和 Hugging Face 的模块一模一样；你在 `convolve` 里用的是它的 `weight` 和你的 `causal_conv1d`。）
#
# `GatedRMSNorm(dim, eps)`：`weight` 初始化为 1；`forward(o, z)` 在最后一维上算
# $o \cdot \operatorname{rsqrt}(\operatorname{mean}(o^2) + \varepsilon) \cdot w \cdot \operatorname{SiLU}(z)$，在 float32 里算，返回 `o` 的 dtype。
#
# `forward` 已经写好，它把五步串起来；你来写这五个方法：
#
# 1. **`convolve(mixed, cache)`**：`in_proj_qkv` 的输出 `[B, T, conv_dim]` 转成 `[B, C, T]`，从缓存的卷积状态（没有缓存时是 None）
#    过 `causal_conv1d`，再过 SiLU，转回 `[B, T, conv_dim]`；返回 `(qkv, conv_state)`；
# 2. **`heads(qkv)`**：拆成 q、k、v 和头，q、k 做 L2 归一化（用下面给出的 `l2_normalize`，在 float32 里做），q 乘 $D_k^{-1/2}$，
#    key 头复制给 value 头；返回 q、k `[B, H_v, T, D_k]` 和 v `[B, H_v, T, D_v]`（q、k 转回 `qkv` 的 dtype）；
# 3. **`gates(x)`**：返回 $\beta$ 和 $g$，都是 `[B, H_v, T]`；$g$ 在 float32 里算（bf16 的 $e^{A_{\log}}$ 很粗）；
# 4. **`core(q, k, v, g, beta, cache)`**：从缓存的记忆表（没有缓存时是 None）开始，在 float32 里跑 `chunked_gated_delta_rule`；
#    返回 `(o [B, H_v, T, D_v]`（转回 v 的 dtype）`, state)`，state 保持 float32；
# 5. **`output(o, x)`**：`z = in_proj_z(x)` 拆成 `[B, T, H_v, D_v]`，`norm(o 转成 [B, T, H_v, D_v], z)`，合并头，`out_proj`。
#
# <details><summary>提示</summary>
#
# - 拆 q、k、v：`qkv.split([H_k * D_k, H_k * D_k, H_v * D_v], dim=-1)`；拆头：`unflatten(-1, (heads, dim))`，再 `transpose(1, 2)`。
# - key 头复制给 value 头：`repeat_interleave(H_v // H_k, dim=1)`（不是 `repeat`）。
# - softplus 是 `F.softplus`，SiLU 是 `F.silu`。
# - `forward` 在最后调 `cache.update(conv_state, state)`；你的方法只要返回新的状态。
#
# </details>

# %%
def l2_normalize(x: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """x / sqrt(sum(x^2) + eps) over the last dim, as Hugging Face's (and FLA's) l2norm."""
    return x * torch.rsqrt(x.pow(2).sum(-1, keepdim=True) + eps)


# %% tags=["solution:Qwen35GatedDeltaNet"]
class GatedRMSNorm(nn.Module):
    """RMSNorm(o) * weight * SiLU(z) over the last dim; weight [dim] starts at ones; computed in float32."""

    def __init__(self, dim: int, eps: float = 1e-6):
        super().__init__()
        ### BEGIN SOLUTION
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))
        ### END SOLUTION

    def forward(self, o: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
        ### BEGIN SOLUTION
        o32 = o.float()
        normed = o32 * torch.rsqrt(o32.pow(2).mean(-1, keepdim=True) + self.eps)
        return (normed * self.weight.float() * F.silu(z.float())).to(o.dtype)
        ### END SOLUTION


class Qwen35GatedDeltaNet(nn.Module):
    """Qwen3.5's Gated DeltaNet layer, with Hugging Face's parameter names.

    config: Hugging Face attribute names (hidden_size, linear_num_key_heads Hk, linear_num_value_heads Hv,
    linear_key_head_dim Dk, linear_value_head_dim Dv, linear_conv_kernel_dim K, rms_norm_eps).
    forward(x [B, T, d], attention_mask [B, L + T] of 0/1 or None, cache GatedDeltaNetCache or None)
    -> (out [B, T, d], cache).
    """

    def __init__(self, config):
        super().__init__()
        ### BEGIN SOLUTION
        self.num_k_heads, self.num_v_heads = config.linear_num_key_heads, config.linear_num_value_heads
        self.head_k_dim, self.head_v_dim = config.linear_key_head_dim, config.linear_value_head_dim
        self.key_dim, self.value_dim = self.num_k_heads * self.head_k_dim, self.num_v_heads * self.head_v_dim
        hidden, width = config.hidden_size, config.linear_conv_kernel_dim
        conv_dim = 2 * self.key_dim + self.value_dim
        self.in_proj_qkv = nn.Linear(hidden, conv_dim, bias=False)
        self.in_proj_z = nn.Linear(hidden, self.value_dim, bias=False)
        self.in_proj_b = nn.Linear(hidden, self.num_v_heads, bias=False)
        self.in_proj_a = nn.Linear(hidden, self.num_v_heads, bias=False)
        self.conv1d = nn.Conv1d(conv_dim, conv_dim, width, groups=conv_dim, padding=width - 1, bias=False)
        self.dt_bias = nn.Parameter(torch.ones(self.num_v_heads))
        self.A_log = nn.Parameter(torch.zeros(self.num_v_heads))
        self.norm = GatedRMSNorm(self.head_v_dim, config.rms_norm_eps)
        self.out_proj = nn.Linear(self.value_dim, hidden, bias=False)
        ### END SOLUTION

    def convolve(self, mixed: torch.Tensor, cache):
        """Step 1: mixed [B, T, conv_dim] -> causal conv (from the cache's conv state) + SiLU -> (qkv, conv_state)."""
        ### BEGIN SOLUTION
        y, conv_state = causal_conv1d(mixed.transpose(1, 2), self.conv1d.weight,
                                      None if cache is None else cache.conv_state)
        return F.silu(y).transpose(1, 2), conv_state
        ### END SOLUTION

    def heads(self, qkv: torch.Tensor):
        """Step 2: qkv [B, T, conv_dim] -> q, k [B, Hv, T, Dk] (L2-normalised, q * Dk^-1/2), v [B, Hv, T, Dv]."""
        ### BEGIN SOLUTION
        q, k, v = qkv.split([self.key_dim, self.key_dim, self.value_dim], dim=-1)
        q, k = (l2_normalize(t.unflatten(-1, (self.num_k_heads, self.head_k_dim)).transpose(1, 2).float())
                for t in (q, k))
        q = q * self.head_k_dim ** -0.5
        n_rep = self.num_v_heads // self.num_k_heads
        q, k = q.repeat_interleave(n_rep, dim=1), k.repeat_interleave(n_rep, dim=1)
        v = v.unflatten(-1, (self.num_v_heads, self.head_v_dim)).transpose(1, 2)
        return q.to(qkv.dtype), k.to(qkv.dtype), v
        ### END SOLUTION

    def gates(self, x: torch.Tensor):
        """Step 3: x [B, T, d] -> beta = sigmoid(b), g = -exp(A_log) * softplus(a + dt_bias), [B, Hv, T] each."""
        ### BEGIN SOLUTION
        work = torch.promote_types(x.dtype, torch.float32)
        beta = torch.sigmoid(self.in_proj_b(x)).transpose(1, 2)
        g = -self.A_log.to(work).exp() * F.softplus(self.in_proj_a(x).to(work) + self.dt_bias.to(work))
        return beta, g.transpose(1, 2)
        ### END SOLUTION

    def core(self, q, k, v, g, beta, cache):
        """Step 4: the chunked gated delta rule from the cache's state, in float32 -> (o [B, Hv, T, Dv], state)."""
        ### BEGIN SOLUTION
        work = torch.promote_types(q.dtype, torch.float32)
        state = None if cache is None else cache.recurrent_state
        o, state = chunked_gated_delta_rule(q.to(work), k.to(work), v.to(work), g.to(work), beta.to(work),
                                            state=state)
        return o.to(v.dtype), state
        ### END SOLUTION

    def output(self, o: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        """Step 5: norm(o, z) per value head with z = in_proj_z(x), heads merged, out_proj -> [B, T, d]."""
        ### BEGIN SOLUTION
        z = self.in_proj_z(x).unflatten(-1, (self.num_v_heads, self.head_v_dim))
        return self.out_proj(self.norm(o.transpose(1, 2), z).flatten(-2))
        ### END SOLUTION

    def forward(self, x: torch.Tensor, attention_mask: torch.Tensor | None = None, cache=None):
        seq = x.shape[1]
        if attention_mask is not None:
            x = x * attention_mask[:, -seq:, None].to(x.dtype)  # padding positions write nothing
        qkv, conv_state = self.convolve(self.in_proj_qkv(x), cache)
        q, k, v = self.heads(qkv)
        beta, g = self.gates(x)
        o, state = self.core(q, k, v, g, beta, cache)
        if cache is not None:
            cache.update(conv_state, state)
        return self.output(o, x), cache


# %%
# Check, steps 1-3 on a small config with more value heads than key heads.
small = dataclasses.replace(config, hidden_size=24, linear_num_key_heads=2, linear_num_value_heads=4,
                            linear_key_head_dim=8, linear_value_head_dim=6)
torch.manual_seed(6)
layer = Qwen35GatedDeltaNet(small)
expected_shapes = {"in_proj_qkv.weight": (56, 24), "in_proj_z.weight": (24, 24), "in_proj_b.weight": (4, 24),
                   "in_proj_a.weight": (4, 24), "conv1d.weight": (56, 1, 4), "dt_bias": (4,), "A_log": (4,),
                   "norm.weight": (6,), "out_proj.weight": (24, 24)}
got_shapes = {name: tuple(t.shape) for name, t in layer.state_dict().items()}
assert got_shapes == expected_shapes, f"子模块的名字和形状应是\n{expected_shapes}\n得到\n{got_shapes}"
assert torch.equal(layer.norm.weight.data, torch.ones(6)), "GatedRMSNorm 的 weight 应从 1 开始（普通 RMSNorm，不是零中心的）"
x_small = torch.randn(2, 5, 24)
with torch.no_grad():
    qkv_1, conv_state_1 = layer.convolve(layer.in_proj_qkv(x_small), None)
    q_1, k_1, v_1 = layer.heads(qkv_1)
    beta_1, g_1 = layer.gates(x_small)
assert qkv_1.shape == (2, 5, 56) and conv_state_1.shape == (2, 56, 3), \
    f"convolve 应返回 qkv (2, 5, 56) 和 conv_state (2, 56, 3)，得到 {tuple(qkv_1.shape)}、{tuple(conv_state_1.shape)}"
assert torch.allclose(qkv_1[:, 0], F.silu(layer.in_proj_qkv(x_small)[:, 0] * layer.conv1d.weight[:, 0, -1]), atol=1e-5), \
    "位置 0 的卷积只有当前输入乘 weight 的最后一个数，再过 SiLU：卷积是因果的吗？SiLU 加上了吗？"
assert q_1.shape == k_1.shape == (2, 4, 5, 8) and v_1.shape == (2, 4, 5, 6), \
    f"q、k 应是 [B, H_v, T, D_k] = (2, 4, 5, 8)，v 应是 (2, 4, 5, 6)，得到 {tuple(q_1.shape)}、{tuple(k_1.shape)}、{tuple(v_1.shape)}"
assert torch.allclose(k_1.norm(dim=-1), torch.ones(2, 4, 5), atol=1e-3), "k 的每个头应是单位长度：L2 归一化了吗？"
assert torch.allclose(q_1.norm(dim=-1), torch.full((2, 4, 5), 8**-0.5), atol=1e-3), "q 应是单位长度再乘 D_k^(−1/2)"
assert torch.equal(k_1[:, 0], k_1[:, 1]) and not torch.equal(k_1[:, 1], k_1[:, 2]), \
    "value 头 0、1 应共用 key 头 0，value 头 2、3 共用 key 头 1：repeat_interleave，不是 repeat"
assert beta_1.shape == g_1.shape == (2, 4, 5), f"β、g 应是 [B, H_v, T] = (2, 4, 5)，得到 {tuple(beta_1.shape)}、{tuple(g_1.shape)}"
expected_g = -F.softplus(layer.in_proj_a(x_small) + 1.0).transpose(1, 2)  # A_log = 0, dt_bias = 1
assert torch.allclose(g_1, expected_g, atol=1e-5), "A_log = 0、dt_bias = 1 时 g 应是 −softplus(a + 1)：softplus 和 dt_bias 都用上了吗？"
assert torch.allclose(beta_1, torch.sigmoid(layer.in_proj_b(x_small)).transpose(1, 2), atol=1e-6), "β 应是 sigmoid(in_proj_b(x))"
print("✓ 第 1～3 步：卷积、拆头和归一化、β 和 g 都对")

# %%
# Check, steps 4-5.
with torch.no_grad():
    o_4, state_4 = layer.core(q_1, k_1, v_1, g_1, beta_1, None)
    o_direct, _ = gated_delta_rule(q_1, k_1, v_1, g_1, beta_1)
    out_5 = layer.output(o_4, x_small)
    layer_no_z = Qwen35GatedDeltaNet(small)
    layer_no_z.in_proj_z.weight.zero_()  # z = 0: SiLU(0) = 0 shuts the output, sigmoid(0) = 0.5 would not
    silent = layer_no_z.output(o_4, x_small)
assert o_4.shape == (2, 4, 5, 6) and state_4.shape == (2, 4, 8, 6), \
    f"core 应返回 o (2, 4, 5, 6) 和 state (2, 4, 8, 6)，得到 {tuple(o_4.shape)}、{tuple(state_4.shape)}"
assert torch.allclose(o_4, o_direct, atol=1e-5), "core 应是门控 delta 规则（q、k、v、g、β 原样交给它）"
assert out_5.shape == (2, 5, 24), f"output 应返回 [B, T, d] = (2, 5, 24)，得到 {tuple(out_5.shape)}"
assert silent.abs().max() < 1e-6, "z = 0 时 SiLU(z) = 0，输出应是 0：门用的是 SiLU 吗（sigmoid(0) = 0.5）？"
print("✓ 第 4～5 步：delta 规则和带门的 norm 都对")

# %% tags=["tests:Qwen35GatedDeltaNet"]
from course.checking import check
check("Qwen35GatedDeltaNet")

### BEGIN HIDDEN TESTS
from autograder.instructor.hidden_cells import grade
grade("Qwen35GatedDeltaNet")
### END HIDDEN TESTS

# %% [markdown]
# 换成真实尺寸的第 0 层（权重来自 `load_layer`），看看缓存到底有多大，再核对逐个 token 解码和一次算完是否一样：

# %%
layer0_weights = load_layer(0, dtype=torch.float32)
layer0 = Qwen35GatedDeltaNet(config)
layer0.load_state_dict(submodule_state(layer0_weights, "linear_attn"))
print(f"第 0 层线性注意力的参数：{sum(p.numel() for p in layer0.parameters()):,} 个")
torch.manual_seed(8)
x_demo = torch.randn(1, 6, config.hidden_size)
with torch.no_grad():
    out_once, _ = layer0(x_demo)
    cache0, out_steps = GatedDeltaNetCache(), []
    for t in range(6):
        out_t, cache0 = layer0(x_demo[:, t:t + 1], cache=cache0)
        out_steps.append(out_t)
print(f"一个一个 token 解码和一次算完最多差 {(torch.cat(out_steps, dim=1) - out_once).abs().max():.1e}")
print(f"缓存：conv_state {tuple(cache0.conv_state.shape)}，recurrent_state {tuple(cache0.recurrent_state.shape)}（{cache0.recurrent_state.dtype}），"
      f"一共 {cache0.conv_state.numel() + cache0.recurrent_state.numel():,} 个数；读过 6 个还是 6 万个 token 都一样")

# %% [markdown]
# ## 7. 训练一个小模型：三种规则谁记得住
#
# 到这里为止用的都是手造的或随机的权重。现在在 CPU 上真的训练三个小模型，看训练之后三种规则的差别。
#
# 任务（联想记忆的一个变体）：每条序列有两段，中间一个分隔符。
#
# 1. **旧的一段**：16 对随机的 (key, value)；
# 2. 一个分隔符 `|`；
# 3. **新的一段**：$N$ 对 (key, value)，key 和旧的一段**可能重复**（这时要的是新值）；
# 4. 然后用新一段的 $N$ 个 key 逐个去问：对应的 value 是什么？
#
# key 从 64 个 key token 里抽，value 从 64 个 value token 里抽。模型只有一层记忆：嵌入 → 投影出 $k$（单位长度）和 $v$ →
# 用三种规则之一把整条序列写进状态 $S$ → 用问的 key 的投影 $q$ 读 $qS$ → 线性层给出 64 个 value 的分数。
# 三个模型除了规则以外完全一样：$D_k = D_v = 16$，同样的种子、同样的数据、同样 400 步 Adam。
#
# - 线性注意力：$S = \sum_j k_j^\top v_j$；
# - DeltaNet：$\beta$ 由当前位置的 token 算出来，$g = 0$；
# - Gated DeltaNet：$\beta$ 和 $g$ 都由当前位置的 token 算出来。
#
# 两种 delta 规则都用你的 `chunked_gated_delta_rule` 算（DeltaNet 就是 $g = 0$），线性注意力用你的 `linear_attention_recurrent`。

# %%
N_KEY_TOKENS, N_VALUE_TOKENS, OLD_PAIRS = 64, 64, 16
SEPARATOR_KEY, SEPARATOR_VALUE = N_KEY_TOKENS, N_VALUE_TOKENS  # one extra token on each side


class RecallModel(nn.Module):
    """One memory layer: token embeddings -> unit keys k, values v -> state S by `rule` -> read q S -> logits."""

    def __init__(self, rule: str, dim: int = 16, width: int = 32):
        super().__init__()
        self.rule = rule
        self.key_embedding = nn.Embedding(N_KEY_TOKENS + 1, width)
        self.value_embedding = nn.Embedding(N_VALUE_TOKENS + 1, width)
        self.to_key = nn.Linear(width, dim, bias=False)
        self.to_value = nn.Linear(width, dim, bias=False)
        self.to_beta = nn.Linear(2 * width, 1)
        self.to_g = nn.Linear(2 * width, 1)
        self.readout = nn.Linear(dim, N_VALUE_TOKENS)

    def write_gates(self, keys, values):
        """beta and g [B, 1, T] from each position's key and value tokens (g = 0 for DeltaNet)."""
        both = torch.cat([self.key_embedding(keys), self.value_embedding(values)], dim=-1)
        beta = torch.sigmoid(self.to_beta(both))[..., 0][:, None]
        g = -F.softplus(self.to_g(both))[..., 0][:, None] if self.rule == "gated" else torch.zeros_like(beta)
        return beta, g

    def forward(self, keys, values, queries):
        """keys, values [B, T] written in order; queries [B, N] read afterwards -> logits [B, N, N_VALUE_TOKENS]."""
        k = F.normalize(self.to_key(self.key_embedding(keys)), dim=-1)[:, None]  # [B, 1, T, dim]
        v = self.to_value(self.value_embedding(values))[:, None]
        q = F.normalize(self.to_key(self.key_embedding(queries)), dim=-1)[:, None]
        if self.rule == "linear":
            _, state = linear_attention_recurrent(k, k, v)
        else:
            beta, g = self.write_gates(keys, values)
            _, state = chunked_gated_delta_rule(k, k, v, g, beta, chunk_size=16)
        return self.readout((q @ state)[:, 0])


def distinct_pairs(gen, batch: int, n_pairs: int):
    """[batch, n_pairs] distinct key tokens and random value tokens."""
    keys = torch.rand(batch, N_KEY_TOKENS, generator=gen).argsort(dim=-1)[:, :n_pairs]
    return keys, torch.randint(0, N_VALUE_TOKENS, (batch, n_pairs), generator=gen)


def recall_batch(gen, batch: int, n_pairs: int):
    """Old pairs | separator | n_pairs new pairs; the queries are the new keys, the targets their new values."""
    old_keys, old_values = distinct_pairs(gen, batch, OLD_PAIRS)
    new_keys, new_values = distinct_pairs(gen, batch, n_pairs)
    separator_keys, separator_values = torch.full((batch, 1), SEPARATOR_KEY), torch.full((batch, 1), SEPARATOR_VALUE)
    keys = torch.cat([old_keys, separator_keys, new_keys], dim=1)
    values = torch.cat([old_values, separator_values, new_values], dim=1)
    return keys, values, new_keys, new_values


def train_recall(rule: str, steps: int = 400, seed: int = 0) -> RecallModel:
    """Adam on batches of 64 sequences, N drawn from 1..24 at every step."""
    torch.manual_seed(seed)
    gen = torch.Generator().manual_seed(seed)
    model = RecallModel(rule)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    for _ in range(steps):
        n_pairs = int(torch.randint(1, 25, (1,), generator=gen))
        keys, values, queries, targets = recall_batch(gen, 64, n_pairs)
        loss = F.cross_entropy(model(keys, values, queries).flatten(0, 1), targets.flatten())
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return model


rules = {"linear": "线性注意力", "delta": "DeltaNet", "gated": "Gated DeltaNet"}
recall_models = {}
for rule, name in rules.items():
    start = time.perf_counter()
    recall_models[rule] = train_recall(rule)
    print(f"{name}：训练 400 步用了 {time.perf_counter() - start:.1f} 秒")

# %% [markdown]
# 在没见过的序列上测（另一个种子，每个 $N$ 256 条序列），$N$ 从 1 到 24：

# %%
test_counts = [1, 2, 4, 8, 12, 16, 20, 24]
accuracy = {rule: [] for rule in rules}
with torch.no_grad():
    for n_pairs in test_counts:
        test_batch = recall_batch(torch.Generator().manual_seed(1), 256, n_pairs)
        for rule, model in recall_models.items():
            predicted = model(*test_batch[:3]).argmax(dim=-1)
            accuracy[rule].append((predicted == test_batch[3]).float().mean().item())
print("N    " + "".join(f"{n:>7}" for n in test_counts))
for rule, name in rules.items():
    print(f"{name:<15}" + "".join(f"{a:7.1%}" for a in accuracy[rule]))
for rule in ("linear", "gated"):
    gaps = [100 * (a - d) for a, d in zip(accuracy[rule], accuracy["delta"])]
    print(f"{rules[rule]} 减 DeltaNet：" + "，".join(f"N = {n} 时 {gap:+.1f}" for n, gap in zip(test_counts, gaps)) + "（百分点）")

fig, ax = plt.subplots(figsize=(7.5, 4.2))
for rule, name in rules.items():
    ax.plot(test_counts, [100 * a for a in accuracy[rule]], marker="o", label=name)
ax.axvline(16, color="gray", linestyle="--")
ax.text(16.3, 5, "N = D_k", color="gray")
ax.axhline(100 / N_VALUE_TOKENS, color="gray", linestyle=":")
ax.set_ylim(0, 102)
ax.set_xlabel("新一段的 (key, value) 对数 N")
ax.set_ylabel("答对的比例（%）")
ax.set_title("训练之后的联想记忆（D_k = D_v = 16，前面有 16 对旧内容）")
ax.grid(alpha=0.3)
ax.legend()
plt.show()

# %% [markdown]
# 读这张图时，用上面打印的数说话（点线是瞎猜的 1/64；种子固定，同一台机器上每次运行的数一样）。三条线大体上都随 $N$ 下降：记忆表只有 $16 \times 16$，
# $N$ 超过 $D_k = 16$ 以后，$N$ 个 key 不可能两两正交，谁都没法把每一对存得互不干扰。可下降的快慢差得很远：看上面打印的数，
# $N = 16$、$24$ 时 Gated DeltaNet 还能读对大多数。线性注意力最低：新旧两段里重复出现的 key，它读出的是新旧两个 value 的和，分不清哪个是新的。
# 两种 delta 规则能覆盖重复的 key。再比较 DeltaNet 和 Gated DeltaNet 两行：Gated DeltaNet 多了一样本事——把旧的一段整个忘掉。
# 它学到的门是什么样的？把旧内容、分隔符和新内容各自位置上的 $e^{g}$ 和 $\beta$ 打出来：

# %%
gated_model = recall_models["gated"]
with torch.no_grad():
    keys, values, _, _ = recall_batch(torch.Generator().manual_seed(2), 256, 8)
    beta_learned, g_learned = gated_model.write_gates(keys, values)
    decay_learned = g_learned.exp()[:, 0]  # [B, T]
    beta_learned = beta_learned[:, 0]
for label, where in [("旧的一段", slice(0, OLD_PAIRS)), ("分隔符", slice(OLD_PAIRS, OLD_PAIRS + 1)),
                     ("新的一段", slice(OLD_PAIRS + 1, None))]:
    print(f"{label}：exp(g) 平均 {decay_learned[:, where].mean():.3f}，β 平均 {beta_learned[:, where].mean():.3f}")

# %% [markdown]
# 分隔符上的 $e^{g}$ 和两段内容上的一比就知道模型学了什么：分隔符处接近 0，就是在那里把旧的一段整个清掉；
# 两段内容上接近 1，就是段内什么也不忘。这正是第 4 节说的"遇到新话题时一步清掉旧内容"。
# 没有人告诉它分隔符是什么意思，这是从 400 步训练里自己学出来的。
# （这个小实验只说明门**能**学成这样；在真实的语言模型里，门在哪里关、关多少，要在真实权重上去量。）

# %% [markdown]
# ## 8. 用你自己的代码跑 Qwen3.5 的第 0～3 层
#
# 作业 06 说过，第 3 层本来的输入是前三层处理过的隐藏状态，当时只能拿词嵌入凑合。现在三层线性注意力都写好了。
# Qwen3.5 的每一层（Hugging Face 叫它 `Qwen3_5DecoderLayer`）是两步，每步都加回残差：
#
# $$
# h \leftarrow h + \operatorname{Mixer}_\ell\big(\operatorname{RMSNorm}_\ell(h)\big), \qquad
# h \leftarrow h + \operatorname{MLP}_\ell\big(\operatorname{RMSNorm}'_\ell(h)\big).
# $$
#
# - 第 0、1、2 层的 Mixer 是你的 `Qwen35GatedDeltaNet`，第 3 层是作业 06 的 `Qwen35Attention`；
# - 两个 norm（`input_layernorm` 和 `post_attention_layernorm`）都是零中心的 `ZeroCenteredRMSNorm`，乘的是 $1 + w$；
# - MLP 是 SwiGLU：$\operatorname{MLP}(x) = W_{\text{down}}\big(\operatorname{SiLU}(W_{\text{gate}}\,x) \odot W_{\text{up}}\,x\big)$，
#   $d = 1024 \to 3584 \to 1024$，和作业 07 里 SmolLM2 用的是同一个 `SwiGLU`（`course/llama.py`）。
#
# MLP 和层的拼法不是这次的练习，下面直接给出。子模块的名字和 Hugging Face 的一样，所以 `load_layer` 读出来的整层权重
# （注意力或 Gated DeltaNet、MLP、两个 norm）可以原样装进去。
#
# > **再说一次：** 用替身权重时，下面的数值和图案**没有任何含义**，只说明代码路径和形状是对的。
# > 运行 `course-weights qwen35 --layers 0-3` 取来真实的第 0～3 层权重（或设好 `QWEN35_PATH`），重新运行即可，代码不用改。

# %%
class Qwen35DecoderLayer(nn.Module):
    """One Qwen3.5 decoder layer, submodules named as Hugging Face's Qwen3_5DecoderLayer, so that load_layer's dict
    loads unchanged: h <- h + mixer(input_layernorm(h)), then h <- h + mlp(post_attention_layernorm(h)).

    forward(h [B, T, d], cos, sin [T, rotary_dim]) -> [B, T, d]; cos and sin are used by the attention layer only.
    """

    def __init__(self, config, layer: int):
        super().__init__()
        self.linear = config.layer_types[layer] == "linear_attention"
        if self.linear:
            self.linear_attn = Qwen35GatedDeltaNet(config)
        else:
            self.self_attn = Qwen35Attention(config)
        self.input_layernorm = ZeroCenteredRMSNorm(config.hidden_size, config.rms_norm_eps)
        self.mlp = SwiGLU(config.hidden_size, config.intermediate_size)
        self.post_attention_layernorm = ZeroCenteredRMSNorm(config.hidden_size, config.rms_norm_eps)

    def mix(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        """The token mixer on the normed input x [B, T, d]: Gated DeltaNet (without a cache) or gated attention."""
        if self.linear:
            return self.linear_attn(x)[0]
        return self.self_attn(x, cos, sin)

    def forward(self, h: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        h = h + self.mix(self.input_layernorm(h), cos, sin)
        return h + self.mlp(self.post_attention_layernorm(h))


# %% [markdown]
# 装上第 0～3 层的权重。`load_layer` 每读一层打印一行，说明读的是哪一份权重：写着"合成的替身"就是随机数，
# 写着 Qwen/Qwen3.5-0.8B 就是真模型。

# %%
weights_label = "合成替身权重" if find_checkpoint().synthetic else "真实权重"
tokenizer = load_tokenizer()
prompt = "今天天气不错，我们去公园"
ids = tokenizer.encode(prompt).ids
pieces = token_pieces(tokenizer, ids)
seq_len = len(ids)
print("切分结果：", " / ".join(pieces))
embeddings = load_embedding_rows(ids, dtype=torch.float32, verbose=False)[None]  # [1, T, d], same weights as the layers

decoder = []
for index in range(4):
    decoder_layer = Qwen35DecoderLayer(config, index)
    decoder_layer.load_state_dict(load_layer(index, dtype=torch.float32))
    decoder.append(decoder_layer)
print("第 0～3 层的 Mixer：", " → ".join(type(d.linear_attn if d.linear else d.self_attn).__name__ for d in decoder))
print(f"一层 MLP 的参数：{sum(p.numel() for p in decoder[0].mlp.parameters()):,} 个（gate、up、down 三个矩阵）")

# %% [markdown]
# 一层一层地跑，分开量两步各往残差里加了多少（更新的长度除以它加上去之前残差的长度）。同时留下两份"第 3 层的输入"：
# 完整的前三层给的，和只跑前三层注意力一半（不要 MLP）给的，看看 MLP 的贡献有多大。

# %%
cos3, sin3 = rope_cos_sin(torch.arange(seq_len), config.rotary_dim, config.rope_theta)
hidden, attention_only = embeddings, embeddings
with torch.no_grad():
    for index, decoder_layer in enumerate(decoder):
        if index == 3:
            layer3_hidden = hidden  # what the real model hands layer 3 (with these weights)
        mixed = decoder_layer.mix(decoder_layer.input_layernorm(hidden), cos3, sin3)
        middle = hidden + mixed
        mlp_out = decoder_layer.mlp(decoder_layer.post_attention_layernorm(middle))
        kind = "Gated DeltaNet" if decoder_layer.linear else "门控注意力"
        print(f"第 {index} 层（{kind}）：Mixer 加的是残差的 {mixed.norm() / hidden.norm():.2f} 倍，"
              f"MLP 加的是 {mlp_out.norm() / middle.norm():.2f} 倍")
        hidden = middle + mlp_out
        if index < 3:
            attention_only = attention_only + decoder_layer.mix(decoder_layer.input_layernorm(attention_only), cos3, sin3)
    same_as_forward = torch.allclose(hidden, decoder[3](layer3_hidden, cos3, sin3), atol=1e-5)
    attention3, norm3 = decoder[3].self_attn, decoder[3].input_layernorm
    layer3_input = norm3(layer3_hidden)  # what layer 3's attention sees
    embedding_input = norm3(embeddings)  # what 06 had to use
    attention_only_input = norm3(attention_only)


def relative_change(a: torch.Tensor, b: torch.Tensor) -> float:
    """|a - b| / |b|."""
    return ((a - b).norm() / b.norm()).item()


print(f"分步算的第 3 层输出和直接调用 forward 的一样：{same_as_forward}；输出 {tuple(hidden.shape)}")
print(f"第 3 层注意力的输入，和只用词嵌入（作业 06）相比：完整的前三层差 {relative_change(layer3_input, embedding_input):.1%}，"
      f"只跑注意力一半差 {relative_change(attention_only_input, embedding_input):.1%}")
print(f"前三层的 MLP 让第 3 层的输入又变了 {relative_change(layer3_input, attention_only_input):.1%}")

# %% [markdown]
# 把第 3 层头 0 的注意力矩阵画出来，左边是作业 06 的输入（只有词嵌入），右边是经过你写的完整前三层之后的输入。
# 取注意力权重的办法和作业 06 第 6 节一样：用这一层自己的子模块重走一遍，停在 `attention` 那一步。

# %%
def layer3_weights(attn: Qwen35Attention, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Softmax weights [B, H, T, T] of the gated attention layer `attn` on its normed input x [B, T, d]."""
    query, _, key, _ = attn.project(x)
    query, key = attn.position(query, key, cos, sin)
    scores = attention_scores(query, repeat_kv(key, attn.num_heads // attn.num_kv_heads))
    return masked_softmax(scores, causal_mask(x.shape[1]))


with torch.no_grad():
    weights_embedding = layer3_weights(attention3, embedding_input, cos3, sin3)
    weights_layers = layer3_weights(attention3, layer3_input, cos3, sin3)
fig, axes = plt.subplots(1, 2, figsize=(12, 4.8))
plotting.attention_heatmap(weights_embedding[0, 0], pieces, ax=axes[0], title=f"输入只有词嵌入（作业 06，{weights_label}）")
plotting.attention_heatmap(weights_layers[0, 0], pieces, ax=axes[1], title=f"输入经过完整的第 0～2 层（{weights_label}）")
fig.suptitle("第 3 层 · 头 0 的注意力")
fig.tight_layout()
plt.show()
print(f"两张图最多差 {(weights_layers - weights_embedding).abs().max():.3f}（8 个头里任意一格）")

# %% [markdown]
# 两张图都满足因果掩码和每行和为 1，这和权重无关。它们之间的差别来自前三层加到残差上的东西（有多大，见上面打印的数）。
#
# 用替身权重时，这些数都是随机数造出来的，**不能**拿来说第 0～3 层学到了什么。替身的每一层往残差里加的并不少（见上面打印的
# 倍数），三层下来，第 3 层的输入和只有词嵌入时已经差得很远（见上面打印的相对变化）：右图和左图不一样，说明输入变了，
# 不说明替身学到了什么。第 3 层的替身是为作业 06 造的，只讲究注意力的图案，它的输出比残差大十几倍，这也只是替身的性质，
# 不是真模型的。
# 换上真实权重，这里打印的就是真实的 Qwen3.5 前四层：右图就是真模型的第 3 层在这句话上真正看到的注意力，
# 可以拿去和作业 06 里那本书报告的表比一比。
#
# 到这里，Qwen3.5 的前四层——3 层 Gated DeltaNet、1 层门控注意力，连同它们的 MLP——全部由你自己的代码（和课程给出的 MLP）算出来了。

# %% [markdown]
# ## 9. 整个模型的账
#
# 作业 07 给 SmolLM2 算过账。Qwen3.5 的层有两种，账也分两种。先数参数：按公式算，再把你的 `Qwen35DecoderLayer`
# 在 meta 设备上建出来（只有形状，不占内存），数它的参数来核对。
#
# - Gated DeltaNet 层：`in_proj_qkv` $d \times (2H_kD_k + H_vD_v)$，`in_proj_z` $d \times H_vD_v$，`in_proj_b`、`in_proj_a` 各 $d \times H_v$，
#   卷积 $(2H_kD_k + H_vD_v) \times K$，`A_log`、`dt_bias` 各 $H_v$，带门的 RMSNorm $D_v$，`out_proj` $H_vD_v \times d$；
# - 门控注意力层（作业 06）：`q_proj` $d \times 2HD$（一半是门），`k_proj`、`v_proj` 各 $d \times H_{kv}D$，`o_proj` $HD \times d$，
#   QK-Norm $2D$；
# - 每层都有：MLP $3\,d\,d_{ff}$，两个 RMSNorm $2d$；再加上词嵌入 $Vd$（和输出层共用）和最后一个 RMSNorm $d$。

# %%
d, d_ff, vocab = config.hidden_size, config.intermediate_size, config.vocab_size
heads_q, heads_kv, head_dim = config.num_attention_heads, config.num_key_value_heads, config.head_dim
deltanet_matrices = d * conv_channels + d * heads_v * dim_v + 2 * d * heads_v + heads_v * dim_v * d
deltanet_params = deltanet_matrices + conv_channels * kernel + 2 * heads_v + dim_v  # + conv, A_log, dt_bias, norm
attention_matrices = d * 2 * heads_q * head_dim + 2 * d * heads_kv * head_dim + heads_q * head_dim * d
attention_params = attention_matrices + 2 * head_dim  # + q_norm, k_norm
mlp_matrices = 3 * d * d_ff
per_layer = mlp_matrices + 2 * d
qwen_parts = {f"{len(linear_layers)} 个 Gated DeltaNet": len(linear_layers) * deltanet_params,
              f"{full_layers} 个门控注意力": full_layers * attention_params,
              f"{config.num_hidden_layers} 个 MLP 和层里的 norm": config.num_hidden_layers * per_layer,
              "词嵌入（和输出层共用）和最后的 norm": vocab * d + d}
qwen_total = sum(qwen_parts.values())
for name, count in qwen_parts.items():
    print(f"{name}：{count:,}（{count / qwen_total:.1%}）")

with torch.device("meta"):  # shapes only: nothing is allocated
    built = [Qwen35DecoderLayer(config, index) for index in range(config.num_hidden_layers)]
counted = sum(p.numel() for layer_ in built for p in layer_.parameters()) + vocab * d + d
print(f"按公式合计 {qwen_total:,}；数你的 {config.num_hidden_layers} 层（加词嵌入和最后的 norm）{counted:,}")

# %% [markdown]
# 语言模型一共约 7.5 亿个参数。（名字里的 0.8B 说的是整个发布的模型，它还带着视觉编码器和一个多 token 预测的 MTP 层，
# 这里只算处理文字的 24 层。）词嵌入占了三分之一：词表有 24.8 万个词，要照顾很多种语言。
#
# 再算**生成一个 token** 的计算量。和作业 07 一样，投影、MLP 和输出层是 $2 \times$ 参数个数；不一样的是随上下文长度 $n$ 变化的那一项：
#
# - 全注意力层：和 $n$ 个缓存的 key、value 各算一次，每层 $4HDn$，随 $n$ 线性增长；
# - Gated DeltaNet 层：一步递推（第 4 节）在每个头的 $D_k \times D_v$ 记忆表上做几次运算：衰减、读出 $k_t S$ 和 $q_t S$、写入外积，
#   约 $7 H_v D_k D_v$，**和 $n$ 无关**。
#
# 把 24 层都换成全注意力，就是下图的另一条线。

# %%
matmul_qwen = (len(linear_layers) * deltanet_matrices + full_layers * attention_matrices
               + config.num_hidden_layers * mlp_matrices + vocab * d)  # every matrix a token is multiplied by
full_attention_per_n = 4 * heads_q * head_dim  # per layer, per cached position
recurrent_step = 7 * heads_v * dim_k * dim_v  # per Gated DeltaNet layer: independent of n
contexts = [2**n for n in range(10, 19)]  # 1K ... 256K


def decode_flops(n: int, attention_layers: int, deltanet_layers: int) -> int:
    """FLOPs of generating one token with n positions cached (the conv and the norms left out: they are small)."""
    return 2 * matmul_qwen + attention_layers * full_attention_per_n * n + deltanet_layers * recurrent_step


hybrid = [decode_flops(n, full_layers, len(linear_layers)) / 1e9 for n in contexts]
all_attention = [decode_flops(n, config.num_hidden_layers, 0) / 1e9 for n in contexts]
print(f"投影、MLP 和输出层：每个 token {2 * matmul_qwen / 1e9:.2f} GFLOP")
for n, h, a in zip(contexts, hybrid, all_attention):
    if n in (4096, 32768, 262144):
        print(f"上下文 {n // 1024}K：Qwen3.5 每个 token {h:.2f} GFLOP，24 层全注意力 {a:.2f} GFLOP")

fig, ax = plt.subplots(figsize=(8, 4.5))
ax.plot(contexts, hybrid, marker="o", label=f"Qwen3.5：{full_layers} 层全注意力 + {len(linear_layers)} 层 Gated DeltaNet")
ax.plot(contexts, all_attention, marker="o", label=f"假如 {config.num_hidden_layers} 层都是全注意力")
ax.axhline(2 * matmul_qwen / 1e9, color="gray", linestyle="--", label="只有投影、MLP 和输出层")
ax.set_xscale("log", base=2)
ax.set_xticks(contexts, labels=[f"{n // 1024}K" for n in contexts])
ax.set_xlabel("已缓存的上下文 n（token）")
ax.set_ylabel("生成一个 token 的 GFLOP")
ax.set_title("生成一个 token 的计算量随上下文的增长")
ax.grid(True, alpha=0.3)
ax.legend()
plt.show()

# %% [markdown]
# 上下文短的时候，两种设计差不多，算力都花在投影和 MLP 上；上下文一长，全注意力那一项就占了上风。Qwen3.5 只有 6 层
# 随 $n$ 增长，256K 时每个 token 的计算量只有 24 层全注意力的四分之一多（见上面打印的数）。这和第 1 节的内存图讲的是
# 同一个取舍：18 层用固定大小的状态，既不占越来越多的缓存，也不做越来越多的计算。
#
# 公式里注意力那一项，可以用作业 07 用过的 `FlopCounterMode` 在第 3 层上核对：一次送进 $T$ 个 token，投影和 MLP 是
# $2T \times$（这一层矩阵的参数），注意力把整张 $T \times T$ 表算完是 $4HDT^2$：

# %%
tokens_3 = 64
hidden_3 = torch.randn(1, tokens_3, d, generator=torch.Generator().manual_seed(3))
cos_3, sin_3 = rope_cos_sin(torch.arange(tokens_3), config.rotary_dim, config.rope_theta)
with torch.no_grad(), FlopCounterMode(display=False) as flop_counter:
    decoder[3](hidden_3, cos_3, sin_3)
expected_3 = 2 * tokens_3 * (attention_matrices + mlp_matrices) + full_attention_per_n * tokens_3**2
print(f"第 3 层，T = {tokens_3}：公式 {expected_3:,}，计数器 {flop_counter.get_total_flops():,}")

# %% [markdown]
# ## 小结
#
# | 名字 | 做什么 | 要守住的细节 |
# |---|---|---|
# | `linear_attention` | $o_t = \sum_{j \le t} (q_t \cdot k_j) v_j$，并行形式 | 因果掩码含对角线，填 0 不是 $-\infty$；没有 softmax、没有 $1/\sqrt{D}$ |
# | `linear_attention_recurrent` | $S \leftarrow S + k_t^\top v_t$，$o_t = q_t S$ | 状态 `[B, H, Dk, Dv]`；先写后读；能从给定的状态接着算 |
# | `delta_rule` | 写修正量 $\beta_t(v_t - k_t S)$ | $\beta$ 乘整个括号；在线最小二乘的一步，能覆盖 |
# | `gated_delta_rule` | 每步先 $S \leftarrow e^{g_t} S$ | 乘 $e^{g}$ 不是 $g$；衰减在读和写之前 |
# | `chunked_gated_delta_rule` | 块内解下三角方程组（UT 变换），块间传状态 | 先相减再 exp，上三角在 exp 前遮掉；最后一块可以短 |
# | `causal_conv1d` | 深度因果卷积，带卷积状态 | 左边补 $K-1$ 个过去的输入；新状态是最后 $K-1$ 列 |
# | `Qwen35GatedDeltaNet` | 整层 | 卷积 + SiLU；q、k 做 L2 归一化，q 乘 $D_k^{-1/2}$；$\beta = \operatorname{sigmoid}(b)$；$g = -e^{A_{\log}}\operatorname{softplus}(a + \text{dt\_bias})$；输出乘 SiLU($z$)；缓存只有卷积状态和记忆表 |
#
# 一句话：线性注意力把注意力改写成一个状态固定的 RNN；delta 规则让它会改写，门让它会遗忘，分块形式让它训练得快。
# Qwen3.5 用 18 层这样的层处理上下文，只留 6 层全注意力做精确的回看。
#
# ### 思考题 1
#
# 既然 Gated DeltaNet 的状态不随上下文增长，Qwen3.5 为什么还要留 6 层全注意力？用第 2、3 节和第 7 节的实验说说，
# 一个每头 $128 \times 128$ 的记忆表做不到什么。

# %% [markdown] tags=["answer:why_keep_full_attention"]
# ### BEGIN SOLUTION
# 记忆表是一张 $D_k \times D_v$ 的矩阵，每个头最多精确存下约 $D_k = 128$ 组线性无关的 key→value（第 3 节：$N$ 超过 $D_k$ 以后，
# 连最小二乘解都不能把它们全记住）。一段几万 token 的上下文远远超过这个容量，只能有损地压缩：delta 规则覆盖、门遗忘，
# 留下的是模型认为有用的摘要。要"逐字回看"——比如原样抄出前文的一个长数字、一个罕见的名字，或者在很远的位置精确找到某一句——
# 就需要保存每个 token 的 K 和 V，用 softmax 在它们之中挑。全注意力的 KV cache 随 $T$ 增长，恰恰是因为它什么都不压缩。
# 混合结构用少数几层全注意力负责精确检索，多数层用固定大小的状态，缓存和计算都省下了大部分（第 1 节的图）。
# ### END SOLUTION

# %% [markdown]
# ### 思考题 2
#
# Qwen3.5 在 delta 规则之前把 $k$ 做了 L2 归一化。如果不归一化，$\lVert k_t \rVert$ 可以很大，会出什么问题？
# 提示：把一步 delta 规则写成 $S_t = (I - \beta_t k_t^\top k_t) S_{t-1} + \beta_t k_t^\top v_t$，看 $k_t$ 方向上的分量被乘了多少。

# %% [markdown] tags=["answer:why_normalize_keys"]
# ### BEGIN SOLUTION
# 矩阵 $I - \beta_t k_t^\top k_t$ 在 $k_t$ 方向上的特征值是 $1 - \beta_t \lVert k_t \rVert^2$，其余方向上是 1。
# 归一化之后 $\lVert k_t \rVert = 1$、$\beta_t \in (0, 1)$，这个特征值在 $(0, 1)$ 里：状态在 $k_t$ 方向上被部分擦掉、再写入新值，
# 永远不会变大。不归一化时，只要 $\beta_t \lVert k_t \rVert^2 > 2$，这个特征值的绝对值就大于 1，状态在这个方向上每一步都被放大
# （还变号），很多步之后会爆炸。从最小二乘的角度看，$\beta_t$ 是学习率，而损失 $\tfrac12\lVert k_t S - v_t\rVert^2$ 的曲率是
# $\lVert k_t \rVert^2$：学习率超过 $2/\text{曲率}$，梯度下降就发散。归一化把曲率固定为 1，$\beta \in (0, 1)$ 就总是稳定的学习率。
# ### END SOLUTION

# %% [markdown]
# ### 思考题 3
#
# 分块形式里块的大小 $C$ 怎么选？$C = 1$ 和 $C = T$ 各是什么，为什么实际用 64 这样的中间值？

# %% [markdown] tags=["answer:chunk_size_choice"]
# ### BEGIN SOLUTION
# $C = 1$ 时每块只有一个位置，$A = 0$，分块形式就是逐步的递推：$T$ 次很小的运算，难以并行。$C = T$ 时只有一块，
# 要建 $T \times T$ 的矩阵、解 $T \times T$ 的三角方程组，计算量和内存都是 $T^2$ 量级，回到了并行形式的老问题。
# 每块的代价约为 $C^2 D_k + C D_k D_v$（块内的矩阵和读写状态），$T / C$ 块合计约 $T\,C\,D_k + T\,D_k D_v$：$C$ 越大，块内的平方项越贵；
# $C$ 越小，顺序执行的块间循环越长、矩阵乘法越小，硬件用不满。64 左右让块内的矩阵乘法足够大、能喂饱 GPU 的矩阵单元，
# 平方项又不占主导；块间只传一个 $D_k \times D_v$ 的状态。
# ### END SOLUTION

# %% [markdown]
# ### 思考题 4
#
# Qwen3.5 的 $\beta = \operatorname{sigmoid}(b) \in (0, 1)$。有的工作（Grazzi 等，2024）把它放宽到 $\beta \in (0, 2)$，例如 $2\operatorname{sigmoid}(b)$。
# 这时转移矩阵 $I - \beta_t k_t^\top k_t$（$\lVert k_t \rVert = 1$）的特征值在什么范围？为什么这能让模型数清一串 0、1 里有奇数个
# 还是偶数个 1，而 $\beta \in (0, 1)$ 时很难？

# %% [markdown] tags=["answer:negative_eigenvalues"]
# ### BEGIN SOLUTION
# 特征值在 $k_t$ 方向上是 $1 - \beta_t$，其余方向上是 1。$\beta \in (0, 1)$ 时 $1 - \beta \in (0, 1)$：每一步只会把 $k_t$ 方向上的
# 分量缩小，不会改变它的符号；$\beta \in (0, 2)$ 时 $1 - \beta \in (-1, 1)$，可以是负的。$\beta = 2$ 时这一步是一个反射：
# $k_t$ 方向上的分量正好变号，两次反射又回到原样。数奇偶正需要这个：读到 1 就让状态里某个方向变一次号（反射），读到 0
# 就不动（$\beta = 0$），读完之后看那个分量的符号就知道 1 的个数是奇是偶。特征值都不小于 0 时，连乘起来的转移矩阵
# 在每个方向上只能缩放、不能翻转，状态没法用"来回翻转"记住奇偶；有限精度下，状态跟踪一类的任务（奇偶、模 $m$ 计数、
# 置换的复合）就很难学。代价是稳定性：$\lvert 1 - \beta \rvert$ 接近 1 时擦得很少，状态里的旧内容忘得更慢。
# ### END SOLUTION
