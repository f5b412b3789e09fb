"""The text model's configuration of a Qwen3.5 checkpoint, read from its ``config.json``.

Qwen3.5 checkpoints are vision-language models: ``config.json`` holds the language model under
``text_config``, next to ``vision_config``. Recent files keep ``rope_theta`` and
``partial_rotary_factor`` inside a ``rope_parameters`` dict (older ones flat, or in ``rope_scaling``).
``TextConfig`` flattens all that into the attribute names of Hugging Face's ``Qwen3_5TextConfig``, so
course code written against it also accepts a ``transformers`` config, and vice versa.

The course ships no copy of these numbers: they are read from the checkpoint's ``config.json`` (the
shipped fixture's, or a real model's). For a small test model, start from a real one and change what
you need: ``dataclasses.replace(config, hidden_size=64, ...)``.
"""
import dataclasses
import json
from pathlib import Path

# The course's prompt and its ids under the real Qwen3.5 tokenizer (tests/course/test_tokenizer.py checks them). The stand-in
# checkpoint stores the embedding rows of exactly these tokens.
PROMPT = "今天天气不错，我们去公园"
PROMPT_IDS = (97375, 101618, 98869, 3709, 116450, 99192)  # 今天 / 天气 / 不错 / ， / 我们去 / 公园

FULL_ATTENTION = "full_attention"
LINEAR_ATTENTION = "linear_attention"

# Where rope settings may live, in order of preference: transformers >= 5 writes `rope_parameters`,
# older files have flat keys, and some carry them in `rope_scaling`.
_ROPE_SECTIONS = ("rope_parameters", None, "rope_scaling")


@dataclasses.dataclass(frozen=True)
class TextConfig:
    """The language model of Qwen3.5, with Hugging Face attribute names.

    Attention shapes follow from it: ``q_proj [num_attention_heads·2·head_dim, hidden_size]`` (query and
    output gate), ``k_proj``/``v_proj [num_key_value_heads·head_dim, hidden_size]``,
    ``o_proj [hidden_size, num_attention_heads·head_dim]``, ``q_norm``/``k_norm [head_dim]``. Gated DeltaNet
    shapes follow from the ``linear_*`` fields (see ``course.qwen35_weights.linear_attention_shapes``).
    """

    hidden_size: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    rms_norm_eps: float
    rope_theta: float
    partial_rotary_factor: float
    vocab_size: int
    num_hidden_layers: int
    layer_types: tuple[str, ...]
    intermediate_size: int
    linear_num_key_heads: int
    linear_num_value_heads: int
    linear_key_head_dim: int
    linear_value_head_dim: int
    linear_conv_kernel_dim: int
    attention_bias: bool
    tie_word_embeddings: bool
    dtype: str  # how the weights are stored, e.g. "bfloat16"
    hidden_act: str = "silu"  # the activation after the Gated DeltaNet layers' conv1d (and in the MLP)

    @property
    def rotary_dim(self) -> int:
        """How many leading dims of each head RoPE rotates: ``head_dim · partial_rotary_factor``."""
        return int(self.head_dim * self.partial_rotary_factor)

    @property
    def num_key_value_groups(self) -> int:
        """Query heads per key/value head."""
        return self.num_attention_heads // self.num_key_value_heads

    @property
    def full_attention_layers(self) -> tuple[int, ...]:
        """Indices of the softmax-attention layers (the others are Gated DeltaNet linear attention)."""
        return tuple(i for i, kind in enumerate(self.layer_types) if kind == FULL_ATTENTION)

    @property
    def linear_attention_layers(self) -> tuple[int, ...]:
        """Indices of the Gated DeltaNet (linear-attention) layers."""
        return tuple(i for i, kind in enumerate(self.layer_types) if kind == LINEAR_ATTENTION)


class ConfigError(ValueError):
    """A ``config.json`` that is not a Qwen3.5 configuration."""


def read_config(path) -> TextConfig:
    """Read ``TextConfig`` from a ``config.json`` file (or a folder that contains one)."""
    path = Path(path)
    if path.is_dir():
        path = path / "config.json"
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigError(f"{path} does not exist; a Qwen3.5 checkpoint folder has a config.json") from None
    except json.JSONDecodeError as error:
        raise ConfigError(f"{path} is not valid JSON ({error}); download it again") from None
    return text_config_from_dict(raw, source=str(path))


def text_config_from_dict(raw: dict, source: str = "config") -> TextConfig:
    """``TextConfig`` from a parsed ``config.json``: the whole file, or its ``text_config`` part alone."""
    text = raw.get("text_config", raw)

    def need(key):
        if key not in text:
            raise ConfigError(f"{source} has no {key!r} in {'text_config' if text is not raw else 'it'}; "
                              "is this the config.json of a Qwen3.5 model?")
        return text[key]

    def rope(key):
        for section in _ROPE_SECTIONS:
            values = text if section is None else (text.get(section) or {})
            if key in values:
                return values[key]
        raise ConfigError(f"{source} has no {key!r} (looked in text_config.rope_parameters, text_config and "
                          "text_config.rope_scaling); is this the config.json of a Qwen3.5 model?")

    num_layers = need("num_hidden_layers")
    layer_types = text.get("layer_types") or _layer_types_from_interval(need("full_attention_interval"), num_layers)
    if len(layer_types) != num_layers:
        raise ConfigError(f"{source}: layer_types lists {len(layer_types)} layers but num_hidden_layers is "
                          f"{num_layers}; the file is inconsistent, download it again")
    # The dtype sits in text_config in new files and at the top level (`torch_dtype`) in old ones.
    dtype = text.get("dtype") or text.get("torch_dtype") or raw.get("dtype") or raw.get("torch_dtype") or "bfloat16"
    tie = text.get("tie_word_embeddings", raw.get("tie_word_embeddings", False))
    return TextConfig(
        hidden_size=need("hidden_size"),
        num_attention_heads=need("num_attention_heads"),
        num_key_value_heads=need("num_key_value_heads"),
        head_dim=need("head_dim"),
        rms_norm_eps=float(need("rms_norm_eps")),
        rope_theta=float(rope("rope_theta")),
        partial_rotary_factor=float(rope("partial_rotary_factor")),
        vocab_size=need("vocab_size"),
        num_hidden_layers=num_layers,
        layer_types=tuple(layer_types),
        intermediate_size=need("intermediate_size"),
        linear_num_key_heads=need("linear_num_key_heads"),
        linear_num_value_heads=need("linear_num_value_heads"),
        linear_key_head_dim=need("linear_key_head_dim"),
        linear_value_head_dim=need("linear_value_head_dim"),
        linear_conv_kernel_dim=need("linear_conv_kernel_dim"),
        attention_bias=bool(text.get("attention_bias", False)),
        tie_word_embeddings=bool(tie),
        dtype=str(dtype),
        hidden_act=str(text.get("hidden_act", "silu")),
    )


def _layer_types_from_interval(interval: int, num_layers: int) -> list[str]:
    """Every ``interval``-th layer (the last of each group) is full attention, as in Qwen3-Next/3.5."""
    return [FULL_ATTENTION if (i + 1) % interval == 0 else LINEAR_ATTENTION for i in range(num_layers)]
