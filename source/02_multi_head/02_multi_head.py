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
# # 作业 02：多头注意力
#
# 作业 01 里只有一个头：每个 token 发出一个 query，得到一行权重，取回一个加权平均。这次把它扩成**多个头**：
# 把每个 token 的向量切成 $H$ 段，每段各做一次注意力，再把结果拼回去，最后过一个输出投影 `o_proj`。
# 你会实现三样东西：拆头的 `split_heads`、合头的 `merge_heads`，以及把一切装进去的 `MultiHeadAttention` 模块。
#
# 路线：
#
# 1. 为什么一个头不够；
# 2. 跟着张量的形状，把多头注意力从头到尾走一遍；
# 3. 练习 1、2：拆头和合头；
# 4. 练习 3：`MultiHeadAttention`，带因果掩码和 padding 掩码；
# 5. 画出几个头各自在看什么；
# 6. 为什么拼接之后还需要 `o_proj`；
# 7. 数一数参数：$4d^2$；
# 8. 小结和思考题。
#
# > **本课程的约定**
# >
# > - 注意力里的张量形状是 `[batch, heads, seq, head_dim]`，下文简写为 `[B, H, T, D]`；
# >   进出注意力层的 hidden states 是 `[B, T, hidden]`，并且 $\text{hidden} = H \cdot D$。
# > - 符号：$B$ batch，$T$ 序列长度，$H$ 头数，$D$ = `head_dim`（每个头的维数），$d$ = `hidden_size`（$d = H D$）。
# > - 掩码是 `torch.bool`，**True 表示"可以看"**，形状能广播到 `[B, H, T_q, T_k]` 即可。
# > - 模块的线性层一律是 `nn.Linear(..., bias=False)`，名字叫 `q_proj`、`k_proj`、`v_proj`、`o_proj`：
# >   Hugging Face 的权重按名字加载，评分程序也按这些名字把权重放进你的模块。
# > - **评分规则**：评分程序只读取你的 `import`、函数和类的定义，以及全大写的常量；演示单元不会被评分程序执行。
# >   所以函数和类里不要用演示单元里的变量，也不要改名字和参数。
# > - **「运行全部」（Run All）**：练习还没写的时候，它会停在第一个练习后面的检查单元，报 `NotImplementedError`——
# >   这是正常的，不是你弄坏了什么。从上往下做：写完一个练习，运行它和它后面的检查，再往下走。
# > - 每个练习标着难度（🔴 越多越难，最多五个）和大约要花的时间；提示收在「提示」里，卡住了再点开。
# >
# > 作业 01 的五个函数（`attention_scores`、`causal_mask`、`padding_mask`、`masked_softmax`、`attention`）
# > 放在导入单元后面的「已给出」单元里（作业 01 的参考答案），运行一下就能用。

# %%
import math

import matplotlib.pyplot as plt
import torch
from torch import nn

from course import toy
from course.tools import plotting

torch.set_printoptions(precision=3, sci_mode=False)
plotting.use_chinese_font()  # Chinese titles and labels in every figure below

# %% tags=["provided:attention_scores", "provided:causal_mask", "provided:padding_mask", "provided:masked_softmax", "provided:attention"]
# course-release fills this cell with the answers of assignment 01.

