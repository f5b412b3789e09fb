"""Probes: small inputs of our own on which a mistake should behave differently from correct code.

``PROBES[assignment][exercise]`` is a list of functions ``probe(namespace) -> value``; the verifier runs each
on the correct and on the mistaken namespace and compares the values (an exception counts as a value).
Modules get deterministic weights by parameter name (``fill``), so the order in which a student builds
layers does not matter.
"""
import math
import zlib
from types import SimpleNamespace

import torch
from torch import nn

BF16 = torch.bfloat16
PROBES: dict[str, dict[str, list]] = {}


def randn(*shape, seed=0, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g).to(dtype)


def fill(module: nn.Module, norm_offset: float = 0.0) -> nn.Module:
    """Deterministic weights by name: linear layers ~ N(0, 1/fan_in), 1-D weights offset + 0.3 N(0, 1)."""
    with torch.no_grad():
        for name, p in module.named_parameters():
            g = torch.Generator().manual_seed(zlib.crc32(f"{name}{tuple(p.shape)}".encode()))
            if p.dim() >= 2:
                p.copy_(torch.randn(p.shape, generator=g) / math.sqrt(p.shape[-1]))
            else:
                p.copy_(norm_offset + 0.3 * torch.randn(p.shape, generator=g))
    return module


def shapes(module: nn.Module) -> dict:
    return {name: tuple(t.shape) for name, t in module.state_dict().items()}


def fresh_state(module: nn.Module) -> dict:
    """The initial values of 1-D parameters (norm weights) and every shape."""
    return {name: (t.clone() if t.dim() == 1 else tuple(t.shape)) for name, t in module.state_dict().items()}


TOY_Q = torch.tensor([[0.0, 0.0], [3.0, 0.0], [0.0, 4.0]])
TOY_K = torch.tensor([[1.0, 0.0], [0.0, 1.0], [0.5, 0.5]])
TOY_V = torch.tensor([[2.0, 0.0], [0.0, 2.0], [1.0, 1.0]])
LEFT_PAD = torch.tensor([[1, 1, 1, 1, 1, 1], [0, 0, 1, 1, 1, 1]])


# ---------------------------------------------------------------- 01
def _p01():
    def scores(ns):
        f = ns["attention_scores"]
        return [f(TOY_Q, TOY_K), f(randn(2, 4, 5, 8), randn(2, 4, 7, 8, seed=1)),
                f(randn(3, 6, 16, dtype=torch.float64), randn(3, 6, 16, seed=2, dtype=torch.float64)),
                f(TOY_Q.to(BF16), TOY_K.to(BF16))]

    def causal(ns):
        f = ns["causal_mask"]
        return [f(3), f(1, 5), f(2, 5), f(4), f(3, 7), f(1)]

    def window(ns):
        f = ns["causal_mask"]
        return [f(5, window=2), f(1, 6, window=3), f(4, window=4), f(3, 8, window=2), f(6, window=1),
                f(2, 2, window=5), f(4, 9, window=3), f(1, window=1), f(7, window=3), f(1, 10, window=4)]

    def padding(ns):
        f = ns["padding_mask"]
        am = torch.tensor([[1, 1, 1, 1], [1, 1, 0, 0]])
        return [f(am), f(am.bool()), f(torch.tensor([[0, 1, 1], [1, 1, 1], [0, 0, 1]]))]

    def softmax(ns):
        f = ns["masked_softmax"]
        toy = torch.tensor([0.0, 2.83, 1.41])
        big = torch.tensor([[1e4, -1e4, 0.0]])
        s = randn(2, 3, 4, 5)
        mask = (torch.tril(torch.ones(4, 5, dtype=torch.bool), 1) & torch.tensor([True, True, False, True, True]))
        s_copy = s.clone()
        out = [f(torch.stack([toy, torch.zeros(3)])), f(toy, torch.tensor([True, True, False])),
               f(toy, torch.tensor([False, False, False])), f(big), f(big, torch.tensor([[True, True, False]])),
               f(s, mask), f(toy.to(BF16), torch.tensor([True, False, True])), f(toy.to(BF16)),
               f(randn(4, 5), torch.ones(2, 1, 4, 5, dtype=torch.bool)),
               f(randn(3, 4, dtype=torch.float16), torch.tensor([True, False, True, False]))]
        return out + [s, s_copy]

    def attn(ns):
        def f(*args):
            out, weights = ns["attention"](*args)  # unpacked as every caller does
            return out, weights
        lower = torch.tril(torch.ones(3, 3, dtype=torch.bool))
        pad = torch.tensor([[0, 0, 1, 1, 1, 1], [1, 1, 1, 1, 1, 1]]).bool()[:, None, None, :]
        mask = pad & torch.tril(torch.ones(6, 6, dtype=torch.bool))
        return [f(TOY_Q, TOY_K, TOY_V, lower), f(TOY_Q, TOY_K, TOY_V),
                f(randn(2, 3, 4, 8), randn(2, 3, 6, 8, seed=1), randn(2, 3, 6, 5, seed=2)),
                f(randn(2, 2, 6, 8), randn(2, 2, 6, 8, seed=1), randn(2, 2, 6, 8, seed=2), mask),
                f(randn(1, 2, 4, 4, dtype=BF16), randn(1, 2, 4, 4, seed=1, dtype=BF16),
                  randn(1, 2, 4, 4, seed=2, dtype=BF16), torch.tril(torch.ones(4, 4, dtype=torch.bool))),
                f(randn(3, 8), randn(5, 8, seed=1), randn(5, 2, seed=2), torch.tril(torch.ones(3, 5, dtype=torch.bool), 2))]

    def tril(q_len, k_len):
        return torch.tril(torch.ones(q_len, k_len, dtype=torch.bool), k_len - q_len)

    def online(ns):
        f = ns["online_softmax_attention"]
        toy = (TOY_Q.clone(), TOY_K.clone(), TOY_V.clone())
        out = [f(*toy, tril(3, 3), block_size=size) for size in (1, 2, 3, 16)]
        out.append(f(*toy))  # no mask, default block_size
        growing = randn(2, 2, 37, 8, seed=3) * torch.linspace(0.5, 4.0, 37)[:, None]  # later blocks score higher
        q, v = randn(2, 2, 5, 8, seed=4), randn(2, 2, 37, 6, seed=5)
        out += [f(q, growing, v, tril(5, 37), block_size=8), f(q, growing, v, block_size=5),
                f(q * 1e3, growing, v, tril(5, 37), block_size=8),  # scores of thousands, row maxima far apart
                f(q, growing, v, torch.tensor([True, False, True, True, False])[:, None], block_size=8),
                f(q, growing, v, tril(5, 37), block_size=64)]  # one block longer than Tk
        # left padding longer than a block: fully masked rows, and rows whose first blocks are all masked
        pad = torch.tensor([[0] * 5 + [1] * 7, [1] * 12]).bool()[:, None, None, :]
        out.append(f(randn(2, 2, 12, 4, seed=6), randn(2, 2, 12, 4, seed=7), randn(2, 2, 12, 3, seed=8),
                     pad & tril(12, 12), block_size=3))
        # every visible score far below zero
        k_pos = randn(1, 10, 4, seed=9).abs() + 1.0
        q_neg = -100.0 * (randn(1, 3, 4, seed=10).abs() + 1.0)
        out.append(f(q_neg, k_pos, randn(1, 10, 2, seed=11), block_size=4))
        out.append(f(randn(3, 4, dtype=BF16), randn(9, 4, seed=1, dtype=BF16), randn(9, 5, seed=2, dtype=BF16),
                     tril(3, 9), block_size=4))
        out.append(f(randn(2, 6, 16, dtype=torch.float64), randn(2, 11, 16, seed=1, dtype=torch.float64),
                     randn(2, 11, 16, seed=2, dtype=torch.float64), block_size=4))
        out.append(f(randn(2, 4, 8), randn(2, 1, 8, seed=1), randn(2, 1, 3, seed=2), block_size=4))  # Tk = 1
        return out

    from torch.overrides import TorchFunctionMode

    class WidestScores(TorchFunctionMode):
        """Records the widest floating-point result with at most `rows` rows in its second-to-last dim (the
        scores of all the queries, or of a block of them), but for `head_dim` rows (kᵀ)."""
        def __init__(self, rows, head_dim):
            super().__init__()
            self.rows, self.head_dim, self.widest = rows, head_dim, 0

        def __torch_function__(self, func, types, args=(), kwargs=None):
            result = func(*args, **(kwargs or {}))
            for t in result if isinstance(result, (tuple, list)) else (result,):
                if isinstance(t, torch.Tensor) and t.is_floating_point() and t.dim() >= 2 \
                        and self.head_dim != t.shape[-2] <= self.rows:
                    self.widest = max(self.widest, t.shape[-1])
            return result

    def blocks(ns):
        f = ns["online_softmax_attention"]
        q, k, v = randn(2, 6, 4, seed=12), randn(2, 23, 4, seed=13), randn(2, 23, 3, seed=14)
        with WidestScores(6, head_dim=4) as watch:
            got = f(q, k, v, tril(6, 23), block_size=5)
        return [got, watch.widest > 5]

    def untouched(ns):
        f = ns["online_softmax_attention"]
        inputs = [randn(1, 2, 4, 8, seed=15), randn(1, 2, 9, 8, seed=16), randn(1, 2, 9, 8, seed=17), tril(4, 9)]
        copies = [t.clone() for t in inputs]
        got = f(*inputs, block_size=4)
        return [got, [torch.equal(a, b) for a, b in zip(inputs, copies)]]

    PROBES["01_attention_basics"] = {"attention_scores": [scores], "causal_mask": [causal, window],
                                     "padding_mask": [padding], "masked_softmax": [softmax], "attention": [attn],
                                     "online_softmax_attention": [online, blocks, untouched]}


