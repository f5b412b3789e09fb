"""A Llama-architecture causal language model around an attention module you bring: token embeddings,
pre-norm decoder layers (RMSNorm → attention → residual, RMSNorm → SwiGLU MLP → residual), a final
RMSNorm and a language-model head tied to the embeddings. Assignment 07 puts the student's
``LlamaAttention`` into every layer of SmolLM2-135M-Instruct this way.

Parameter names are Hugging Face's ``LlamaForCausalLM`` names without the leading ``model.``
(``layers.5.self_attn.q_proj.weight``, ``layers.5.mlp.gate_proj.weight``, ``embed_tokens.weight`` ...),
so a Hugging Face checkpoint loads unchanged.

Shapes: token ids ``[B, T]``; hidden states ``[B, T, hidden]``; logits ``[B, T, vocab]``. An
``attention_mask`` is ``[B, k_len]`` of 0/1 covering cached and new positions, as each attention module
expects it (the exercise contract every notebook states).
"""
import contextlib
import dataclasses
import json
import threading
from pathlib import Path

import torch
from safetensors.torch import load_file
from torch import nn
from torch.nn import functional as F
from torch.nn.modules.module import register_module_parameter_registration_hook

CONFIG_FILE, WEIGHTS_FILE = "config.json", "model.safetensors"


@dataclasses.dataclass(frozen=True)
class LlamaConfig:
    """What the model needs from ``config.json``, under Hugging Face's ``LlamaConfig`` names."""

    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    rope_theta: float
    rms_norm_eps: float
    vocab_size: int
    bos_token_id: int
    eos_token_id: int


def read_config(folder) -> LlamaConfig:
    """``LlamaConfig`` from ``folder/config.json``."""
    raw = json.loads((Path(folder) / CONFIG_FILE).read_text(encoding="utf-8"))
    return LlamaConfig(**{field.name: raw[field.name] for field in dataclasses.fields(LlamaConfig)})


class RMSNorm(nn.Module):
    """``x · rsqrt(mean(x²) + eps) · weight`` over the last dim, computed in float32; weight starts at 1."""

    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x32 = x.float()
        normed = x32 * torch.rsqrt(x32.square().mean(dim=-1, keepdim=True) + self.eps)
        return self.weight * normed.to(x.dtype)


