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
# # 作业 05：输出门——让一个头可以"不发言"
#
# 作业 01 的最后留了一个问题：softmax 的权重必须加起来等于 1，所以一个头哪怕这次无事可做，也得交出一份
# value 的加权平均。Qwen3.5 的全注意力层给每个头的输出乘上一个 sigmoid **门**，这个头就可以把自己的输出
# 关小，甚至关掉。这次作业把这个门从头到尾做一遍：
#
# 1. 回顾问题：softmax 为什么不能弃权，没有门的模型又是怎么凑合的（attention sink）；
# 2. 门的三步：打分、sigmoid、逐维相乘——以及门到底乘在哪里；
# 3. 门为什么有用：Qwen 团队论文找到的两个因素和由此带来的一个后果，和真实 Qwen3.5 里一个头被门关上的例子；
# 4. 练习 1 `split_query_gate`：门的分数藏在 `q_proj` 里，按头交错排放，把它拆出来；
# 5. 练习 2 `apply_output_gate`：把门乘到头的输出上，并在「书 / 她」的玩具例子上看门怎么开关；
# 6. 练习 3 `gate_gradient`：亲手推出门的梯度，用梯度下降把门学出来；
# 7. 两道思考题。
#
# > **本课程的约定**
# >
# > - 注意力里的张量形状是 `[batch, heads, seq, head_dim]`，简写为 `[B, H, T, D]`；
# >   投影层的输出按 token 排列，是 `[B, T, ...]`；残差流（隐藏状态）的宽度 `hidden_size` 记作 $d$。
# > - 掩码是 `torch.bool`，**True 表示"可以看"**。
# > - 作业 01 写过的 `attention` 在导入单元后面的「已给出」单元里（作业 01 的参考答案），运行一下就能用。
# > - **评分规则**：评分程序只读取你的 `import`、函数和类的定义，以及全大写的常量（如 `EPS = 1e-6`）；
# >   演示单元不会被评分程序执行。所以函数里不要用演示单元里的变量，也不要改函数名和参数。
# > - **「运行全部」（Run All）**：练习还没写的时候，它会停在第一个练习后面的检查单元，报 `NotImplementedError`——
# >   这是正常的，不是你弄坏了什么。从上往下做：写完一个练习，运行它和它后面的检查，再往下走。
# >
# > 做练习时，把 `raise NotImplementedError()` 换成你的代码。每个练习后面的检查单元先跑一个看得见的小检查，
# > 评分时还会用更多的形状、dtype 和边界情况来检验你的函数。

# %%
import matplotlib.pyplot as plt
import torch

from course import toy
from course.tools import plotting
from course.qwen35_weights import load_config

torch.set_printoptions(precision=4, sci_mode=False)
plotting.use_chinese_font()

# %% tags=["provided:attention_scores", "provided:masked_softmax", "provided:attention"]
# course-release fills this cell with the answers of assignment 01.

# %% [markdown]
# ## 1. 回顾：softmax 总要交一份平均值
#
# 还是作业 01 的三个 token「今天 / 天气 / 不错」。假设某个头这一次什么都不想找，query 是零向量。
# 它和每个 key 的点积都是 0，softmax 只能给出 $\tfrac13, \tfrac13, \tfrac13$，输出是三个 value 的平均 $(1,\ 1)$：

# %%
silent_query = torch.zeros(1, 2)  # [Tq=1, D=2]: a head with nothing to look for
out_silent, weights_silent = attention(silent_query, toy.keys(), toy.values())
print("权重：", weights_silent)
print("输出：", out_silent)

# %% [markdown]
# 这份平均值不是"没有"，它会被 `o_proj` 投影后加进残差流，对后面的层来说就是噪声。
# 注意力的权重没有"全部给 0"这个选项：一个头可以挑**看谁**，却不能选择**不看**。

# %% [markdown]
# ## 2. 没有门时，模型怎么凑合：attention sink
#
# 训练会自己找出一条退路：找一个每个 query 都能看到的 token——在因果掩码下只有**第一个 token** 满足——
# 把它的 value 学得几乎是零向量。一个头无事可做时，就把注意力几乎全部倒给它；取回来的东西约等于 0，
# 等于没有发言。这个被当成"垃圾桶"的 token 叫 **attention sink**（注意力的"汇点"；
# 《动手学深度学习》里的"注意力汇聚"说的是另一回事，attention pooling）。
#
# 在三个 token 前面加一个这样的"首 token"，它的 key 是 $(-1,\ -1)$，value 是 $(0,\ 0)$。
# 想弃权的头只要把 query 对准这个 key：

# %%
sink_words = ["<首>"] + toy.words()
sink_keys = torch.cat([torch.tensor([[-1.0, -1.0]]), toy.keys()])    # [4, 2]
sink_values = torch.cat([torch.tensor([[0.0, 0.0]]), toy.values()])  # [4, 2]: the sink carries nothing

abstain_query = torch.tensor([[-3.0, -3.0]])  # points at the sink's key
out_sink, weights_sink = attention(abstain_query, sink_keys, sink_values)
for word, weight in zip(sink_words, weights_sink[0]):
    print(f"{word:>4}: {weight:.3f}")
print("输出：", out_sink)

# %% [markdown]
# 99% 以上的注意力去了首 token，输出只剩约 $(0.005,\ 0.005)$。这条退路能用，但代价不小：
# 首 token 的 value 被占用，不能再携带它自己的意思；注意力矩阵里大片的权重堆在第一列，
# 而这些权重其实表示"这个头这次没事干"。
#
# 真实模型里确实如此。下面是别人**报告**的数字（本 notebook 没有、也无法重新测量它们）：前两条出自
# 一本讲 Qwen3.5 的书的门控注意力一章，第三条出自 Qwen 团队的论文。
#
# - 没有门的 **Qwen3-0.6B**（书里转引的另一份测量）：从第 6 层起，位置靠后的那一半 query 有 40%～77% 的注意力落在第一个 token 上，
#   而平均分配时每个 token 只该分到约 5%；逐层平均是 55%，28 层里有 20 层过半；
#   第一个 token 的 value 向量只有平均长度的 0.07～0.23 倍。
# - 有门的 **Qwen3.5-0.8B**，同一句话、同一种量法：平均 12%，最多的一层 27%。
# - 这两个模型的差别远不止门：层数、有没有线性注意力、训练数据都不同。只差一个门的对照实验在 Qwen 团队 2025 年的论文
#   *Gated Attention for Large Language Models* 里：同样的模型、同样的数据，加上门以后，第一个 token
#   分到的注意力从 **46.7%** 降到 **4.8%**。