_p01()


# ---------------------------------------------------------------- 02
def _p02():
    def split(ns):
        f = ns["split_heads"]
        return [f(torch.arange(12.0).reshape(1, 3, 4), 2), f(randn(2, 5, 512), 8), f(randn(3, 4, 12), 3),
                f(randn(2, 6, 8), 1), f(randn(1, 2, 128), 2)]

    def merge(ns):
        f = ns["merge_heads"]
        return [f(torch.arange(12.0).reshape(1, 2, 3, 2)), f(randn(2, 8, 5, 64)), f(randn(3, 3, 4, 4)),
                f(randn(2, 1, 6, 8))]

    def mha(ns):
        cls = ns["MultiHeadAttention"]
        torch.manual_seed(0)
        m = fill(cls(24, 3))
        x = randn(2, 6, 24)
        out = [shapes(m)]
        with torch.no_grad():
            out += [m(x).float(), m(x, causal=False), m(x, attention_mask=LEFT_PAD), m(x, attention_mask=LEFT_PAD, causal=False),
                    m(x[:1, :1])]
            m3 = fill(cls(16, 4))
            out += [m3(randn(3, 5, 16, seed=3), attention_mask=torch.tensor([[1] * 5, [1, 1, 1, 0, 0], [0, 1, 1, 1, 1]]))]
        return out

    PROBES["02_multi_head"] = {"split_heads": [split], "merge_heads": [merge], "MultiHeadAttention": [mha]}


_p02()


# ---------------------------------------------------------------- 03
def decode_in_chunks(m, x, chunks, cache, attention_mask=None):
    """Run module m over x [B, T, hidden] in the given (start, end) chunks with one cache; outputs and lens."""
    outs, lens = [], []
    for start, end in chunks:
        am = None if attention_mask is None else attention_mask[:, :end]
        out, returned = m(x[:, start:end], attention_mask=am, cache=cache)
        outs.append(out)
        lens.append(len(cache))
        assert returned is cache, "the cache passed in must come back"
    return torch.cat(outs, dim=1), lens


def _p03():
    def cache(ns):
        c = ns["KVCache"]()
        out = [len(c)]
        k1, v1 = randn(2, 2, 3, 4), randn(2, 2, 3, 4, seed=1)
        out += list(c.update(k1, v1)) + [len(c)]
        out += list(c.update(randn(2, 2, 1, 4, seed=2), randn(2, 2, 1, 4, seed=3))) + [len(c)]
        out += list(c.update(randn(2, 2, 2, 4, seed=4), randn(2, 2, 2, 4, seed=5))) + [len(c)]
        other = ns["KVCache"]()
        out += [len(other)] + list(other.update(randn(1, 3, 2, 5, seed=6), randn(1, 3, 2, 5, seed=7))) + [len(other)]
        return out

    def repeat(ns):
        f = ns["repeat_kv"]
        return [f(torch.arange(2.0)[None, :, None, None], 4), f(randn(2, 2, 5, 4), 3), f(randn(2, 2, 5, 4), 1),
                f(randn(1, 1, 3, 2), 4), f(randn(1, 3, 2, 2), 2)]

    def gqa(ns):
        cls, cache_cls = ns["GroupedQueryAttention"], ns["KVCache"]
        out = []
        m = fill(cls(32, 8, 2))
        out.append(shapes(m))
        out.append(shapes(cls(32, 4, 2, head_dim=16)))
        x = randn(2, 6, 32)
        with torch.no_grad():
            whole, returned = m(x)
            out += [whole, returned]
            out += [m(x, attention_mask=LEFT_PAD)[0]]
            steps, lens = decode_in_chunks(m, x, [(0, 3), (3, 4), (4, 6)], cache_cls())
            out += [steps, lens]
            c2 = cache_cls()
            steps, lens = decode_in_chunks(m, x, [(0, 4), (4, 5), (5, 6)], c2, attention_mask=LEFT_PAD)
            held_k, held_v = c2.update(torch.zeros(2, 2, 0, 4), torch.zeros(2, 2, 0, 4))
            out += [steps, lens, held_k, held_v]
            for kv in (8, 1):
                out.append(fill(cls(32, 8, kv))(x)[0])
            m16 = fill(cls(24, 4, 2, head_dim=16))
            out.append(m16(randn(3, 5, 24, seed=9))[0])
        return out

    def kv_bytes(ns):
        f = ns["kv_cache_bytes"]
        return [f(1, 1, 6, 2, 256, 2), f(1, 1, 1, 8, 32, 1), f(3, 5, 7, 2, 16, 4)]

    def flops(ns):
        f = ns["attention_flops"]
        return [f(1, 1, 1, 4, 1, 1, 4),                    # one token, one head: 144
                f(1, 1, 100, 1024, 8, 2, 256),              # Qwen3.5-sized decode step, hidden != H * D
                f(1, 1, 100, 1024, 8, 8, 256),              # the same as MHA
                f(8, 1, 4096, 1024, 8, 2, 256),             # batched decode on a long cache
                f(2, 3, 10, 64, 8, 2, 16),                  # a chunk after cached positions
                f(3, 7, 7, 48, 6, 3, 8),                    # prefill, hidden == H * D
                f(2, 4, 9, 40, 4, 1, 12),                   # MQA chunk, hidden != H * D
                f(batch=2, q_len=1, k_len=33, hidden_size=96, num_heads=12, num_kv_heads=4, head_dim=8),
                f(1001, 1000001, 1000001, 576, 9, 3, 64),   # past 2**53
                f(4096, 2**20, 2**20, 8192, 64, 8, 128)]    # past 2**63

    PROBES["03_gqa_kv_cache"] = {"KVCache": [cache], "repeat_kv": [repeat], "GroupedQueryAttention": [gqa],
                                 "kv_cache_bytes": [kv_bytes], "attention_flops": [flops]}


