"""Check of ``causal_conv1d(x, weight, conv_state=None) → (y, conv_state)``: a depthwise causal conv without
activation, ``x [B, C, T]``, ``weight [C, 1, K]``, ``conv_state [B, C, K−1]`` the last K−1 inputs. On a hand
case, seeded shapes (T = 1, T < K − 1, K = 2), from a given state (one decoding step), continued from its own
state, in three dtypes."""
import torch
import torch.nn.functional as F

from autograder.engine.combined import variants
from autograder.engine.inputs.seeded import dtype_name, generator, randn, shape
from autograder.engine.model import Exercise, Mistake, public
from course.protocols import Case, call_conv
from solutions.gated_deltanet import causal_conv1d

OUTPUT_NAMES = ("输出 y", "返回的 conv_state")


def cases() -> list[Case]:
    gen = generator(85)
    hand = (torch.tensor([[[1.0, 2.0, 3.0, 4.0, 5.0]]]), torch.tensor([[[1.0, 10.0, 100.0]]]))
    found = [Case("小例子：x = [1, 2, 3, 4, 5]，一个通道，weight = [1, 10, 100]（最后一个权重乘当前位置）", hand)]

    def case(label, batch, channels, seq, width, dtype=torch.float32, with_state=False, weight_dtype=None, **kwargs):
        x = randn(gen, batch, channels, seq, dtype=dtype)
        weight = randn(gen, channels, 1, width, dtype=weight_dtype or dtype, scale=width ** -0.5)
        if with_state:
            kwargs["conv_state"] = randn(gen, batch, channels, width - 1, dtype=dtype)
        dtypes = dtype_name(dtype) if weight_dtype is None else f"x 是 {dtype_name(dtype)}，weight 是 {dtype_name(weight_dtype)}"
        found.append(Case(f"{label}x {shape(x)}，weight {shape(weight)}，{dtypes}", (x, weight), kwargs))

    case("", 2, 6, 10, 4)
    case("只有一个位置，", 2, 3, 1, 4)
    case("从给定的 conv_state 开始（解码一步），", 2, 5, 1, 4, with_state=True)
    case("从给定的 conv_state 开始，T 比 K − 1 短，", 1, 4, 2, 4, with_state=True)
    case("从给定的 conv_state 开始，", 1, 4, 6, 3, with_state=True)
    case("先算前 2 个位置，再从返回的 conv_state 接着算剩下的，", 2, 4, 7, 4, split=2)
    case("K = 2，先算前 4 个位置再接着算，", 1, 3, 6, 2, torch.float64, split=4)
    case("", 2, 8, 9, 4, torch.bfloat16, with_state=True)
    # As in the layer (and the notebook's own check): float32 conv weights meet bfloat16 activations.
    case("层里的情形（float32 的卷积权重遇上 bfloat16 的激活），", 2, 4, 5, 4, torch.bfloat16, weight_dtype=torch.float32)
    return public(found, 0, 2, 3, 6, 9)


def _past(x, weight, conv_state):
    width = weight.shape[-1]
    return torch.zeros(x.shape[0], x.shape[1], width - 1, dtype=x.dtype) if conv_state is None else conv_state


@variants
def _wrong(*, same=False, future=False, use_state=True, state_from_x=False, state_width="K - 1", flipped=False,
           silu=False):
    """causal_conv1d written out, right by default, with one thing changed: ``same`` pads both sides as
    padding="same" does, the given state and x together ("full") or x alone ("x"); ``future`` pads x with K − 1
    zeros on both sides and keeps the last T outputs (each sees x_t … x_{t+K−1}); ``use_state`` False ignores a
    given conv_state; ``state_from_x`` keeps only this call's x for the new state; ``state_width`` "K" keeps K
    columns; ``flipped`` flips the kernel; ``silu`` applies SiLU to the output."""
    def wrong(x, weight, conv_state=None):
        width, seq = weight.shape[-1], x.shape[-1]
        kernel = (weight.flip(-1) if flipped else weight).to(x.dtype)
        full = torch.cat([_past(x, weight, conv_state if use_state else None), x], dim=-1)
        if same or future:  # padding="same" puts (K − 1) // 2 zeros on the left and the rest on the right
            left = width - 1 if future else (width - 1) // 2
            padded = F.pad(full if same == "full" else x, (left, width - 1 if future else width - 1 - left))
            y = F.conv1d(padded, kernel, groups=x.shape[1])[..., -seq:]
        else:
            y = F.conv1d(full, kernel, groups=x.shape[1])
        kept = width if state_width == "K" else width - 1
        state = x[..., seq - min(width - 1, seq):] if state_from_x else full[..., max(full.shape[-1] - kept, 0):]
        return F.silu(y) if silu else y, state
    return wrong


MISTAKES = (
    *(Mistake("卷积不是因果的（两边补零，padding='same'）", "因果卷积只在左边补 K − 1 个零（或者接上 conv_state）：y_t 只用 "
            "x_{t−K+1} … x_t，不能看到后面的位置。", wrong) for wrong in (_wrong(same="full"), _wrong(same="x"))),
    Mistake("卷积看的是当前和后面 K − 1 个输入（两边各补了 K − 1 个零，取了最后 T 个输出）", "因果卷积的 y_t 只用 "
            "x_{t−K+1} … x_t：只在左边补 K − 1 个零（或者接上 conv_state），卷积正好得到 T 个输出。两边都补再取最后 T 个，"
            "每个输出就都往后看了 K − 1 个位置。", _wrong(future=True)),
    Mistake("没有用传进来的 conv_state（每次都从零开始）", "conv_state 是上一段最后 K − 1 个输入：把它接在 x 前面再卷积，"
            "这样分段算和一次算完整段一样。", _wrong(use_state=False)),
    Mistake("返回的 conv_state 只取了这一段的 x", "T 比 K − 1 短时，这一段的 x 不够 K − 1 个：新的 conv_state 要从"
            "「旧的 conv_state 接上 x」里取最后 K − 1 个。", _wrong(state_from_x=True)),
    Mistake("conv_state 存了 K 个位置", "conv_state 的形状是 [B, C, K−1]：下一步的输出只需要前面的 K − 1 个输入。",
            _wrong(state_width="K")),
    Mistake("卷积核的方向反了", "约定和 nn.Conv1d 一样（互相关，不翻转）：weight[c, 0, K−1] 乘当前位置 x_t，"
            "weight[c, 0, 0] 乘最早的 x_{t−K+1}。", _wrong(flipped=True)),
    Mistake("卷积之后做了 SiLU", "causal_conv1d 不带激活：SiLU 由 Gated DeltaNet 层在卷积之后自己做。", _wrong(silu=True)),
)

EXERCISE = Exercise("causal_conv1d", 3, causal_conv1d, cases, MISTAKES, output_names=OUTPUT_NAMES, call=call_conv)
