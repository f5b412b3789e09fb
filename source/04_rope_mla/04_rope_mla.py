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
# # 作业 04：RoPE 与多头潜在注意力（MLA）
#
# 前三次作业的注意力有一个盲点：打分 $q \cdot k$ 只看内容，不看两个 token 隔多远。不加掩码时，打乱 token 的顺序，
# 每个 token 的输出只是跟着换个位置，数值不变。加上因果掩码，输出会变（每个 query 能看到的前文换了），因果模型也确实能从
# "前面有多少个 token"里间接推出位置：不加任何位置编码的因果 Transformer（NoPE）也能训练出来。可那只是间接的、粗糙的信号，
# "这个 key 离我 3 个位置"这样的相对距离，打分里没有。这次作业的前半部分把距离直接写进打分：**RoPE**（旋转位置编码），
# 今天几乎所有大模型都用它。
# 后半部分是 DeepSeek-V2 提出的**多头潜在注意力**（Multi-head Latent Attention，MLA）：KV cache 里不再存每个头的 K、V，
# 只存一个低维的"潜在向量"，缓存只有 MHA 的几十分之一。MLA 离不开 RoPE，而且正是 RoPE 逼出了它最巧妙的一步。
#
# 六个练习：`rope_cos_sin`、`apply_rope`、`LatentKVCache`、`MultiHeadLatentAttention`（及其吸收版的
# `forward_absorbed`）、`mla_cache_bytes`。
#
# 路线：
#
# - **A. RoPE**：1. 转一对数；2. 很多对、很多频率，以及怎么把上下文拉长；3–4. 练习 1、2；5. 两种排法；6. 带缓存时的位置。
# - **B. MLA**：7. 只缓存一个潜在向量；8. 吸收，和 RoPE 为什么挡路；9. 解耦的 RoPE key 与缩放；10. 数据流图；
#   11–14. 练习 3–6（13 之后：解码时的 MLA 就是 latent 空间里的 MQA）；15. 量一量吸收版快在哪里。
#
# 参考资料：RoPE 来自 RoFormer 论文（Su 等，2021）；MLA 来自 DeepSeek-V2 论文（DeepSeek-AI，2024），
# 一篇讲 MHA/MQA/GQA/MLA 的中文教程也写过一个简化版，本作业会指出它和 DeepSeek 原版的两处不同。
#
# > **本课程的约定**
# >
# > - 注意力里的张量形状是 `[batch, heads, seq, head_dim]`，简写为 `[B, H, T, D]`；进出注意力层的是 `[B, T, hidden]`。
# > - 掩码是 `torch.bool`，**True 表示"可以看"**。模块的 `attention_mask` 是 tokenizer 给的 `[B, k_len]` 的 0/1，
# >   覆盖缓存里的位置和新来的位置；模块自己加因果掩码。
# > - 线性层都是 `nn.Linear(..., bias=False)`，名字照抄 Hugging Face 的 DeepSeek-V3，真实的 state dict 才能直接装进来。
# > - **评分规则**：评分程序只读取你的 `import`、函数和类的定义，以及全大写的常量；演示单元不会被评分程序执行。
# > - **「运行全部」（Run All）**：练习还没写的时候，它会停在第一个练习后面的检查单元，报 `NotImplementedError`——
# >   这是正常的，不是你弄坏了什么。从上往下做：写完一个练习，运行它和它后面的检查，再往下走。
# >
# > 作业 01 的函数在导入单元后面的「已给出」单元里，运行一下就能用。

# %%
import math
import time
from types import SimpleNamespace

import matplotlib.pyplot as plt
import torch
from torch import nn

from course.tools import plotting

torch.set_printoptions(precision=4, sci_mode=False)
plotting.use_chinese_font()


# %% tags=["provided:attention_scores", "provided:causal_mask", "provided:padding_mask", "provided:masked_softmax", "provided:attention"]
# course-release fills this cell with the answers of assignment 01.

# %% [markdown]
# # A. RoPE：把位置写成旋转
#
# ## 1. 转一对数
#
# 先只看两个数 $(a, b)$，把它当成平面上的一个点。逆时针转 $\varphi$ 弧度，就是乘一个旋转矩阵：
#
# $$
# R(\varphi)\begin{pmatrix} a \\ b \end{pmatrix} =
# \begin{pmatrix} \cos\varphi & -\sin\varphi \\ \sin\varphi & \cos\varphi \end{pmatrix}
# \begin{pmatrix} a \\ b \end{pmatrix}
# = \begin{pmatrix} a\cos\varphi - b\sin\varphi \\ a\sin\varphi + b\cos\varphi \end{pmatrix}.
# $$
#
# RoPE 的规则只有一句：**位置 $m$ 上的 query 和 key，都转 $m\theta$ 弧度**（$\theta$ 是一个固定的"每步转多少"）。
# 然后照常求点积。位置 $m$ 的 query 和位置 $n$ 的 key：
#
# $$
# \big(R(m\theta)\,q\big)^\top \big(R(n\theta)\,k\big) = q^\top R(m\theta)^\top R(n\theta)\, k = q^\top R\big((n - m)\theta\big)\, k .
# $$
#
# 旋转矩阵的转置就是反着转，两次旋转合成一次：中间只剩 $n - m$。**点积只和两者隔了几个位置有关，和它们站在哪里无关。**
# 用几行代码核对：

# %%
def rotate_pair(v: torch.Tensor, angle: float) -> torch.Tensor:
    """Turn the 2-D point v counter-clockwise by angle radians."""
    c, s = math.cos(angle), math.sin(angle)
    return torch.tensor([c * v[0] - s * v[1], s * v[0] + c * v[1]])


q_pair, k_pair = torch.tensor([1.0, 2.0]), torch.tensor([0.5, -1.5])
step = 0.3  # radians per position
for m, n in [(3, 1), (10, 8), (100, 98), (3, 2), (3, 0)]:
    dot = rotate_pair(q_pair, m * step) @ rotate_pair(k_pair, n * step)
    print(f"query 在 {m:>3}，key 在 {n:>3}（距离 {m - n}）：点积 {dot:+.4f}")

# %% [markdown]
# 前三行隔了 2 个位置，点积一样；换成隔 1 个、隔 3 个，点积就变了。旋转不改变向量的长度，所以 RoPE 只动"方向"，
# 不会把某个 token 的向量放大或缩小。

# %% [markdown]
# ## 2. 很多对、很多频率
#
# 一个头有 $D$ 维，就配成 $D/2$ 对，每对各转各的。如果每对都用同一个 $\theta$，转一圈（$2\pi/\theta$ 个位置）之后位置就分不清了。
# 所以每一对用不同的频率：
#
# $$
# \theta_i = \text{theta}^{-2i/D},\qquad i = 0, 1, \dots, \tfrac D2 - 1 .
# $$
#
# - 第 0 对 $\theta_0 = 1$：每个位置转 1 弧度，六个多位置就转一圈——**快对**，对相邻几个 token 的细微距离最敏感；
# - 越往后越慢，最后一对几乎不动——**慢对**，转一圈要几万甚至上千万个位置，用来区分"很远"和"更远"。
#
# 这里的 theta（代码里叫 `rope_theta`，常被叫作"底数"）决定最慢的那一对有多慢。原始 Transformer 风格的设置是 $10^4$；
# 要支持更长的上下文，就把它调大：Qwen3.5 用 $10^7$。下面左图是 $D = 64$、theta $= 10^4$ 时几对的 $\cos(m\theta_i)$
# 随位置 $m$ 的变化，右图是每一对转一圈要多少个位置（波长 $2\pi/\theta_i$）：

