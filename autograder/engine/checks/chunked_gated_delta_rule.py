"""Check of ``chunked_gated_delta_rule(q, k, v, g, beta, chunk_size=64, state=None) → (o, state)``: the gated
delta rule computed a chunk at a time (the WY / UT form), equal to the recurrent ``gated_delta_rule`` for any T:
a multiple of the chunk or not, T = 1, T shorter than the default chunk, from a given state, continued from its
own state, and a long input of many chunks, where code that updates the state at every position is stopped
(``protocols.call_chunkwise``): it gives the same numbers, but it is the recurrent loop, not the chunked form."""
import torch

from autograder.engine.checks.gated_delta_rule import _gates, hand_case
from autograder.engine.checks.linear_attention_recurrent import OUTPUT_NAMES
from autograder.engine.inputs import linear_attention as inputs
from autograder.engine.inputs.seeded import generator
from autograder.engine.model import Exercise, Mistake
from autograder.engine.protocols import Case, call_chunkwise
from solutions.gated_deltanet import chunked_gated_delta_rule


def cases() -> list[Case]:
    gen = generator(84)
    found = [Case(hand_case().label + "，chunk_size=2", hand_case().args, {**hand_case().kwargs, "chunk_size": 2})]

    def case(label, shape, chunk_size=None, dtype=torch.float32, **kwargs):
        q, k, v = inputs.qkv(gen, *shape, dtype=dtype)
        options = {} if chunk_size is None else {"chunk_size": chunk_size}
        said = "chunk_size 用默认值 64" if chunk_size is None else f"chunk_size={chunk_size}"
        found.append(Case(f"{label}{inputs.describe(q, v)}，{said}", (q, k, v, *_gates(gen, *shape[:3], dtype=dtype)),
                          {**options, **kwargs}))

    case("T 是块长的整数倍（2 块），", (2, 2, 8, 4, 4), 4)
    case("T 不是块长的整数倍（最后一块只有 2 个位置），", (1, 2, 10, 4, 6), 4)
    case("只有一个位置，", (2, 2, 1, 8, 3), 4)
    case("T 比默认块长短，", (1, 3, 7, 4, 4))
    case("从给定的 state 开始，", (2, 2, 7, 4, 6), 3, state=inputs.state(gen, 2, 2, 4, 6))
    case("先算前 5 个位置，再从返回的 state 接着算剩下的，", (1, 2, 11, 4, 5), 4, split=5)
    case("", (1, 2, 9, 6, 5), 4, torch.float64)
    case("", (2, 2, 8, 8, 8), 4, torch.bfloat16)
    case("长输入（16 块），", (1, 1, 256, 8, 4), 16)
    # Decay of e^-20 to e^-40 a step: a chunk's cumulative γ reaches about -300, where exp(γ) alone underflows and
    # exp of γ_i − γ_j for j > i overflows: only differences taken before exp, masked before exp, stay finite.
    q, k, v = inputs.qkv(gen, 1, 2, 12, 4, 4)
    strong = -(20 + 20 * torch.rand(1, 2, 12, generator=gen, dtype=torch.float64)).float()
    found.append(Case(f"衰减很强（每步 g 在 −40 到 −20 之间），{inputs.describe(q, v)}，chunk_size=6",
                      (q, k, v, strong, inputs.beta(gen, 1, 2, 12)), {"chunk_size": 6}))
    return found


