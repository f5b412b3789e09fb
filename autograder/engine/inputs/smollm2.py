"""What the checks of 07 share: the real model (SmolLM2-135M-Instruct, converted by ``course-weights smollm2``),
real text for it, and one real layer with the hidden states that reach it.

When the weights are not in the cache, ``model_folder`` raises ``WeightsMissing``, whose message says which
command gets them: the grader reports that as its own problem, never as the student's.
"""
import functools
from dataclasses import dataclass
from pathlib import Path

import torch
from tokenizers import Tokenizer

from course import llama, protocols, smollm2
from solutions.real_model import LlamaAttention

LAYER = 16  # a layer with a clear previous-token head (head 0) next to heads that mostly look at the first token
# Two sentences of different lengths, so that the shorter one is left-padded in a batch.
SENTENCES = ("The quick brown fox jumps over the lazy dog because it wants to play.",
             "Paris is the capital of France.")
PAD_ID = 2  # SmolLM2's padding token (<|im_end|>); padded positions are masked anyway


def model_folder() -> Path:
    """The converted model's folder; ``course.smollm2.WeightsMissing`` (how to get it) when it is not there."""
    return smollm2.find_model()


@functools.lru_cache(maxsize=1)
def tokenizer(folder: Path) -> Tokenizer:
    return Tokenizer.from_file(str(folder / "tokenizer.json"))


def encode_batch(folder: Path, texts) -> tuple[torch.Tensor, torch.Tensor | None]:
    """``texts`` as token ids ``[B, T]``, left-padded to the longest with ``PAD_ID``, and the
    ``attention_mask [B, T]`` (None when no text is padded)."""
    encoded = [tokenizer(folder).encode(text).ids for text in texts]
    width = max(map(len, encoded))
    ids = torch.tensor([[PAD_ID] * (width - len(e)) + e for e in encoded])
    mask = torch.tensor([[0] * (width - len(e)) + [1] * len(e) for e in encoded])
    return ids, (None if bool(mask.all()) else mask)


@dataclass(frozen=True, eq=False)
class RealLayer:
    """Layer ``index``'s attention weights (float32) and the hidden states ``x [B, T, hidden]`` that enter
    its attention (after ``input_layernorm``) when the model reads ``SENTENCES``, with their mask."""

    index: int
    config: llama.LlamaConfig
    weights: dict
    x: torch.Tensor
    attention_mask: torch.Tensor


def real_layer() -> RealLayer:
    """Layer ``LAYER`` of the model in the cache (``WeightsMissing`` when there is none)."""
    return _layer_in(model_folder())


class _Reached(Exception):
    """Raised by the hook on layer ``LAYER``'s attention once it has seen its input: the layers above are not run."""


@functools.lru_cache(maxsize=1)
def _layer_in(folder: Path) -> RealLayer:
    ids, mask = encode_batch(folder, SENTENCES)
    # The grader's one copy of the reference model, which 07's generation references run in too.
    model = protocols.real_model(str(folder), LlamaAttention)
    attention = model.layers[LAYER].self_attn
    seen = []

    def record(module, args):
        seen.append(args[0].clone())
        raise _Reached

    hook = attention.register_forward_pre_hook(record)
    try:
        with torch.no_grad():
            model(ids, attention_mask=mask)
    except _Reached:
        pass
    finally:
        hook.remove()
    state = {name: tensor.clone() for name, tensor in attention.state_dict().items()}
    return RealLayer(LAYER, model.config, state, seen[0], mask)