# %%
dims, positions_plot = 64, torch.arange(0, 64)
pair_index = torch.arange(dims // 2)
fig, (ax_wave, ax_len) = plt.subplots(1, 2, figsize=(13, 4.2))
for i in (0, 4, 12, 31):
    frequency = 10_000.0 ** (-2 * i / dims)
    ax_wave.plot(positions_plot, torch.cos(positions_plot * frequency), label=f"第 {i} 对（θ = {frequency:.2g}）")
ax_wave.set_xlabel("位置 m")
ax_wave.set_ylabel("cos(m·θᵢ)")
ax_wave.set_title("快对转得快，慢对几乎不动（D = 64，theta = 1e4）")
ax_wave.legend(fontsize=8)
for base in (1e4, 1e6, 1e7):
    ax_len.plot(pair_index, 2 * math.pi * base ** (2 * pair_index / dims), label=f"theta = {base:.0e}")
ax_len.axhline(262_144, color="gray", linestyle="--", linewidth=1)
ax_len.text(0, 262_144 * 1.6, "262,144（Qwen3.5 的最大上下文）", fontsize=8, color="gray")
ax_len.set_yscale("log")
ax_len.set_xlabel("第 i 对")
ax_len.set_ylabel("转一圈需要的位置数（对数坐标）")
ax_len.set_title("theta 越大，慢对越慢")
ax_len.legend(fontsize=8)
fig.tight_layout()
plt.show()

# %% [markdown]
# 每一对是一个钟面上的指针，各自以不同的速度走。把所有指针的读数合起来，就能分辨出很大范围内的每个距离。

# %% [markdown]
# ### 上下文不够长：把慢对拉长
#
# 模型训练时只见过 $T_{\text{train}}$ 以内的位置。再往后，快对在训练长度里早就转过成百上千圈，角度都见过；波长比 $T_{\text{train}}$ 还长的
# **慢对**却转到了训练时没出现过的角度，模型不会读。要把上下文扩大 $s$ 倍，常见的四种办法都只改每一对的频率 $\theta_i$
# （也就是改波长 $\lambda_i = 2\pi/\theta_i$）：
#
# - **位置插值**（PI）：所有频率都除以 $s$，等于把位置 $m$ 当成 $m/s$。远处的角度回到了见过的范围，可快对也慢了 $s$ 倍，
#   相邻几个 token 的距离变得难分。
# - **NTK-aware**：把 theta 调大到 $\text{theta}\cdot s^{d_{rope}/(d_{rope}-2)}$（$d_{rope}$ 是参与旋转的维数）。第 0 对不变，最后一对正好慢 $s$ 倍，中间渐变：
#   高频几乎保留，低频被拉长。
# - **YaRN**：看每一对在训练长度里转了几圈，$\rho_i = T_{\text{train}}/\lambda_i$。转了 $\beta = 32$ 圈以上的不动，
#   不到 $\alpha = 1$ 圈的按 PI 除以 $s$，中间按 $\rho_i$ 线性过渡。此外，分数再乘一个"温度" $(0.1\ln s + 1)^2$
#   （YaRN 论文按实验定的）：插值后 softmax 会摊得更平，这一项把它拉回来。
# - **Llama 3 的 rope scaling**（factor 8，`low_freq_factor` 1，`high_freq_factor` 4，原始上下文 8192）：波长超过
#   $8192/1$ 的对除以 8，短于 $8192/4$ 的不动，中间平滑过渡。
#
# 用 Llama 3.1 的真实设置画出来：$d_{rope} = 128$（64 对）、theta $= 5\times10^5$、$T_{\text{train}} = 8192$、$s = 8$。

# %%
d_rope_llama, theta_llama, train_len, s_ext = 128, 500_000.0, 8192, 8
pairs_llama = torch.arange(d_rope_llama // 2)
base_freq = theta_llama ** (-2 * pairs_llama.double() / d_rope_llama)      # θ_i, [d_rope / 2]


def ramp_frequencies(freq: torch.Tensor, scale: float, context: int, alpha: float, beta: float) -> torch.Tensor:
    """YaRN's ramp: pairs turning more than beta times within context keep freq, under alpha get freq / scale."""
    kept = ((context * freq / (2 * math.pi) - alpha) / (beta - alpha)).clamp(0, 1)   # by turns ρ = context / λ
    return kept * freq + (1 - kept) * freq / scale


def llama3_frequencies(freq: torch.Tensor, factor=8, low_freq_factor=1, high_freq_factor=4, original=8192):
    """Llama 3's rule by wavelength: above original / low divide by factor, below original / high keep, smooth between."""
    wavelength = 2 * math.pi / freq
    smooth = (original / wavelength - low_freq_factor) / (high_freq_factor - low_freq_factor)
    scaled = torch.where(wavelength > original / low_freq_factor, freq / factor, freq)
    between = (wavelength >= original / high_freq_factor) & (wavelength <= original / low_freq_factor)
    return torch.where(between, (1 - smooth) * freq / factor + smooth * freq, scaled)


extended = {
    "位置插值（PI）": base_freq / s_ext,
    "NTK-aware": (theta_llama * s_ext ** (d_rope_llama / (d_rope_llama - 2))) ** (-2 * pairs_llama.double() / d_rope_llama),
    "YaRN（α = 1，β = 32）": ramp_frequencies(base_freq, s_ext, train_len, 1, 32),
    "Llama 3": llama3_frequencies(base_freq),
}
# Llama 3's rule is YaRN's ramp with beta = high_freq_factor = 4 (and no temperature).
assert torch.allclose(extended["Llama 3"], ramp_frequencies(base_freq, s_ext, train_len, 1, 4))

wavelength = 2 * math.pi / base_freq
fig, (ax_wl, ax_stretch) = plt.subplots(1, 2, figsize=(13, 4.4))
ax_wl.plot(pairs_llama, wavelength, color="black", linewidth=2.5, label="原始")
for name, freq in extended.items():
    ax_wl.plot(pairs_llama, 2 * math.pi / freq, label=name)
    ax_stretch.plot(pairs_llama, base_freq / freq, label=name)
for length, text in [(train_len, "8192 = T_train"), (train_len // 4, "2048 = T_train / 4"),
                     (s_ext * train_len, "65,536 = 8 × T_train")]:
    ax_wl.axhline(length, color="gray", linestyle="--", linewidth=1)
    ax_wl.text(0, length * 1.3, text, fontsize=8, color="gray")
ax_wl.set_yscale("log")
ax_wl.set_xlabel("第 i 对")
ax_wl.set_ylabel("波长 λᵢ（位置数，对数坐标）")
ax_wl.set_title("扩展前后每一对的波长（d_rope = 128，theta = 5e5）")
ax_wl.legend(fontsize=8)
ax_stretch.set_xlabel("第 i 对")
ax_stretch.set_ylabel("波长被拉长的倍数 λ′ᵢ / λᵢ")
ax_stretch.set_title("哪些对被拉长（s = 8）")
ax_stretch.legend(fontsize=8)
fig.tight_layout()
plt.show()

stretch_llama = base_freq / extended["Llama 3"]
kept, full = (stretch_llama < 1 + 1e-9).sum().item(), (stretch_llama > s_ext - 1e-9).sum().item()
print(f"Llama 3：64 对里 {kept} 对不动（波长 < 2048），{full} 对拉长 8 倍（波长 > 8192），"
      f"{64 - kept - full} 对在中间过渡")
stretch_yarn = base_freq / extended["YaRN（α = 1，β = 32）"]
print(f"YaRN：{(stretch_yarn < 1 + 1e-9).sum().item()} 对不动，{(stretch_yarn > s_ext - 1e-9).sum().item()} 对拉长 8 倍；"
      f"温度 (0.1·ln {s_ext} + 1)² = {(0.1 * math.log(s_ext) + 1) ** 2:.3f}")
print(f"NTK-aware：第 0 对拉长 {(base_freq / extended['NTK-aware'])[0]:.2f} 倍，"
      f"第 {len(pairs_llama) // 2} 对 {(base_freq / extended['NTK-aware'])[len(pairs_llama) // 2]:.2f} 倍，"
      f"最后一对 {(base_freq / extended['NTK-aware'])[-1]:.2f} 倍")

# %% [markdown]
# 右图一眼就能看出区别：PI 把 64 对全都拉长 8 倍；另外三种都让快对（左边）保持原样，只拉长慢对。NTK-aware 是一条平滑的曲线，
# 中间的对也被拉长了（第 32 对约 2.9 倍）；YaRN 和 Llama 3 则按"在训练长度里转了几圈"划出明确的界线，界线以外原封不动。
# Llama 3 的规则其实就是 $\beta = 4$、不加温度的 YaRN 斜坡（上面的 `assert` 核对过）。
# （Hugging Face 的 YaRN 在两条界线之间按对的编号、而不是按圈数线性过渡，曲线略有不同，界线一样。）
# DeepSeek-V2/V3 用的就是 YaRN，第 9 节会再碰到它的温度。

# %% [markdown]
# ## 3. 练习 1：`rope_cos_sin(positions, rotary_dim, theta)`
#
# 旋转要用的只是每个位置、每一对的 $\cos$ 和 $\sin$。先把它们做成两张表，之后所有的头、所有的层都查同一张表。
#
# 输入 `positions` 是整数张量 `[T]`（不一定从 0 开始：带缓存时是 `len(cache)` 往后的几个位置），
# `rotary_dim`（记作 $d_{rope}$，MLA 一节也这么叫）是参与旋转的维数（偶数）。返回 `(cos, sin)`，形状都是 `[T, rotary_dim]`，float32：
#
# - 第 $i$ 个频率是 $\text{theta}^{-2i/\text{rotary\_dim}}$，$i = 0, \dots, \text{rotary\_dim}/2 - 1$；
# - 表的第 $m$ 行、第 $i$ 列是角度 $m\,\theta_i$；
# - 表的**前一半和后一半是同一组角度**：`[θ₀, θ₁, …, θ₀, θ₁, …]`，下一节的 rotate-half 写法需要这样排。
#   不是把每个角度重复两次挨着放（`[θ₀, θ₀, θ₁, θ₁, …]`）。
#
# 提示：位置先转成 float32；外积可以用广播，也可以用 `torch.outer`。

# %% tags=["solution:rope_cos_sin"]
def rope_cos_sin(positions: torch.Tensor, rotary_dim: int, theta: float) -> tuple[torch.Tensor, torch.Tensor]:
    """RoPE tables for rotate-half.

    positions: [T] integer positions. Frequency i is theta^(-2i / rotary_dim), i < rotary_dim / 2.
    Returns (cos, sin), each [T, rotary_dim] float32, the angle table being cat(freqs, freqs).
    """
    ### BEGIN SOLUTION
    exponents = torch.arange(0, rotary_dim, 2, dtype=torch.float32) / rotary_dim
    inv_freq = theta ** (-exponents)                          # [rotary_dim / 2]
    freqs = torch.outer(positions.float(), inv_freq)          # [T, rotary_dim / 2]: angle m * theta_i
    angles = torch.cat([freqs, freqs], dim=-1)                # [T, rotary_dim]: both halves share the angles
    return angles.cos(), angles.sin()
    ### END SOLUTION


# %% tags=["tests:rope_cos_sin"]
from course.checking import check
check("rope_cos_sin")

### BEGIN HIDDEN TESTS
from autograder.instructor.hidden_cells import grade
grade("rope_cos_sin")
### END HIDDEN TESTS

# %% [markdown]
# ## 4. 练习 2：`apply_rope(x, cos, sin)`
#
# 用表来转。把 $D$ 维切成前一半 $x_1$ 和后一半 $x_2$，让第 $i$ 维和第 $i + D/2$ 维配成一对（这种配法叫 **rotate-half**）。
# 第 $i$ 对的两个数按第 1 节的公式转：
#
# $$
# \begin{aligned}
# x'_i &= x_i\cos(m\theta_i) - x_{i + D/2}\sin(m\theta_i),\\
# x'_{i + D/2} &= x_{i + D/2}\cos(m\theta_i) + x_i\sin(m\theta_i).
# \end{aligned}
# $$
#
# 把 $D$ 个式子排成一行，就是一个向量式：
#
# $$
# x' = x \odot \cos + \operatorname{rotate\_half}(x) \odot \sin,\qquad \operatorname{rotate\_half}([x_1,\ x_2]) = [-x_2,\ x_1] .
# $$
#
# 这就是为什么上一个练习的表要前后两半相同：第 $i$ 维和第 $i + D/2$ 维乘的是同一个角度。
#
# `x` 是 `[..., T, D]`（前面有几维都行：`[B, H, T, D]` 的 query，或 `[B, T, D]` 的一个 key），`cos`、`sin` 是 `[T, D]`，
# 和 `x` 的最后两维右对齐，直接广播。表是 float32，先转成 `x` 的 dtype 再乘，bfloat16 进来的还是 bfloat16 出去。

# %% tags=["solution:apply_rope"]
def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate-half RoPE over every dim of x.

    x: [..., T, D]; cos, sin: [T, D] from rope_cos_sin, cast to x's dtype.
    Returns x rotated position by position, same shape and dtype.
    """
    ### BEGIN SOLUTION
    cos, sin = cos.to(x.dtype), sin.to(x.dtype)
    x1, x2 = x.chunk(2, dim=-1)
    return x * cos + torch.cat([-x2, x1], dim=-1) * sin
    ### END SOLUTION


# %% tags=["tests:apply_rope"]
from course.checking import check
check("apply_rope")

### BEGIN HIDDEN TESTS
from autograder.instructor.hidden_cells import grade
grade("apply_rope")
### END HIDDEN TESTS

# %% [markdown]
# 用你的两个函数再核对一次第 1 节的结论，这回是 64 维、32 对一起转：

# %%
torch.manual_seed(0)
q_vec, k_vec = torch.randn(64), torch.randn(64)


def rope_dot(q_pos: int, k_pos: int, theta: float = 10_000.0) -> float:
    cos_p, sin_p = rope_cos_sin(torch.tensor([q_pos, k_pos]), 64, theta)
    return (apply_rope(q_vec[None], cos_p[:1], sin_p[:1]) @ apply_rope(k_vec[None], cos_p[1:], sin_p[1:]).T).item()


for q_pos, k_pos in [(5, 3), (50, 48), (5000, 4998), (5, 4), (5, 0)]:
    print(f"q 在 {q_pos:>4}，k 在 {k_pos:>4}（距离 {q_pos - k_pos}）：{rope_dot(q_pos, k_pos):+.4f}")

# %% [markdown]
# 隔 2 个位置的三行相同（最后几位的差别是 float32 的舍入）。RoPE 让注意力分数里同时有两样东西：$q$、$k$ 的**内容**是否匹配，
# 以及它们的**相对距离**。

# %% [markdown]
# ## 5. 两种排法：rotate-half 和交错式
#
# 配对还有另一种常见写法：相邻两维一对，$(x_0, x_1), (x_2, x_3), \dots$，第 $i$ 对用第 $i$ 个频率。Meta 最初发布的 Llama 代码、
# GPT-J、DeepSeek 发布的权重都按这种**交错式**（interleaved）训练；Hugging Face 的 Llama、Qwen 实现用 **rotate-half**。
#
# 两者是同一种旋转，只是维度的编号不同。把交错式的维度重新排一下——偶数维放前一半，奇数维放后一半——交错式的第 $i$ 对
# $(x_{2i}, x_{2i+1})$ 就落到 rotate-half 的第 $i$ 对 $(y_i, y_{i + D/2})$ 上：

# %%
def apply_rope_interleaved(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """RoPE on adjacent pairs (x0, x1), (x2, x3), ...: pair i turns by the angle in column i of the table."""
    half = x.shape[-1] // 2
    c, s = cos[..., :half], sin[..., :half]
    even, odd = x[..., 0::2], x[..., 1::2]
    return torch.stack([even * c - odd * s, even * s + odd * c], dim=-1).flatten(-2)


D_DEMO = 8
to_rotate_half = torch.cat([torch.arange(0, D_DEMO, 2), torch.arange(1, D_DEMO, 2)])  # [0, 2, 4, 6, 1, 3, 5, 7]
x_demo = torch.randn(5, D_DEMO)
cos_d, sin_d = rope_cos_sin(torch.arange(5), D_DEMO, 10_000.0)
same = torch.allclose(apply_rope(x_demo[:, to_rotate_half], cos_d, sin_d),
                      apply_rope_interleaved(x_demo, cos_d, sin_d)[:, to_rotate_half], atol=1e-6)
print("维度的排列：", to_rotate_half.tolist(), "  rotate-half(排列后的 x) == 排列(interleaved(x))：", same)

# %% [markdown]
# 权重也一样。query 和 key 都是 $W x$；把 $W_q$、$W_k$ 的**行**按同一个排列换一下，投影出来的向量就已经是 rotate-half 的排法，
# 而点积对"两边同时换维度顺序"毫不在乎。所以按交错式训练的 checkpoint，只要在加载时排列一次 $W_q$、$W_k$ 的行，
# 就能交给 rotate-half 的代码，算出一模一样的注意力分数（Hugging Face 把 Meta 的 Llama 权重转过来时做的正是这件事；
# 它的 DeepSeek-V3 实现则留了一个 `rope_interleave` 开关，直接按交错式算）。

# %%
hidden_demo = 12
w_q, w_k = torch.randn(D_DEMO, hidden_demo), torch.randn(D_DEMO, hidden_demo)
tokens_demo = torch.randn(5, hidden_demo)
scores_interleaved = (apply_rope_interleaved(tokens_demo @ w_q.T, cos_d, sin_d)
                      @ apply_rope_interleaved(tokens_demo @ w_k.T, cos_d, sin_d).T)
scores_rotate_half = (apply_rope(tokens_demo @ w_q[to_rotate_half].T, cos_d, sin_d)
                      @ apply_rope(tokens_demo @ w_k[to_rotate_half].T, cos_d, sin_d).T)
print("5 × 5 分数的最大差：      ", (scores_interleaved - scores_rotate_half).abs().max().item())
print("不排列权重直接换写法时的最大差：", (scores_interleaved - apply_rope(tokens_demo @ w_q.T, cos_d, sin_d)
                                              @ apply_rope(tokens_demo @ w_k.T, cos_d, sin_d).T).abs().max().item())

# %% [markdown]
# 排列过权重，两种写法的分数一致；不排列就直接换一种写法，分数就错了——模型照样跑得动，输出却是胡话，这是加载别家权重时最难查的一类错误。

# %% [markdown]
# ## 6. 带缓存时的位置
#
# 生成时每一步只送进新 token（作业 03 的 KV cache）。缓存里已经有 $L$ 个位置，它们的 key 早就按位置 $0, 1, \dots, L-1$ 转好了；
# 新来的第 $i$ 个 token 坐在位置 **$L + i$**，它的 query 和 key 都要按这个位置转。
#
# 最常见的错误是每次调用都从 0 数位置：`rope_cos_sin(torch.arange(T), …)`。整句一次算时没问题，一带缓存，
# 新 token 就以为自己站在位置 0，和缓存里每个 key 的"距离"全错了。
#
# 下面造一个"看前一个 token"的头：每个 token 的内容都一样，query 被调成"找距离为 1 的 key"，于是注意力只能靠位置来分配。
# 缓存里有 7 个 token，比较第 8 个 token 用正确的位置 7 和错误的位置 0 时，它的注意力落在哪里：

# %%
torch.manual_seed(2)
HEAD_DIM_DEMO, THETA_DEMO = 16, 10.0
content = torch.randn(HEAD_DIM_DEMO)
# A query that matches the content one position back: q · k is largest when the key sits at distance 1.
query_template = apply_rope(content[None], *rope_cos_sin(torch.tensor([-1]), HEAD_DIM_DEMO, THETA_DEMO))[0]
cached_keys = apply_rope(content.expand(7, -1), *rope_cos_sin(torch.arange(7), HEAD_DIM_DEMO, THETA_DEMO))
new_key = content[None]


def new_token_weights(position: int) -> torch.Tensor:
    cos_p, sin_p = rope_cos_sin(torch.tensor([position]), HEAD_DIM_DEMO, THETA_DEMO)
    q = apply_rope(query_template[None], cos_p, sin_p)
    keys = torch.cat([cached_keys, apply_rope(new_key, cos_p, sin_p)])
    return torch.softmax(2.0 * q @ keys.T, dim=-1)[0]


right, wrong = new_token_weights(7), new_token_weights(0)
fig, ax = plt.subplots(figsize=(8, 3.6))
slots = torch.arange(8)
ax.bar(slots - 0.2, right, width=0.4, label="位置 = len(cache) + i = 7（正确）")
ax.bar(slots + 0.2, wrong, width=0.4, label="位置从 0 重新数（错误）")
ax.set_xticks(slots, labels=[f"key {j}" for j in range(8)])
ax.set_ylabel("新 token 的注意力权重")
ax.set_title("同一个\"看前一个 token\"的头，新 token 站错了位置")
ax.legend()
plt.show()
print(f"前一个 token（key 6）分到的注意力：位置对时 {right[6]:.2f}，位置从 0 数时 {wrong[6]:.2f}")
print(f"位置从 0 数时：key 0 分到 {wrong[0]:.2f}，新 token 自己（key 7）分到 {wrong[7]:.2f}")

# %% [markdown]
# 位置对的时候，新 token 把注意力给了紧挨着它的 key 6。位置从 0 数时，新 token 以为自己站在位置 0：它要找的"前一个位置"是 −1，
# 那里没有 key；离它最近、和它"站在同一个位置"的是 key 0 和它自己（两个都在位置 0），注意力就在这两个之间平分，真正的前一个 token 一点也没分到。
# 所以带缓存的注意力层，算 RoPE 表时用的位置是 `len(cache) + arange(T)`。练习 4 的 MLA 会用到这一条，作业 07 也会。

# %% [markdown]
# # B. MLA：只缓存一个潜在向量
#
# ## 7. 想法：K、V 从一个低维向量里长出来
#
# 作业 03 算过账：缓存的大小正比于"每个 token、每层存多少个数"。MHA 存 $2 H D$ 个，GQA 把 $H$ 换成组数，MQA 只剩 $2D$。
# MLA 换了个方向：每个 token 先被压成一个 $r$ 维的**潜在向量** $c$（latent，$r$ 远小于 $2HD$），缓存里只存它；
# 要用时，再用一个升维矩阵从 $c$ 里还原出每个头的 $k$ 和 $v$：
#
# $$
# c_t = \operatorname{RMSNorm}(W_{DKV}\, x_t) \in \mathbb{R}^{r},\qquad
# k_t^{(h)} = W_{UK}^{(h)} c_t,\qquad v_t^{(h)} = W_{UV}^{(h)} c_t .
# $$
#
# - 压缩 $W_{DKV}$ 对应 Hugging Face 的 `kv_a_proj_with_mqa`，升维 $W_{UK}, W_{UV}$ 合在一个 `kv_b_proj` 里；
#   latent 在进缓存之前先过一个普通的 RMSNorm（`kv_a_layernorm`，权重从 1 开始，在 float32 里算）。
# - DeepSeek-V2 还把 query 也压缩了一次（`q_a_proj` → `q_a_layernorm` → `q_b_proj`，维数 `q_lora_rank`）。
#   query 从来不进缓存，所以这一步**不省 KV cache**；它省的是训练时的参数和激活值。`q_lora_rank` 为 `None` 时就是一个普通的 `q_proj`。
#
# 一篇中文教程里的小例子：hidden 256、8 个头、每头 32 维，latent 64 维（再加 26 维，下面会讲）：MHA 每个 token 每层存
# $2 \times 8 \times 32 = 512$ 个数，MLA 只存 $64 + 26 = 90$ 个。DeepSeek-V2 本身是 128 个头、每头 128 维：
# MHA 要 $2 \times 128 \times 128 = 32{,}768$ 个，MLA 只要 $512 + 64 = 576$ 个，只有 MHA 的约 **1/57**。

# %% [markdown]
# ## 8. 吸收：不展开 K 也能打分——以及 RoPE 为什么挡路
#
# 缓存里只有 $c$，打分时难道要把所有位置的 $k$ 都升维出来？不必。一个头的分数是
#
# $$
# q^\top k_n = q^\top \big(W_{UK}\, c_n\big) = \big(W_{UK}^\top q\big)^\top c_n .
# $$
#
# 矩阵乘法满足结合律：先把 $W_{UK}$ "吸收"进 query，得到一个 $r$ 维的 $\tilde q = W_{UK}^\top q$，再直接和缓存里的 $c_n$ 求点积。
# 整个过程从不生成 $k$。value 那边同理：先按权重把 $c_n$ 加起来，最后再乘一次 $W_{UV}$。数值上核对一下：

# %%
torch.manual_seed(3)
d_head, rank = 16, 8
w_uk = torch.randn(d_head, rank)         # one head's key up-projection
latents = torch.randn(6, rank)           # six cached positions
q_head = torch.randn(d_head)
explicit = (latents @ w_uk.T) @ q_head   # rebuild every key, then dot
absorbed = latents @ (w_uk.T @ q_head)   # fold W_uk into the query once
print("没有 RoPE：直接算和吸收后算，最大差", (explicit - absorbed).abs().max().item())

# %% [markdown]
# 现在加上 RoPE。位置 $n$ 的 key 是 $R_n W_{UK} c_n$，位置 $m$ 的 query 是 $R_m q$：
#
# $$
# (R_m q)^\top (R_n W_{UK}\, c_n) = q^\top R_{n-m}\, W_{UK}\, c_n .
# $$
#
# 旋转夹在 $q$ 和 $W_{UK}$ 中间，而且随 $n$ 变：没有**一个**固定的矩阵能提前吸收进 query。硬要吸收（先转 query，再乘 $W_{UK}^\top$），
# 等于把所有 key 都当成没转过：

# %%
m = 5
cos_m, sin_m = rope_cos_sin(torch.arange(6), d_head, 10_000.0)
keys_rotated = apply_rope(latents @ w_uk.T, cos_m, sin_m)     # key n rotated at position n
q_rotated = apply_rope(q_head[None], cos_m[m:m + 1], sin_m[m:m + 1])[0]
true_scores = keys_rotated @ q_rotated
absorbed_try = latents @ (w_uk.T @ q_rotated)
print("有 RoPE：真正的分数  ", true_scores)
print("        硬吸收得到的  ", absorbed_try)

# %% [markdown]
# 只有第 0 个数对得上：位置 0 的 key 转了 0 弧度（$R_0 = I$），"当成没转过"对它恰好没错。从位置 1 起，每个 key 都转过
# $n\theta_i$，硬吸收把这些旋转全丢了，分数差得很远。要么放弃吸收（每一步把所有位置的 $k$ 升维、旋转一遍，缓存小了，计算却多了），要么……

# %% [markdown]
# ## 9. 解耦的 RoPE key，和缩放
#
# DeepSeek 的办法是把"内容"和"位置"拆开：
#
# - 每个头的 query 分两段：`[q_nope | q_rope]`。`q_nope`（$d_{nope}$ 维）**不转**，它和从 latent 升维出来的 `k_nope` 打分，
#   可以被吸收；`q_rope`（$d_{rope}$ 维）按位置转。
# - 再为每个 token 单独投影一个 $d_{rope}$ 维的 **rope key**，按位置转好，**所有头共用这一个**（像 MQA）。
#   它和 latent 一起从 `kv_a_proj_with_mqa` 出来：输出的前 $r$ 维是 latent，后 $d_{rope}$ 维是 rope key。它也进缓存——
#   这就是上面那多出来的 26 维和 64 维。
# - 分数是两段之和：$\ s = q_{nope}^\top k_{nope} + q_{rope}^\top k_{rope}$。
#
# **缩放**。这个点积是在 $d_{nope} + d_{rope}$ 维上求和的。和作业 01 一样，$d$ 个独立的单位方差乘积加起来，方差是 $d$，
# 所以要除以 $\sqrt{d_{nope} + d_{rope}}$，DeepSeek 就是这么做的（Hugging Face 里是 `qk_head_dim ** -0.5`）。
# 那篇教程的简化版除的是 $\sqrt{d} + \sqrt{d_{rope}}$：两个根号之和比和的根号大（$\sqrt a + \sqrt b > \sqrt{a + b}$），
# 分数被多压了一截，softmax 就更平、更"拿不定主意"。量一量：

# %%
torch.manual_seed(4)
d_nope_demo, d_rope_demo = 32, 16
q_samples, k_samples = torch.randn(10_000, d_nope_demo + d_rope_demo), torch.randn(10_000, d_nope_demo + d_rope_demo)
raw = (q_samples * k_samples).sum(-1)
right_scale = (d_nope_demo + d_rope_demo) ** -0.5
tutorial_scale = 1 / (math.sqrt(d_nope_demo) + math.sqrt(d_rope_demo))
print(f"没缩放的分数的标准差 {raw.std():.2f}（√48 = {math.sqrt(48):.2f}）")
print(f"× (d_nope + d_rope)^-½      → std {(raw * right_scale).std():.2f}")
print(f"× 1/(√d_nope + √d_rope)     → std {(raw * tutorial_scale).std():.2f}（除数是正确值的 {right_scale / tutorial_scale:.2f} 倍）")

# %% [markdown]
# 用对的缩放，分数的标准差回到 1；教程的写法只有约 0.72。
#
# 这还只是一处错。教程代码里的 $d$ 是 `head_dim = hidden_size // num_heads` $= 256 / 8 = 32$，可它每个头的 nope 段
# 是从 128 维的升维结果里按 8 个头切出来的，只有 $128 / 8 = 16$ 维：点积真正求和的是 $16 + 26$ 维。用它自己的尺寸再量一次：

# %%
# The tutorial's MLA: hidden 256, 8 heads, keys up-projected to 128 dims (16 per head), a 26-dim rope key.
tut_hidden, tut_heads, tut_up_dim, tut_rope = 256, 8, 128, 26
tut_d = tut_hidden // tut_heads       # its head_dim, the d of its divisor
tut_nope = tut_up_dim // tut_heads    # the nope width each head really has
summed = tut_nope + tut_rope          # the dims the dot product runs over
tut_divisor, right_divisor = math.sqrt(tut_d) + math.sqrt(tut_rope), math.sqrt(summed)
torch.manual_seed(4)
raw_tut = (torch.randn(10_000, summed) * torch.randn(10_000, summed)).sum(-1)
print(f"教程的除数 √{tut_d} + √{tut_rope} = {tut_divisor:.2f}；点积在 {tut_nope} + {tut_rope} = {summed} 维上求和，"
      f"该除以 √{summed} = {right_divisor:.2f}")
print(f"只犯第一处错（√{tut_nope} + √{tut_rope} = {math.sqrt(tut_nope) + math.sqrt(tut_rope):.2f}）：除数是正确值的 "
      f"{(math.sqrt(tut_nope) + math.sqrt(tut_rope)) / right_divisor:.2f} 倍；两处叠加：{tut_divisor / right_divisor:.2f} 倍")
print(f"分数的标准差：除以 √{summed} → {(raw_tut / right_divisor).std():.2f}，按教程除 → {(raw_tut / tut_divisor).std():.2f}")

# %% [markdown]
# 两处错叠在一起，教程的除数是正确值的 1.66 倍，分数的标准差只剩约 0.6，softmax 比该有的平得多。
# （那个简化版还给每个投影加了 bias，也没有 latent 的 RMSNorm；本作业按 DeepSeek 的原版来，真实的权重才能装进来。）
#
# > **注**：DeepSeek 发布的 V2、V3 权重都用 YaRN（第 2 节末尾）把训练时的 4096 个位置扩展到了 128K，config 里是
# > `"rope_scaling": {"type": "yarn", "factor": 40, "mscale_all_dim": …}`。YaRN 要给注意力分数乘一个"温度"，所以
# > Hugging Face 的 DeepSeek 实现把 softmax 的缩放再乘上 $\text{mscale}^2$，$\text{mscale} = 0.1\, m \ln(\text{factor}) + 1$（$m$ 是 config 里的
# > `mscale_all_dim`）。
# > 本作业的 $(d_{nope} + d_{rope})^{-1/2}$ 是不做扩展时的干净形式。装真实权重时别忘了这一项：

# %%
def yarn_mscale(factor: float, mscale_all_dim: float) -> float:
    """YaRN's attention temperature as Hugging Face's DeepSeek code computes it: 0.1 * m * ln(factor) + 1."""
    return 0.1 * mscale_all_dim * math.log(factor) + 1.0


qk_head_dim_v2 = 128 + 64  # d_nope + d_rope of DeepSeek-V2 and V3
for release, mscale_all_dim in [("DeepSeek-V2", 0.707), ("DeepSeek-V3", 1.0)]:
    m_scale = yarn_mscale(40, mscale_all_dim)
    print(f"{release}（factor 40，mscale_all_dim {mscale_all_dim}）：mscale = {m_scale:.3f}，"
          f"softmax 的缩放 = {qk_head_dim_v2}^-½ × {m_scale ** 2:.3f}")

# %% [markdown]
# ## 10. 数据流
#
# 一次前向，把上面几节串起来（括号里是形状；$H$ 个头，latent $r$ 维）：

# %%
mla_boxes = {
    "x": (0, 5, "x  [B, T, hidden]"),
    "q": (-3.6, 3.4, "q_proj（或 q_a_proj → q_a_layernorm → q_b_proj）\n每个头 [q_nope | q_rope]"),
    "kva": (3.4, 3.4, "kv_a_proj_with_mqa\n[B, T, r + d_rope]"),
    "latent": (1.6, 1.7, "kv_a_layernorm\nlatent c  [B, T, r]", "#fde3c8"),
    "krope": (5.2, 1.7, "RoPE（位置 len(cache) + i）\nk_rope  [B, T, d_rope]，所有头共用", "#fde3c8"),
    "cache": (3.4, 0.0, "LatentKVCache：只存 (c, k_rope)", "#f6d5d5"),
    "kvb": (1.6, -1.7, "kv_b_proj：每个头 [k_nope | v]\n（吸收版：折进 query 和输出）"),
    "qrope": (-3.6, 1.2, "RoPE(q_rope)"),
    "scores": (-1.2, -3.2, "分数 = (q_nope·k_nope + q_rope·k_rope) / √(d_nope + d_rope)\n因果 + padding 掩码，softmax，乘 v"),
    "out": (-1.2, -4.8, "o_proj  →  [B, T, hidden]"),
}
mla_arrows = [("x", "q"), ("x", "kva"), ("kva", "latent", "前 r 维"), ("kva", "krope", "后 d_rope 维"),
              ("latent", "cache"), ("krope", "cache"), ("cache", "kvb", "c"), ("kvb", "scores", "k_nope, v"),
              ("q", "qrope"), ("qrope", "scores", "q_rope"), ("q", "scores", "q_nope"),
              # k_rope skips kv_b_proj: straight down past the box's right side, then into the scores.
              ("cache", "scores", "k_rope", {"connection": "angle,angleA=-90,angleB=0", "label_at": (3.4, -1.7)}),
              ("scores", "out")]
plotting.flow_diagram(mla_boxes, mla_arrows, title="多头潜在注意力（MLA）的一次前向", size=(13, 7.5))
plt.show()

# %% [markdown]
# ## 11. 练习 3：`LatentKVCache`
#
# 和作业 03 的 `KVCache` 一样的接口，存的东西不同：每个位置一个 latent、一个 rope key，**没有任何按头的东西**。
#
# - `update(latent, k_rope)`：`latent` 是 `[B, T_new, r]`，`k_rope` 是 `[B, T_new, d_rope]`（已经转好），
#   沿 T 这一维接到缓存后面，返回缓存里**全部**的 `(latent, k_rope)`；
# - `len(cache)`：缓存里有几个位置（一次 `update` 可以放进好几个）。

# %% tags=["solution:LatentKVCache"]
class LatentKVCache:
    """MLA's cache for one layer: the normalised latent [B, T, r] and the rotated rope key [B, T, d_rope]."""

    def __init__(self):
        ### BEGIN SOLUTION
        self.latent = None
        self.k_rope = None
        ### END SOLUTION

    def update(self, latent: torch.Tensor, k_rope: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Append latent [B, T_new, r] and k_rope [B, T_new, d_rope] along T; return everything cached."""
        ### BEGIN SOLUTION
        if self.latent is None:
            self.latent, self.k_rope = latent, k_rope
        else:
            self.latent = torch.cat([self.latent, latent], dim=1)
            self.k_rope = torch.cat([self.k_rope, k_rope], dim=1)
        return self.latent, self.k_rope
        ### END SOLUTION

    def __len__(self) -> int:
        ### BEGIN SOLUTION
        return 0 if self.latent is None else self.latent.shape[1]
        ### END SOLUTION


# %% tags=["tests:LatentKVCache"]
from course.checking import check
check("LatentKVCache")

### BEGIN HIDDEN TESTS
from autograder.instructor.hidden_cells import grade
grade("LatentKVCache")
### END HIDDEN TESTS

# %% [markdown]
# ## 12. 练习 4：`MultiHeadLatentAttention(config)`
#
# `config` 是任何带这些属性的对象（名字和 Hugging Face 的 `DeepseekV3Config` 一样）：`hidden_size`、`num_attention_heads`、
# `q_lora_rank`（`None` 表示不压缩 query）、`kv_lora_rank`（$r$）、`qk_nope_head_dim`、`qk_rope_head_dim`、`v_head_dim`、
# `rope_theta`、`rms_norm_eps`。
#
# **`__init__`**：子模块的名字一字不差（都是 `bias=False`；$H$ 个头，$d_q = d_{nope} + d_{rope}$）：
#
# | 名字 | 输入 → 输出 |
# |---|---|
# | `q_proj`（`q_lora_rank` 为 `None` 时） | `hidden` → $H \cdot d_q$ |
# | `q_a_proj`、`q_a_layernorm`、`q_b_proj`（否则） | `hidden` → `q_lora_rank`，RMSNorm，`q_lora_rank` → $H \cdot d_q$ |
# | `kv_a_proj_with_mqa` | `hidden` → $r + d_{rope}$ |
# | `kv_a_layernorm` | RMSNorm，$r$ 维 |
# | `kv_b_proj` | $r$ → $H \cdot (d_{nope} + d_v)$ |
# | `o_proj` | $H \cdot d_v$ → `hidden` |
#
# 两个 norm 是**普通**的 RMSNorm：$x \cdot \operatorname{rsqrt}(\operatorname{mean}(x^2) + \varepsilon) \cdot w$，$w$ 初始化为 1，
# 在 float32 里算，转回输入的 dtype。下面的单元已经写好了一个 `RMSNorm(dim, eps)`，直接用。
#
# **`prepare(x, attention_mask, cache)`** 做下面的第 1–4 步和掩码，`forward` 和练习 5 的 `forward_absorbed` 都用它；
# **`forward(x, attention_mask=None, cache=None)`** 接着做第 5–7 步，返回 `(out, cache)`。`x` 是新来的 $T$ 个位置：
#
# 1. 位置：新 token 在 `len(cache) + arange(T)`（没有缓存时从 0 开始），用 `rope_cos_sin` 做一张 $d_{rope}$ 维的表；
# 2. query：投影后按头拆成 `[B, H, T, d_q]`，每个头**前** $d_{nope}$ 维是 `q_nope`、**后** $d_{rope}$ 维是 `q_rope`；`q_rope` 转一下；
# 3. `kv_a_proj_with_mqa(x)` 切成 latent（前 $r$ 维）和 rope key（后 $d_{rope}$ 维）；latent 过 `kv_a_layernorm`，rope key 转一下；
# 4. 有缓存时 `latent, k_rope = cache.update(latent, k_rope)`，从此它们覆盖全部 $k_{len}$ 个位置；
# 5. `kv_b_proj(latent)` 按头拆成 `[B, H, k_len, d_{nope} + d_v]`，每个头前 $d_{nope}$ 维是 `k_nope`、后 $d_v$ 维是 `v`；
# 6. 分数 $(q_{nope} k_{nope}^\top + q_{rope} k_{rope}^\top) \cdot (d_{nope} + d_{rope})^{-1/2}$，`k_rope` 给每个头共用；
#    掩码是 `causal_mask(T, k_len)`，有 `attention_mask` 时 `&` 上 `padding_mask`；`masked_softmax`；乘 `v`；
# 7. 合并头，`o_proj`。
#
# 提示：`q_nope @ k_nope.transpose(-2, -1)` 是 `[B, H, T, k_len]`；`k_rope` 是 `[B, k_len, d_rope]`，在第 1 维插一个长度为 1 的头维，
# 它就能和每个头的 `q_rope` 广播。

# %%
class RMSNorm(nn.Module):
    """Plain RMSNorm over the last dim: x * rsqrt(mean(x^2) + eps) * weight, weight from 1, in float32."""

    def __init__(self, dim: int, eps: float = 1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x32 = x.float()
        return (x32 * torch.rsqrt(x32.square().mean(-1, keepdim=True) + self.eps) * self.weight.float()).to(x.dtype)


# %% tags=["solution:MultiHeadLatentAttention"]
class MultiHeadLatentAttention(nn.Module):
    """DeepSeek-V2's multi-head latent attention with a decoupled, shared RoPE key.

    Submodules are named as in Hugging Face's DeepseekV3Attention, all bias-free, so its state dicts load.
    forward(x [B, T, hidden], attention_mask [B, k_len] of 0/1 or None, cache LatentKVCache or None)
    -> (out [B, T, hidden], cache).
    """

    def __init__(self, config):
        super().__init__()
        ### BEGIN SOLUTION
        self.num_heads = config.num_attention_heads
        self.rank = config.kv_lora_rank
        self.d_nope, self.d_rope, self.d_v = config.qk_nope_head_dim, config.qk_rope_head_dim, config.v_head_dim
        self.theta = config.rope_theta
        hidden, heads, d_q = config.hidden_size, config.num_attention_heads, self.d_nope + self.d_rope
        self.compress_query = config.q_lora_rank is not None
        if self.compress_query:
            self.q_a_proj = nn.Linear(hidden, config.q_lora_rank, bias=False)
            self.q_a_layernorm = RMSNorm(config.q_lora_rank, config.rms_norm_eps)
            self.q_b_proj = nn.Linear(config.q_lora_rank, heads * d_q, bias=False)
        else:
            self.q_proj = nn.Linear(hidden, heads * d_q, bias=False)
        self.kv_a_proj_with_mqa = nn.Linear(hidden, self.rank + self.d_rope, bias=False)
        self.kv_a_layernorm = RMSNorm(self.rank, config.rms_norm_eps)
        self.kv_b_proj = nn.Linear(self.rank, heads * (self.d_nope + self.d_v), bias=False)
        self.o_proj = nn.Linear(heads * self.d_v, hidden, bias=False)
        ### END SOLUTION

    def prepare(self, x: torch.Tensor, attention_mask: torch.Tensor | None, cache: LatentKVCache | None):
        """Steps 1-4 and the mask, which forward_absorbed will share.

        Returns q_nope [B, H, T, d_nope], the rotated q_rope [B, H, T, d_rope], the latents [B, k_len, r] and
        rotated rope keys [B, k_len, d_rope] of every position (cached and new), and the mask.
        """
        ### BEGIN SOLUTION
        batch, new = x.shape[:2]
        start = 0 if cache is None else len(cache)
        cos, sin = rope_cos_sin(torch.arange(start, start + new), self.d_rope, self.theta)
        q = self.q_b_proj(self.q_a_layernorm(self.q_a_proj(x))) if self.compress_query else self.q_proj(x)
        q = q.view(batch, new, self.num_heads, self.d_nope + self.d_rope).transpose(1, 2)
        q_nope, q_rope = q.split([self.d_nope, self.d_rope], dim=-1)              # [B, H, T, ·]
        latent, k_rope = self.kv_a_proj_with_mqa(x).split([self.rank, self.d_rope], dim=-1)
        latent, k_rope = self.kv_a_layernorm(latent), apply_rope(k_rope, cos, sin)
        if cache is not None:
            latent, k_rope = cache.update(latent, k_rope)                         # [B, k_len, ·]
        mask = causal_mask(new, latent.shape[1])
        if attention_mask is not None:
            mask = mask & padding_mask(attention_mask)
        return q_nope, apply_rope(q_rope, cos, sin), latent, k_rope, mask
        ### END SOLUTION

    def forward(self, x: torch.Tensor, attention_mask: torch.Tensor | None = None,
                cache: LatentKVCache | None = None) -> tuple[torch.Tensor, LatentKVCache | None]:
        ### BEGIN SOLUTION
        q_nope, q_rope, latent, k_rope, mask = self.prepare(x, attention_mask, cache)
        batch, k_len = latent.shape[:2]
        kv = self.kv_b_proj(latent).view(batch, k_len, self.num_heads, self.d_nope + self.d_v).transpose(1, 2)
        k_nope, value = kv.split([self.d_nope, self.d_v], dim=-1)                 # [B, H, k_len, ·]
        scores = q_nope @ k_nope.transpose(-2, -1) + q_rope @ k_rope.unsqueeze(1).transpose(-2, -1)
        weights = masked_softmax(scores / math.sqrt(self.d_nope + self.d_rope), mask)
        return self.o_proj((weights @ value).transpose(1, 2).flatten(-2)), cache
        ### END SOLUTION


# %% tags=["tests:MultiHeadLatentAttention"]
from course.checking import check
check("MultiHeadLatentAttention")

### BEGIN HIDDEN TESTS
from autograder.instructor.hidden_cells import grade
grade("MultiHeadLatentAttention")
### END HIDDEN TESTS

# %% [markdown]
# ## 13. 练习 5：`forward_absorbed`——在 latent 空间里算
#
# 第 8 节的吸收，现在可以用了：RoPE 只在 `q_rope` 和共用的 `k_rope` 上，`q_nope` 那一段没有旋转挡路。
# `kv_b_proj.weight` 的形状是 $[H (d_{nope} + d_v),\ r]$（`nn.Linear` 的 weight 是 `[输出, 输入]`），按头拆开是
# $[H,\ d_{nope} + d_v,\ r]$：每个头前 $d_{nope}$ 行是 $W_{UK}^{(h)}$，后 $d_v$ 行是 $W_{UV}^{(h)}$。
#
# 1. 步骤 1–4 和 `forward` 一样：调用 `self.prepare`；
# 2. $\tilde q = q_{nope} W_{UK}$：`[B, H, T, d_nope] @ [H, d_nope, r]` → `[B, H, T, r]`；
# 3. 分数 $= \tilde q\, c^\top + q_{rope}\, k_{rope}^\top$，缩放、掩码、softmax，和 `forward` 完全一样；
# 4. 用权重把 latent 加起来：`[B, H, T, k_len] @ [B, 1, k_len, r]` → `[B, H, T, r]`；
# 5. 再乘 $W_{UV}^\top$：`[B, H, T, r] @ [H, r, d_v]` → `[B, H, T, d_v]`；合并头，`o_proj`。
#
# 从头到尾不生成任何一个头的 `k_nope` 或 `v`，结果和 `forward` 一样（差别只是浮点舍入）。
#
# 写法：在下面的单元里**接着**上面的类写——`class MultiHeadLatentAttention(MultiHeadLatentAttention):` 定义一个同名的子类，
# 加上 `forward_absorbed` 方法；它能用父类的一切（包括你自己写的辅助方法）。

# %% tags=["solution:forward_absorbed"]
class MultiHeadLatentAttention(MultiHeadLatentAttention):
    def forward_absorbed(self, x: torch.Tensor, attention_mask: torch.Tensor | None = None,
                         cache: LatentKVCache | None = None) -> tuple[torch.Tensor, LatentKVCache | None]:
        """The same as forward, computed in latent space: no per-head key or value is ever built."""
        ### BEGIN SOLUTION
        q_nope, q_rope, latent, k_rope, mask = self.prepare(x, attention_mask, cache)
        per_head = self.kv_b_proj.weight.view(self.num_heads, self.d_nope + self.d_v, self.rank)
        w_uk, w_uv = per_head[:, :self.d_nope], per_head[:, self.d_nope:]          # [H, d_nope, r], [H, d_v, r]
        q_latent = q_nope @ w_uk                                                   # [B, H, T, r]
        scores = q_latent @ latent.unsqueeze(1).transpose(-2, -1) + q_rope @ k_rope.unsqueeze(1).transpose(-2, -1)
        weights = masked_softmax(scores / math.sqrt(self.d_nope + self.d_rope), mask)
        mixed = weights @ latent.unsqueeze(1)                                      # [B, H, T, r]
        return self.o_proj((mixed @ w_uv.transpose(-2, -1)).transpose(1, 2).flatten(-2)), cache
        ### END SOLUTION


# %% tags=["tests:forward_absorbed"]
from course.checking import check
check("forward_absorbed")

### BEGIN HIDDEN TESTS
from autograder.instructor.hidden_cells import grade
grade("forward_absorbed")
### END HIDDEN TESTS

# %% [markdown]
# ### 解码时的 MLA，就是 latent 空间里的 MQA
#
# 看吸收版每个头在算什么：query 是 $[\tilde q \mid q_{rope}]$（$r + d_{rope}$ 维），key 是 $[c \mid k_{rope}]$，value 就是 $c$。
# 后两样**每个头都一样**——key 和 value 都只有一份，所有 $H$ 个头共用，这正是 MQA，只是维数大：DeepSeek-V2 的 key 是
# $512 + 64 = 576$ 维，value 是 512 维。SGLang 这样的推理框架里，吸收版的 MLA 就是交给一个"1 个 KV 头、key 576 维、
# value 512 维"的 MQA kernel 去算的。
#
# 这决定了解码时的瓶颈在哪里。MHA 解码一步，每个头的 K、V 只被 1 个 query 用，从显存读一个数只做 1 次乘加，GPU 在等数据
# （带宽受限）。MLA 每读一个缓存的数，$H$ 个头都要用它，而且 $c$ 既当 key 又当 value，读一次用两回：每个字节的计算量是 MHA 的
# $H(2r + d_{rope})/(r + d_{rope}) \approx 2H$ 倍（DeepSeek-V2 有 128 个头），已经够得上 GPU 的算力和带宽之比，
# 瓶颈从读缓存移到了计算上。DeepSeek 开源的 FlashMLA 就是按"算力受限"来写的 kernel。
# 用 DeepSeek-V2 的尺寸数一数（bf16，每个数 2 字节，一次乘加算 2 次浮点运算，所以"每字节的浮点运算数"正好等于"每个数的乘加数"）：

# %%
heads_v2, rank_v2, rope_v2, head_dim_v2 = 128, 512, 64, 128
# One decode step, per cached position: numbers read from the cache, and multiply-adds done with them.
mha_read, mha_madds = 2 * heads_v2 * head_dim_v2, heads_v2 * (head_dim_v2 + head_dim_v2)      # q·k and weight·v
mla_read, mla_madds = rank_v2 + rope_v2, heads_v2 * ((rank_v2 + rope_v2) + rank_v2)          # all heads share them
h800_flops, h800_bandwidth = 865e12, 3.35e12  # FlashMLA's write-up: H800 bf16 at its throttled clock, HBM bytes/s
print(f"MHA：每个位置读 {mha_read:,} 个数，做 {mha_madds:,} 次乘加 → 每字节 {mha_madds / mha_read:.0f} 次浮点运算")
print(f"MLA（吸收后）：每个位置读 {mla_read} 个数，做 {mla_madds:,} 次乘加 → 每字节 {mla_madds / mla_read:.0f} 次浮点运算")
print(f"H800 的算力 / 带宽 ≈ {h800_flops / h800_bandwidth:.0f} 次浮点运算 / 字节")

# %% [markdown]
# 每字节约 242 次浮点运算，和 H800 的约 258 在同一个量级（每步预测两个 token 时翻倍，就越过去了）；MHA 只有 1。
#
# 吸收还有另一半。$W_{UV}$ 本来在注意力之后按头乘：$o = W_O\,[W_{UV}^{(1)} u^{(1)};\ \dots;\ W_{UV}^{(H)} u^{(H)}]$，
# $u^{(h)}$ 是第 $h$ 个头加权后的 latent（$r$ 维）。这是一串线性运算，可以先合并：
# $W_O \cdot \operatorname{blockdiag}(W_{UV}^{(1)}, \dots, W_{UV}^{(H)})$ 是一个 $d \times H r$ 的矩阵，直接作用在拼起来的 $u$ 上——
# $W_{UV}$ 被吸收进了 `o_proj`。同样，$W_{UK}$ 可以提前吸收进 query 的投影（`q_b_proj` 的 nope 行）：
# DeepSeek-V2 论文说的就是这两处吸收，推理时根本不需要单独的 $W_{UK}$、$W_{UV}$。拿一个小的 MLA 核对一下
# （$H = 4$、$r = 8$、$d_{nope} = 4$、$d_v = 6$，query 经过 `q_a_proj` 压缩）：

# %%
config_c = SimpleNamespace(hidden_size=32, num_attention_heads=4, q_lora_rank=12, kv_lora_rank=8, qk_nope_head_dim=4,
                           qk_rope_head_dim=4, v_head_dim=6, rope_theta=10_000.0, rms_norm_eps=1e-6)
torch.manual_seed(0)
mla = MultiHeadLatentAttention(config_c)
x_abs = torch.randn(2, 6, 32)
heads_c, rank_c = config_c.num_attention_heads, config_c.kv_lora_rank
d_nope_c, d_rope_c, d_v_c = config_c.qk_nope_head_dim, config_c.qk_rope_head_dim, config_c.v_head_dim
per_head_w = mla.kv_b_proj.weight.view(heads_c, d_nope_c + d_v_c, rank_c)
w_uk_c, w_uv_c = per_head_w[:, :d_nope_c], per_head_w[:, d_nope_c:]                    # [H, d_nope, r], [H, d_v, r]
# W_UV into o_proj: [hidden, H·d_v] @ blockdiag(W_UV) [H·d_v, H·r] -> [hidden, H·r].
o_absorbed = mla.o_proj.weight @ torch.block_diag(*w_uv_c)
# W_UK into q_b_proj: each head's nope rows [d_nope, q_lora] become W_UKᵀ @ rows, [r, q_lora].
q_rows = mla.q_b_proj.weight.view(heads_c, d_nope_c + d_rope_c, -1)
q_absorbed = torch.block_diag(*w_uk_c.transpose(1, 2)) @ q_rows[:, :d_nope_c].flatten(0, 1)   # [H·r, q_lora]

with torch.no_grad():
    student_out, _ = mla.forward_absorbed(x_abs)
    _, q_rope_c, latent_c, k_rope_c, mask_c = mla.prepare(x_abs, None, None)
    q_tilde = (mla.q_a_layernorm(mla.q_a_proj(x_abs)) @ q_absorbed.T).unflatten(-1, (heads_c, rank_c)).transpose(1, 2)
    # Every head reads the same key [c | k_rope] and the same value c: MQA with one KV head.
    shared_key = torch.cat([latent_c, k_rope_c], dim=-1).unsqueeze(1)                   # [B, 1, k_len, r + d_rope]
    scores_c = torch.cat([q_tilde, q_rope_c], dim=-1) @ shared_key.transpose(-2, -1)     # [B, H, T, k_len]
    mixes = masked_softmax(scores_c / math.sqrt(d_nope_c + d_rope_c), mask_c) @ latent_c.unsqueeze(1)  # [B, H, T, r]
    folded_out = mixes.transpose(1, 2).flatten(-2) @ o_absorbed.T
assert torch.allclose(folded_out, student_out, atol=1e-5), \
    f"W_UV 折进 o_proj、W_UK 折进 q_b_proj 之后应和 forward_absorbed 一样，最大差 {(folded_out - student_out).abs().max():.3g}"
print(f"合并后的 o_proj：{tuple(mla.o_proj.weight.shape)} → {tuple(o_absorbed.shape)}；"
      f"合并后的 query 投影：{tuple(q_rows[:, :d_nope_c].flatten(0, 1).shape)} → {tuple(q_absorbed.shape)}")
print(f"✓ 1 个共用的 key、1 个共用的 value，加上两处吸收，和你的 forward_absorbed 最大差 "
      f"{(folded_out - student_out).abs().max():.2g}")

# %% [markdown]
# 合并后的矩阵比原来的大 $r / d_v$ 倍（这里 8/6，DeepSeek-V2 是 512/128 = 4 倍），所以真的把它乘出来，还是像
# `forward_absorbed` 那样在注意力之后按头乘一次 $W_{UV}$，是工程上的取舍；数学上两者完全一样。

# %% [markdown]
# ## 14. 练习 6：`mla_cache_bytes(batch, seq_len, num_layers, kv_lora_rank, qk_rope_head_dim, bytes_per_elem)`
#
# 返回 MLA 缓存的字节数（Python 的 `int`）。想一想缓存里每个位置、每一层到底存了什么——和作业 03 的 `kv_cache_bytes` 比，
# 哪些因子还在，哪些不见了。

# %% tags=["solution:mla_cache_bytes"]
def mla_cache_bytes(batch: int, seq_len: int, num_layers: int, kv_lora_rank: int, qk_rope_head_dim: int,
                    bytes_per_elem: int) -> int:
    """Bytes of an MLA cache: each position of each layer keeps one latent and one shared rope key."""
    ### BEGIN SOLUTION
    return batch * seq_len * num_layers * (kv_lora_rank + qk_rope_head_dim) * bytes_per_elem
    ### END SOLUTION


# %% tags=["tests:mla_cache_bytes"]
from course.checking import check
check("mla_cache_bytes")

### BEGIN HIDDEN TESTS
from autograder.instructor.hidden_cells import grade
grade("mla_cache_bytes")
### END HIDDEN TESTS

# %% [markdown]
# ### 每个 token 每层存多少个数
#
# 两组数放在一起（`bytes_per_elem = 1` 就是按个数算）：

# %%
per_token = {
    "教程的例子（8 头 × 32 维）": (2 * 8 * 32, mla_cache_bytes(1, 1, 1, 64, 26, 1)),
    "DeepSeek-V2（128 头 × 128 维）": (2 * 128 * 128, mla_cache_bytes(1, 1, 1, 512, 64, 1)),
}
for name, (mha, mla_numbers) in per_token.items():
    print(f"{name}：每个 token、每层 MHA 存 {mha:,} 个数，MLA 存 {mla_numbers:,} 个，只有 MHA 的 1/{mha / mla_numbers:.1f}")
groups = mla_cache_bytes(1, 1, 1, 512, 64, 1) / (2 * 128)
print(f"和 {groups:.2f} 组 128 维 KV 头的 GQA 一样大")

# %% [markdown]
# DeepSeek-V2 的 576 个数只相当于 2.25 组 KV 头的 GQA，却保留了 128 个头各自不同的 key 和 value（它们都从同一个 latent 里升维出来）。
#
# 作业 03 画过缓存大小随上下文长度的变化。换成 DeepSeek-V2 的尺寸（60 层、128 个头 × 128 维、bf16、batch 1），再添上 MLA 一条线：

# %%
MIB, LAYERS_V2, BF16_BYTES = 1024**2, 60, 2
context = [2**n for n in range(10, 18)]  # 1K ... 128K tokens
lines = {"MHA（128 个 KV 头）": lambda n: 2 * n * LAYERS_V2 * 128 * 128 * BF16_BYTES,
         "GQA（8 组）": lambda n: 2 * n * LAYERS_V2 * 8 * 128 * BF16_BYTES,
         "MQA（1 组）": lambda n: 2 * n * LAYERS_V2 * 1 * 128 * BF16_BYTES,
         "MLA（latent 512 + rope 64）": lambda n: mla_cache_bytes(1, n, LAYERS_V2, 512, 64, BF16_BYTES)}
fig, ax = plt.subplots(figsize=(8, 5))
for name, size in lines.items():
    ax.plot(context, [size(n) / MIB for n in context], marker="o", label=name)
ax.set_xscale("log", base=2)
ax.set_yscale("log", base=2)
ax.set_xticks(context, labels=[f"{n // 1024}K" for n in context])
size_ticks = [16, 256, 4096, 65536, 1048576]
ax.set_yticks(size_ticks, labels=[f"{mib} MiB" if mib < 1024 else f"{mib // 1024:,} GiB" for mib in size_ticks])
ax.set_xlabel("上下文长度（token）")
ax.set_ylabel("KV cache 的大小（对数坐标）")
ax.set_title("DeepSeek-V2 的尺寸（60 层，bf16，batch 1）")
ax.grid(True, which="both", alpha=0.3)
ax.legend()
plt.show()

# %%
GIB, LONGEST = 1024**3, context[-1]
at_longest = {name: size(LONGEST) / GIB for name, size in lines.items()}
for name, gib in at_longest.items():
    print(f"{name}：{LONGEST // 1024}K 个 token 时 {gib:,.2f} GiB")
mla_gib, mqa_gib, gqa_gib = at_longest["MLA（latent 512 + rope 64）"], at_longest["MQA（1 组）"], at_longest["GQA（8 组）"]
print(f"MLA 是 8 组 GQA 的 {mla_gib / gqa_gib:.0%}，是 MQA 的 {mla_gib / mqa_gib:.2f} 倍")

# %% [markdown]
# 128K 个 token 时，MHA 要 480 GiB，一张卡放不下；8 组的 GQA 要 30 GiB，MQA 3.75 GiB，MLA 8.44 GiB。MLA 比 8 组的 GQA 小得多，
# 但它是 MQA 的 2.25 倍（576 对 256 个数），并不比 MQA 省。MLA 换来的是：缓存和 2.25 组 KV 头一样大，每个头却仍有自己的 key 和 value。

# %% [markdown]
# ## 15. 量一量：吸收版快在哪里
#
# 缓存小了，计算呢？生成时每一步只有 1 个新 query，却要看 $L$ 个缓存的位置：
#
# - `forward` 每一步都要把 $L$ 个 latent 全部升维成每个头的 `k_nope`、`v`：约 $L \cdot r \cdot H(d_{nope} + d_v)$ 次乘加；
# - `forward_absorbed` 只把 1 个 query 折进 latent 空间，然后和 $L$ 个 latent 打分、加权：约 $L \cdot H \cdot r$ 的两倍。
#
# 取一个中等大小的配置（hidden 1024、16 个头、$r = 256$、$d_{nope} = d_v = 64$、$d_{rope} = 32$），缓存里先放 $L$ 个位置，
# 测生成下一个 token 的时间（每个长度测几次取最快的一次）：

# %%
timing_config = SimpleNamespace(hidden_size=1024, num_attention_heads=16, q_lora_rank=None, kv_lora_rank=256,
                                qk_nope_head_dim=64, qk_rope_head_dim=32, v_head_dim=64, rope_theta=10_000.0,
                                rms_norm_eps=1e-6)
torch.manual_seed(0)
timed = MultiHeadLatentAttention(timing_config)
lengths = [128, 256, 512, 1024, 2048]
stream = torch.randn(1, lengths[-1] + 1, 1024)


def fastest_ms(run, repeats=3):
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    return 1000 * min(times)


def one_step(method, length):
    latent, k_rope = timed.kv_a_proj_with_mqa(stream[:, :length]).split([256, 32], dim=-1)
    return fastest_ms(lambda: method(stream[:, length:length + 1], cache=filled(latent, k_rope)))


def filled(latent, k_rope):
    """A fresh cache holding ``length`` positions (each timing starts from the same cache)."""
    cache = LatentKVCache()
    cache.update(latent, k_rope)
    return cache


plain_ms, absorbed_ms = [], []
threads = torch.get_num_threads()
torch.set_num_threads(1)  # steadier timings on a shared machine
with torch.no_grad():
    for length in lengths:
        plain_ms.append(one_step(timed.forward, length))
        absorbed_ms.append(one_step(timed.forward_absorbed, length))
torch.set_num_threads(threads)
for length, slow, fast in zip(lengths, plain_ms, absorbed_ms):
    print(f"缓存里 {length:>5} 个位置：forward {slow:7.2f} ms，forward_absorbed {fast:6.2f} ms")

fig, ax = plt.subplots(figsize=(8, 4.5))
ax.plot(lengths, plain_ms, marker="o", label="forward：每步把全部 latent 升维")
ax.plot(lengths, absorbed_ms, marker="o", label="forward_absorbed：在 latent 空间里算")
ax.set_xscale("log", base=2)
ax.set_yscale("log")
ax.set_xticks(lengths, labels=[str(n) for n in lengths])
ax.set_xlabel("缓存里的位置数 L")
ax.set_ylabel("生成一个 token 的时间（ms，对数坐标）")
ax.set_title("一层 MLA 的一步解码")
ax.grid(True, which="both", alpha=0.3)
ax.legend()
plt.show()

# %% [markdown]
# 上下文越长，差距越大：`forward` 的时间几乎全花在把 $L$ 个 latent 重新升维上，吸收版省掉了这一步。
# （整句一次算的 prefill 里，$T$ 个 query 共用一份升维出来的 K、V，升维的代价被摊薄，这时展开的写法反而更划算。
# 具体的毫秒数取决于你的机器，要看的是两条线的走势。）

# %% [markdown]
# ## 小结
#
# | 名字 | 做什么 | 要守住的细节 |
# |---|---|---|
# | `rope_cos_sin` | RoPE 的 cos / sin 表 | `theta ** (-arange(0, rotary_dim, 2) / rotary_dim)`（$d_{rope}$ 维）；`cat(freqs, freqs)`；位置可以不从 0 开始 |
# | `apply_rope` | 按位置旋转 | rotate-half：`x·cos + cat(−x2, x1)·sin`；表先转成 x 的 dtype |
# | `LatentKVCache` | 只存 latent 和 rope key | 沿 T（`dim=1`）追加；没有按头的东西 |
# | `MultiHeadLatentAttention` | DeepSeek-V2 的 MLA | 每个头 `[nope \| rope]`；latent 先 norm；rope key 共用；缩放 $(d_{nope} + d_{rope})^{-1/2}$；位置 `len(cache) + i` |
# | `forward_absorbed` | 在 latent 空间里算 | $W_{UK}$ 折进 query，$W_{UV}$ 放到最后；不展开 K、V |
# | `mla_cache_bytes` | 缓存的字节数 | $B \times L \times N_{\text{layer}} \times (r + d_{rope}) \times$ 字节数（$L$ 个缓存的位置，$N_{\text{layer}}$ 层） |
#
# RoPE 把位置写成旋转，于是分数只看相对距离；MLA 只缓存一个潜在向量，再借"吸收"在推理时不展开 K、V——
# 为了不让 RoPE 挡住吸收，位置信息走一条单独的、所有头共用的小通道。

# %% [markdown]
# ### 思考题
#
# 1. `k_rope` 为什么要单独存进缓存，不能像 `k_nope` 那样用的时候再从 latent 里算出来？

# %% [markdown] tags=["answer:rope_key_cached"]
# ### BEGIN SOLUTION
# `k_rope` 不是从 latent 升维出来的：它是 `kv_a_proj_with_mqa` 直接从 `x` 投影出来的另一段，latent 里没有它的信息，而 `x`
# 本身不进缓存。它还要按自己的位置转好——存下转好的版本，之后每一步直接拿来用。代价是每个位置多存 $d_{rope}$ 个数
# （DeepSeek-V2 是 64 个），所有头共用，所以很便宜。
# ### END SOLUTION

# %% [markdown]
# 2. 推理时 `forward_absorbed` 更快；那训练和 prefill 时为什么常用展开 K、V 的写法？

# %% [markdown] tags=["answer:when_to_absorb"]
# ### BEGIN SOLUTION
# 吸收以后，每个分数是在 $r$ 维（DeepSeek-V2 是 512）上算点积，而展开的写法只在 $d_{nope} + d_{rope}$（192）维上算。
# 解码时只有 1 个 query、$L$ 个 key，展开要把 $L$ 个 latent 全部升维，这一步最贵，吸收版省掉了它；训练和 prefill 时
# $T$ 个 query 对 $T$ 个 key，升维只做一次、被 $T$ 个 query 共用，而每个分数更便宜的展开写法就划算了。
# ### END SOLUTION