def chunked(*, strict_output=False, diagonal_in_system=False, carry=True, decay_query=True, decay_key=True):
    """The chunked rule written out, right by default, with one step changed: ``strict_output`` reads only
    j < i inside a chunk; ``diagonal_in_system`` solves ``I + A`` with ``A`` keeping its diagonal ``β_i k_i·k_i``; ``carry`` False starts every chunk from the given state;
    ``decay_query`` False reads the chunk's start state without ``exp(γ_i)``; ``decay_key`` False writes the
    state without ``exp(γ_C − γ_i)``."""
    def rule(q, k, v, g, beta, chunk_size=64, state=None):
        start_state = torch.zeros(*q.shape[:-2], q.shape[-1], v.shape[-1], dtype=q.dtype) if state is None else state
        memory, out = start_state, []
        for start in range(0, q.shape[-2], chunk_size):
            part = slice(start, start + chunk_size)
            qc, kc, vc, gc, bc = q[..., part, :], k[..., part, :], v[..., part, :], g[..., part], beta[..., part]
            c = qc.shape[-2]
            gamma = gc.cumsum(-1)
            lower = torch.ones(c, c, dtype=torch.bool).tril()
            decay = (gamma[..., :, None] - gamma[..., None, :]).masked_fill(~lower, float("-inf")).exp()
            a = bc[..., :, None] * (kc @ kc.transpose(-2, -1)) * decay
            system = (a.tril() if diagonal_in_system else a.tril(-1)) + torch.eye(c, dtype=q.dtype)
            memory0 = memory if carry else start_state
            rhs = bc[..., None] * (vc - (gamma.exp()[..., None] * kc) @ memory0)
            delta = torch.linalg.solve_triangular(system, rhs, upper=False)
            scores = (qc @ kc.transpose(-2, -1)) * decay
            scores = scores.tril(-1) if strict_output else scores
            read = (gamma.exp()[..., None] * qc if decay_query else qc) @ memory0
            out.append(read + scores @ delta)
            to_end = (gamma[..., -1:] - gamma).exp() if decay_key else torch.ones_like(gamma)
            memory = gamma[..., -1, None, None].exp() * memory0 + (to_end[..., None] * kc).transpose(-2, -1) @ delta
        return torch.cat(out, dim=-2), memory
    return rule


MISTAKES = (
    Mistake("块与块之间没有传递状态", "每一块从上一块结束时的状态 memory 开始：块内的输出要加上 (q ⊙ exp(γ)) memory，块末的 memory "
            "再交给下一块。只有一块时看不出来，T 超过 chunk_size 就错了。", chunked(carry=False)),
    Mistake("块内的输出掩码不含对角线（只用了 j < i）", "o_i = q_i S_i 读的是写入 δ_i 之后的状态：块内的分数 (q_i·k_j) Γ_ij "
            "取 j ≤ i，包括对角线；只有 UT 系统 A 才是严格下三角。", chunked(strict_output=True)),
    Mistake("UT 系统多算了对角线（A 保留了 β_i k_i·k_i）", "修正量满足 (I + A) δ = β (v − …)，A 只取严格下三角"
            "（j < i，tril(-1)），所以系统的对角线是 1：位置 i 的修正量只受它之前的位置影响。",
            chunked(diagonal_in_system=True)),
    Mistake("读块开始时的状态时 q 没有乘 exp(γ_i)", "从块开始到位置 i，状态已经衰减了 exp(γ_i)，γ_i 是块内 g 的累积和："
            "读旧状态用 (q_i exp(γ_i)) memory。", chunked(decay_query=False)),
    Mistake("块末更新状态时 k 没有乘 exp(γ_C − γ_i)", "位置 i 写入的 k_i δ_iᵀ 到块末还要再衰减 exp(γ_C − γ_i)："
            "memory ← exp(γ_C) memory + (k ⊙ exp(γ_C − γ))ᵀ δ。", chunked(decay_key=False)),
    Mistake("没有按块计算：每个位置都更新了一次状态", "结果和递推一样，但这是逐个位置的循环，T 个位置要走 T 步。分块的做法是：块内"
            "先用矩阵乘法和 UT 变换一次算出所有修正量 δ，再用一次矩阵乘法把整块写进状态，只在块与块之间循环。",
            error="PerPosition"),
)

EXERCISE = Exercise("chunked_gated_delta_rule", 5, chunked_gated_delta_rule, cases, MISTAKES, output_names=OUTPUT_NAMES,
                    call=call_chunkwise)
