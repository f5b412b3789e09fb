"""Check of ``linear_attention_recurrent(q, k, v, state=None) → (o, state)``: causal linear attention as an RNN,
``S_t = S_{t-1} + k_t v_tᵀ``, ``o_t = q_t S_t``, state ``[B, H, Dk, Dv]``; equal to the parallel form, from a
given state, continued from its own state, and on a long input (the state does not grow)."""
import torch

from autograder.engine.checks.linear_attention import hand_case
from autograder.engine.combined import variants
from autograder.engine.inputs import linear_attention as inputs
from autograder.engine.inputs.seeded import generator
from autograder.engine.model import Exercise, Mistake, public
from course.protocols import Case, call_rule
from solutions.gated_deltanet import linear_attention_recurrent

OUTPUT_NAMES = ("输出 o", "最后的状态 state")


def rule_cases(gen, rule_inputs) -> list[Case]:
    """The cases every recurrent rule of 08 is graded on (``rule_inputs(gen, B, H, T, Dk, Dv, dtype)`` gives a
    rule's arguments after q, k, v: none, β, or g and β): seeded shapes from T = 1 to a long input, Dk ≠ Dv,
    three dtypes, a given initial state and a continuation from the rule's own state."""
    found = []

    def case(label, shape, dtype=torch.float32, **kwargs):
        q, k, v = inputs.qkv(gen, *shape, dtype=dtype)
        args = (q, k, v, *rule_inputs(gen, *shape[:3], dtype=dtype))
        found.append(Case(f"{label}{inputs.describe(q, v)}", args, kwargs))

    case("", (2, 3, 6, 4, 4))
    case("Dk ≠ Dv，", (1, 2, 7, 4, 6))
    case("只有一个位置，", (2, 2, 1, 8, 3))
    batch, heads, dk, dv = 2, 2, 4, 6
    case("从给定的 state 开始，", (batch, heads, 5, dk, dv), state=inputs.state(gen, batch, heads, dk, dv))
    case("先算前 3 个位置，再从返回的 state 接着算剩下的，", (1, 2, 8, 4, 5), split=3)
    case("从给定的 state 开始，只有一个位置（解码一步），", (1, 2, 1, 4, 5), state=inputs.state(gen, 1, 2, 4, 5))
    case("", (1, 2, 9, 6, 5), torch.float64, split=4)
    case("", (2, 2, 8, 8, 8), torch.bfloat16)
    case("长输入（状态始终是 [B, H, Dk, Dv]），", (1, 1, 200, 8, 4))
    return found


def cases() -> list[Case]:
    return public([hand_case(), *rule_cases(generator(81), lambda gen, *shape, dtype: ())], 0, 2, 4, 5, 8)


def rule_variant(*, gate=torch.exp, decay_at="first", correction=True, beta_inside=True, read_after_write=True,
                 use_state=True, transposed_state=False, sign=1.0, read_with="k", cumulative=False):
    """A recurrent rule ``(q, k, v, g=None, beta=None, state=None) → (o, state)`` written out step by step,
    right by default (the gated delta rule; without g no decay, without beta β = 1, without ``correction``
    plain linear attention), with one step changed: ``gate`` turns g into the decay factor; ``decay_at`` is
    "first" (before the read), "after_read" (between the read and the write), "after_write" (before ``o_t`` is
    read), "end" (after it), "twice" (before the read and again before the write) or "read_only" (the decayed
    state only read, never kept); ``cumulative`` decays by ``exp(g_1 + … + g_t)``; ``beta_inside`` False writes ``β v − Sᵀk``; ``read_after_write`` False reads ``o_t``
    before the write; ``use_state`` False ignores a given state; ``transposed_state`` returns ``[B, H, Dv, Dk]``;
    ``sign`` −1 writes ``Sᵀk − v``; ``read_with`` "q" reads the stored value ``Sᵀq`` instead of ``Sᵀk``."""
    def rule(q, k, v, g=None, beta=None, state=None):
        memory = torch.zeros(*q.shape[:-2], q.shape[-1], v.shape[-1], dtype=q.dtype)
        if state is not None and use_state:
            # Code that keeps the state as [Dv, Dk] reads a given state in that layout too.
            if transposed_state and state.shape[-2:] != (v.shape[-1], q.shape[-1]):
                raise ValueError("the given state is not [Dv, Dk]")
            memory = (state.transpose(-2, -1) if transposed_state else state).to(q.dtype)
        out = []
        gs = None if g is None else g.cumsum(-1) if cumulative else g
        for t in range(q.shape[-2]):
            factor = 1.0 if g is None else gate(gs[..., t, None, None])
            b = 1.0 if beta is None else beta[..., t, None]
            memory = factor * memory if decay_at in ("first", "twice") else memory
            k_t = k[..., t, :]
            read_from = factor * memory if decay_at == "read_only" else memory
            read = ((k_t if read_with == "k" else q[..., t, :])[..., :, None] * read_from).sum(-2)
            memory = factor * memory if decay_at in ("after_read", "twice") else memory
            if not correction:
                delta = b * v[..., t, :]
            elif beta_inside:
                delta = sign * (v[..., t, :] - read) * b
            else:
                delta = b * v[..., t, :] - read
            before = (q[..., t, :, None] * memory).sum(-2)
            memory = memory + k_t[..., :, None] * delta[..., None, :]
            memory = factor * memory if decay_at == "after_write" else memory
            out.append((q[..., t, :, None] * memory).sum(-2) if read_after_write else before)
            memory = factor * memory if decay_at == "end" else memory
        return torch.stack(out, dim=-2), (memory.transpose(-2, -1) if transposed_state else memory)
    return rule


@variants
def _linear(**how):
    wrong = rule_variant(correction=False, **how)
    return lambda q, k, v, state=None: wrong(q, k, v, state=state)


LAYOUT = ("状态的布局是 [B, H, Dk, Dv]：memory = Σ k_j v_jᵀ（k 在前），读出 o_t = q_t memory（q_t 是 [Dk] 的行向量），"
          "和 Hugging Face 的 torch_recurrent_gated_delta_rule 一样。")
READ_AFTER_WRITE = "先把 k_t v_tᵀ 写进状态，再读 o_t = q_t S_t：位置 t 要看到它自己。"
GIVEN_STATE = "state 不是 None 时从它开始（不要从零开始）：这样接着上一段算，和一次算完整段一样。"

MISTAKES = (
    Mistake("状态的布局转置了（[Dv, Dk]）", LAYOUT, _linear(transposed_state=True)),
    Mistake("先读后写（o_t 用的是写入 k_t v_tᵀ 之前的状态）", READ_AFTER_WRITE, _linear(read_after_write=False)),
    Mistake("忽略了传进来的 state", GIVEN_STATE, _linear(use_state=False)),
)

EXERCISE = Exercise("linear_attention_recurrent", 2, linear_attention_recurrent, cases, MISTAKES,
                    output_names=OUTPUT_NAMES, call=call_rule, works_in_float32=True)