# %%
fig, axes = plt.subplots(1, 2, figsize=(10, 3.8), sharey=True)
reported = [
    ("两个模型（讲 Qwen3.5 的书报告）", ["Qwen3-0.6B\n无门", "Qwen3.5-0.8B\n有门"], [55.0, 12.0]),
    ("只差一个门（Gated Attention 论文）", ["无门", "有门"], [46.7, 4.8]),
]
for ax, (title, labels, shares) in zip(axes, reported):
    bars = ax.bar(labels, shares, color=["#c44e52", "#4c72b0"], width=0.55)
    ax.bar_label(bars, labels=[f"{s:g}%" for s in shares])
    ax.set_title(title)
    ax.set_ylim(0, 65)
axes[0].set_ylabel("第一个 token 分到的注意力（%）")
fig.suptitle("报告的数字，不是本 notebook 测量的")
fig.tight_layout()
plt.show()

# %% [markdown]
# ## 3. 门的三步
#
# 门给了头一条直接的退路：取回来的东西要不要交出去，由当前 token 自己说了算。对一个 token 的输入 $x$
# （注意力层的输入，$d$ 维）和一个头的注意力输出 $o$（$D$ 维）：
#
# 1. **打分**：$z = x\,W_{\text{gate}}$，每个头的每一维各有一个分数；
# 2. **压到 0～1**：$g = \operatorname{sigmoid}(z) = \dfrac{1}{1 + e^{-z}}$；
# 3. **逐维相乘**：头的输出变成 $o \odot g$，再进 `o_proj`。
#
# 门只看当前这个 token 的 $x$，不看它注意的那些 token。和注意力权重对比一下：
#
# | | 注意力权重 | 门 |
# |---|---|---|
# | 管什么 | 从哪些 token 取、各取多少 | 取回来的要交出去多少 |
# | 约束 | 一行加起来必须是 1 | 每个数各自在 0～1 之间，可以都接近 0（sigmoid 永远大于 0，但可以非常小） |
# | 由谁算 | 当前 token 的 query 和所有 key | 只有当前 token 的 $x$ |
#
# sigmoid 的几个值值得记住：

# %%
for score in (-6.0, 0.0, 6.0):
    print(f"sigmoid({score:+.0f}) = {torch.sigmoid(torch.tensor(score)).item():.4f}")

gated_silent = out_silent * torch.sigmoid(torch.tensor(-6.0))
print("没事可做的头的输出 (1, 1) 乘上 sigmoid(-6)：", gated_silent)

# %% [markdown]
# 分数 $-6$ 时门是 0.0025，第 1 节那份平均值 $(1,\ 1)$ 变成 $(0.0025,\ 0.0025)$：这个头真的没有发言，
# 也不需要借用第一个 token。分数 $0$ 时门半开（0.5）；分数 $6$ 时几乎全开（0.9975）。
#
# 下面把 sigmoid 和它的斜率 $g(1-g)$ 画在一起。斜率在 $z = 0$ 时最大（0.25），越往两边越小；
# 第 7 节学门的时候会看到，这决定了门为什么在接近 0 或 1 时变得很慢。

# %%
z_axis = torch.linspace(-8, 8, 161)
g_axis = torch.sigmoid(z_axis)

fig, ax = plt.subplots(figsize=(7, 3.6))
ax.plot(z_axis, g_axis, label="门 g = sigmoid(z)")
ax.plot(z_axis, g_axis * (1 - g_axis), "--", label="斜率 g(1 − g)")
for score, offset in ((-6.0, (4, 8)), (0.0, (8, -12)), (6.0, (-14, -16))):
    gate_value = torch.sigmoid(torch.tensor(score)).item()
    ax.plot(score, gate_value, "o", color="black")
    ax.annotate(f"{gate_value:.4f}", (score, gate_value), textcoords="offset points", xytext=offset)
ax.set_xlabel("门的分数 z")
ax.set_ylabel("值")
ax.set_title("sigmoid 把任意分数压到 0～1")
ax.legend()
ax.grid(alpha=0.3)
plt.show()

# %% [markdown]
# ### 门乘在哪里：一个常见的误读
#
# 把一整层写出来，门的位置就清楚了。设这一层有 $H$ 个头；$o_h$ 是头 $h$ 的注意力输出（value 的加权平均，`[D]`），
# $z_h$ 是当前 token 为头 $h$ 算出的 $D$ 个门分数，$W^O_h$ 是把 `o_proj` 的矩阵按行切成 $H$ 块后属于头 $h$ 的那一块
# （$D \times d$，作业 02 第 6 节的切法）。这个 token 的残差流 $x$ 经过注意力子层后变成
#
# $$
# y = x + \sum_{h=1}^{H} \big(o_h \odot \sigma(z_h)\big)\, W^O_h
# $$
#
# （Qwen3.5 先对 $x$ 做 RMSNorm 再算 $o_h$ 和 $z_h$，这里略去。）
#
# 一篇讲 MHA/MQA/GQA/MLA 的教程把门写成 $x + \operatorname{Attention}(x) \odot \sigma(g)$，还把它解释成
# "更灵活的残差连接"。照字面读，$\operatorname{Attention}(x)$ 已经过了 `o_proj`，门就成了一个 $d$ 维的向量，
# 在整个注意力子层的结果加进残差流之前统一打个折。Qwen3.5 做的不是这件事（那篇教程自己的代码和它最后写的
# $W^O\big(\operatorname{Attention}(Q, K, V) \odot \sigma(g)\big)$ 倒是和 Qwen3.5 一致）：
#
# - **被乘的是每个头的注意力输出，在 `o_proj` 之前。** 门的形状是 `[B, T, H·D]`，和各头拼起来的输出一一对应，
#   每个头、每一维各一个数；不是 `o_proj` 之后那个 `[B, T, d]` 的向量。
# - **残差连接原封不动。** 式子里的 $x$ 总是以系数 1 加过去，门碰不到它。门只管每个头往残差流里**添**多少。
# - **位置决定了门能做什么。** 过了 `o_proj`，各头的结果已经混进每一维，在那里乘门就没法只让某一个头闭嘴；
#   乘在 `o_proj` 之前，它可以关掉头 3、同时让头 5 全开。它还正好夹在 $W_V$ 和 $W^O$ 之间，下一节马上会用到这一点。

