"""Check of ``gated_delta_rule(q, k, v, g, beta, state=None) → (o, state)``, as Hugging Face's
``torch_recurrent_gated_delta_rule`` (without its 1/√Dk): ``S ← exp(g_t) S``; ``δ = β_t (v_t − k_tᵀS)``;
``S ← S + k_t δᵀ``; ``o_t = q_t S``. On a hand case, seeded shapes, a given state, a continuation from its own
state and a long input."""
import torch

from autograder.engine.checks.delta_rule import CORRECTION, READ_AFTER_CORRECTION, READ_WITH_KEY
from autograder.engine.checks.linear_attention_recurrent import (
    GIVEN_STATE,
    LAYOUT,
    OUTPUT_NAMES,
    rule_cases,
    rule_variant,
)
from autograder.engine.combined import variants
from autograder.engine.inputs import linear_attention as inputs
from autograder.engine.inputs.seeded import generator
from autograder.engine.model import Exercise, Mistake, public
from course.protocols import Case, call_rule
from solutions.gated_deltanet import gated_delta_rule


def hand_case() -> Case:
    """One key written, then forgotten by half (g = ln 0.5) while another is written, from a given state."""
    k = torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 0.0]])
    v = torch.tensor([[2.0, 0.0], [0.0, 2.0], [1.0, 1.0]])
    q = torch.tensor([[1.0, 0.0], [1.0, 1.0], [1.0, 0.0]])
    g = torch.log(torch.tensor([1.0, 0.5, 0.5]))
    beta = torch.tensor([1.0, 1.0, 0.5])
    state = torch.tensor([[0.0, 1.0], [1.0, 0.0]])
    return Case("小例子：从 S = [[0, 1], [1, 0]] 开始，exp(g) = 1, 0.5, 0.5，β = 1, 1, 0.5，key 是 (1, 0)、(0, 1)、(1, 0)",
                (q[None, None], k[None, None], v[None, None], g[None, None], beta[None, None]),
                {"state": state[None, None]})


def _gates(gen, *shape, dtype):
    return inputs.decay(gen, *shape, dtype=dtype), inputs.beta(gen, *shape, dtype=dtype)


def cases() -> list[Case]:
    return public([hand_case(), *rule_cases(generator(83), _gates)], 0, 2, 4, 5, 8)


@variants
def gated(**how):
    """``rule_variant`` with the gated delta rule's signature."""
    wrong = rule_variant(**how)
    return lambda q, k, v, g, beta, state=None: wrong(q, k, v, g, beta, state)


ORDER = "Hugging Face 的顺序：先衰减 S ← exp(g_t)·S，再用衰减后的 S 读出 k_tᵀS、算修正量、写入，最后读 o_t = q_t S。"
MISTAKES = (
    Mistake("衰减放在了写入之后", ORDER, gated(decay_at="after_write")),
    Mistake("修正量里的 Sᵀk 是衰减之前读的", ORDER, gated(decay_at="after_read")),
    Mistake("衰减放在了每一步的最后（读出 o_t 之后）", ORDER + "放在最后，o_t 读的是还没衰减的状态，下一步又少衰减了一次。",
            gated(decay_at="end")),
    Mistake("修正量里读旧值时用了 q（应是 k）", READ_WITH_KEY, gated(read_with="q")),
    Mistake("每一步衰减了两次（读 Sᵀk 之前一次，写入之前又一次）", ORDER + "每一步只乘一次 exp(g_t)。", gated(decay_at="twice")),
    Mistake("衰减用的是累积和 exp(g_1 + … + g_t)，不是这一步的 exp(g_t)", "递推每一步只乘这一步的 exp(g_t)：之前各步的衰减"
            "已经乘进状态里了。累积和 γ_t 是分块形式里从块开始算的衰减，递推里用它就重复衰减了。", gated(cumulative=True)),
    Mistake("衰减后的状态只用来读 Sᵀk，状态本身没有衰减", "S ← exp(g_t)·S 要改写状态本身：之后的写入和读出 o_t 都用衰减后的 S，"
            "下一步也从它开始。" + ORDER, gated(decay_at="read_only")),
    Mistake("衰减乘的是 g 本身，不是 exp(g)", "g 是衰减的对数（g ≤ 0）：状态乘的是 exp(g_t)，在 0 和 1 之间。",
            gated(gate=lambda g: g)),
    Mistake("衰减乘的是 exp(−g)", "g ≤ 0 是衰减的对数：状态乘 exp(g_t) ≤ 1；exp(−g) > 1 会让状态越来越大。",
            gated(gate=lambda g: torch.exp(-g))),
    Mistake("没有衰减（g 没有用上）", "每一步先把状态乘 exp(g_t)：这就是 Gated DeltaNet 的「门」，学到的遗忘速度。",
            gated(gate=lambda g: torch.ones_like(g))),
    Mistake("β 只乘了 v（写的是 β·v − Sᵀk）", CORRECTION, gated(beta_inside=False)),
    Mistake("写入的不是修正量（没有减去 Sᵀk）", "delta rule 只写入差值 β_t (v_t − Sᵀk_t)，Sᵀk_t 用衰减后的 S 读。",
            gated(correction=False)),
    Mistake("先读后写（o_t 用的是写入之前的状态）", READ_AFTER_CORRECTION, gated(read_after_write=False)),
    Mistake("状态的布局转置了（[Dv, Dk]）", LAYOUT, gated(transposed_state=True)),
    Mistake("忽略了传进来的 state", GIVEN_STATE, gated(use_state=False)),
)

EXERCISE = Exercise("gated_delta_rule", 3, gated_delta_rule, cases, MISTAKES, output_names=OUTPUT_NAMES, call=call_rule,
                    works_in_float32=True, uses=("chunked_gated_delta_rule",))