class SwiGLU(nn.Module):
    """The MLP of every layer: ``down(silu(gate(x)) · up(x))``, hidden → intermediate → hidden."""

    def __init__(self, hidden: int, intermediate: int):
        super().__init__()
        self.gate_proj = nn.Linear(hidden, intermediate, bias=False)
        self.up_proj = nn.Linear(hidden, intermediate, bias=False)
        self.down_proj = nn.Linear(intermediate, hidden, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class DecoderLayer(nn.Module):
    """One pre-norm layer around ``self_attn``, whose ``forward(x, attention_mask=None, cache=None)``
    returns ``(out, cache)``."""

    def __init__(self, config: LlamaConfig, attention: nn.Module):
        super().__init__()
        self.input_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.self_attn = attention
        self.post_attention_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.mlp = SwiGLU(config.hidden_size, config.intermediate_size)

    def forward(self, x: torch.Tensor, attention_mask=None, cache=None) -> torch.Tensor:
        """``x [B, T, hidden]`` (the new positions) -> ``[B, T, hidden]``."""
        result = self.self_attn(self.input_layernorm(x), attention_mask=attention_mask, cache=cache)
        if not (isinstance(result, tuple) and len(result) == 2 and isinstance(result[0], torch.Tensor)):
            raise TypeError(f"注意力模块的 forward 应返回 (out, cache) 两个值，得到的是 {type(result).__name__}。")
        x = x + result[0]
        return x + self.mlp(self.post_attention_layernorm(x))


class LlamaModel(nn.Module):
    """The whole causal LM, with ``attention_class(config)`` as every layer's attention. Its weights are a
    checkpoint's (``load_model``): the embedding ``[vocab, hidden]`` starts uninitialised.

    ``forward(input_ids [B, T], attention_mask=None, caches=None) -> logits [B, T, vocab]``: ``caches`` is
    one cache object per layer (or None), handed to that layer's attention as ``cache``.
    """

    def __init__(self, config: LlamaConfig, attention_class):
        super().__init__()
        self.config = config
        # Not nn.Embedding's random start: on the meta device (load_model) its normal_ imports torch._dynamo,
        # over a second in every sandbox child that builds the model.
        self.embed_tokens = nn.Embedding.from_pretrained(torch.empty(config.vocab_size, config.hidden_size),
                                                         freeze=False)
        self.layers = nn.ModuleList(DecoderLayer(config, _built_on_cpu(attention_class, config))
                                    for _ in range(config.num_hidden_layers))
        self.norm = RMSNorm(config.hidden_size, config.rms_norm_eps)

    def forward(self, input_ids: torch.Tensor, attention_mask=None, caches=None) -> torch.Tensor:
        if caches is not None and len(caches) != len(self.layers):
            raise ValueError(f"caches 应是每层一个，共 {len(self.layers)} 个，得到 {len(caches)} 个。")
        x = self.embed_tokens(input_ids)
        for i, layer in enumerate(self.layers):
            x = layer(x, attention_mask=attention_mask, cache=None if caches is None else caches[i])
        return F.linear(self.norm(x), self.embed_tokens.weight)  # the head shares the embedding matrix


_building = threading.local()  # how deep this thread is in parameters_on_meta


def _on_meta(module, name, parameter):
    if getattr(_building, "depth", 0) and isinstance(parameter, nn.Parameter) and not parameter.is_meta:
        return nn.Parameter(parameter.to("meta"), requires_grad=parameter.requires_grad)
    return None


# Torch's parameter-registration hooks are global, and registering or removing one while another thread builds a
# module breaks that thread's loop over them: the course's hook is registered once, here, as the module is imported,
# and does nothing outside parameters_on_meta.
register_module_parameter_registration_hook(_on_meta)


@contextlib.contextmanager
def parameters_on_meta():
    """Inside, modules are built with real buffers and tensors but every parameter goes to the meta device as
    it is registered, so that its random initialisation costs nothing: for modules whose every parameter is
    then replaced (``load_state_dict(..., assign=True)``). Their own ``__init__`` may make tensors (a RoPE
    table) that nothing replaces: those stay real. Only in the thread inside this block: modules that other
    threads build meanwhile keep their parameters."""
    _building.depth = getattr(_building, "depth", 0) + 1
    try:
        with torch.device("cpu"):
            yield
    finally:
        _building.depth -= 1


def _built_on_cpu(attention_class, config) -> nn.Module:
    """``attention_class(config)`` built on the CPU, its parameters on meta (``parameters_on_meta``), even while
    the rest of the model is built on the meta device (``load_model``)."""
    with parameters_on_meta():
        return attention_class(config)


def load_model(folder, attention_class, dtype: torch.dtype = torch.float32) -> LlamaModel:
    """The model in ``folder`` (config.json and model.safetensors with Hugging Face's Llama keys), with
    ``attention_class`` in every layer, in ``dtype``, ready for inference (eval mode).

    The weights are memory-mapped and handed to the model as they are (float32 files need no copy), and
    the model's own parts are never initialised with random numbers first, so loading takes a fraction
    of a second once the file is in the page cache.
    """
    folder = Path(folder)
    config = read_config(folder)
    state = {key.removeprefix("model."): value for key, value in load_file(folder / WEIGHTS_FILE).items()
             if key != "lm_head.weight"}
    with torch.device("meta"):
        model = LlamaModel(config, attention_class)
    model.load_state_dict(state, strict=True, assign=True)
    return model.to(dtype).eval()


def attention_shapes(config: LlamaConfig) -> dict[str, tuple[int, int]]:
    """The weights an attention module of this model holds, keyed as in the module (``q_proj.weight`` ...):
    ``q_proj [H·D, hidden]``, ``k_proj`` and ``v_proj [Hkv·D, hidden]``, ``o_proj [hidden, H·D]``."""
    width, kv_width = config.num_attention_heads * config.head_dim, config.num_key_value_heads * config.head_dim
    return {"q_proj.weight": (width, config.hidden_size), "k_proj.weight": (kv_width, config.hidden_size),
            "v_proj.weight": (kv_width, config.hidden_size), "o_proj.weight": (config.hidden_size, width)}
