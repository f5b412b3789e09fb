"""What the course notebooks import, in two rooms.

This package's own modules are what verdicts depend on too, so the graders read them and the class store's key
hashes them: toy data (``toy``), the Qwen3.5 config (``qwen35``) and checkpoint loader (``qwen35_weights``),
the Llama model around a student's attention (``llama``), where SmolLM2's converted weights live
(``smollm2``), weights a grading job names by file (``stored_tensors``), the cache folder (``cache``), the course's
folder names (``layout``), and what the grader and the notebooks' visible checks share: how code under test is
called (``protocols``), how an output is compared (``compare``, ``tolerances``, ``output_rules``), what a
PyTorch error means (``torch_errors``), the rule against changing inputs in place (``inplace``), the grader's own
exception (``errors``) and the visible checks themselves (``checking``), which run the grader's public cases in
the student's kernel, so they ship with a handout that has no grader.

``course.tools`` holds what no verdict depends on: plots, the Qwen3.5 tokenizer, ``course-work`` and
``course-weights`` with its fetchers. Submodules are imported on demand, so that graders, which need only the
toy data, do not pay for matplotlib.
"""