# %% [markdown]
# ## 4. 门为什么有用：论文的两个因素，和一个后果
#
# Qwen 团队 2025 年的论文 *Gated Attention for Large Language Models* 在 1.7B 的稠密模型和 15B 的 MoE 模型上
# （训练数据 3.5T token）比较了 30 种加门的方式。效果最好的就是上面这种：sigmoid 门，每个头单独、逐维，
# 由当前 token 算出，乘在注意力的输出上。论文的摘要把效果归到两个因素上：一是在低秩的 $W_V W^O$ 映射里加进了非线性，
# 二是随 query 而变的稀疏门控；不再需要 attention sink，是稀疏带来的后果。下面一个一个看。
#
# ### 因素一：在 $W_V$ 和 $W^O$ 之间加了一道非线性
#
# 先看没有门时，头 $h$ 给 token $i$ 的贡献。value 是 $v_j = x_j W_V^h$，头的输出是 value 按权重 $a_{ij}$ 的加权平均，
# 再乘 $W^O_h$。权重只是一些标量，可以挪到前面：
#
# $$
# \Big(\sum_j a_{ij}\, x_j W_V^h\Big)\, W^O_h = \Big(\sum_j a_{ij}\, x_j\Big)\, W_V^h W^O_h
# $$
#
# softmax 只决定"从每个 token 取多少"；取回来的内容被怎样变换，对每个 token、每句话都是同一个矩阵 $W_V^h W^O_h$。
# 它是 $d \times D$ 乘 $D \times d$，两个线性层首尾相接，合起来还是一个线性映射，
# 而且秩最多是 $D$（Qwen3.5 里是 $d = 1024$ 维里的至多 $D = 256$ 维）：这是一个**低秩的线性**映射。
#
# 加上门，中间多了一次逐维乘法，而门的分数 $z_i$ 来自当前 token $i$：
#
# $$
# \Big(\big(\textstyle\sum_j a_{ij}\, x_j W_V^h\big) \odot \sigma(z_i)\Big)\, W^O_h
# = \Big(\sum_j a_{ij}\, x_j\Big)\, W_V^h \operatorname{diag}\!\big(\sigma(z_i)\big)\, W^O_h
# $$
#
# 中间的矩阵变成了 $W_V^h \operatorname{diag}(\sigma(z_i))\, W^O_h$，每个 token 各有一张。秩没有超过 $D$，
# 但这段变换不再是固定的线性映射，而是随当前 token 而变：这就是论文说的非线性。用小尺寸看一下（$d = 6$，$D = 2$）：

# %%
torch.manual_seed(0)
w_v_head = torch.randn(6, 2)  # one head's value projection:   [d, D]
w_o_head = torch.randn(2, 6)  # that head's block of o_proj:    [D, d]
fixed_map = w_v_head @ w_o_head  # without a gate: the same [d, d] map for every token
print(f"W_V W_O：形状 {tuple(fixed_map.shape)}，秩 {torch.linalg.matrix_rank(fixed_map).item()}")

token_maps = {}
for name, scores in [("A", torch.tensor([4.0, -4.0])), ("B", torch.tensor([-4.0, 4.0]))]:
    gates = torch.sigmoid(scores)  # computed from the current token, one per head dim
    token_maps[name] = w_v_head @ torch.diag(gates) @ w_o_head
    print(f"token {name}：门 {[round(g, 3) for g in gates.tolist()]}，"
          f"映射的秩 {torch.linalg.matrix_rank(token_maps[name]).item()}")
print("A 和 B 得到的映射不一样：", not torch.allclose(token_maps["A"], token_maps["B"], atol=1e-3))

# %% [markdown]
# 没有门时，两个 token 取回的内容都经过同一张秩为 2 的映射；有门时，A 几乎只让第 0 个 value 维通过，B 几乎只让第 1 个通过，
# 同一个头对不同 token 做了不同的变换。论文也试过把门放在 value 投影之后（乘在每个被看的 token 的 value 上），
# 同样带来非线性，也有提升，但不如乘在注意力输出上：那样的门由被看的 token 决定，而不是由当前 token 决定。
# 区别就在因素二。
#
# ### 因素二：稀疏，大多数门接近 0
#
# 训练出来的门大部分时候是关着的：一个头在大多数 token 上把自己的输出乘上一个很小的数，只在少数用得着它的 token 上打开。
# 因为门由当前 token 算出，这种开关是**逐 token** 的：同一个头对这个 token 闭嘴，对下一个 token 可以全开。
# 论文在自己的模型里也量到，这种门的分数整体很低，大多挤在 0 附近。
#
# 一本讲 Qwen3.5 的书的门控注意力一章，在完整的 Qwen3.5-0.8B 上跑了一句话，跟踪第 15 层（全注意力层之一）的头 4，
# 报告了下面这些数字。它们同样是**报告的数字**：本 notebook 没有真实的整模型，无法重新测量。
#
# - 在「公园」这个 token 上，头 4 的 256 个门平均只有 **0.056**。这个头经过 `o_proj` 加进残差流的量，
#   乘门之前是 **4.46**，乘门之后只剩 **0.34**，只相当于残差流的 **8%**。
# - 同一个头在那句话的第三个「，」上门是开着的，它加进去的量占到残差流的 **32%**。
# - 整个第 15 层（所有 token、所有头、所有维）的门，均值是 **0.12**，**55%** 小于 0.1。书里还报告，
#   6 个全注意力层的门均值都只在 0.07～0.19 之间。
#
# `o_proj` 没有 bias，输入小，输出就小；残差流只做加法，加进去一个接近 0 的量，这个头在「公园」上就等于没发言。