# %% [markdown]
# ## 1. 一个头不够
#
# 一句话里的关系不止一种。「小猫追着老鼠跑进了厨房，因为它饿了」里，「它」要找的是它指代的对象（小猫）；
# 「跑进」要找的是跑去了哪里（厨房）；每个词多半还想看看紧挨着它的邻居。一个头只能给每个 token 一行权重，
# 也就是**一种**看上下文的方式：要么盯着指代对象，要么盯着邻居，很难兼顾。
#
# 多头注意力的办法是同时开 $H$ 个头，每个头有自己的 $W^Q_h, W^K_h, W^V_h$，各看各的：
#
# $$
# \text{head}_h = \operatorname{Attention}\!\left(XW^Q_h,\ XW^K_h,\ XW^V_h\right), \qquad
# \operatorname{MultiHead}(X) = \operatorname{Concat}(\text{head}_1, \dots, \text{head}_H)\, W^O
# $$
#
# 头多了，计算量却没有变大：hidden 维被**切开**分给各个头。比如 MiniMind 一类的小模型里
# $\text{hidden} = 512$、$H = 8$，每个头分到 $D = 512 / 8 = 64$ 维。一个头的分数表 $QK^\top$ 是 $T \times T$ 个长度为 $D$ 的点积，
# 要 $2T^2D$ 次浮点运算（FLOPs，一次乘加算 2 次）；$H$ 个头合起来是 $2T^2 \cdot HD = 2T^2 d$，和切成几个头无关。
# （作业 03 会把整层注意力的 FLOPs 一项一项数清楚。）
#
# 实现时不会真的建 $H$ 个小矩阵。`q_proj` 是一个 `[hidden → H·D]` 的大线性层，它的 $H \cdot D$ 个输出里，
# 第 $h$ 段 $D$ 个（第 $hD$ 到 $(h+1)D - 1$ 个）就是第 $h$ 个头的 query。一次大矩阵乘法等于 $H$ 次小的，
# 还更快。剩下的问题只是**怎样把这 $H$ 段摆成方便计算的形状**——这正是下一节的内容。

# %% [markdown]
# ## 2. 跟着形状走一遍
#
# 读注意力代码时，最容易跟丢的不是公式，而是形状。下面取一个 batch：2 句话，每句 5 个 token，
# 每个 token 是 512 维的向量，即 `x` 的形状是 `[2, 5, 512]`；8 个头，每个头 64 维。每做一步就打印一次形状。
# （这里先不加掩码，练习 3 再加上。）

# %%
torch.manual_seed(0)
batch, seq_len, hidden_size, num_heads = 2, 5, 512, 8
head_dim = hidden_size // num_heads
x = torch.randn(batch, seq_len, hidden_size)
q_proj, k_proj, v_proj, o_proj = (nn.Linear(hidden_size, hidden_size, bias=False) for _ in range(4))


def show(step, t):
    print(f"{step:<38} {list(t.shape)}")


show("x", x)
q, k, v = q_proj(x), k_proj(x), v_proj(x)
show("q = q_proj(x)", q)
q = q.view(batch, seq_len, num_heads, head_dim)
show("q.view(B, T, H, D)", q)
q = q.transpose(1, 2)
show("q.transpose(1, 2)", q)
k = k.view(batch, seq_len, num_heads, head_dim).transpose(1, 2)
v = v.view(batch, seq_len, num_heads, head_dim).transpose(1, 2)
show("k = k_proj(x).view(...).transpose(1, 2)", k)
scores = q @ k.transpose(-2, -1) / math.sqrt(head_dim)
show("scores = q @ k^T / sqrt(D)", scores)
weights = torch.softmax(scores, dim=-1)
show("weights = softmax(scores)", weights)
out = weights @ v
show("out = weights @ v", out)
out = out.transpose(1, 2)
show("out.transpose(1, 2)", out)
out = out.reshape(batch, seq_len, hidden_size)
show("out.reshape(B, T, H * D)", out)
y = o_proj(out)
show("y = o_proj(out)", y)

