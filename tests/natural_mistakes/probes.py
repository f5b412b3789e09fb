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

    PROBES["01_attention_basics"] = {"attention_scores": [scores], "causal_mask": [causal],
                                     "padding_mask": [padding], "masked_softmax": [softmax], "attention": [attn]}


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

    PROBES["03_gqa_kv_cache"] = {"KVCache": [cache], "repeat_kv": [repeat], "GroupedQueryAttention": [gqa],
                                 "kv_cache_bytes": [kv_bytes]}


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

    PROBES["07_real_model"] = {"LlamaAttention": [llama], "greedy_generate": [greedy_tiny, greedy_real]}


_p07()
