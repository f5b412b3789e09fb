"""Check of ``delta_rule(q, k, v, beta, state=None) → (o, state)``: ``S_t = S_{t-1} + k_t (β_t (v_t − S_{t-1}ᵀ
k_t))ᵀ``, ``o_t = q_t S_t``, state ``[B, H, Dk, Dv]``; on a hand case that overwrites a key, seeded shapes, a
given state, a continuation from its own state and a long input (unit keys: the state stays bounded)."""
import torch

from autograder.engine.checks.linear_attention_recurrent import (
    GIVEN_STATE,
    LAYOUT,
    OUTPUT_NAMES,
    READ_AFTER_WRITE,
    rule_cases,
    rule_variant,
)
from autograder.engine.combined import variants
from autograder.engine.inputs import linear_attention as inputs
from autograder.engine.inputs.seeded import generator
from autograder.engine.model import Exercise, Mistake, public
from course.protocols import Case, call_rule
from solutions.gated_deltanet import delta_rule


def hand_case() -> Case:
    """Two writes to the key (1, 0) with β = 1, then one to (0, 1): the second overwrites the first."""
    k = torch.tensor([[1.0, 0.0], [1.0, 0.0], [0.0, 1.0]])
    v = torch.tensor([[2.0, 0.0], [0.0, 3.0], [1.0, 1.0]])
    q = torch.tensor([[1.0, 0.0], [1.0, 0.0], [1.0, 1.0]])
    beta = torch.tensor([1.0, 1.0, 0.5])
    return Case("小例子：同一个 key (1, 0) 先后写入 (2, 0) 和 (0, 3)（β = 1，第二次覆盖第一次），再以 β = 0.5 写入 key (0, 1)",
                (q[None, None], k[None, None], v[None, None], beta[None, None]))


def cases() -> list[Case]:
    return public([hand_case(), *rule_cases(generator(82), lambda gen, *shape, dtype: (inputs.beta(gen, *shape, dtype=dtype),))],
                  0, 2, 4, 5, 8)


@variants
def _delta(**how):
    wrong = rule_variant(**how)
    return lambda q, k, v, beta, state=None: wrong(q, k, v, beta=beta, state=state)


CORRECTION = "写进状态的是修正量 δ_t = β_t (v_t − Sᵀk_t)：β 乘的是整个括号。"
READ_AFTER_CORRECTION = READ_AFTER_WRITE.replace("k_t v_tᵀ", "修正量")
READ_WITH_KEY = ("修正量 δ_t = β_t (v_t − Sᵀk_t) 比的是状态在 k_t 这个 key 下已经存的值：用 k_t 去读（Sᵀk_t），"
                 "q_t 只在最后读输出 o_t = q_t S 时用。")
MISTAKES = (
    Mistake("β 只乘了 v（写的是 β·v − Sᵀk）", CORRECTION, _delta(beta_inside=False)),
    Mistake("写入的不是修正量（没有减去 Sᵀk，成了带 β 的线性注意力）", "delta rule 先读出状态对 k_t 已经给出的值 "
            "Sᵀk_t，只写入差值 β_t (v_t − Sᵀk_t)：这样同一个 key 再写一次会覆盖，而不是叠加。", _delta(correction=False)),
    Mistake("修正量的符号反了（写的是 β (Sᵀk − v)）", CORRECTION, _delta(sign=-1.0)),
    Mistake("修正量里读旧值时用了 q（应是 k）", READ_WITH_KEY, _delta(read_with="q")),
    Mistake("先读后写（o_t 用的是写入之前的状态）", READ_AFTER_CORRECTION, _delta(read_after_write=False)),
    Mistake("状态的布局转置了（[Dv, Dk]）", LAYOUT, _delta(transposed_state=True)),
    Mistake("忽略了传进来的 state", GIVEN_STATE, _delta(use_state=False)),
)

# The later exercises too: a delta rule may be written as the gated one with g = 0.
EXERCISE = Exercise("delta_rule", 3, delta_rule, cases, MISTAKES, output_names=OUTPUT_NAMES, call=call_rule,
                    works_in_float32=True, uses=("gated_delta_rule", "chunked_gated_delta_rule"))