_p03()


# ---------------------------------------------------------------- 04
def rope_table(positions, dim, theta):
    """The course's cos/sin tables, computed here so that probes of apply_rope do not depend on the student."""
    inv = theta ** (-torch.arange(0, dim, 2, dtype=torch.float64) / dim)
    angles = torch.outer(positions.double(), inv)
    angles = torch.cat([angles, angles], dim=-1)
    return angles.cos().float(), angles.sin().float()


def mla_config(q_lora_rank=None, nope=4, rope=4, v=6):
    return SimpleNamespace(hidden_size=32, num_attention_heads=4, q_lora_rank=q_lora_rank, kv_lora_rank=8,
                           qk_nope_head_dim=nope, qk_rope_head_dim=rope, v_head_dim=v, rope_theta=10_000.0,
                           rms_norm_eps=1e-6)


def _p04():
    def cos_sin(ns):
        f = ns["rope_cos_sin"]
        return [f(torch.arange(3), 4, 100.0), f(torch.tensor([7, 8]), 4, 100.0), f(torch.arange(5), 16, 1e4),
                f(torch.tensor([3, 4, 5]), 8, 1e7)]

    def rope(ns):
        f = ns["apply_rope"]
        c2, s2 = rope_table(torch.arange(2), 4, 100.0)
        c5, s5 = rope_table(torch.arange(5), 16, 1e4)
        c7, s7 = rope_table(torch.arange(4, 7), 8, 1e4)
        x4 = randn(2, 3, 5, 16)
        x4_before = x4.clone()
        out = [f(torch.tensor([[1.0, 0, 0, 0], [1.0, 0, 0, 0]]), c2, s2), f(x4, c5, s5), x4, x4_before,
               f(x4_before.to(BF16), c5, s5), f(randn(2, 3, 8, seed=3), c7, s7)]
        return out

    def latent_cache(ns):
        c = ns["LatentKVCache"]()
        out = [len(c)]
        out += list(c.update(randn(2, 3, 8), randn(2, 3, 4, seed=1))) + [len(c)]
        out += list(c.update(randn(2, 1, 8, seed=2), randn(2, 1, 4, seed=3))) + [len(c)]
        out += list(c.update(randn(2, 2, 8, seed=4), randn(2, 2, 4, seed=5))) + [len(c)]
        return out

    def build(ns, config):
        m = ns["MultiHeadLatentAttention"](config)
        return m, fill(m, norm_offset=1.0)

    def mla(ns):
        out = []
        for config in (mla_config(), mla_config(12, nope=6, rope=4, v=6)):
            fresh, m = ns["MultiHeadLatentAttention"](config), None
            out.append(fresh_state(fresh))
            _, m = build(ns, config)
            x = randn(2, 6, 32)
            with torch.no_grad():
                whole, returned = m(x)
                out += [whole, returned, m(x, attention_mask=LEFT_PAD)[0]]
                cache = ns["LatentKVCache"]()
                steps, lens = decode_in_chunks(m, x, [(0, 3), (3, 4), (4, 6)], cache)
                held = cache.update(torch.zeros(2, 0, 8), torch.zeros(2, 0, config.qk_rope_head_dim))
                out += [steps, lens, held[0], held[1]]
                out.append(m.to(BF16)(x.to(BF16))[0])
        return out

    def absorbed(ns):
        out = []
        for config in (mla_config(12, nope=6, rope=4, v=6), mla_config()):
            _, m = build(ns, config)
            x = randn(2, 6, 32, seed=5)
            with torch.no_grad():
                whole, returned = m.forward_absorbed(x)
                out += [whole, returned, m.forward_absorbed(x, attention_mask=LEFT_PAD)[0]]
                cache = ns["LatentKVCache"]()
                pieces = []
                for start, end in [(0, 4), (4, 5), (5, 6)]:
                    pieces.append(m.forward_absorbed(x[:, start:end], cache=cache)[0])
                held = cache.update(torch.zeros(2, 0, 8), torch.zeros(2, 0, config.qk_rope_head_dim))
                out += [torch.cat(pieces, dim=1), len(cache), held[0], held[1]]
                out.append(m.to(BF16).forward_absorbed(x.to(BF16))[0])
        return out

    def mla_bytes(ns):
        f = ns["mla_cache_bytes"]
        return [f(1, 1, 1, 64, 26, 1), f(1, 1, 1, 512, 64, 1), f(2, 3, 5, 16, 8, 2)]

    PROBES["04_rope_mla"] = {"rope_cos_sin": [cos_sin], "apply_rope": [rope], "LatentKVCache": [latent_cache],
                             "MultiHeadLatentAttention": [mla], "forward_absorbed": [absorbed],
                             "mla_cache_bytes": [mla_bytes]}


_p04()


# ---------------------------------------------------------------- 05
def _p05():
    def split(ns):
        f = ns["split_query_gate"]
        out = []
        for args in [(torch.arange(12.0).reshape(1, 1, 12), 2, 3), (randn(2, 5, 64), 4, 8), (randn(3, 2, 24), 3, 4),
                     (randn(2, 4, 16, dtype=BF16), 1, 8)]:
            query, gate = f(*args)
            out += [query, gate]
        return out

    def gate(ns):
        f = ns["apply_output_gate"]
        a = randn(2, 3, 4, 8)
        a_before = a.clone()
        out = [f(torch.tensor([[0.8, -0.3], [0.4, 0.9]]), torch.tensor([[-4.5, -4.5], [2.0, 1.0]])),
               f(torch.ones(3), torch.tensor([-100.0, 0.0, 100.0])), f(a, randn(2, 3, 4, 8, seed=1)), a, a_before,
               f(randn(2, 3, 4, 8, dtype=BF16), randn(2, 3, 4, 8, seed=1, dtype=BF16)),
               f(randn(2, 5, 4, 8), randn(2, 5, 4, 1, seed=2))]
        return out

    def grad(ns):
        f = ns["gate_gradient"]
        x = torch.tensor([[1.0, 0.0], [0.0, 1.0]])
        out = [f(x, torch.tensor([0.01, -0.02]), torch.tensor([0.0, 1.0]), torch.tensor([1.0, 0.8]), torch.ones(2))]
        out.append(f(randn(5, 3), randn(3, seed=1), randn(5, seed=2), randn(5, seed=3), randn(5, seed=4)))
        out.append(f(randn(7, 4, dtype=torch.float64), randn(4, seed=1, dtype=torch.float64),
                     randn(7, seed=2, dtype=torch.float64), randn(7, seed=3, dtype=torch.float64),
                     randn(7, seed=4, dtype=torch.float64)))
        return out

    PROBES["05_output_gate"] = {"split_query_gate": [split], "apply_output_gate": [gate], "gate_gradient": [grad]}


