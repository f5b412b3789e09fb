"""Check of ``gate_gradient(x, w, r, o, t)``: the hand-derived gradient of the gate's squared error."""
import torch

from autograder.engine.inputs.seeded import dtype_name, generator, randn
from autograder.engine.model import Exercise, Mistake, public
from course.protocols import Case
from solutions.output_gate import gate_gradient


def _sgd_toy(w):
    """The notebook's two tokens: 问号 (the head has the answer) and 数字 (the head only adds noise)."""
    x = torch.eye(2)  # one feature per token
    residual, head_output = torch.tensor([0.0, 1.0]), torch.tensor([1.0, 0.8])
    return x, torch.tensor(w), residual, head_output, torch.ones(2)


def cases() -> list[Case]:
    gen = generator(53)
    found = [Case("问号 / 数字的例子，初始 w = [0.01, −0.02]（第 0 步的梯度约为 [−0.124, +0.079]）",
                  _sgd_toy([0.01, -0.02])),
             Case("同一个例子，w = [2.835, −2.568]（200 步之后，门接近 0 和 1，梯度变得很小）",
                  _sgd_toy([2.835, -2.568]))]
    for tokens, features, dtype in [(5, 3, torch.float32), (7, 4, torch.float64), (1, 6, torch.float32)]:
        found.append(Case(f"随机 {tokens} 个 token、{features} 个特征，{dtype_name(dtype)}",
                          (randn(gen, tokens, features, dtype=dtype), randn(gen, features, dtype=dtype),
                           randn(gen, tokens, dtype=dtype), randn(gen, tokens, dtype=dtype),
                           randn(gen, tokens, dtype=dtype))))
    return public(found, 0, 3)


def _parts(x, w, r, o, t):
    g = torch.sigmoid(x @ w)
    return g, r + g * o - t


MISTAKES = (
    Mistake("漏了 sigmoid 的导数 g(1 − g)", "链式法则要乘上 sigmoid 的斜率：dg/dz = g·(1 − g)。",
            lambda x, w, r, o, t: (lambda g, err: (err * o) @ x)(*_parts(x, w, r, o, t))),
    Mistake("漏了头的输出 o", "y = r + g·o，所以 dy/dg = o。",
            lambda x, w, r, o, t: (lambda g, err: (err * g * (1 - g)) @ x)(*_parts(x, w, r, o, t))),
    Mistake("符号反了：用了 t − y", "损失是 (y − t)²/2，对 y 的导数是 y − t。",
            lambda x, w, r, o, t: -gate_gradient(x, w, r, o, t)),
    Mistake("y 里漏了残差 r", "门控之后的输出是 y = r + g·o：残差 r 也在里面，误差是 y − t = r + g·o − t。",
            lambda x, w, r, o, t: gate_gradient(x, w, torch.zeros_like(r), o, t)),
    Mistake("sigmoid 的斜率写成了 g·(1 − z)，z = x @ w 是过 sigmoid 之前的分数",
            "sigmoid 的导数用它自己的输出表示：dg/dz = g·(1 − g)，g = sigmoid(z)。",
            lambda x, w, r, o, t: (lambda g, err: (err * o * g * (1 - x @ w)) @ x)(*_parts(x, w, r, o, t))),
    Mistake("梯度多乘了 2", "损失是 (y − t)²/2，对 y 的导数是 y − t，不是 2(y − t)：1/2 正是为了消掉这个 2。",
            lambda x, w, r, o, t: 2 * gate_gradient(x, w, r, o, t)),
    Mistake("没有对 token 求和", "w 由所有 token 共用，梯度是每个 token 的贡献之和，形状是 [F]。",
            lambda x, w, r, o, t: (lambda g, err: (err * o * g * (1 - g))[:, None] * x)(*_parts(x, w, r, o, t))),
    Mistake("sigmoid 的斜率写成了 tanh 的 1 − g²", "sigmoid 的导数是 g·(1 − g)；1 − g² 是 tanh 的导数。",
            lambda x, w, r, o, t: (lambda g, err: (err * o * (1 - g * g)) @ x)(*_parts(x, w, r, o, t))),
    Mistake("导数里多了 1/2：dL/dy 写成了 (y − t)/2", "损失是 (y − t)²/2，求导时指数 2 落下来，正好和 1/2 抵消："
            "dL/dy = y − t。", lambda x, w, r, o, t: gate_gradient(x, w, r, o, t) / 2),
    Mistake("对 token 取了平均，不是求和", "损失是各 token 平方误差的和（不是平均），梯度也是各 token 贡献之和："
            "不要除以 token 数 N。", lambda x, w, r, o, t: gate_gradient(x, w, r, o, t) / x.shape[0]),
)

# A student may make y with their own apply_output_gate: a broken one is named before this exercise is diagnosed.
EXERCISE = Exercise("gate_gradient", 2, gate_gradient, cases, MISTAKES, uses=("apply_output_gate",))
