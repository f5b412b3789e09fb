"""The assignments the graders know: each one's exercises in notebook order, and what its graders need on the
machine besides the course (``Weights`` fetched once). Tools act on these records: ``course-doctor`` checks
what is needed, the Gradescope bundle and the project's tests fetch it."""
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from autograder.engine.checks import (
    apply_output_gate,
    apply_partial_rope,
    apply_penalties,
    apply_rope,
    attention,
    attention_flops,
    attention_scores,
    beam_search,
    causal_conv1d,
    causal_mask,
    chunked_gated_delta_rule,
    delta_rule,
    flash_attention_backward,
    flash_attention_forward,
    flash_attention_function,
    forward_absorbed,
    gate_gradient,
    gated_delta_rule,
    greedy_generate,
    grouped_query_attention,
    kv_cache,
    kv_cache_bytes,
    latent_kv_cache,
    linear_attention,
    linear_attention_recurrent,
    llama_attention,
    masked_softmax,
    merge_heads,
    min_p_filter,
    mla_cache_bytes,
    multi_head_attention,
    multi_head_latent_attention,
    online_softmax_attention,
    padding_mask,
    qwen35_attention,
    qwen35_gated_deltanet,
    repeat_kv,
    rope_cos_sin,
    sample_generate,
    sampling_probs,
    split_heads,
    split_query_gate,
    zero_centered_rms_norm,
)
from autograder.engine.model import Exercise
from course import smollm2


@dataclass(frozen=True)
class Weights:
    """Real weights that graders read from the course's cache folder: ``ready()`` says whether they are in
    ``folder()``; ``command``, a console script of the course, fetches them (and does nothing when they are)."""

    name: str
    folder: Callable[[], Path]
    ready: Callable[[], bool]
    command: str


@dataclass(frozen=True)
class Assignment:
    name: str
    exercises: tuple[Exercise, ...]
    needs: tuple[Weights, ...] = ()


SMOLLM2 = Weights(smollm2.MODEL_NAME, smollm2.model_folder, smollm2.is_ready, smollm2.COMMAND)

RECORDS: dict[str, Assignment] = {a.name: a for a in (
    Assignment("01_attention_basics", (
        attention_scores.EXERCISE,
        causal_mask.EXERCISE,
        padding_mask.EXERCISE,
        masked_softmax.EXERCISE,
        attention.EXERCISE,
        online_softmax_attention.EXERCISE,
    )),
    Assignment("02_multi_head", (split_heads.EXERCISE, merge_heads.EXERCISE, multi_head_attention.EXERCISE)),
    Assignment("03_gqa_kv_cache", (kv_cache.EXERCISE, repeat_kv.EXERCISE, grouped_query_attention.EXERCISE,
                                   kv_cache_bytes.EXERCISE, attention_flops.EXERCISE)),
    Assignment("04_rope_mla", (
        rope_cos_sin.EXERCISE,
        apply_rope.EXERCISE,
        latent_kv_cache.EXERCISE,
        multi_head_latent_attention.EXERCISE,
        forward_absorbed.EXERCISE,
        mla_cache_bytes.EXERCISE,
    )),
    Assignment("05_output_gate", (split_query_gate.EXERCISE, apply_output_gate.EXERCISE, gate_gradient.EXERCISE)),
    Assignment("06_qwen35_attention", (zero_centered_rms_norm.EXERCISE, apply_partial_rope.EXERCISE,
                                       qwen35_attention.EXERCISE)),
    Assignment("07_real_model", (llama_attention.EXERCISE, greedy_generate.EXERCISE, sampling_probs.EXERCISE,
                                 sample_generate.EXERCISE, apply_penalties.EXERCISE, min_p_filter.EXERCISE,
                                 beam_search.EXERCISE),
               needs=(SMOLLM2,)),
    Assignment("08_gated_deltanet", (
        linear_attention.EXERCISE,
        linear_attention_recurrent.EXERCISE,
        delta_rule.EXERCISE,
        gated_delta_rule.EXERCISE,
        chunked_gated_delta_rule.EXERCISE,
        causal_conv1d.EXERCISE,
        qwen35_gated_deltanet.EXERCISE,
    )),
    Assignment("09_flash_attention", (flash_attention_forward.EXERCISE, flash_attention_backward.EXERCISE,
                                      flash_attention_function.EXERCISE)),
)}

# Assignment -> its exercises, what most graders and tools look up.
ASSIGNMENTS: dict[str, tuple[Exercise, ...]] = {name: a.exercises for name, a in RECORDS.items()}
EXERCISES: dict[str, Exercise] = {e.name: e for exercises in ASSIGNMENTS.values() for e in exercises}


def needed_weights(assignments=None) -> list[Weights]:
    """The weights the graders of ``assignments`` (default: all) read, each once."""
    found = [w for name in (assignments or RECORDS) for w in RECORDS[name].needs]
    return list(dict.fromkeys(found))
