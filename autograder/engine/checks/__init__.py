"""One module per exercise, named after it: its cases, its known mistakes and its ``EXERCISE``. What several
checks share (seeded inputs, module weights, the real model) is in ``autograder.engine.inputs``."""

# The exercises of 01 that every attention module of the later assignments may be built on (``Exercise.uses``).
ATTENTION_BASICS = ("attention_scores", "causal_mask", "padding_mask", "masked_softmax", "attention")
