"""How the code under test is called: a ``Case`` holds the inputs, a call protocol turns a function or
class into outputs. One definition serves both sides: in the sandbox the protocols call the student's
code; in the grader they call the reference and the known mistakes.

This package runs inside the sandbox, so it imports torch and, to build a real model around a student's
attention, the course's model code (``course.llama``, which the sandbox may read): no reference, no check.
Its modules are all imported here, by the fork server before the walls go up: a run can read no file of the
grading packages, so nothing of them may be imported later. Errors raised here reach the student, so they say in
Chinese what the code should look like; a ``GraderProblem`` raised here (the model's files cannot be read) is
the grading environment's, and reaches the teacher as such (``harness`` vouches that a line of ``FILES``
raised it).

The families: ``case`` (the case, the plain call, building a module, finding a neighbour), ``modules`` (modules
run whole or decoded through a cache), ``generation`` (07's loops in the real model), ``watches`` (how the code
computes: block by block, chunk by chunk, tile by tile), ``recurrent`` (08's rules, conv and layer, continued from a
state), ``autograd`` (09's ``torch.autograd.Function``, run forward and backward).
"""
from course import inplace
from course.protocols import autograd, case, generation, modules, recurrent, watches
from course.protocols.autograd import call_autograd
from course.protocols.case import STUDENT_MODULE, Case, build, call_function, map_tensors, neighbour, pair
from course.protocols.generation import (
    GLOBAL_SEED_OFFSET,
    call_beam,
    call_generate,
    call_sample_generate,
    real_model,
)
from course.protocols.modules import (
    LAYER_STAGES,
    call_absorbed_decoder,
    call_cache,
    call_decoder,
    call_latent_decoder,
    call_layer,
    call_module,
    call_norm,
)
from course.protocols.recurrent import (
    DELTANET_STAGES,
    call_conv,
    call_recurrent_decoder,
    call_rule,
    kept_state,
)
from course.protocols.watches import (
    REFUSING_FLASH,
    FlashKernelRefused,
    PerPosition,
    TilesNotSkipped,
    TileTooLarge,
    WholeScores,
    call_blockwise,
    call_chunkwise,
    call_tiled,
)

__all__ = ["DELTANET_STAGES", "FILES", "GLOBAL_SEED_OFFSET", "HANDED", "LAYER_STAGES", "PROTOCOLS", "PULLED",
           "REFUSING_FLASH", "STUDENT_MODULE", "Case", "FlashKernelRefused", "PerPosition",
           "TileTooLarge", "TilesNotSkipped", "WholeScores", "build", "call_absorbed_decoder", "call_autograd", "call_beam", "call_blockwise", "call_cache", "call_chunkwise", "call_conv",
           "call_decoder", "call_function", "call_generate", "call_latent_decoder", "call_layer", "call_module",
           "call_norm", "call_recurrent_decoder", "call_rule", "call_sample_generate", "call_tiled", "handed_inputs", "kept_state", "map_tensors",
           "neighbour", "pair", "real_model"]

PROTOCOLS = {fn.__name__: fn for fn in (call_function, call_blockwise, call_module, call_decoder, call_latent_decoder,
                                         call_absorbed_decoder, call_generate, call_sample_generate, call_cache, call_norm,
                                         call_layer, call_rule, call_chunkwise, call_conv,
                                         call_recurrent_decoder, call_tiled, call_autograd, call_beam)}

# The student's own classes that a protocol hands to the code under test, whatever that code names: the cache
# a decoder is given, the attention in every layer of the real model.
PULLED = {"call_decoder": ("KVCache",), "call_latent_decoder": ("LatentKVCache",),
          "call_absorbed_decoder": ("LatentKVCache",), "call_generate": ("LlamaAttention",),
          "call_sample_generate": ("LlamaAttention",)}

# How a protocol hands a case's positional inputs to the code under test, so that an input the code changes in
# place is named by the parameter it arrives in, as the notebook's own check names it (``course.inplace.named``):
# the method of the code it calls (None: the code itself), the case's positions in the order that method takes its
# arguments (None: what the protocol makes itself, ``self`` or the model), and those it hands by keyword. A
# protocol not listed here hands the case's arguments to the code as they are; call_cache hands the pairs of
# its one input to ``update`` one call at a time, and its inputs are named by position.
HANDED = {
    "call_module": ("forward", (None, 2), {}),
    "call_decoder": ("forward", (None, 2), {}),
    "call_latent_decoder": ("forward", (None, 2), {}),
    "call_absorbed_decoder": ("forward_absorbed", (None, 2), {}),
    "call_recurrent_decoder": ("forward", (None, 2), {}),
    "call_norm": ("forward", (None, 3), {}),
    "call_layer": ("forward", (None, 2, 3, 4), {"attention_mask": 5}),
    "call_generate": (None, (None, 1, 2), {"attention_mask": 3}),
    "call_sample_generate": (None, (None, 1, 2, None), {"attention_mask": 3}),
    "call_beam": (None, (None, 1, 2, 3), {}),
    "call_cache": ("update", (), {}),
}


def handed_inputs(call: str, code, case) -> list[tuple[str, object]]:
    """Every input of ``case``, its positional arguments and then its keyword arguments, named as the notebook's
    own check names an input it finds changed (``course.inplace.named``): by the parameter of the code under test
    that the protocol hands it to (``HANDED``), else by position and keyword. The code's signature is the
    student's to write: whatever looking at it raises, the names fall back to positions."""
    method, order, keywords = HANDED.get(call, (None, range(len(case.args)), {}))
    names = [f"第 {i + 1} 个参数" for i in range(len(case.args))]
    try:
        stand_ins = [object() for _ in order]
        by_keyword = {key: object() for key in keywords}
        found = {id(value): name for name, value in
                 inplace.named(code if method is None else getattr(code, method), tuple(stand_ins), by_keyword)}
        for stand_in, position in [*zip(stand_ins, order), *((by_keyword[key], keywords[key]) for key in keywords)]:
            if position is not None and id(stand_in) in found:
                names[position] = found[id(stand_in)]
    except BaseException:  # noqa: BLE001 - the student's signature, or a class's __getattr__, raised
        pass
    return [*zip(names, case.args), *((f"参数 {key}", value) for key, value in case.kwargs.items())]


# The source files of the protocols' code: a ``GraderProblem`` raised on a line of one of them is the grader's.
FILES = frozenset(module.__file__ for module in (autograd, case, generation, modules, recurrent, watches))
