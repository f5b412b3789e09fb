"""Turn a Llama-architecture GGUF file (llama.cpp's format) into a Hugging Face-style model folder:
``config.json``, ``model.safetensors`` (float32, Llama key names) and ``tokenizer.json``.

Three things differ between the two formats, and each is undone here:

- **Quantisation.** GGUF keeps most matrices in blocks of small integers with a scale (Q4_1: 32 weights
  share a float16 scale ``d`` and offset ``m``, each weight is ``d·q + m`` with ``q`` in 0..15). The
  ``gguf`` package turns them back into float32; every such value is exact in float32.
- **Names.** ``blk.5.attn_q.weight`` is ``model.layers.5.self_attn.q_proj.weight``, and so on (``_NAMES``).
- **The RoPE layout of q_proj and k_proj.** llama.cpp rotates adjacent pairs (dims 2i, 2i+1) of each
  head; Hugging Face's Llama rotates dim i with dim i + D/2 (rotate-half). So that both compute the same
  scores, llama.cpp's converter reorders the rows of each head of W_q and W_k: rotate-half row
  ``half·D/2 + i`` is stored at row ``2i + half``. ``rotate_half_rows`` puts every row back.

The tokenizer is built from the vocabulary and merges stored in the file, with the ``tokenizers``
library: byte-level BPE whose pre-tokeniser first splits off every digit on its own and then applies
GPT-2's regex (how SmolLM2's own ``tokenizer.json`` splits text; llama.cpp calls it ``smollm``).

``gguf`` is imported only when a file is converted, so the rest of the course never needs it.
"""
import json
import os
import shutil
import tempfile
from pathlib import Path

import numpy as np
import torch
from safetensors.torch import save_file
from tokenizers import AddedToken, Tokenizer, decoders, pre_tokenizers
from tokenizers.models import BPE

CONFIG_FILE, WEIGHTS_FILE, TOKENIZER_FILE = "config.json", "model.safetensors", "tokenizer.json"

# GGUF's name of each tensor of a block (``blk.N.``), and of the model around the blocks -> Hugging Face's.
_BLOCK_NAMES = {
    "attn_norm": "input_layernorm", "attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj",
    "attn_v": "self_attn.v_proj", "attn_output": "self_attn.o_proj", "ffn_norm": "post_attention_layernorm",
    "ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj", "ffn_down": "mlp.down_proj",
}
_MODEL_NAMES = {"token_embd": "model.embed_tokens", "output_norm": "model.norm", "output": "lm_head"}
_CONTROL_TOKEN = 3  # GGUF's token type of special tokens such as <|im_start|>


class GGUFError(ValueError):
    """A GGUF file that is not a Llama model this converter understands."""


def hf_name(gguf_name: str) -> str:
    """``blk.5.attn_q.weight`` -> ``model.layers.5.self_attn.q_proj.weight``, ``token_embd.weight`` ->
    ``model.embed_tokens.weight``."""
    stem, _, kind = gguf_name.rpartition(".")
    parts = stem.split(".")
    if parts[0] == "blk" and len(parts) == 3 and parts[2] in _BLOCK_NAMES:
        return f"model.layers.{parts[1]}.{_BLOCK_NAMES[parts[2]]}.{kind}"
    if stem in _MODEL_NAMES:
        return f"{_MODEL_NAMES[stem]}.{kind}"
    raise GGUFError(f"{gguf_name!r} is not a tensor of a Llama GGUF file this converter knows")


