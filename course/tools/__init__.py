"""Conveniences for notebooks and students, and fetchers of real weights: plots (``plotting``), the Qwen3.5
tokenizer (``tokenizer``), the student's work copy (``workspace``, ``course-work``), and ``course-weights``
(``weights_cli``, with ``qwen35_fetch`` and ``gguf_llama``). No verdict depends on these modules."""