# %%
fig, axes = plt.subplots(1, 3, figsize=(13, 3.8))
reported_head = [  # (title, bar labels, reported values, label format, y limit, colours)
    ("头 4 在「公园」上加进残差流的量", ["乘门之前", "乘门之后"], [4.46, 0.34], "{:g}", 5.5, ["#c44e52", "#4c72b0"]),
    ("头 4 加进去的量占残差流的比例", ["「公园」\n（门关着）", "第三个「，」\n（门开着）"], [8.0, 32.0], "{:g}%", 40,
     ["#8c8c8c", "#55a868"]),
    ("门的值（这一层 55% 的门小于 0.1）", ["头 4 在「公园」上\n的平均门", "第 15 层\n全部门的均值"], [0.056, 0.12], "{:g}",
     0.2, ["#8c8c8c", "#8c8c8c"]),
]
for ax, (title, labels, values, fmt, top, colours) in zip(axes, reported_head):
    bars = ax.bar(labels, values, color=colours, width=0.55)
    ax.bar_label(bars, labels=[fmt.format(v) for v in values])
    ax.set_title(title)
    ax.set_ylim(0, top)
fig.suptitle("Qwen3.5-0.8B 第 15 层：讲 Qwen3.5 的书报告的数字，不是本 notebook 测量的")
fig.tight_layout()
plt.show()

# %% [markdown]
# ### 后果：不再需要 attention sink
#
# 头可以用门直接闭嘴，就不必再把注意力倒给第一个 token 来"交白卷"。第 2 节那组只差一个门的对照实验就是证据：
# 第一个 token 分到的注意力从 **46.7%** 降到 **4.8%**。第一个 token 的 value 也不必再被训练成近乎零向量，
# 它可以像别的 token 一样携带自己的意思。论文还报告，加门以后个别维度上那些巨大的激活值（massive activation）少了，
# 训练更稳（loss 尖峰更少，能用更大的学习率），长上下文的外推也更好。
#
# ### 打个比方：一间厨房
#
# 那本讲 Qwen3.5 的书用厨房打了个比方，这里换个说法讲一遍。一句话是一桌菜，每个 token 是一道菜；每个头是一位厨师。
# 做到某一道菜时，每位厨师都从已经上桌的菜里（因果掩码：只有这道和前面的）按自己的配比舀一勺，倒进这道菜。
# 规矩很死：**每位厨师每道菜都得交满满一勺**——这就是 softmax 一行加起来等于 1。
#
# 总有厨师在某道菜上派不上用场。没有门的厨房里，他们想了个办法：桌子最前面摆一缸清水（第一个 token，
# 每道菜做的时候都够得着），没事可做就舀一勺清水倒进去，菜的味道几乎不变。这缸清水就是 attention sink；
# 它占着第一个位置，本来也可以是一道有味道的菜。
#
# 有了门，每道菜旁边多了一位主厨。他尝一口这道菜，对每位厨师说"你这勺倒多少进去"。用不上的厨师舀了什么都无所谓，
# 主厨不让倒，那勺就不进锅；没人再需要那缸清水。
#
# 比方到这里就不再贴切了，有四处要说清楚：
#
# - 主厨给的不是"要 / 不要"两档，而是 0～1 之间的比例，而且**逐维**：一勺里的每一味配料各有各的比例（每个头 $D$ 个门）。
# - 主厨只尝眼前这道菜：门只由当前 token 自己的 $x$ 算出（$z = x\,W_{\text{gate}}$），不看厨师从哪些菜里舀了料；
#   他也不是"懂行"才这么说，他的口味是训练一点点推出来的（第 7 节）。
# - 门关上时，厨师舀料的活（注意力的计算）照样干完了，只是那勺没倒进锅：门省掉的是残差流里的噪声，不是计算量。
# - 厨房只讲到了因素二和它的后果。因素一——门夹在 $W_V$ 和 $W^O$ 之间，让这段变换随当前 token 而变——
#   在厨房里找不到对应的东西，还得看上面的式子。

# %% [markdown]
# ## 5. 门的分数从哪里来：藏在 `q_proj` 里
#
# Qwen3.5 没有单独的 `gate_proj`。它的 `q_proj` 是普通多头注意力的两倍宽：8 个头、每头 $D = 256$，
# 输出却有 $8 \times 2 \times 256 = 4096$ 维。**每个头占连续的 $2D = 512$ 维，前 256 维是这个头的 query，
# 后 256 维是这个头的门分数**：
#
# ```
# [ q0 | g0 ][ q1 | g1 ][ q2 | g2 ] ... [ q7 | g7 ]
# ```
#
# `qh` 是头 h 的 query，`gh` 是头 h 的门分数，各 $D$ 个数；一对方括号是一个头的 $2D$ 个数。
#
# 注意它**不是**"前 2048 维全是 query、后 2048 维全是门"。要是按整个投影对半切，前一半其实装着头 0～3 的 query 和门，
# 后一半装着头 4～7 的：切出来的"头 1 的 query"拿到的是头 0 的门。形状完全对，数值全错，也不会报任何错误。
#
# ### 练习 1：`split_query_gate(q_out, num_heads, head_dim)`
#
# 输入 `q_out` 是 `q_proj` 的输出，形状 `[B, T, H·2D]`；返回 `(query, gate)`，形状都是 `[B, T, H, D]`。
#
# 提示：看上面那张排布图。只要把最后一维改成"按头分组"的两维，每个头的 $2D$ 个数就会落在同一行里，
# 接下来 query 和门各在这一行的哪一段，图上写得很清楚。改形状的工具作业 02 都用过（`unflatten` 也行）；
# 前面的 `B`、`T` 不要写死。这个练习**不**转置：`[B, T, H, D] → [B, H, T, D]` 留给注意力计算的那一步。