def rotate_half_rows(weight: torch.Tensor, heads: int) -> torch.Tensor:
    """Undo llama.cpp's row order of a q_proj / k_proj weight ``[heads·D, in]``.

    Within each head, stored row ``2i + half`` (``half`` 0 or 1, ``i < D/2``) goes back to row
    ``half·D/2 + i``: the pairs llama.cpp rotates together become dims ``i`` and ``i + D/2``.
    """
    head_dim = weight.shape[0] // heads
    by_pair = weight.reshape(heads, head_dim // 2, 2, *weight.shape[1:])  # [head, i, half, in]
    return by_pair.transpose(1, 2).reshape(weight.shape)


def _field(reader, key: str, default=None):
    field = reader.fields.get(key)
    if field is None:
        if default is None:
            raise GGUFError(f"the GGUF file has no {key!r}; is it a Llama model?")
        return default
    return field.contents()


def _float32_decimal(value: float) -> float:
    """A float32 read from the file as the shortest decimal that rounds to it (9.99999974e-06 -> 1e-05)."""
    return float(str(np.float32(value)))


def read_config(reader) -> dict:
    """The model's configuration with Hugging Face's ``LlamaConfig`` names, from the file's metadata."""
    arch = _field(reader, "general.architecture")
    if arch != "llama":
        raise GGUFError(f"the GGUF file holds a {arch!r} model, not a Llama one")
    heads = int(_field(reader, "llama.attention.head_count"))
    hidden = int(_field(reader, "llama.embedding_length"))
    names = {tensor.name for tensor in reader.tensors}
    return {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": hidden,
        "intermediate_size": int(_field(reader, "llama.feed_forward_length")),
        "num_hidden_layers": int(_field(reader, "llama.block_count")),
        "num_attention_heads": heads,
        "num_key_value_heads": int(_field(reader, "llama.attention.head_count_kv", heads)),
        "head_dim": int(_field(reader, "llama.rope.dimension_count", hidden // heads)),
        "rope_theta": _float32_decimal(_field(reader, "llama.rope.freq_base")),
        "rms_norm_eps": _float32_decimal(_field(reader, "llama.attention.layer_norm_rms_epsilon")),
        "max_position_embeddings": int(_field(reader, "llama.context_length")),
        "vocab_size": len(_field(reader, "tokenizer.ggml.tokens")),
        "tie_word_embeddings": "output.weight" not in names,
        "bos_token_id": int(_field(reader, "tokenizer.ggml.bos_token_id")),
        "eos_token_id": int(_field(reader, "tokenizer.ggml.eos_token_id")),
        "hidden_act": "silu",
        "attention_bias": False,
        "mlp_bias": False,
        "torch_dtype": "float32",
    }


def read_tensors(reader, config: dict, progress=None) -> dict[str, torch.Tensor]:
    """Every tensor of the file, dequantised to float32, under its Hugging Face name, q/k rows in
    rotate-half order. ``progress(n)`` is called after each tensor."""
    from gguf import GGMLQuantizationType, dequantize

    tensors = {}
    for tensor in reader.tensors:
        if tensor.tensor_type in (GGMLQuantizationType.F32, GGMLQuantizationType.F16):
            values = np.array(tensor.data, dtype=np.float32)  # a copy: the file is mapped read-only
        else:
            values = dequantize(tensor.data, tensor.tensor_type)
        # GGUF lists dimensions fastest first; torch wants them the other way round.
        weight = torch.from_numpy(np.ascontiguousarray(values)).reshape(tuple(reversed(tensor.shape.tolist())))
        name = hf_name(tensor.name)
        if name.endswith("self_attn.q_proj.weight"):
            weight = rotate_half_rows(weight, config["num_attention_heads"])
        elif name.endswith("self_attn.k_proj.weight"):
            weight = rotate_half_rows(weight, config["num_key_value_heads"])
        tensors[name] = weight.contiguous()
        if progress is not None:
            progress(1)
    return tensors


def read_tokenizer(reader) -> Tokenizer:
    """The file's byte-level BPE tokenizer as a ``tokenizers.Tokenizer``: its tokens (in the byte
    alphabet of GPT-2, as GGUF stores them), its merges in order, and its control tokens as special tokens."""
    tokens = list(_field(reader, "tokenizer.ggml.tokens"))
    if _field(reader, "tokenizer.ggml.model") != "gpt2":
        raise GGUFError("the GGUF file's tokenizer is not byte-level BPE (tokenizer.ggml.model is not 'gpt2')")
    merges = [tuple(merge.split(" ", 1)) for merge in _field(reader, "tokenizer.ggml.merges")]
    tokenizer = Tokenizer(BPE(vocab={token: i for i, token in enumerate(tokens)}, merges=merges, fuse_unk=False))
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Digits(individual_digits=True),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
    ])
    tokenizer.decoder = decoders.ByteLevel()
    kinds = _field(reader, "tokenizer.ggml.token_type")
    special = [AddedToken(token, special=True, normalized=False)
               for token, kind in zip(tokens, kinds) if kind == _CONTROL_TOKEN]
    tokenizer.add_special_tokens(special)
    return tokenizer


def open_gguf(gguf_file: Path):
    """A ``gguf.GGUFReader`` of ``gguf_file`` that parses the metadata, and hands out the tensors' data, as plain
    ndarray views of the mapped file. The reader slices its ``np.memmap`` once per value, and a memmap slice runs
    Python code: for SmolLM2's 49,152 tokens and 48,900 merges, 3.8 s against 1.3 s this way, and dequantize,
    which slices its input row group by row group, 1.2 s against 2.7 s. (Should a later gguf read the file some
    other way, this is simply the plain reader.)"""
    from gguf import GGUFReader

    class PlainViews(GGUFReader):
        def _get(self, *args, **kwargs):
            if isinstance(self.data, np.memmap):  # the first read: from then on, a plain view of the same map
                self.data = self.data.view(np.ndarray)
            return super()._get(*args, **kwargs)

    return PlainViews(gguf_file)


def convert(gguf_file: Path, folder: Path, progress: bool = True) -> Path:
    """Write ``folder`` (config.json, model.safetensors, tokenizer.json) from ``gguf_file``.

    The files are written into a temporary folder next to ``folder`` and moved into place at the end, so
    an interrupted run never leaves a half-written model behind.
    """
    from tqdm.auto import tqdm

    reader = open_gguf(gguf_file)
    config = read_config(reader)
    folder.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(dir=folder.parent, prefix=f".{folder.name}-"))
    try:
        with tqdm(total=len(reader.tensors), desc="dequantising", unit="tensor", disable=not progress) as bar:
            tensors = read_tensors(reader, config, bar.update)
        save_file(tensors, staging / WEIGHTS_FILE, metadata={"format": "pt", "source": gguf_file.name})
        (staging / CONFIG_FILE).write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")
        read_tokenizer(reader).save(str(staging / TOKENIZER_FILE))
        for file in staging.iterdir():
            file.chmod(0o644)
        staging.chmod(0o755)  # mkdtemp's folder is private; the model is not
        if folder.exists():
            shutil.rmtree(folder)
        os.replace(staging, folder)
    finally:
        if staging.exists():
            shutil.rmtree(staging)
    return folder