_p05()


# ---------------------------------------------------------------- 06
QWEN_SMALL = SimpleNamespace(hidden_size=24, num_attention_heads=4, num_key_value_heads=2, head_dim=8,
                             rms_norm_eps=1e-6, rope_theta=10_000.0, partial_rotary_factor=0.5)


def _p06():
    def norm(ns):
        cls = ns["ZeroCenteredRMSNorm"]
        out = [fresh_state(cls(4))]
        with torch.no_grad():
            x = torch.tensor([[3.0, 4.0]])
            n = cls(2)
            out.append(n(x))
            n.load_state_dict({"weight": torch.tensor([1.0, -0.5])})
            out += [n(x), cls(2, eps=1.0)(x), cls(64)(torch.full((2, 64), 300.0, dtype=torch.float16)),
                    cls(4)(torch.zeros(1, 4))]
            m = fill(cls(8))
            out += [m(randn(2, 3, 8)), m(randn(2, 3, 8, dtype=BF16)), m(randn(3, 8, dtype=torch.float64) * 5)]
        return out

    def partial(ns):
        f = ns["apply_partial_rope"]
        c2, s2 = rope_table(torch.arange(2), 4, 100.0)
        c5, s5 = rope_table(torch.arange(5), 8, 1e4)
        x = torch.zeros(1, 1, 2, 8)
        x[..., 0], x[..., 6] = 1.0, 5.0
        xr = randn(2, 3, 5, 16)
        return [f(x, c2, s2), f(xr, c5, s5), f(xr.to(BF16), c5, s5), f(randn(1, 2, 5, 8, seed=2), c5, s5)]

    def qwen(ns):
        cls = ns["Qwen35Attention"]
        layer = fill(cls(QWEN_SMALL))
        out = [shapes(layer)]
        x = randn(2, 5, 24)
        cos, sin = rope_table(torch.arange(5), 4, 1e4)
        pad = torch.tensor([[1, 1, 1, 1, 1], [0, 0, 1, 1, 1]])
        with torch.no_grad():
            out += [layer(x, cos, sin), layer(x, cos, sin, attention_mask=pad)]
            big = SimpleNamespace(**{**vars(QWEN_SMALL), "num_attention_heads": 6, "num_key_value_heads": 3,
                                     "head_dim": 16, "hidden_size": 40})
            layer2 = fill(cls(big))
            c7, s7 = rope_table(torch.arange(7), 8, 1e4)
            out.append(layer2(randn(3, 7, 40, seed=4), c7, s7))
            layer3 = fill(cls(QWEN_SMALL)).to(BF16)
            out.append(layer3(x.to(BF16), cos, sin))
        return out

    PROBES["06_qwen35_attention"] = {"ZeroCenteredRMSNorm": [norm], "apply_partial_rope": [partial],
                                     "Qwen35Attention": [qwen]}


_p06()


# ---------------------------------------------------------------- 07
_REFERENCE = {}


def reference_attention():
    """Our own correct LlamaAttention (from a07.CORRECT): greedy_generate is probed with it, so that only the
    student's greedy_generate and the KVCache it builds can change the result."""
    if "cls" not in _REFERENCE:
        from . import a07, source
        namespace = {"__name__": "reference"}
        exec(compile(source(a07), "<reference>", "exec"), namespace)
        _REFERENCE["cls"] = namespace["LlamaAttention"]
    return _REFERENCE["cls"]


def tiny_llama():
    if "tiny" not in _REFERENCE:
        from course.llama import LlamaConfig, LlamaModel
        config = LlamaConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                             num_key_value_heads=2, head_dim=8, rope_theta=10_000.0, rms_norm_eps=1e-5,
                             vocab_size=61, bos_token_id=0, eos_token_id=1)
        model = LlamaModel(config, reference_attention())
        model = fill(model.to_empty(device="cpu"), norm_offset=1.0)  # attention weights start on meta
        with torch.no_grad():  # strong attention and MLP, so that the next token depends on the context
            for layer in model.layers:
                layer.self_attn.o_proj.weight.mul_(4.0)
                layer.mlp.down_proj.weight.mul_(4.0)
            model.embed_tokens.weight.mul_(0.2)
        _REFERENCE["tiny"] = model.eval()
    return _REFERENCE["tiny"]


def real_llama():
    if "real" not in _REFERENCE:
        from tokenizers import Tokenizer

        from course.llama import load_model
        from course.tools import smollm2_fetch
        folder = smollm2_fetch.fetch()
        _REFERENCE["real"] = load_model(folder, reference_attention())
        _REFERENCE["tokenizer"] = Tokenizer.from_file(str(folder / "tokenizer.json"))
    return _REFERENCE["real"], _REFERENCE["tokenizer"]


def counting_fed(model):
    fed = []
    hook = model.register_forward_pre_hook(
        lambda module, args, kwargs: fed.append(tuple((args[0] if args else kwargs["input_ids"]).shape)),
        with_kwargs=True)
    return fed, hook