# %% [markdown]
# 一步一步看：
#
# 1. **投影**：`q_proj` 把每个 token 的 512 维变成另外 512 维，形状不变。
# 2. **`view(B, T, H, D)`**：`view` 只是换一种方式解读同一块内存，数据一个也不动。每个 token 的 512 个数在内存里是挨着的，
#    `view` 把它们切成 8 段、每段 64 个：第 $h$ 段就是第 $h$ 个头。
# 3. **`transpose(1, 2)`**：把头这一维换到序列前面，得到 `[B, H, T, D]`。为什么要换？`@` 只把**最后两维**当矩阵相乘，
#    前面的维度都当成"一批彼此独立的矩阵"。换成 `[2, 8, 5, 64]` 之后，最后两维是"某个头里 5 个 token 的 64 维向量"，
#    于是一次 `@` 就同时算好了 $2 \times 8 = 16$ 个 batch 和头的组合。
# 4. **$QK^\top$**：每个 (batch, 头) 组合得到一张 $5 \times 5$ 的分数表，一共 16 张：`[2, 8, 5, 5]`。
#    除以 $\sqrt{D}$ 时用的是**每个头**的维数 $D = 64$，不是 512。
# 5. **softmax、乘 $V$**：按行归一化，再加权求和，回到 `[2, 8, 5, 64]`：每个头给每个 token 一份 64 维的输出。
# 6. **`transpose(1, 2)` 换回来**：`[2, 5, 8, 64]`，每个 token 的 8 份输出排在一起。
# 7. **`reshape(B, T, H·D)`**：把 8 份 64 维首尾相接，拼成 512 维。这就是公式里的 Concat。
# 8. **`o_proj`**：再做一次线性变换，把各头的结果混合起来（第 6 节细说为什么需要它）。
#
# 出来的形状和进去的一样，都是 `[2, 5, 512]`：注意力层可以一层层叠上去，中间还能接残差连接和 MLP。
#
# > **本课程省掉的一步：注意力权重上的 dropout。** BERT、GPT-2 和不少教程代码（包括 MiniMind）在第 5 步的 softmax
# > 之后、乘 $V$ 之前还有一个 `nn.Dropout`：训练时随机把一部分权重置 0，其余的除以 $1 - p$ 放大，推理时关掉。
# > 它是防过拟合的正则化；如今大模型预训练的数据多到每条基本只看一遍，很少过拟合，所以 Llama、Qwen 这类模型都把它设成 0，
# > 训练时也省下了生成随机掩码的时间和保存它的显存。这门课不训练大模型，一律不加。

# %% [markdown]
# ### 两个容易踩的坑
#
# **坑一：直接 `view` 成 `[B, H, T, D]`。** 形状是对的，内容却乱了。用一个小例子看清楚：1 句话、3 个 token，
# hidden = 4 = 2 个头 × 2 维，每个数就是它原来的编号。

# %%
numbered = torch.arange(12).reshape(1, 3, 4)  # [B=1, T=3, hidden=4]: token t holds 4t ... 4t+3
print("x：每行是一个 token\n", numbered[0])
right = numbered.view(1, 3, 2, 2).transpose(1, 2)  # [1, H=2, T=3, D=2]
wrong = numbered.view(1, 2, 3, 2)                  # same shape, but cut in the wrong place
print("先 view(B, T, H, D) 再 transpose，头 0：\n", right[0, 0])
print("直接 view(B, H, T, D)，头 0：\n", wrong[0, 0])

# %% [markdown]
# 正确的头 0 拿到的是每个 token 的**前半段**：`[0, 1]`、`[4, 5]`、`[8, 9]`，三行分别来自三个 token。
# 直接 `view` 的头 0 里，第二行 `[2, 3]` 其实是 token 0 的后半段，却被当成了"token 1"；token 2 根本不在头 0 里。
# 原因是内存里同一个 token 的数挨在一起，`view` 只能按内存顺序切：必须先按 token 切（`[B, T, H, D]`），再把维度换位置。
#
# 下图把两种切法画出来：每一行是某个头在某个位置上的向量，格子里的数是这个数来自哪个 token。
# 正确的切法里每一行只来自一个 token，而且位置 $t$ 就是 token $t$；错误的切法让 token 错了位。

