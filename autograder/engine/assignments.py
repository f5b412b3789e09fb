"""The assignments the graders know, and their exercises in notebook order."""
from pathlib import Path

from autograder.engine.checks import attention, attention_scores, causal_mask, masked_softmax, padding_mask
from autograder.engine.checks import (grouped_query_attention, kv_cache, kv_cache_bytes, merge_heads,
                               multi_head_attention, repeat_kv, split_heads)
from autograder.engine.checks import (apply_rope, forward_absorbed, latent_kv_cache, mla_cache_bytes,
                               multi_head_latent_attention, rope_cos_sin)
from autograder.engine.checks import (apply_output_gate, apply_partial_rope, gate_gradient, qwen35_attention,
                               split_query_gate, zero_centered_rms_norm)
from autograder.engine.checks import greedy_generate, llama_attention
from autograder.engine.exercise import Exercise

ASSIGNMENTS: dict[str, tuple[Exercise, ...]] = {
    "01_attention_basics": (
        attention_scores.EXERCISE,
        causal_mask.EXERCISE,
        padding_mask.EXERCISE,
        masked_softmax.EXERCISE,
        attention.EXERCISE,
    ),
    "02_multi_head": (split_heads.EXERCISE, merge_heads.EXERCISE, multi_head_attention.EXERCISE),
    "03_gqa_kv_cache": (kv_cache.EXERCISE, repeat_kv.EXERCISE, grouped_query_attention.EXERCISE,
                        kv_cache_bytes.EXERCISE),
    "04_rope_mla": (
        rope_cos_sin.EXERCISE,
        apply_rope.EXERCISE,
        latent_kv_cache.EXERCISE,
        multi_head_latent_attention.EXERCISE,
        forward_absorbed.EXERCISE,
        mla_cache_bytes.EXERCISE,
    ),
    "05_output_gate": (split_query_gate.EXERCISE, apply_output_gate.EXERCISE, gate_gradient.EXERCISE),
    "06_qwen35_attention": (zero_centered_rms_norm.EXERCISE, apply_partial_rope.EXERCISE, qwen35_attention.EXERCISE),
    "07_real_model": (llama_attention.EXERCISE, greedy_generate.EXERCISE),
}

EXERCISES: dict[str, Exercise] = {e.name: e for exercises in ASSIGNMENTS.values() for e in exercises}


def assignment_of(notebook: Path) -> str | None:
    """The assignment a notebook belongs to, by its folder or its file name (e.g. ``01_...ipynb``)."""
    for name in ASSIGNMENTS:
        if notebook.parent.name == name or notebook.stem.startswith(name) or notebook.stem.startswith(name[:3]):
            return name
    return None