def _p07():
    def llama(ns):
        cls, cache_cls = ns["LlamaAttention"], ns["KVCache"]
        out = []
        hand = cls(SimpleNamespace(hidden_size=2, num_attention_heads=1, num_key_value_heads=1, head_dim=2,
                                   rope_theta=10_000.0))
        with torch.no_grad():
            for projection in (hand.q_proj, hand.k_proj, hand.v_proj, hand.o_proj):
                projection.weight.copy_(torch.eye(2))
            out.append(hand(torch.tensor([[[1.0, 0.0], [0.0, 1.0]]]))[0])
        for config in (SimpleNamespace(hidden_size=32, num_attention_heads=4, num_key_value_heads=2, head_dim=8,
                                       rope_theta=10_000.0),
                       SimpleNamespace(hidden_size=24, num_attention_heads=6, num_key_value_heads=2, head_dim=8,
                                       rope_theta=100.0)):
            m = fill(cls(config))
            out.append(shapes(m))
            x = randn(2, 6, config.hidden_size)
            with torch.no_grad():
                whole, returned = m(x)
                out += [whole, returned, m(x, attention_mask=LEFT_PAD)[0]]
                cache = cache_cls()
                steps, lens = decode_in_chunks(m, x, [(0, 3), (3, 4), (4, 6)], cache)
                held = cache.update(torch.zeros(2, config.num_key_value_heads, 0, 8),
                                    torch.zeros(2, config.num_key_value_heads, 0, 8))
                out += [steps, lens, held[0]]
                cache = cache_cls()
                out.append(decode_in_chunks(m, x, [(0, 4), (4, 5), (5, 6)], cache, attention_mask=LEFT_PAD)[0])
                out.append(m.to(BF16)(x.to(BF16))[0])
        return out

    def greedy_tiny(ns):
        f = ns["greedy_generate"]
        model = tiny_llama()
        out = []
        fed, hook = counting_fed(model)
        try:
            ids = torch.tensor([[5, 17, 3, 42, 8]])
            out.append(f(model, ids, 7))
            out.append(list(fed))
            batch = torch.tensor([[2, 2, 9, 30, 11], [5, 17, 3, 42, 8]])
            mask = torch.tensor([[0, 0, 1, 1, 1], [1, 1, 1, 1, 1]])
            out.append(f(model, batch, 5, attention_mask=mask))
            out.append(f(model, torch.tensor([[7]]), 3))
        finally:
            hook.remove()
        return out

    def greedy_real(ns):
        f = ns["greedy_generate"]
        model, tokenizer = real_llama()
        out = []
        fed, hook = counting_fed(model)
        try:
            ids = torch.tensor([tokenizer.encode("The capital of France is").ids])
            out.append(f(model, ids, 4))
            out.append(list(fed))
            encoded = [tokenizer.encode(text).ids for text in ["The capital of France is", "Once upon a time, there was a"]]
            width = max(map(len, encoded))
            batch = torch.tensor([[2] * (width - len(e)) + e for e in encoded])
            mask = torch.tensor([[0] * (width - len(e)) + [1] * len(e) for e in encoded])
            out.append(f(model, batch, 3, attention_mask=mask))
        finally:
            hook.remove()
        return out

    # sampling_probs: rows without ties, so top-k and top-p boundaries are unambiguous
    # (fresh tensors on every call: a mistake may divide the logits in place)
    def hand():
        return torch.tensor([[1.5, -0.5, 0.3, 2.2, 0.0, -1.2], [0.1, 0.4, -2.0, 1.0, 3.0, 0.2],
                             [-1.0, 0.7, 0.6, -0.2, 0.9, 2.4]])

    def wide():
        return randn(4, 200, seed=11) * 2.5

    def sp_plain(ns):
        f = ns["sampling_probs"]
        return [f(hand()), f(hand(), temperature=0.5), f(hand(), temperature=2.0), f(wide(), temperature=0.8)]

    def sp_top_k(ns):
        f = ns["sampling_probs"]
        return [f(hand(), top_k=1), f(hand(), top_k=2), f(hand(), top_k=4), f(hand(), top_k=6), f(wide(), top_k=7),
                f(hand()[:1], top_k=3)]

    def sp_top_k_beyond_vocab(ns):
        return ns["sampling_probs"](hand(), top_k=10)

    def sp_top_p(ns):
        f = ns["sampling_probs"]
        return [f(hand(), top_p=0.3), f(hand(), top_p=0.5), f(hand(), top_p=0.75), f(hand(), top_p=1e-3),
                f(hand(), top_p=1.0), f(wide(), top_p=0.6), f(wide(), temperature=1.7, top_p=0.9)]

    def sp_combined(ns):
        f = ns["sampling_probs"]
        return [f(hand(), temperature=1.8, top_k=4, top_p=0.6), f(hand(), temperature=0.6, top_k=3, top_p=0.8),
                f(wide(), temperature=1.3, top_k=30, top_p=0.7), f(wide(), temperature=0.9, top_k=12, top_p=0.95)]

    def sp_large_and_bf16(ns):
        f = ns["sampling_probs"]
        huge = torch.tensor([[1e4, 1e4 - 0.5, -1e4, 3.0], [-1e4, 0.0, 2e4, 2e4 - 2.0]])
        return [f(huge), f(huge, top_p=0.8), f(hand().to(BF16), top_k=3), f(hand().to(BF16), temperature=0.7)]

    def sp_leaves_input(ns):
        logits = hand()
        ns["sampling_probs"](logits, temperature=0.5, top_k=3, top_p=0.9)
        return logits

    class Sharpened(nn.Module):
        """A model whose logits are ``scale`` times another's: same ``layers``, same call."""

        def __init__(self, inner: nn.Module, scale: float):
            super().__init__()
            self.inner, self.layers, self.scale = inner, inner.layers, scale

        def forward(self, input_ids, attention_mask=None, caches=None):
            return self.inner(input_ids, attention_mask=attention_mask, caches=caches) * self.scale

    def sharp_llama():
        """tiny_llama with logits times 6: next-token distributions from a few likely tokens to fairly flat."""
        if "sharp" not in _REFERENCE:
            _REFERENCE["sharp"] = Sharpened(tiny_llama(), 6.0).eval()
        return _REFERENCE["sharp"]

    # sample_generate on the tiny random Llama with its logits scaled up (its own next-token distributions are
    # nearly uniform), with our own LlamaAttention (the submission's KVCache)
    prompt = torch.tensor([[5, 17, 3, 42, 8]])
    settings = [{}, {"temperature": 0.7}, {"temperature": 1.6}, {"top_k": 4}, {"top_p": 0.8},
                {"temperature": 0.4, "top_p": 0.95}, {"temperature": 3.0, "top_p": 0.5},
                {"temperature": 1.5, "top_k": 8, "top_p": 0.7}, {"temperature": 0.6, "top_k": 20, "top_p": 0.9}]

    def sg_settings(ns):
        f = ns["sample_generate"]
        model = sharp_llama()
        out = []
        fed, hook = counting_fed(model)
        try:
            for i, options in enumerate(settings):
                out.append(f(model, prompt, 8, torch.Generator().manual_seed(1234 + i), **options))
            out.append(list(fed))
        finally:
            hook.remove()
        return out

    def sg_generator_use(ns):
        f = ns["sample_generate"]
        model = sharp_llama()
        generator = torch.Generator().manual_seed(99)
        first = f(model, prompt, 6, generator, temperature=1.2)
        second = f(model, prompt, 6, generator, temperature=1.2)
        return [first, second, torch.rand(3, generator=generator), f(model, prompt, 5, torch.Generator().manual_seed(0))]

    def sg_batch(ns):
        f = ns["sample_generate"]
        model = sharp_llama()
        batch = torch.tensor([[2, 2, 9, 30, 11], [5, 17, 3, 42, 8]])
        mask = torch.tensor([[0, 0, 1, 1, 1], [1, 1, 1, 1, 1]])
        return [f(model, batch, 5, torch.Generator().manual_seed(7), attention_mask=mask, temperature=1.3, top_p=0.9),
                f(model, batch, 5, torch.Generator().manual_seed(8), attention_mask=mask, top_k=1),
                f(model, batch, 6, torch.Generator().manual_seed(9), attention_mask=mask, top_k=3, temperature=1.5),
                f(model, torch.tensor([[7]]), 3, torch.Generator().manual_seed(5), top_k=5)]

    # apply_penalties: seen tokens on both sides of zero, repeats, rows of their own, an empty history
    def penalty_logits(rows: int, vocab: int, seed: int, dtype=torch.float32):
        return (torch.randn(rows, vocab, generator=torch.Generator().manual_seed(seed)) * 2).to(dtype)

    def ap_each(ns):
        f, history = ns["apply_penalties"], torch.tensor([[1, 1, 1, 4, 6], [0, 2, 2, 7, 7]])
        logits = penalty_logits(2, 9, 31)
        return [f(logits, history, repetition_penalty=1.7), f(logits, history, frequency_penalty=0.4),
                f(logits, history, presence_penalty=0.9), f(logits, history), f(logits, history[:, :0], 1.5, 0.3, 0.2)]

    def ap_together(ns):
        f = ns["apply_penalties"]
        small = torch.tensor([[0.3, 0.1, -0.2, 2.0, 0.05, -3.0]])
        return [f(small, torch.tensor([[0, 0, 1, 2, 4, 4, 4]]), 1.5, 0.6, 0.25),
                f(penalty_logits(3, 20, 32), torch.randint(0, 20, (3, 15), generator=torch.Generator().manual_seed(33)),
                  repetition_penalty=0.7, frequency_penalty=0.2, presence_penalty=0.1)]

    def ap_dtypes_and_input(ns):
        f, history = ns["apply_penalties"], torch.tensor([[3, 3, 5], [1, 8, 8]])
        logits = penalty_logits(2, 10, 34)
        out = [f(logits.to(BF16), history, 1.3, 0.5, 0.2), f(logits.double(), history, 1.2, 0.3, 0.4)]
        f(logits, history, 1.4, 0.5, 0.5)
        return out + [logits]

    # min_p_filter: rows of different sureness, a token exactly on the threshold, min_p at 0 and 1
    def mp_rows(ns):
        f = ns["min_p_filter"]
        rows = torch.softmax(torch.randn(3, 30, generator=torch.Generator().manual_seed(35))
                             * torch.tensor([[4.0], [0.5], [2.0]]), dim=-1)
        return [f(rows, 0.1), f(rows, 0.3), f(rows, 0.0), f(rows, 1.0)]

    def mp_edges(ns):
        f = ns["min_p_filter"]
        edge = torch.tensor([[0.5, 0.25, 0.125, 0.125], [0.25, 0.25, 0.25, 0.25]])
        return [f(edge, 0.5), f(edge, 0.25), f(edge, 1.0)]

    def mp_dtypes_and_input(ns):
        f = ns["min_p_filter"]
        rows = torch.softmax(torch.randn(2, 16, generator=torch.Generator().manual_seed(36)) * 2, dim=-1)
        out = [f(rows.to(BF16), 0.2), f(rows.double(), 0.05)]
        f(rows, 0.3)
        return out + [rows]

    # beam_search: toy models whose next token depends on the last two; one, a few and as many beams as tokens
    def beam_tables(ns):
        f, out = ns["beam_search"], []
        for n, (vocab, beams, steps, dtype) in enumerate([(6, 3, 4, torch.float32), (5, 1, 3, torch.float32),
                                                          (4, 4, 3, torch.float64), (7, 2, 1, torch.float32),
                                                          (6, 3, 7, torch.float32), (5, 2, 3, BF16)]):
            table = (torch.randn(vocab, vocab, vocab, generator=torch.Generator().manual_seed(40 + n)) * 2).log_softmax(-1)
            table = table.to(dtype)
            prompt = torch.tensor([1, 2, 0])[:2 + n % 2]
            copy = prompt.clone()
            out.append(f(lambda ids, table=table: table[ids[:, -2], ids[:, -1]], prompt, beams, steps))
            out.append(torch.equal(prompt, copy))
        return out

    def beam_hand(ns):
        after_last = torch.tensor([[0.05, 0.5, 0.4, 0.05], [0.3, 0.25, 0.05, 0.4],
                                   [0.02, 0.03, 0.05, 0.9], [0.25, 0.25, 0.3, 0.2]]).log()
        return [ns["beam_search"](lambda ids: after_last[ids[:, -1]], torch.tensor([3, 0]), beams, steps)
                for beams, steps in ((2, 2), (1, 2), (3, 3))]

    PROBES["07_real_model"] = {"LlamaAttention": [llama], "greedy_generate": [greedy_tiny, greedy_real],
                               "sampling_probs": [sp_plain, sp_top_k, sp_top_k_beyond_vocab, sp_top_p, sp_combined,
                                                  sp_large_and_bf16, sp_leaves_input],
                               "sample_generate": [sg_settings, sg_generator_use, sg_batch],
                               "apply_penalties": [ap_each, ap_together, ap_dtypes_and_input],
                               "min_p_filter": [mp_rows, mp_edges, mp_dtypes_and_input],
                               "beam_search": [beam_tables, beam_hand]}