# %%
token_of = torch.arange(3).repeat_interleave(4).reshape(1, 3, 4)  # each entry labelled by its token
fig, axes = plt.subplots(1, 2, figsize=(9, 3.5))
for ax, (title, heads) in zip(axes, [("先 view 再 transpose（正确）", token_of.view(1, 3, 2, 2).transpose(1, 2)),
                                     ("直接 view 成 [B, H, T, D]（错误）", token_of.view(1, 2, 3, 2))]):
    grid = heads[0].reshape(6, 2)  # rows: (head, position) pairs; columns: the D features of that row
    ax.imshow(grid, cmap="Pastel1", vmin=0, vmax=8, aspect="auto")
    for row in range(6):
        for col in range(2):
            ax.text(col, row, grid[row, col].item(), ha="center", va="center")
    ax.set_yticks(range(6), labels=[f"头 {h}，位置 {t}" for h in range(2) for t in range(3)])
    ax.set_xticks(range(2), labels=["维 0", "维 1"])
    ax.set_title(title)
fig.tight_layout()
plt.show()

# %% [markdown]
# **坑二：`transpose` 之后用 `view`。** `transpose` 同样不搬数据，只改"怎么走内存"的步长，
# 结果在内存里就不再是按新形状连续排列的了（不连续，non-contiguous）。这时再 `view` 会报错：

# %%
heads_first = torch.randn(2, 8, 5, 64)
back = heads_first.transpose(1, 2)  # [2, 5, 8, 64], not contiguous
try:
    back.view(2, 5, 512)
except RuntimeError as error:
    print("view 报错：", str(error).split(".")[0])
print("reshape：", list(back.reshape(2, 5, 512).shape))
print("contiguous().view：", list(back.contiguous().view(2, 5, 512).shape))

# %% [markdown]
# `reshape` 在需要时会先复制成连续的，`contiguous().view(...)` 是同一回事的显式写法。两种都行。

# %% [markdown]
# ## 3. 拆头与合头
#
# ### 练习 1：`split_heads(x, num_heads)`
#
# 难度：🔴🔴⚪⚪⚪ · 约 10 分钟
#
# 输入 `x` 的形状是 `[B, T, H·D]`，返回 `[B, H, T, D]`，其中 $D$ = `x.shape[-1] // num_heads`。
# 第 $h$ 个头拿到每个 token 的第 $hD$ 到 $(h+1)D - 1$ 维。
#
# <details><summary>提示</summary>
#
# 回想第 2 节的第 2、3 步和坑一。要分两步走：先把每个 token 的向量按头切开，再把头这一维挪到序列那一维前面；
# 顺序反过来，形状对了，内容却是乱的。batch 大小、序列长度和宽度都从 `x.shape` 读出来，不要写死。
#
# </details>

