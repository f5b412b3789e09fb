"""Check of ``split_query_gate(q_out, num_heads, head_dim)``: ``[B, T, H·2D] → (query, gate)``, each
``[B, T, H, D]``, with each head's ``2D`` outputs laid out as ``[query_h | gate_h]``."""
import torch

from autograder.engine.inputs.seeded import dtype_name, generator, randn
from autograder.engine.model import Exercise, Mistake, public
from course.protocols import Case
from solutions.output_gate import split_query_gate


def cases() -> list[Case]:
    # Readable numbers: head h, part p (0 = query, 1 = gate), dim d is 100·h + 10·p + d.
    toy = torch.tensor([[[100.0 * h + 10 * p + d for h in range(2) for p in range(2) for d in range(3)]]])
    gen = generator(51)
    found = [Case("可读的小例子：2 个头、head_dim 3，数值 = 100·头 + 10·(0 是 query，1 是门) + 维", (toy, 2, 3))]
    for batch, seq, heads, dim, dtype in [(2, 5, 4, 8, torch.float32), (1, 1, 3, 4, torch.float64),
                                          (1, 6, 8, 256, torch.float32), (2, 3, 2, 16, torch.bfloat16)]:
        q_out = randn(gen, batch, seq, heads * 2 * dim, dtype=dtype)
        found.append(Case(f"随机 q_out [{batch}, {seq}, {heads}·2·{dim}]，num_heads={heads}，head_dim={dim}，"
                          f"{dtype_name(dtype)}", (q_out, heads, dim)))
    return public(found, 0, 2, 4)


def _half_split(q_out, num_heads, head_dim):
    query, gate = q_out.chunk(2, dim=-1)
    return query.unflatten(-1, (num_heads, head_dim)), gate.unflatten(-1, (num_heads, head_dim))


MISTAKES = (
    Mistake("按整个投影的前一半 / 后一半切开了", "Qwen3.5 是按头交错排的：先 view 成 [B, T, H, 2D]，"
            "每个头的 2D 个输出里前 D 个是 query、后 D 个是门。", _half_split),
    Mistake("query 和门弄反了", "每个头的 2D 个输出里，前一半是 query，后一半才是门。",
            lambda q, h, d: split_query_gate(q, h, d)[::-1]),
    Mistake("返回的是 [B, H, T, D]", "这个练习返回 [B, T, H, D]，转置留给后面的注意力计算。",
            lambda q, h, d: tuple(t.transpose(1, 2) for t in split_query_gate(q, h, d))),
    Mistake("没有拆出头这一维", "返回 [B, T, H, D]，不是 [B, T, H·D]。",
            lambda q, h, d: tuple(t.flatten(-2) for t in split_query_gate(q, h, d))),
    Mistake("返回的门已经过了 sigmoid", "这个函数只负责切开：返回原始的门分数，sigmoid 留给 apply_output_gate。",
            lambda q, h, d: (lambda query, gate: (query, torch.sigmoid(gate)))(*split_query_gate(q, h, d))),
    Mistake("每个头的 2D 个数按奇偶交错拆开了", "每个头的 2D 个输出是两段相连的 [query_h | gate_h]：前 D 个是 query，"
            "后 D 个是门，不是偶数位给 query、奇数位给门。",
            lambda q, h, d: (lambda t: (t[..., 0], t[..., 1]))(q.unflatten(-1, (h, d, 2)))),
)

EXERCISE = Exercise("split_query_gate", 2, split_query_gate, cases, MISTAKES, output_names=("query", "gate"))