_p07()


# ---------------------------------------------------------------- 08
GDN_SMALL = SimpleNamespace(hidden_size=24, linear_num_key_heads=2, linear_num_value_heads=4, linear_key_head_dim=8,
                            linear_value_head_dim=6, linear_conv_kernel_dim=4, rms_norm_eps=1e-6)
GDN_OTHER = SimpleNamespace(hidden_size=20, linear_num_key_heads=1, linear_num_value_heads=3, linear_key_head_dim=4,
                            linear_value_head_dim=4, linear_conv_kernel_dim=3, rms_norm_eps=1e-5)


def _p08():
    def unit(x):
        return x / x.norm(dim=-1, keepdim=True)

    def qkv(b, h, t, dk, dv, seed=0, dtype=torch.float32):
        return (randn(b, h, t, dk, seed=seed).to(dtype), unit(randn(b, h, t, dk, seed=seed + 1)).to(dtype),
                randn(b, h, t, dv, seed=seed + 2).to(dtype))

    def uniform(*shape, seed=0):
        return torch.rand(*shape, generator=torch.Generator().manual_seed(seed))

    hand_q = torch.tensor([1.0, 2.0]).view(1, 1, 2, 1)
    hand_k = torch.tensor([3.0, 4.0]).view(1, 1, 2, 1)
    hand_v = torch.tensor([5.0, 6.0]).view(1, 1, 2, 1)
    key_twice = torch.tensor([[1.0, 0.0], [1.0, 0.0]]).view(1, 1, 2, 2)
    values_twice = torch.tensor([[1.0, 0.0], [0.0, 1.0]]).view(1, 1, 2, 2)
    ones_2 = torch.ones(1, 1, 2, 1)
    g_hand = torch.log(torch.tensor([1.0, 0.5])).view(1, 1, 2)
    beta_hand = torch.tensor([1.0, 0.5]).view(1, 1, 2)

    def linear(ns):
        f = ns["linear_attention"]
        q, k, v = qkv(2, 3, 5, 4, 6)
        return [f(hand_q, hand_k, hand_v), f(q, k, v), f(q[:, :, :1], k[:, :, :1], v[:, :, :1]),
                f(*qkv(1, 2, 6, 8, 8, seed=3, dtype=BF16)), f(*qkv(2, 1, 4, 3, 5, seed=4, dtype=torch.float64))]

    def split_run(f, tensors, cut, extra=(), **kw):
        """f over the whole sequence, then over [:cut] and [cut:] from the returned state; also the state
        passed in, before and after the second call."""
        whole = f(*tensors, *extra, **kw)
        first = f(*[t[..., :cut, :] for t in tensors], *[e[..., :cut] for e in extra], **kw)
        given = first[1].clone()
        second = f(*[t[..., cut:, :] for t in tensors], *[e[..., cut:] for e in extra], state=first[1], **kw)
        return [whole, first, second, torch.equal(given, first[1])]

    def recurrent(ns):
        f = ns["linear_attention_recurrent"]
        q, k, v = qkv(2, 3, 5, 4, 6)
        out = [f(hand_q, hand_k, hand_v), f(q, k, v)]
        out += split_run(f, (q, k, v), 2)
        out.append(f(q[:, :, :1], k[:, :, :1], v[:, :, :1], state=randn(2, 3, 4, 6, seed=9)))
        out.append(f(*qkv(1, 2, 6, 4, 4, seed=3, dtype=BF16)))
        return out

    def delta(ns):
        f = ns["delta_rule"]
        q, k, v = qkv(2, 3, 6, 4, 5)
        beta = uniform(2, 3, 6, seed=1)
        out = [f(key_twice, key_twice, values_twice, torch.ones(1, 1, 2)),
               f(key_twice, key_twice, values_twice, torch.full((1, 1, 2), 0.5)), f(q, k, v, beta)]
        out += split_run(f, (q, k, v), 3, (beta,))
        out.append(f(q[:, :, :1], k[:, :, :1], v[:, :, :1], beta[:, :, :1], state=randn(2, 3, 4, 5, seed=9)))
        out.append(f(*qkv(1, 2, 5, 4, 4, seed=3, dtype=BF16), uniform(1, 2, 5, seed=2).to(BF16)))
        return out

    def gated(ns):
        f = ns["gated_delta_rule"]
        q, k, v = qkv(2, 3, 6, 4, 5)
        g, beta = -uniform(2, 3, 6, seed=3), uniform(2, 3, 6, seed=1)
        out = [f(ones_2, ones_2, ones_2, g_hand, beta_hand), f(q, k, v, g, beta), f(q, k, v, torch.zeros(2, 3, 6), beta),
               f(q, k, v, torch.full((2, 3, 6), -1e4), torch.ones(2, 3, 6))]
        out += split_run(f, (q, k, v), 2, (g, beta))
        out.append(f(q[:, :, :1], k[:, :, :1], v[:, :, :1], g[:, :, :1], beta[:, :, :1], state=randn(2, 3, 4, 5, seed=9)))
        out.append(f(*qkv(1, 2, 5, 4, 4, seed=3, dtype=BF16), -uniform(1, 2, 5, seed=4).to(BF16),
                     uniform(1, 2, 5, seed=2).to(BF16)))
        return out

    def chunked(ns):
        f = ns["chunked_gated_delta_rule"]
        q, k, v = qkv(2, 2, 11, 4, 3, seed=5)
        g, beta = -uniform(2, 2, 11, seed=6), uniform(2, 2, 11, seed=7)
        out = [f(ones_2, ones_2, ones_2, g_hand, beta_hand, chunk_size=2), f(ones_2, ones_2, ones_2, g_hand, beta_hand)]
        out += [f(q, k, v, g, beta, chunk_size=size) for size in (1, 3, 4, 11, 64)]
        out.append(f(q[:, :, :1], k[:, :, :1], v[:, :, :1], g[:, :, :1], beta[:, :, :1], chunk_size=4))
        out += split_run(f, (q, k, v), 5, (g, beta), chunk_size=4)
        out.append(f(q, k, v, g, beta, chunk_size=4, state=randn(2, 2, 4, 3, seed=9)))
        steep = torch.full((2, 2, 11), -200.0)
        out += [f(q, k, v, steep, beta, chunk_size=11), f(q, k, v, steep, beta, chunk_size=4)]
        long_q, long_k, long_v = qkv(1, 2, 70, 8, 8, seed=11)
        out.append(f(long_q, long_k, long_v, -0.1 * uniform(1, 2, 70, seed=12), uniform(1, 2, 70, seed=13)))
        out.append(f(*qkv(1, 2, 9, 4, 4, seed=3, dtype=BF16), -uniform(1, 2, 9, seed=4).to(BF16),
                     uniform(1, 2, 9, seed=2).to(BF16), chunk_size=4))
        return out

    def conv(ns):
        f = ns["causal_conv1d"]
        w_hand = torch.tensor([1.0, 10.0, 100.0]).view(1, 1, 3)
        y_hand, s_hand = f(torch.tensor([1.0, 2.0, 3.0]).view(1, 1, 3), w_hand)
        out = [y_hand, s_hand, f(torch.tensor([4.0]).view(1, 1, 1), w_hand, s_hand)]
        x, w = randn(2, 6, 9, seed=5), randn(6, 1, 4, seed=6)
        out.append(f(x, w))
        y1, s1 = f(x[..., :2], w)
        s1_given = s1.clone()
        y2, s2 = f(x[..., 2:3], w, s1)
        y3, s3 = f(x[..., 3:], w, s2)
        out += [y1, s1, y2, s2, y3, s3, torch.equal(s1, s1_given)]
        out.append(f(x, w, randn(2, 6, 3, seed=7)))
        out.append(f(randn(1, 5, 6, seed=8), randn(5, 1, 3, seed=9)))
        out.append(f(x.to(BF16), w))
        return out

    def run_cached(m, x, chunks, cache, attention_mask=None):
        pieces = []
        for start, end in chunks:
            mask = None if attention_mask is None else attention_mask[:, :end]
            piece, returned = m(x[:, start:end], attention_mask=mask, cache=cache)
            assert returned is cache, "the cache passed in must come back"
            pieces.append(piece)
        return torch.cat(pieces, dim=1)

    def layer(ns):
        cls, cache_cls = ns["Qwen35GatedDeltaNet"], ns["GatedDeltaNetCache"]
        out = [fresh_state(cls(GDN_SMALL))]
        m = fill(cls(GDN_SMALL))
        out.append(shapes(m))
        x = randn(2, 7, 24, seed=3)
        pad = torch.tensor([[1] * 7, [0, 0, 1, 1, 1, 1, 1]])
        with torch.no_grad():
            whole, returned = m(x)
            out += [whole, returned is None, m(x, attention_mask=pad)[0], m(x[:, :1])[0]]
            cache = cache_cls()
            out.append(run_cached(m, x, [(0, 3), (3, 4), (4, 5), (5, 7)], cache))
            out += [cache.conv_state, cache.recurrent_state]
            out.append(run_cached(m, x, [(0, 4), (4, 5), (5, 7)], cache_cls(), attention_mask=pad))
            out.append(m(randn(1, 70, 24, seed=4))[0])
            strong = fill(cls(GDN_SMALL))
            strong.A_log.fill_(10.0)
            out.append(strong(x)[0])
            other = fill(cls(GDN_OTHER))
            x_other = randn(3, 5, 20, seed=5)
            out += [other(x_other)[0], run_cached(other, x_other, [(0, 1), (1, 2), (2, 5)], cache_cls())]
            half = fill(cls(GDN_SMALL)).to(BF16)
            out.append(half(x.to(BF16))[0])
            out.append(run_cached(half, x.to(BF16), [(0, 5), (5, 6)], cache_cls()))
        return out

    PROBES["08_gated_deltanet"] = {"linear_attention": [linear], "linear_attention_recurrent": [recurrent],
                                   "delta_rule": [delta], "gated_delta_rule": [gated],
                                   "chunked_gated_delta_rule": [chunked], "causal_conv1d": [conv],
                                   "Qwen35GatedDeltaNet": [layer]}


