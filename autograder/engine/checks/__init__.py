"""One module per exercise, named after it: its cases, its known mistakes and its ``EXERCISE``. What several
checks share (seeded inputs, module weights, the real model) is in ``autograder.engine.inputs``."""