# %% tags=["solution:split_heads"]
def split_heads(x: torch.Tensor, num_heads: int) -> torch.Tensor:
    """[B, T, H*D] -> [B, H, T, D]; head h gets features h*D ... (h+1)*D - 1 of every token."""
    ### BEGIN SOLUTION
    batch, seq, width = x.shape
    per_head = x.view(batch, seq, num_heads, width // num_heads)  # cut each token's vector into H pieces
    return per_head.transpose(1, 2)                                 # heads before positions
    ### END SOLUTION


# %% tags=["tests:split_heads"]
from course.checking import check
check("split_heads")

### BEGIN HIDDEN TESTS
from autograder.instructor.hidden_cells import grade
grade("split_heads")
### END HIDDEN TESTS

# %% [markdown]
# ### 练习 2：`merge_heads(x)`
#
# 难度：🔴⚪⚪⚪⚪ · 约 5 分钟
#
# `split_heads` 的逆操作：输入 `[B, H, T, D]`，返回 `[B, T, H·D]`，每个 token 的 $H$ 份输出按头的顺序首尾相接。
#
# <details><summary>提示</summary>
#
# 把 `split_heads` 倒着走一遍：先让每个 token 的 $H$ 份输出重新挨在一起，再把它们合成一份。
# 换维这一步省不得：跳过它直接改形状，形状会对，但同一行里拼进去的是同一个头、不同 token 的结果。
# 还记得坑二吗？换过维度的张量在内存里不连续，想想哪种改形状的写法在这时还能用。
#
# </details>

# %% tags=["solution:merge_heads"]
def merge_heads(x: torch.Tensor) -> torch.Tensor:
    """[B, H, T, D] -> [B, T, H*D]: the inverse of split_heads, each token's heads side by side."""
    ### BEGIN SOLUTION
    batch, heads, seq, dim = x.shape
    return x.transpose(1, 2).reshape(batch, seq, heads * dim)
    ### END SOLUTION


# %% tags=["tests:merge_heads"]
from course.checking import check
check("merge_heads")

### BEGIN HIDDEN TESTS
from autograder.instructor.hidden_cells import grade
grade("merge_heads")
### END HIDDEN TESTS

# %% [markdown]
# ## 4. 练习 3：`MultiHeadAttention(hidden_size, num_heads)`
#
# 难度：🔴🔴🔴⚪⚪ · 约 20 分钟
#
# 把第 2 节的流程装进一个 `nn.Module`，再加上掩码。
#
# **`__init__(hidden_size, num_heads)`**：四个线性层，都是 `nn.Linear(hidden_size, hidden_size, bias=False)`，
# 名字必须是 `q_proj`、`k_proj`、`v_proj`、`o_proj`。记下头数（`forward` 里要用）。
#
# **`forward(x, attention_mask=None, causal=True)`**：`x` 是 `[B, T, hidden]`，返回同样形状的输出。
#
# 1. `q_proj`、`k_proj`、`v_proj` 之后各自 `split_heads`；
# 2. 组合掩码：
#    - `causal=True`（默认）时用 `causal_mask(T)`，不许看未来；`causal=False` 时不加因果掩码（像 BERT 那样，每个 token 看整句）；
#    - `attention_mask` 是 tokenizer 给的 `[B, T]`，1 = 真实 token，0 = padding；不是 `None` 时用 `padding_mask` 转换；
#    - 两个都有就用 `&` 合并（两个条件都满足才能看）；一个都没有就是 `None`；
# 3. 调用 `attention(q, k, v, mask)`，它在最后两维上计算，`[B, H, T, D]` 直接就能用，而且会按每个头的 $D$ 缩放；
# 4. `merge_heads`，再过 `o_proj`。
#
# <details><summary>提示</summary>
#
# `nn.Module` 的子类在 `__init__` 里第一件事是调用 `super().__init__()`；要在 `forward` 里用的东西存到 `self` 上。
# 掩码请用现成的 `causal_mask`、`padding_mask` 和 `attention`。如果你想自己写 `masked_fill`，记住它**返回一个新张量**，
# 不会修改原来的 `scores`：只写 `scores.masked_fill(...)` 而不接住返回值，这个掩码就白加了。
#
# </details>

# %% tags=["solution:MultiHeadAttention"]
class MultiHeadAttention(nn.Module):
    """Multi-head self-attention: H heads of width D = hidden_size / H, concatenated, then o_proj."""

    def __init__(self, hidden_size: int, num_heads: int):
        super().__init__()
        ### BEGIN SOLUTION
        self.num_heads = num_heads
        self.q_proj = nn.Linear(hidden_size, hidden_size, bias=False)
        self.k_proj = nn.Linear(hidden_size, hidden_size, bias=False)
        self.v_proj = nn.Linear(hidden_size, hidden_size, bias=False)
        self.o_proj = nn.Linear(hidden_size, hidden_size, bias=False)
        ### END SOLUTION

    def forward(self, x: torch.Tensor, attention_mask: torch.Tensor | None = None,
                causal: bool = True) -> torch.Tensor:
        """x: [B, T, hidden]; attention_mask: [B, T] of 0/1 (1 = real token) or None. Returns [B, T, hidden]."""
        ### BEGIN SOLUTION
        seq = x.shape[1]
        q = split_heads(self.q_proj(x), self.num_heads)
        k = split_heads(self.k_proj(x), self.num_heads)
        v = split_heads(self.v_proj(x), self.num_heads)
        masks = []
        if causal:
            masks.append(causal_mask(seq))                 # [T, T]
        if attention_mask is not None:
            masks.append(padding_mask(attention_mask))     # [B, 1, 1, T]
        mask = None
        for m in masks:
            mask = m if mask is None else mask & m          # broadcasts to [B, 1, T, T]
        out, _ = attention(q, k, v, mask)
        return self.o_proj(merge_heads(out))
        ### END SOLUTION


# %% tags=["tests:MultiHeadAttention"]
from course.checking import check
check("MultiHeadAttention")

### BEGIN HIDDEN TESTS
from autograder.instructor.hidden_cells import grade
grade("MultiHeadAttention")
### END HIDDEN TESTS

# %% [markdown]
# ## 5. 每个头各看各的
#
# 多头的意义在于不同的头学到不同的"看法"。训练好的模型里，有的头盯着前一个 token，有的头找指代对象，有的头把注意力堆在句首。
# 我们没有训练好的权重，但可以模拟"每个头一套不同的投影"：回到作业 01 的句子，用 `toy.sentence_qkv` 给每个头造一组
# q、k、v，`seed` 取头的编号，于是每个头的投影矩阵都不一样。把 4 个头叠成 `[1, 4, 7, 8]`，一次 `attention` 就全算完了。

# %%
sentence = ["今天", "天气", "不错", "，", "我们", "去", "公园"]
per_head = [toy.sentence_qkv(sentence, head_dim=8, seed=h) for h in range(4)]  # 4 x (q, k, v), each [7, 8]
q_h, k_h, v_h = [torch.stack(parts)[None] for parts in zip(*per_head)]       # each [1, 4, 7, 8]
_, weights_h = attention(q_h, k_h, v_h, causal_mask(len(sentence)))          # [1, 4, 7, 7]

fig, axes = plt.subplots(2, 2, figsize=(12, 10))
for h, ax in enumerate(axes.flat):
    plotting.attention_heatmap(weights_h[0, h], sentence, ax=ax, title=f"头 {h}")
fig.tight_layout()
plt.show()

# %% [markdown]
# 同一句话、同一个因果掩码，四个头的权重分布完全不同：同一个 token 在不同的头里把注意力给了不同的位置。
# 这些数字没有语言学含义（投影是随机的），要看的是**结构**：每个头各有一张自己的 $T \times T$ 表，互不干扰。

# %% [markdown]
# ## 6. 为什么还需要 `o_proj`
#
# `merge_heads` 之后，每个 token 的 512 维输出是 8 段并排放着的：第 0–63 维只来自头 0，第 64–127 维只来自头 1……
# 拼接只是把各头的结果摆在一起，不做任何计算：它不把头和头混合，也不决定每个头的结果落在哪些维上——
# 头 $h$ 的结果就待在第 $64h$ 到 $64h + 63$ 维。
#
# 这并不是说，没有 `o_proj` 各头就永远没法合作：拼好的向量加进残差流以后，紧接着的 MLP 和下一层的 `q_proj`、
# `k_proj`、`v_proj` 都读取全部 512 维，照样能把几个头的结果放在一起用。`o_proj` 补上的是两件拼接做不到的事：
#
# 1. **它是注意力层里唯一让各头相遇的地方。** 在它之前，每个头从打分、softmax 到加权求和都只碰自己的那一份；
#    过了它，输出的每一维都可以是所有头结果的一个学出来的组合，不必等到后面的层。
# 2. **让每个头自己选择往残差流里写到哪些方向。** 没有它，头 $h$ 只能写进固定的那 64 维，
#    而这 64 维里同时还装着残差流原有的信息（token 的嵌入、前面各层的结果）。有了它，每个头可以写到 512 维空间里
#    一个学出来的子空间（最多 64 维，因为它只有 64 个数可写）。
#
# `o_proj` 是一个 $512 \times 512$ 的矩阵。把它按行切成 8 块 $W^O_0, \dots, W^O_7$（每块 $64 \times 512$），
# 就能看出它做了什么：
#
# $$
# \operatorname{Concat}(\text{head}_0, \dots, \text{head}_7)\, W^O = \sum_{h=0}^{7} \text{head}_h\, W^O_h
# $$
#
# 每个头先各自映射到完整的 512 维，再相加：**输出的每一维都是所有头的混合**，而且混合的方式是学出来的。
#
# 用你的 `MultiHeadAttention` 验证一下：只改动头 3 的 value 投影（`v_proj` 的第 192–255 行），看 `o_proj`
# 前后的输出有哪些维变了。`register_forward_hook` 让我们在不改模块代码的情况下，取到 `o_proj` 的输入（拼接后的各头输出）。

# %%
torch.manual_seed(1)
mha = MultiHeadAttention(512, 8)
x_demo = torch.randn(1, 5, 512)
captured = []
hook = mha.o_proj.register_forward_hook(lambda module, inputs, output: captured.append((inputs[0], output)))

with torch.no_grad():
    mha(x_demo)
    mha.v_proj.weight[3 * 64:4 * 64] += 0.05 * torch.randn(64, 512)  # perturb head 3's values only
    mha(x_demo)
hook.remove()

(before_in, before_out), (after_in, after_out) = captured
change_concat = (after_in - before_in).abs().mean(dim=(0, 1))  # [512]: mean change per dimension
change_output = (after_out - before_out).abs().mean(dim=(0, 1))
changed = change_concat.nonzero().flatten()
print(f"o_proj 之前：第 {changed[0]}–{changed[-1]} 维变了，共 {len(changed)} 维")
print(f"o_proj 之后：{int((change_output > 1e-6).sum())} 维变了（共 512 维）")

fig, axes = plt.subplots(2, 1, figsize=(10, 5), sharex=True)
axes[0].bar(range(512), change_concat, width=1.0, color="tab:blue")
axes[0].set_title("o_proj 之前（各头拼接）：只有头 3 的 64 维变了")
axes[1].bar(range(512), change_output, width=1.0, color="tab:orange")
axes[1].set_title("o_proj 之后：每一维都变了")
for ax in axes:
    ax.set_ylabel("平均变化 |Δ|")
    for boundary in range(64, 512, 64):
        ax.axvline(boundary - 0.5, color="gray", linewidth=0.5)
axes[1].set_xlabel("输出的维（灰线是头与头的分界）")
fig.tight_layout()
plt.show()

# %% [markdown]
# 上图：头 3 的改动只出现在第 192–255 维，其他头的地盘纹丝不动。下图：过了 `o_proj`，这一个头的改动散到了全部 512 维。
# 这就是 `o_proj` 的作用：每个头的结果都能影响这一层输出的每一维，而且影响的方式是学出来的。
# 加进残差流的是一个已经按学到的方式混合好的向量，不再是八段位置固定、各占一块的小向量。

# %% [markdown]
# ## 7. 参数量：$4d^2$
#
# 四个投影都是 $d \times d$ 的矩阵（$d$ = hidden_size，没有 bias），所以一层多头注意力有 $4d^2$ 个参数。
# $d = 512$ 时是 $4 \times 262{,}144 = 1{,}048{,}576$。数一数你的模块：

# %%
for heads in (1, 8, 64):
    count = sum(p.numel() for p in MultiHeadAttention(512, heads).parameters())
    print(f"hidden 512，{heads:>2} 个头：{count:,} 个参数   （4 · 512² = {4 * 512**2:,}）")

# %% [markdown]
# 头数不影响参数量：多头只是把同样的 $d$ 列**分组**使用，不是多加了矩阵。
#
# | 参数 | 形状 | 个数（$d = 512$） |
# |---|---|---|
# | `q_proj.weight` | $[d, d]$ | 262,144 |
# | `k_proj.weight` | $[d, d]$ | 262,144 |
# | `v_proj.weight` | $[d, d]$ | 262,144 |
# | `o_proj.weight` | $[d, d]$ | 262,144 |
# | 合计 | | $4d^2$ = 1,048,576 |
#
# 推理时真正的负担往往不在参数，而在每个 token 都要存下来的 K 和 V（KV cache）。每个头都有自己的 K、V，
# 头越多、上下文越长，缓存越大。下一次作业让多个 query 头**共享** K、V（MQA / GQA），再实现 KV cache 并算清它的大小。

# %% [markdown]
# ## 小结
#
# | 步骤 | 形状 | 要守住的细节 |
# |---|---|---|
# | `q_proj(x)` | `[B, T, H·D]` | 一个大线性层，第 $h$ 段属于头 $h$ |
# | `split_heads` | `[B, H, T, D]` | 先 `view(B, T, H, D)`，再 `transpose(1, 2)` |
# | `attention` | `[B, H, T, D]` | 按每个头的 $D$ 缩放；掩码用 `&` 合并 |
# | `merge_heads` | `[B, T, H·D]` | 先 `transpose(1, 2)`，再 `reshape` |
# | `o_proj` | `[B, T, hidden]` | 让各头的结果混合；参数量 $4d^2$ |

# %% [markdown]
# ### 思考题
#
# 1. hidden 保持 512，把头数从 8 加到 64（每个头只剩 $D = 8$ 维）。参数量、FLOPs 会变吗？什么会变差？

# %% [markdown] tags=["answer:many_small_heads"]
# ### BEGIN SOLUTION
# 参数量不变，还是 $4d^2$（第 7 节数过）；投影的 FLOPs 不变；分数表 $QK^\top$ 和加权求和 $PV$ 各是 $H \times 2T^2D = 2T^2d$，合起来 $4T^2d$，也不变。
# 变的是每个头能表达什么。一个头的分数 $q \cdot k$ 只在 $D$ 维里算：$D = 8$ 时，这个头对 $T$ 个 token 打出的
# $T \times T$ 分数表的秩最多是 8，能区分的"关系"很少；每个头取回的值也只有 8 维。头越多，每个头越窄，
# 这个瓶颈就越紧。另外，要存的注意力权重有 $H$ 张 $T \times T$ 的表，头数加到 8 倍，这份中间结果也变成 8 倍大。
# 所以实际模型的 $D$ 大多取 64 到 256，而不是把头切得很碎。
# ### END SOLUTION

# %% [markdown]
# 2. 缩放时为什么除以 $\sqrt{D}$（每个头的维数），而不是 $\sqrt{d}$（hidden 的维数）？

# %% [markdown] tags=["answer:scale_per_head"]
# ### BEGIN SOLUTION
# 缩放是为了让分数的大小不随维数变化。一个头的分数是 $q_h \cdot k_h = \sum_{i=1}^{D} q_i k_i$，只有 $D$ 项相加；
# 各项独立、方差为 1 时，和的方差是 $D$，除以 $\sqrt{D}$ 正好让它回到 1。hidden 的其余 $d - D$ 维属于别的头，
# 根本不在这个点积里。要是除以 $\sqrt{d}$，分数就被多压小了 $\sqrt{H}$ 倍（$H = 8$ 时约 2.8 倍），
# softmax 会变得过于平均，每个头都更难把注意力集中到少数几个 token 上。
# ### END SOLUTION

# %% [markdown]
# 3. 把输入的 token 顺序打乱（比如倒过来），`causal=False` 时输出会怎样？`causal=True` 时呢？这说明模型还缺什么？

# %% [markdown] tags=["answer:permuted_tokens"]
# ### BEGIN SOLUTION
# `causal=False`（也没有 padding）时，输出只是跟着换了位置，每个 token 自己的输出一点不变：投影对每个 token 各算各的，
# 注意力对所有 key 求加权和，而加法不在乎顺序。换句话说，这个模块根本不知道 token 的先后。
#
# `causal=True` 时就不一样了：每个 token 能看到的是"排在它前面的那些"，顺序一换，它看到的集合就变了，输出也跟着变。
# 但这只是掩码带来的一点位置信息；"相隔多远""谁紧挨着谁"，模块自己仍然看不出来。所以真实模型要另外加上位置编码，
# 作业 04 的 RoPE 就是现在最常用的一种。
# ### END SOLUTION