# %% tags=["solution:split_query_gate"]
def split_query_gate(q_out: torch.Tensor, num_heads: int, head_dim: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Split q_proj's output into the query and the output-gate scores, Qwen3.5 layout.

    q_out: [B, T, H * 2 * D]; head h owns 2D consecutive entries, its query first, then its gate.
    Returns (query [B, T, H, D], gate [B, T, H, D]).
    """
    ### BEGIN SOLUTION
    per_head = q_out.unflatten(-1, (num_heads, 2 * head_dim))  # [B, T, H, 2D]
    query = per_head[..., :head_dim]
    gate = per_head[..., head_dim:]
    return query, gate
    ### END SOLUTION


# %% tags=["tests:split_query_gate"]
from course.checking import check
check("split_query_gate")

### BEGIN HIDDEN TESTS
from autograder.instructor.hidden_cells import grade
grade("split_query_gate")
### END HIDDEN TESTS

# %% [markdown]
# ### 为什么把门拼在 `q_proj` 里
#
# **数学上和单独的 `gate_proj` 一模一样。** 两个线性层 $W_q$、$W_{\text{gate}}$ 作用在同一个 $x$ 上，
# 把它们的行按头交错拼成一个大矩阵，一次乘法算出来的还是那两份结果。用小尺寸验证一下（4 个头、$D = 3$、8 个输入特征）：

# %%
torch.manual_seed(0)
heads, dim, features = 4, 3, 8
w_query = torch.randn(heads * dim, features)  # a separate query projection: [H·D, F]
w_gate = torch.randn(heads * dim, features)   # a separate gate projection:  [H·D, F]

# Interleave per head: rows of head h are [query rows of h ; gate rows of h].
w_fused = torch.cat([w_query.view(heads, dim, features), w_gate.view(heads, dim, features)], dim=1)
w_fused = w_fused.reshape(heads * 2 * dim, features)  # [H·2D, F], laid out like Qwen3.5's q_proj

x_demo = torch.randn(1, 5, features)  # [B, T, F]
query_fused, gate_fused = split_query_gate(x_demo @ w_fused.T, heads, dim)
print("query 一样：", torch.allclose(query_fused, (x_demo @ w_query.T).view(1, 5, heads, dim)))
print("门一样：    ", torch.allclose(gate_fused, (x_demo @ w_gate.T).view(1, 5, heads, dim)))

# %% [markdown]
# 既然数学一样，拼在一起的理由在工程上：
#
# - **query 和门都是"当前 token"的决定。** 两者都只由当前 token 的 $x$ 算出，用完即弃，都不进 KV cache；
#   key 和 value 是留给后面的 token 查的，才需要缓存。按"要不要缓存"分组，门和 query 天然是一伙。
# - **少一次矩阵乘法。** 一次读完权重、一次算完，和很多实现把 SwiGLU 的 `gate_proj`、`up_proj` 合成一个 `gate_up_proj` 是同一个道理。
# - **按头交错，张量并行时门跟着自己的头走。** 多卡推理时常把 `q_proj` 按输出行切开，每张卡负责几个头。
#   每个头的 $2D$ 行连在一起，切给某张卡的那段行里就同时有这些头的 query 和门，不需要额外通信。
#   如果按"前一半 query、后一半门"排列，一张卡上的头的门却在另一段里。

# %%
# Two "GPUs", each taking a contiguous half of the fused rows: GPU 0 gets heads 0 and 1 whole.
rows_gpu0 = w_fused[: heads // 2 * 2 * dim]
query_gpu0, gate_gpu0 = split_query_gate(x_demo @ rows_gpu0.T, heads // 2, dim)
print("GPU 0 拿到了头 0–1 的 query 和门：",
      torch.allclose(query_gpu0, query_fused[:, :, :2]) and torch.allclose(gate_gpu0, gate_fused[:, :, :2]))

# %% [markdown]
# 代价是多少参数？每层的门需要把 $d$ 维的 $x$ 映射成 $H \cdot D$ 个分数，从模型的 config 里算一下：

# %%
config = load_config()
gate_params = config.hidden_size * config.num_attention_heads * config.head_dim
n_full = len(config.full_attention_layers)
print(f"每个 full attention 层：{config.hidden_size} × {config.num_attention_heads * config.head_dim} "
      f"= {gate_params:,} ≈ {gate_params / 1e6:.1f}M 个门的参数")
print(f"{n_full} 个 full attention 层 {list(config.full_attention_layers)}："
      f"{n_full * gate_params:,} ≈ {n_full * gate_params / 1e6:.1f}M")

# %% [markdown]
# 每层约 2.1M，6 个全注意力层共约 12.6M，只占 Qwen3.5-0.8B 全部参数的 1.7% 左右。

# %% [markdown]
# ## 6. 把门乘上去
#
# ### 练习 2：`apply_output_gate(attn_out, gate)`
#
# 返回 `attn_out * sigmoid(gate)`，逐元素相乘。`gate` 是门的**分数**（还没过 sigmoid），和 `attn_out`
# 形状相同或能广播。输出保持 `attn_out` 的 dtype。
#
# 提示：用 `torch.sigmoid`，不要自己写 `1 / (1 + exp(-z))`：分数是 $-100$ 时 $e^{100}$ 在 float32 里溢出成 inf，
# 前向还能算出 $1/(1+\infty) = 0$，反向传播的梯度却是 $\infty/\infty$ = NaN；`torch.sigmoid` 两头都处理好了。

# %% tags=["solution:apply_output_gate"]
def apply_output_gate(attn_out: torch.Tensor, gate: torch.Tensor) -> torch.Tensor:
    """Scale the attention output by the output gate, elementwise.

    attn_out: [..., D] (e.g. [B, T, H, D]); gate: gate scores (before the sigmoid), same or broadcastable shape.
    Returns attn_out * sigmoid(gate), shape and dtype of attn_out.
    """
    ### BEGIN SOLUTION
    return attn_out * torch.sigmoid(gate)
    ### END SOLUTION


# %% tags=["tests:apply_output_gate"]
from course.checking import check
check("apply_output_gate")

### BEGIN HIDDEN TESTS
from autograder.instructor.hidden_cells import grade
grade("apply_output_gate")
### END HIDDEN TESTS

# %% [markdown]
# ### 同一个头，碰到「书」关上，碰到「她」打开
#
# 一个手写的玩具：每个 token 只有 4 个 0/1 特征——名词？代词？动词？前文出现过人？——两个头、每头 2 维，
# 所以 $W_{\text{gate}}$ 把 4 个特征映射成 4 个门分数。第一个头叫它"代词头"（专门替代词找它指的人），
# 第二个叫"语法头"。真实模型里的 $W_{\text{gate}}$ 是训练出来的，也远没有这么好读；这里只为看清机制。
#
# 「她」的代词头这次取回来的是前文「小红」的信息；「书」不是代词，代词头取回来的东西没有用处。

# %%
feature_names = ["名词", "代词", "动词", "前文有人"]
# Which features each token has, by name; the vector follows feature_names.
toy_features = {"书": {"名词", "前文有人"}, "她": {"代词", "前文有人"}}
toy_x = {word: torch.tensor([float(name in has) for name in feature_names]) for word, has in toy_features.items()}
# Columns: pronoun head dim 0, dim 1 | grammar head dim 0, dim 1.
toy_w_gate = torch.tensor([
    [-5.0, -5.0, 2.0, 1.0],    # noun
    [6.0, 5.0, -1.0, -1.0],    # pronoun
    [-2.0, -2.0, 2.0, 2.0],    # verb
    [0.5, 0.5, 0.0, 0.0],      # a person was mentioned earlier
])
# What each head's attention brought back this time, [2 heads, 2 dims]: pronoun head first.
toy_head_out = {word: torch.tensor(rows) for word, rows in [("书", [[0.8, -0.3], [0.4, 0.9]]),
                                                             ("她", [[1.2, 0.5], [0.3, -0.2]])]}

def rounded(t, digits=3):
    return [round(v, digits) for v in t.tolist()]


toy_gates = {}
for word in toy_x:
    scores = (toy_x[word] @ toy_w_gate).view(2, 2)          # step 1: z = x W_gate, one score per head and dim
    gated = apply_output_gate(toy_head_out[word], scores)   # steps 2 and 3: sigmoid, multiply
    toy_gates[word] = torch.sigmoid(scores)
    present = [name for name, on in zip(feature_names, toy_x[word].tolist()) if on]
    print(f"「{word}」（{'、'.join(present)}）z = {rounded(scores.flatten(), 1)}")
    for h, name in enumerate(["代词头", "语法头"]):
        print(f"   {name}：门 {rounded(toy_gates[word][h])}，输出 {rounded(toy_head_out[word][h], 2)} "
              f"-> {rounded(gated[h])}")

# %% [markdown]
# 读数：
#
# - 「书」的代词头门是 **0.011**，输出 $(0.8,\ -0.3)$ 几乎被乘没了；
# - 「她」的代词头门是 **0.998**，「小红」的信息几乎原样放行；
# - 语法头正好相反：「书」是 0.881 和 0.731，「她」只有 0.269。
#
# 第 4 节里 Qwen3.5 第 15 层头 4 的例子，是真实模型里的同一件事：在「公园」上关，在第三个「，」上开。
# 门是逐维的，所以它还能更细：只放行一个头输出里的部分维度。把四个门画成一张小图：

# %%
fig, axes = plt.subplots(1, 2, figsize=(7.5, 2.8))
for ax, word in zip(axes, toy_gates):
    image = ax.imshow(toy_gates[word].numpy(), cmap="Greens", vmin=0, vmax=1)
    for h in range(2):
        for d in range(2):
            value = toy_gates[word][h, d].item()
            ax.text(d, h, f"{value:.3f}", ha="center", va="center", color="white" if value > 0.6 else "black")
    ax.set_xticks([0, 1], labels=["维 0", "维 1"])
    ax.set_yticks([0, 1], labels=["代词头", "语法头"])
    ax.set_title(f"「{word}」的门")
fig.colorbar(image, ax=axes, fraction=0.03)
plt.show()

# %% [markdown]
# ## 7. 门是怎么学出来的
#
# $W_{\text{gate}}$ 跟别的权重一样，初始值是很小的随机数（Qwen3.5 的 `initializer_range` 是 0.02），
# 所以刚初始化时分数都不大：输入先经过 RMSNorm（每维均方为 1），1024 维乘上标准差 0.02 的权重，分数的标准差约
# $0.02 \times \sqrt{1024} \approx 0.64$，门大多落在 0.35～0.65 之间，都在半开附近。是梯度把"开着反而添乱"的门推向 0，
# 把"该说话"的门拉向 1。一个小到能手算的例子：
#
# - 两种 token，输入是独热向量：「问号」$x = (1,\ 0)$，「数字」$x = (0,\ 1)$；门只有 1 维，$w = (w_{\text{问号}},\ w_{\text{数字}})$，
#   门 $g = \operatorname{sigmoid}(x \cdot w)$。
# - 这一层的输出 $y = r + g\,o$：残差 $r$ 加上门乘头的输出 $o$。目标 $t = 1$，损失 $\mathcal{L} = \sum_n \tfrac12 (y_n - t_n)^2$。
# - 「问号」：残差里还没有答案（$r = 0$），头找到了答案（$o = 1$）——门应该开。
# - 「数字」：残差里已经对了（$r = 1$），头只会添乱（$o = 0.8$）——门应该关。
#
# ### 手推梯度
#
# 对第 $n$ 个 token，沿着 $w \to z_n \to g_n \to y_n \to \mathcal{L}$ 用链式法则：
#
# $$
# \frac{\partial \mathcal{L}}{\partial y_n} = y_n - t_n,\qquad
# \frac{\partial y_n}{\partial g_n} = o_n,\qquad
# \frac{\partial g_n}{\partial z_n} = g_n (1 - g_n),\qquad
# \frac{\partial z_n}{\partial w} = x_n .
# $$
#
# $w$ 被所有 token 共用，所以把每个 token 的贡献加起来：
#
# $$
# \nabla_w \mathcal{L} = \sum_n \underbrace{(y_n - t_n)}_{\text{差多少}} \cdot \underbrace{o_n}_{\text{头的输出}}
# \cdot \underbrace{g_n (1 - g_n)}_{\text{sigmoid 的斜率}} \cdot\ x_n .
# $$
#
# ### 练习 3：`gate_gradient(x, w, r, o, t)`
#
# 输入：`x [N, F]` 每行一个 token 的特征；`w [F]` 门的权重；`r, o, t [N]` 每个 token 的残差、头的输出、目标。
# 返回 `[F]`：上面的 $\nabla_w \mathcal{L}$。请按公式手算，**不要**用 `backward()` 或 `torch.autograd`——那是检查单元用来核对你的。
#
# 提示：照着链式法则的顺序，先算出门、再算出输出 $y$，都是每个 token 一个数。公式里除了 $x_n$ 以外的因子，
# 对每个 token 合起来是一个标量；"每个标量乘上自己那一行 $x_n$，再对所有 token 求和"不需要写循环：
# 想一想形状 `[N]` 和 `[N, F]` 的张量怎样一步得到 `[F]`。

# %% tags=["solution:gate_gradient"]
def gate_gradient(x: torch.Tensor, w: torch.Tensor, r: torch.Tensor, o: torch.Tensor,
                  t: torch.Tensor) -> torch.Tensor:
    """Gradient of the loss sum_n (y_n - t_n)^2 / 2 with respect to the gate weights w.

    x: [N, F] one row per token; w: [F]; r, o, t: [N] residual, head output and target per token.
    The gate is g = sigmoid(x @ w) and the layer's output y = r + g * o.
    Returns [F]: sum_n (y_n - t_n) * o_n * g_n * (1 - g_n) * x_n.
    """
    ### BEGIN SOLUTION
    g = torch.sigmoid(x @ w)                    # [N] one gate per token
    y = r + g * o                               # [N] the layer's output
    per_token = (y - t) * o * g * (1 - g)       # [N] dL/dz_n by the chain rule
    return per_token @ x                        # [F] sum over tokens of per_token[n] * x[n]
    ### END SOLUTION


# %% tags=["tests:gate_gradient"]
from course.checking import check
check("gate_gradient")

### BEGIN HIDDEN TESTS
from autograder.instructor.hidden_cells import grade
grade("gate_gradient")
### END HIDDEN TESTS

# %% [markdown]
# ### 用你的梯度做 200 步梯度下降
#
# 初始 $w = (0.01,\ -0.02)$，学习率 1，每一步 $w \leftarrow w - 1 \cdot \nabla_w \mathcal{L}$：

# %%
sgd_x = torch.tensor([[1.0, 0.0], [0.0, 1.0]])  # 问号, 数字
sgd_r = torch.tensor([0.0, 1.0])  # residual before the head: empty at 问号, already right at 数字
sgd_o = torch.tensor([1.0, 0.8])  # what the head brings back
sgd_t = torch.ones(2)             # the target at both tokens
sgd_w = torch.tensor([0.01, -0.02])
learning_rate = 1.0
n_steps = 200
report_at = {0, 1, 2, 5, 20, 50, n_steps}
gate_history, loss_history, grad_history = [], [], []
for step in range(n_steps + 1):  # record the state after 0, 1, ..., 200 updates
    gates_now = torch.sigmoid(sgd_x @ sgd_w)
    grad = gate_gradient(sgd_x, sgd_w, sgd_r, sgd_o, sgd_t)
    gate_history.append(gates_now)
    loss_history.append((((sgd_r + gates_now * sgd_o - sgd_t) ** 2) / 2).sum().item())
    grad_history.append(grad)
    if step in report_at:
        print(f"第 {step:3d} 步：w = [{sgd_w[0]:+.3f}, {sgd_w[1]:+.3f}]  "
              f"门(问号) {gates_now[0]:.3f}  门(数字) {gates_now[1]:.3f}  "
              f"损失 {loss_history[-1]:.4f}  梯度 [{grad[0]:+.4f}, {grad[1]:+.4f}]")
    if step < n_steps:
        sgd_w = sgd_w - learning_rate * grad

gate_history = torch.stack(gate_history)  # [201, 2]
grad_history = torch.stack(grad_history)  # [201, 2]

# %% [markdown]
# 200 步之后，「问号」的门开到 **0.945**，「数字」的门关到 **0.071**。
#
# 方向很好理解：「问号」处 $y < t$，$y - t < 0$，梯度为负，$w_{\text{问号}}$ 往上走，门越开越大；
# 「数字」处头只会添乱，$y > t$，$w_{\text{数字}}$ 往下走。真实模型里没有谁事先规定"问号处该开门"，机制却相同：
# 只要某个 (token, 头, 维) 的门开大一点能让下一个词预测得更准，梯度就会把它推开；反之就推它关上。

# %%
steps = torch.arange(n_steps + 1)
fig, axes = plt.subplots(1, 2, figsize=(11, 3.8))
axes[0].plot(steps, gate_history[:, 0], label="门（问号）")
axes[0].plot(steps, gate_history[:, 1], label="门（数字）")
for value in gate_history[-1].tolist():
    axes[0].annotate(f"{value:.3f}", (n_steps, value), textcoords="offset points", xytext=(-30, 6))
axes[0].axhline(0.5, color="gray", lw=0.8, ls=":")
axes[0].set_xlabel("步数")
axes[0].set_ylabel("门 g")
axes[0].set_ylim(0, 1)
axes[0].set_title("门从 0.5 出发，一个打开、一个关上")
axes[0].legend()
axes[1].plot(steps, grad_history.abs()[:, 0], label="|梯度|（问号）")
axes[1].plot(steps, grad_history.abs()[:, 1], label="|梯度|（数字）")
axes[1].set_yscale("log")
axes[1].set_xlabel("步数")
axes[1].set_title("越接近 0 或 1，梯度越小")
axes[1].legend()
fig.tight_layout()
plt.show()

# %% [markdown]
# ### 为什么门在接近 0 和 1 时走得很慢
#
# 左图的两条曲线一开始很陡，后来越来越平。梯度里有一个因子 $g(1 - g)$，就是第 3 节那条虚线：

# %%
for gate_value in (0.5, 0.8, 0.945, 0.99, 0.999):
    print(f"g = {gate_value:<6} g(1 - g) = {gate_value * (1 - gate_value):.4f}")

# %% [markdown]
# 门在 0.5 时斜率是 0.25，到 0.945 只剩 0.052，到 0.999 只剩 0.001。另外，门越接近目标，$y - t$ 本身也越小。
# 两者相乘，梯度很快变小，门就停在"基本关上 / 基本打开"附近，慢慢地再往 0 或 1 挪。
#
# 反过来看也有好处：一个已经关得很死（比如 0.0025）的门，很难被一次噪声大的梯度突然推开。
# 如果有朝一日需要它重新打开，就得靠长时间一致的梯度。

# %% [markdown]
# ## 思考题
#
# 两道题不计分，也没有标准格式：把你的推理写下来就好。
#
# **思考题 1.** 假设某一层里有一个头，在某个 token 上它的门全是 0（$D$ 个门一个不剩）。这一层在这个 token 上的输出会怎样？
# 残差流呢？如果这一层所有头的门在这个 token 上都是 0 呢？

# %% [markdown] tags=["answer:gate_all_zero"]
# ### BEGIN SOLUTION
# 这个头的输出乘完门是零向量。`o_proj` 没有 bias，它的输出是各头贡献之和 $\sum_h (o_h \odot g_h)\,W^O_h$，
# 这个头那一项正好是 0；其余头的注意力和门都是各算各的，贡献一点不变。所以这一层的输出就是"少了这个头"的那份，
# 残差流照样是 $x$ 加上其余头的贡献，$x$ 本身完整保留。
#
# 如果所有头的门都是 0，注意力子层加进残差流的就是零向量：这个 token 在这一层的注意力等于被跳过，残差流原样交给后面的 MLP。
#
# 两点补充。第一，这只对这一个 token 成立：同一个头在别的 token 上照样可以开门；这个 token 的 K、V 由 `k_proj`、`v_proj`
# 算出，和门无关，照样进 KV cache，供后面的 token 查询。第二，sigmoid 只会无限接近 0；真到了 0，梯度也断了：
# 这个 token 上，这个头的 value、query、key 都收不到来自这里的梯度，门自己的梯度也带着 $g(1-g) \approx 0$ 这个因子。
# 这就是第 7 节说的"关得很死的门很难再被推开"。
# ### END SOLUTION

# %% [markdown]
# **思考题 2.** 没有门的模型为什么偏偏挑**第一个** token 当 attention sink，而不是随便哪个 token（比如句号，或者某个常见的词）？

# %% [markdown] tags=["answer:first_token_sink"]
# ### BEGIN SOLUTION
# 关键在因果掩码。一个 sink 要管用，必须对**每一个** query 都看得见：第 $i$ 个 query 只能看位置 $0 \dots i$，
# 所以所有 query 都看得见的只有位置 0，而第一个 query 除了它什么都看不见。换成第 5 个 token，前面几个位置的 query
# 就用不上它；换成句号或某个常见词，它出不出现、出现在哪都因句子而异，没法当一个随时可用的垃圾桶。
#
# 第一个 token 还有一个方便之处：它在每一层都只能看自己，所以它每一层的隐藏状态都和后面的文本无关。只要开头总是同一个
# token（常见的是 BOS 之类的特殊 token），它在每一层的 key 和 value 就总是同一组向量，模型很容易把这个 key 学成
# "谁想弃权都能对准"，把 value 学成接近 0。
#
# 这也解释了 StreamingLLM 的发现：只保留最近的 KV、丢掉开头几个 token，模型就崩了，因为头们失去了交白卷的地方；
# 把开头几个 token 的 KV 一直留着就好了。
# ### END SOLUTION

# %% [markdown]
# ## 小结
#
# | 函数 | 做什么 | 要守住的细节 |
# |---|---|---|
# | `split_query_gate` | 从 `q_proj` 的输出拆出 query 和门分数 | 按头交错：每个头 `[query_h, gate_h]`，不是整体对半切 |
# | `apply_output_gate` | 头的输出 × sigmoid(门分数) | 逐维相乘；在 `o_proj` 之前，不碰残差连接 |
# | `gate_gradient` | 手推门权重的梯度 | $(y-t)\cdot o \cdot g(1-g)\cdot x$，对 token 求和 |
#
# - softmax 逼每个头交一份加权平均；没有门时，模型只好让第一个 token 的 value 变得接近 0，当作 attention sink。
# - 门由当前 token 自己算出，逐维乘在头的输出上（`o_proj` 之前），想闭嘴就乘一个接近 0 的数。
# - 门为什么有用（Gated Attention 论文）：在 $W_V$ 和 $W^O$ 之间加入随当前 token 变化的非线性；大多数门接近 0，
#   头的输出按 token 稀疏地开关；头能直接闭嘴，也就不再需要 attention sink。
# - 门的前世今生：1997 年的 LSTM 已经用 sigmoid 门调节信息流；2016 年 GLU 让一路过 sigmoid 去乘另一路；
#   2023 年有人发现注意力头"什么都不想做"时会造出巨大的离群值（*Quantizable Transformers*），
#   Evan Miller 提议给 softmax 的分母加 1（*Attention Is Off By One*），StreamingLLM 给 attention sink 起了名字；
#   2025 年 Qwen 团队在 *Gated Attention for Large Language Models* 里比较了 30 种加门的方式，
#   头输出上逐维、由当前 token 算出的 sigmoid 门效果最好；Qwen3-Next 和 Qwen3.5 都用上了它。
#   同一个问题也有别的解法，例如 gpt-oss 为每个头多设一个可学习的 sink 分数。
#
# 下一次作业把门和 GQA、QK-Norm、部分 RoPE 装进同一个模块，在 Qwen3.5 第 3 层的权重上跑起来。
