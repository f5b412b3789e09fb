"""Check of ``causal_conv1d(x, weight, conv_state=None) → (y, conv_state)``: a depthwise causal conv without
activation, ``x [B, C, T]``, ``weight [C, 1, K]``, ``conv_state [B, C, K−1]`` the last K−1 inputs. On a hand
case, seeded shapes (T = 1, T < K − 1, K = 2), from a given state (one decoding step), continued from its own
state, in three dtypes."""
import torch
import torch.nn.functional as F

from autograder.engine.inputs.seeded import dtype_name, generator, randn, shape
from autograder.engine.model import Exercise, Mistake
from autograder.engine.protocols import Case, call_conv
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
    return found


def _past(x, weight, conv_state):
    width = weight.shape[-1]
    return torch.zeros(x.shape[0], x.shape[1], width - 1, dtype=x.dtype) if conv_state is None else conv_state


def _same_padding(x, weight, conv_state=None):
    full = torch.cat([_past(x, weight, conv_state), x], dim=-1)
    left = (weight.shape[-1] - 1) // 2  # where padding="same" puts the zeros: left, and the rest on the right
    padded = F.pad(full, (left, weight.shape[-1] - 1 - left))
    y = F.conv1d(padded, weight, groups=x.shape[1])[..., -x.shape[-1]:]
    return y, full[..., full.shape[-1] - (weight.shape[-1] - 1):]


def _no_state(x, weight, conv_state=None):
    return causal_conv1d(x, weight)


def _state_from_x(x, weight, conv_state=None):
    return causal_conv1d(x, weight, conv_state)[0], x[..., x.shape[-1] - min(weight.shape[-1] - 1, x.shape[-1]):]


def _state_of(width_of):
    def wrong(x, weight, conv_state=None):
        y, _ = causal_conv1d(x, weight, conv_state)
        full = torch.cat([_past(x, weight, conv_state), x], dim=-1)
        return y, full[..., max(full.shape[-1] - width_of(weight.shape[-1]), 0):]
    return wrong


def _flipped(x, weight, conv_state=None):
    return causal_conv1d(x, weight.flip(-1), conv_state)


def _silu(x, weight, conv_state=None):
    y, state = causal_conv1d(x, weight, conv_state)
    return F.silu(y), state


MISTAKES = (
    Mistake("卷积不是因果的（两边补零，padding='same'）", "因果卷积只在左边补 K − 1 个零（或者接上 conv_state）：y_t 只用 "
            "x_{t−K+1} … x_t，不能看到后面的位置。", _same_padding),
    Mistake("没有用传进来的 conv_state（每次都从零开始）", "conv_state 是上一段最后 K − 1 个输入：把它接在 x 前面再卷积，"
            "这样分段算和一次算完整段一样。", _no_state),
    Mistake("返回的 conv_state 只取了这一段的 x", "T 比 K − 1 短时，这一段的 x 不够 K − 1 个：新的 conv_state 要从"
            "「旧的 conv_state 接上 x」里取最后 K − 1 个。", _state_from_x),
    Mistake("conv_state 存了 K 个位置", "conv_state 的形状是 [B, C, K−1]：下一步的输出只需要前面的 K − 1 个输入。",
            _state_of(lambda width: width)),
    Mistake("卷积核的方向反了", "约定和 nn.Conv1d 一样（互相关，不翻转）：weight[c, 0, K−1] 乘当前位置 x_t，"
            "weight[c, 0, 0] 乘最早的 x_{t−K+1}。", _flipped),
    Mistake("卷积之后做了 SiLU", "causal_conv1d 不带激活：SiLU 由 Gated DeltaNet 层在卷积之后自己做。", _silu),
)

EXERCISE = Exercise("causal_conv1d", 3, causal_conv1d, cases, MISTAKES, output_names=OUTPUT_NAMES, call=call_conv)
