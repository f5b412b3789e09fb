"""What the course notebooks import, in two rooms.

This package's own modules are what verdicts depend on too, so the graders read them and the class store's key
hashes them: toy data (``toy``), the Qwen3.5 config (``qwen35``) and checkpoint loader (``qwen35_weights``),
the Llama model around a student's attention (``llama``), where SmolLM2's converted weights live
(``smollm2``), weights a grading job names by file (``stored_tensors``), the cache folder (``cache``), the course's
folder names (``layout``), and the grader's rule against changing inputs in place, which the notebooks' visible
checks apply too (``inplace``).

``course.tools`` holds what no verdict depends on: plots, the Qwen3.5 tokenizer, ``course-work`` and
``course-weights`` with its fetchers. Submodules are imported on demand, so that graders, which need only the
toy data, do not pay for matplotlib.
"""
