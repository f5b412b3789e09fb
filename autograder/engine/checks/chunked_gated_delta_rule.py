"""Check of ``chunked_gated_delta_rule(q, k, v, g, beta, chunk_size=64, state=None) → (o, state)``: the gated
delta rule computed a chunk at a time (the WY / UT form), equal to the recurrent ``gated_delta_rule`` for any T:
a multiple of the chunk or not, T = 1, T shorter than the default chunk, from a given state, continued from its
own state, and a long input of many chunks, where code that updates the state at every position is stopped
(``protocols.call_chunkwise``): it gives the same numbers, but it is the recurrent loop, not the chunked form."""
import torch

from autograder.engine.checks.gated_delta_rule import _gates, hand_case
from autograder.engine.checks.linear_attention_recurrent import OUTPUT_NAMES
from autograder.engine.combined import variants
from autograder.engine.inputs import linear_attention as inputs
from autograder.engine.inputs.seeded import generator
from autograder.engine.model import Exercise, Mistake, public
from course.protocols import Case, call_chunkwise
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
    return public(found, 0, 2, 5, 6, 8, 9, 10)


@variants
def chunked(*, strict_output=False, diagonal_in_system=False, carry=True, decay_query=True, decay_key=True,
            use_state=True, beta_in_system=True, decay_inside=True, short_end_at_zero=False, system_sign=1.0,
            solve=True, beta_on_columns=False, decay_transposed=False, exclusive=False, key_decay_from_start=False,
            decay_rhs=True, beta_in_rhs=True, decay_memory=True, key_decay_inverted=False, gamma_over_sequence=False):
    """The chunked rule written out, right by default, with one step changed: ``strict_output`` reads only
    j < i inside a chunk; ``diagonal_in_system`` solves ``I + A`` with ``A`` keeping its diagonal ``β_i k_i·k_i``;
    ``carry`` False starts every chunk from the given state; ``decay_query`` False reads the chunk's start state
    without ``exp(γ_i)``; ``decay_key`` False writes the state without ``exp(γ_C − γ_i)``; ``use_state`` False
    ignores a given state; ``beta_in_system`` False leaves β out of ``A`` (not out of the right-hand side);
    ``decay_inside`` False masks the chunk with the plain causal mask instead of ``exp(γ_i − γ_j)``;
    ``short_end_at_zero`` takes γ_C = 0 for a last chunk shorter than ``chunk_size`` (as if read from padding
    that was never summed); ``system_sign`` −1 solves ``I − A``; ``solve`` False takes ``δ`` = the right-hand
    side (the system never solved); ``beta_on_columns`` scales ``A``'s columns by β (β_j, not β_i);
    ``decay_transposed`` uses ``exp(γ_j − γ_i)`` inside the chunk; ``exclusive`` takes γ without each position's
    own g (``"padded"``: code that pads the last chunk with g = 0 then ends a short chunk at the whole sum);
    ``key_decay_from_start`` writes the state with ``exp(γ_i)`` instead of ``exp(γ_C − γ_i)``; ``decay_rhs`` False
    reads the start state on the right-hand side without ``exp(γ_i)``; ``beta_in_rhs`` False leaves β out of the
    right-hand side (not out of ``A``); ``decay_memory`` False carries the start state to the chunk's end without
    ``exp(γ_C)``; ``key_decay_inverted`` writes the state with ``exp(γ_i − γ_C)``; ``gamma_over_sequence`` takes γ
    as the cumulative sum over the whole sequence, never restarted at a chunk."""
    def rule(q, k, v, g, beta, chunk_size=64, state=None):
        zeros = torch.zeros(*q.shape[:-2], q.shape[-1], v.shape[-1], dtype=q.dtype)
        start_state = zeros if state is None or not use_state else state
        memory, out = start_state, []
        whole = g.cumsum(-1)
        for start in range(0, q.shape[-2], chunk_size):
            part = slice(start, start + chunk_size)
            qc, kc, vc, gc, bc = q[..., part, :], k[..., part, :], v[..., part, :], g[..., part], beta[..., part]
            c = qc.shape[-2]
            gamma = whole[..., part] if gamma_over_sequence else gc.cumsum(-1) - (gc if exclusive else 0.0)
            lower = torch.ones(c, c, dtype=torch.bool).tril()
            gap = gamma[..., None, :] - gamma[..., :, None] if decay_transposed else gamma[..., :, None] - gamma[..., None, :]
            decay = gap.masked_fill(~lower, float("-inf")).exp()
            decay = decay if decay_inside else lower.to(q.dtype)
            scale = (bc[..., None, :] if beta_on_columns else bc[..., :, None]) if beta_in_system else 1.0
            a = system_sign * scale * (kc @ kc.transpose(-2, -1)) * decay
            system = (a.tril() if diagonal_in_system else a.tril(-1)) + torch.eye(c, dtype=q.dtype)
            memory0 = memory if carry else start_state
            rhs = (bc[..., None] if beta_in_rhs else 1.0) * (vc - ((gamma.exp()[..., None] if decay_rhs else 1.0) * kc) @ memory0)
            delta = torch.linalg.solve_triangular(system, rhs, upper=False) if solve else rhs
            scores = (qc @ kc.transpose(-2, -1)) * decay
            scores = scores.tril(-1) if strict_output else scores
            read = (gamma.exp()[..., None] * qc if decay_query else qc) @ memory0
            out.append(read + scores @ delta)
            end = gamma[..., -1:] if c == chunk_size or not short_end_at_zero else torch.zeros_like(gamma[..., -1:])
            end = gc.sum(-1, keepdim=True) if exclusive == "padded" and c < chunk_size else end
            to_end = (gamma.exp() if key_decay_from_start else (gamma - end).exp() if key_decay_inverted else
                      (end - gamma).exp() if decay_key else torch.ones_like(gamma))
            memory = (end[..., None].exp() if decay_memory else 1.0) * memory0 + (to_end[..., None] * kc).transpose(-2, -1) @ delta
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
    Mistake("UT 系统里漏了 β（A 只是 k_i·k_j 乘衰减）", "修正量满足 (I + A) δ = β ⊙ (v − …)，A 的第 i 行要乘 β_i："
            "A_ij = β_i (k_i·k_j) exp(γ_i − γ_j)，j < i。它来自 δ_i = β_i (v_i − 读出的旧值)，旧值里包括同一块里"
            "前面位置刚写进去的 k_j δ_jᵀ。", chunked(beta_in_system=False)),
    Mistake("块内用的是普通的因果掩码，没有乘衰减 exp(γ_i − γ_j)", "块内位置 j 写入的东西到位置 i 已经衰减了 "
            "exp(γ_i − γ_j)（γ 是块内 g 的累积和）：UT 系统的 A 和块内的分数 (q_i·k_j) 都要乘这个衰减，"
            "mask 只把 j > i 的位置去掉。", chunked(decay_inside=False)),
    Mistake("最后一块不满 chunk_size 时，块末的累积衰减 γ_C 当成了 0", "最后一块可能比 chunk_size 短：块末的 γ_C 是这一块"
            "最后一个真实位置的累积和（γ[..., -1]），不是补齐的位置上的 0。否则返回的状态少衰减了，接着算就错了。",
            chunked(short_end_at_zero=True)),
    Mistake("UT 系统的符号反了：解的是 (I − A) δ", "修正量满足 (I + A) δ = β ⊙ (v − …)：位置 i 读到的旧值里包括同一块前面"
            "位置刚写进去的 k_j δ_jᵀ，要从 v_i 里减掉，移到左边就是 +A。", chunked(system_sign=-1.0)),
    Mistake("UT 系统没有起作用：修正量就是右边（δ = β ⊙ (v − …)）", "块内的修正量要解下三角系统 (I + A) δ = 右边："
            "torch.linalg.solve_triangular(I + A, 右边, upper=False)。upper=True 只读上三角（对角线的 1），等于没解。",
            chunked(solve=False)),
    Mistake("A 里的 β 乘在了列上（β_j），应乘在行上（β_i）", "A_ij = β_i (k_i·k_j) exp(γ_i − γ_j)：β 属于正在写入的位置 i，"
            "用 β[..., :, None]。", chunked(beta_on_columns=True)),
    Mistake("块内的衰减矩阵反了：用的是 exp(γ_j − γ_i)", "位置 j 写入的东西到位置 i（j ≤ i）衰减了 exp(γ_i − γ_j) ≤ 1："
            "gamma[..., :, None] − gamma[..., None, :]，行是 i，列是 j。", chunked(decay_transposed=True)),
    *(Mistake("γ 用的是不含自己的累积和（少了这一步的 g_t）", "γ_i = g_1 + … + g_i 包括位置 i 自己的 g_i（先衰减再读写，"
              "和递推一样）：gamma = g.cumsum(-1)，不要再减去 g。", chunked(exclusive=how)) for how in ("all", "padded")),
    Mistake("块末更新状态时 k 乘的是 exp(γ_i)（应是 exp(γ_C − γ_i)）", "位置 i 写入的 k_i δ_iᵀ 从位置 i 到块末还要衰减 "
            "exp(γ_C − γ_i)，不是从块开始算的 exp(γ_i)：memory ← exp(γ_C) memory + (k ⊙ exp(γ_C − γ))ᵀ δ。",
            chunked(key_decay_from_start=True)),
    Mistake("右边读块开始时的状态时 k 没有乘 exp(γ_i)", "右边是 β ⊙ (v − (exp(γ) ⊙ k) S₀)：位置 i 读到的旧状态从块开始已经衰减了 "
            "exp(γ_i)，和输出里 (q ⊙ exp(γ)) S₀ 的道理一样。", chunked(decay_rhs=False)),
    Mistake("右边漏了 β（只在 A 里乘了 β）", "修正量满足 (I + A) δ = β ⊙ (v − (exp(γ) ⊙ k) S₀)：β 既在 A 的每一行，也乘在右边；"
            "写入强度 β_i 决定这个位置改写多少。", chunked(beta_in_rhs=False)),
    Mistake("块末的状态里，块开始时的状态没有乘 exp(γ_C)", "到块末，块开始时的状态衰减了整块的 exp(γ_C)："
            "S_C = exp(γ_C) S₀ + Σ_i exp(γ_C − γ_i) k_i δ_iᵀ，两项都要衰减。", chunked(decay_memory=False)),
    Mistake("块末更新状态时 k 乘的是 exp(γ_i − γ_C)（指数的符号反了）", "位置 i 写入的东西到块末衰减了 exp(γ_C − γ_i) ≤ 1："
            "γ_C 是到块末的累积和，比 γ_i 更负。", chunked(key_decay_inverted=True)),
    Mistake("γ 是整个序列的累积和，没有在每一块重新开始", "γ 是块内的累积和：每一块从 0 开始累加 g。整段的累积和里含着前面各块的衰减，"
            "它们在块开始时的状态里已经算过了，再乘一次就重复了。", chunked(gamma_over_sequence=True)),
    Mistake("忽略了传进来的 state", "state 不是 None 时，第一块从它开始，而不是从零开始：这样接着上一段算，和一次算完整段一样。",
            chunked(use_state=False)),
    Mistake("读块开始时的状态时 q 没有乘 exp(γ_i)", "从块开始到位置 i，状态已经衰减了 exp(γ_i)，γ_i 是块内 g 的累积和："
            "读旧状态用 (q_i exp(γ_i)) memory。", chunked(decay_query=False)),
    Mistake("块末更新状态时 k 没有乘 exp(γ_C − γ_i)", "位置 i 写入的 k_i δ_iᵀ 到块末还要再衰减 exp(γ_C − γ_i)："
            "memory ← exp(γ_C) memory + (k ⊙ exp(γ_C − γ))ᵀ δ。", chunked(decay_key=False)),
    Mistake("没有按块计算：每个位置都更新了一次状态", "结果和递推一样，但这是逐个位置的循环，T 个位置要走 T 步。分块的做法是：块内"
            "先用矩阵乘法和 UT 变换一次算出所有修正量 δ，再用一次矩阵乘法把整块写进状态，只在块与块之间循环。",
            error="PerPosition"),
)

EXERCISE = Exercise("chunked_gated_delta_rule", 5, chunked_gated_delta_rule, cases, MISTAKES, output_names=OUTPUT_NAMES,
                    call=call_chunkwise, works_in_float32=True)
