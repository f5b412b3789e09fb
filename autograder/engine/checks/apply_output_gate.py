"""Check of ``apply_output_gate(attn_out, gate)`` = ``attn_out * sigmoid(gate)``, elementwise."""
import torch

from autograder.engine.inputs.seeded import dtype_name, generator, randn
from autograder.engine.model import Exercise, Mistake, public
from course.protocols import Case
from solutions.output_gate import apply_output_gate

# The 书 / 她 toy of the notebook: two heads (pronoun, grammar) with two dims each.
HEAD_OUTPUTS = {"书": [[0.8, -0.3], [0.4, 0.9]], "她": [[1.2, 0.5], [0.3, -0.2]]}
GATE_SCORES = {"书": [[-4.5, -4.5], [2.0, 1.0]], "她": [[6.5, 5.5], [-1.0, -1.0]]}


def cases() -> list[Case]:
    found = [Case(f"「{word}」的玩具例子：两个头的输出 {HEAD_OUTPUTS[word]}，门分数 {GATE_SCORES[word]}",
                  (torch.tensor(HEAD_OUTPUTS[word]), torch.tensor(GATE_SCORES[word]))) for word in HEAD_OUTPUTS]
    gen = generator(52)
    for shape, dtype in [((2, 5, 4, 8), torch.float32), ((1, 3, 2, 16), torch.float64),
                         ((2, 4, 64), torch.bfloat16)]:
        found.append(Case(f"随机输出和门分数 {list(shape)}，{dtype_name(dtype)}",
                          (randn(gen, *shape, dtype=dtype), randn(gen, *shape, dtype=dtype, scale=4))))
    found.append(Case("门分数很大（±30）：门应是 0 或 1，不能溢出成 NaN",
                      (randn(gen, 2, 3, 4), randn(gen, 2, 3, 4, scale=30))))
    found.append(Case("门分数到了 ±100 以上（exp 在 float32 里超过 88 就是 inf）：门还是 0 或 1",
                      (randn(gen, 2, 4), torch.tensor([[120.0, -120.0, 95.0, -3.0], [0.5, 200.0, -95.0, 89.0]]))))
    return public(found, 0, 3, 4, 6)


MISTAKES = (
    Mistake("门分数没有过 sigmoid", "门是 sigmoid(gate)，把分数压到 0～1 之间再相乘。",
            lambda out, gate: out * gate),
    Mistake("用了 1 − sigmoid(gate)", "分数越大门越开：乘 sigmoid(gate)。",
            lambda out, gate: out * (1 - torch.sigmoid(gate))),
    Mistake("sigmoid 用在了注意力输出上", "sigmoid 只作用在门分数上：attn_out * sigmoid(gate)。",
            lambda out, gate: torch.sigmoid(out) * gate),
    Mistake("用了 softmax，不是逐元素的 sigmoid", "每个维度的门各自独立地开合：sigmoid(gate) 逐元素算，"
            "不像 softmax 那样让一行的门加起来等于 1。", lambda out, gate: out * torch.softmax(gate, dim=-1)),
    Mistake("门是加上去的，不是乘上去的", "门逐维相乘：attn_out * sigmoid(gate)。",
            lambda out, gate: out + torch.sigmoid(gate)),
    Mistake("乘的是 SiLU(gate) = gate·sigmoid(gate)，不是 sigmoid(gate)", "输出门是 sigmoid(gate)，值在 0～1 之间，只负责开合；"
            "gate·sigmoid(gate) 是 SwiGLU 前馈层里的 SiLU，它没有上限，不是这里的门。",
            lambda out, gate: out * torch.nn.functional.silu(gate)),
    Mistake("用了 tanh(gate)，不是 sigmoid(gate)", "tanh 的值在 −1～1 之间，分数为负时会把输出翻号；门要在 0～1 之间，"
            "只开合、不翻号：sigmoid(gate)。", lambda out, gate: out * torch.tanh(gate)),
    Mistake("sigmoid 包住了整个乘积：sigmoid(attn_out · gate)", "sigmoid 只作用在门分数上，过完再和注意力输出相乘："
            "attn_out * sigmoid(gate)。", lambda out, gate: torch.sigmoid(out * gate)),
    Mistake("每一行只用了一个门（门分数先取平均再过 sigmoid）", "门是逐元素的：每个维度有自己的门分数，"
            "sigmoid(gate) 和 attn_out 一样形状，逐元素相乘。",
            lambda out, gate: out * torch.sigmoid(gate.mean(dim=-1, keepdim=True))),
)

EXERCISE = Exercise("apply_output_gate", 2, apply_output_gate, cases, MISTAKES)