_p08()


# ---------------------------------------------------------------- 09
def _p09():
    # (Tq, Tk, causal, block_q, block_k, dtype): Tq > Tk leaves rows that see no key; lengths not multiples of tiles.
    layouts = [(37, 37, False, 16, 8, torch.float32), (40, 40, True, 16, 16, torch.float32),
               (20, 45, True, 8, 16, torch.float32), (30, 12, True, 8, 8, torch.float32),
               (11, 23, True, 4, 5, torch.float64), (1, 19, True, 4, 8, torch.float32)]

    def inputs(q_len, k_len, dtype, seed):
        return (randn(2, 3, q_len, 6, seed=seed, dtype=dtype), randn(2, 3, k_len, 6, seed=seed + 1, dtype=dtype),
                randn(2, 3, k_len, 5, seed=seed + 2, dtype=dtype))

    def forward(ns):
        f = ns["flash_attention_forward"]
        return [f(*inputs(q_len, k_len, dtype, n), causal, block_q, block_k)
                for n, (q_len, k_len, causal, block_q, block_k, dtype) in enumerate(layouts)]

    def backward(ns):
        f, out = ns["flash_attention_backward"], []
        for n, (q_len, k_len, causal, block_q, block_k, dtype) in enumerate(layouts):
            q, k, v = inputs(q_len, k_len, torch.float64, 10 + n)
            scores = q @ k.mT / math.sqrt(q.shape[-1])
            if causal:
                scores = scores.masked_fill(torch.ones(q_len, k_len, dtype=torch.bool).tril(k_len - q_len).logical_not(),
                                            float("-inf"))
            lse = torch.logsumexp(scores, dim=-1)
            o = (torch.softmax(scores, dim=-1).nan_to_num(0.0) @ v)
            do = randn(2, 3, q_len, 5, seed=30 + n, dtype=torch.float64)
            out.append(f(*(t.to(dtype) for t in (q, k, v, o, lse, do)), causal, block_q, block_k))
        return out

    def function(ns):
        cls, out = ns["FlashAttention"], []
        for n, (q_len, k_len, causal) in enumerate([(37, 37, False), (40, 40, True), (30, 12, True), (20, 45, True)]):
            q, k, v = (t.requires_grad_(True) for t in inputs(q_len, k_len, torch.float64, 50 + n))
            o = cls.apply(q, k, v, causal)
            o.backward(randn(*o.shape, seed=60 + n, dtype=torch.float64))
            out += [o.detach(), q.grad, k.grad, v.grad]
        return out

    from torch.overrides import TorchFunctionMode

    class Tiles(TorchFunctionMode):
        """Raises at a matrix product whose result is a table (last two dims both lengths or tile lengths of the
        probe's queries and keys, ``sizes``) larger than one ``tile``, or once there are more such tables than
        ``limit``: the skipped tiles make none."""
        def __init__(self, sizes, tile, limit):
            super().__init__()
            self.sizes, self.tile, self.limit, self.made = sizes, tile, limit, 0

        def __torch_function__(self, func, types, args=(), kwargs=None):
            result = func(*args, **(kwargs or {}))
            if func in (torch.matmul, torch.Tensor.__matmul__, torch.einsum, torch.bmm, torch.Tensor.matmul) \
                    and isinstance(result, torch.Tensor) and result.dim() >= 2 and set(result.shape[-2:]) <= self.sizes:
                if result.shape[-2] * result.shape[-1] > self.tile:
                    raise RuntimeError(f"a table of {list(result.shape[-2:])}")
                self.made += 1
                if self.made > self.limit:
                    raise RuntimeError("more tables than tiles to compute")
            return result

    def untouched(inputs, copies):
        if not all(torch.equal(a, b) for a, b in zip(inputs, copies)):
            raise RuntimeError("an input was changed in place")

    # Tq = 39 and Tk = 31 in tiles of 8 and 4: no batch (1), head (2), head dim (6, 5) equals a length or a tile's.
    # Causal: query tiles 0..4 see 0, 1, 3, 5 and 7 of the 8 key tiles (16 of 40); 2 tables a tile (3 in the
# backward pass, which also makes dP), and 2 spare.
    sizes, tile, needed = {39, 8, 7, 31, 4, 3}, 32, {False: 40, True: 16}

    def small(seed):
        return [randn(1, 2, length, dim, seed=seed + n) for n, (length, dim) in enumerate([(39, 6), (31, 6), (31, 5)])]

    def structure(ns, name, backward):
        """Each layout's output under ``Tiles``, the inputs left as they were."""
        out = []
        for causal in (False, True):
            args = small(70)
            if backward:
                q, k, v = args
                scores = q @ k.mT / math.sqrt(6)
                if causal:
                    scores = scores.masked_fill(torch.ones(39, 31, dtype=torch.bool).tril(-8).logical_not(), float("-inf"))
                args += [torch.softmax(scores, dim=-1).nan_to_num(0.0) @ v, torch.logsumexp(scores, dim=-1),
                         randn(1, 2, 39, 5, seed=80)]
            copies = [t.clone() for t in args]
            with Tiles(sizes, tile, (3 if backward else 2) * needed[causal] + 2):
                out.append(ns[name](*args, causal, 8, 4))
            untouched(args, copies)
        return out

    def watched(cls, sizes, tile, forward_limit, backward_limit):
        """``cls`` with its forward and its backward each under ``Tiles`` (autograd runs the backward outside any
        mode the caller entered)."""
        def forward(ctx, *args):
            with Tiles(sizes, tile, forward_limit):
                return cls.forward(ctx, *args)

        def backward(ctx, *grads):
            with Tiles(sizes, tile, backward_limit):
                return cls.backward(ctx, *grads)

        return type(cls.__name__, (cls,), {"forward": staticmethod(forward), "backward": staticmethod(backward)})

    def function_structure(ns):
        """FlashAttention forward and backward on the default 16 × 16 tiles, each under ``Tiles``."""
        out = []
        # Tq = 100, Tk = 31: the first 69 queries see no key; of the 7 × 2 tiles of 16, causal leaves 5.
        for causal, counted in ((False, 14), (True, 5)):
            q = randn(1, 2, 100, 6, seed=95, dtype=torch.float64)
            k, v = randn(1, 2, 31, 6, seed=96, dtype=torch.float64), randn(1, 2, 31, 5, seed=97, dtype=torch.float64)
            leaves = [t.clone().requires_grad_(True) for t in (q, k, v)]
            do = randn(1, 2, 100, 5, seed=98, dtype=torch.float64)
            copy = do.clone()
            o = watched(ns["FlashAttention"], {100, 16, 4, 31, 15}, 256, 2 * counted + 2, 3 * counted + 2).apply(
                *leaves, causal)
            o.backward(do)
            untouched([do], [copy])
            out += [o.detach(), *(leaf.grad for leaf in leaves)]
        return out

    PROBES["09_flash_attention"] = {
        "flash_attention_forward": [forward, lambda ns: structure(ns, "flash_attention_forward", False)],
        "flash_attention_backward": [backward, lambda ns: structure(ns, "flash_attention_backward", True)],
        "FlashAttention": [function, function_structure]}


_p09()
