"""Runtime helpers imported by the course notebooks: toy data (``course.toy``), plots
(``course.plotting``), and for the Qwen3.5 layer the config (``course.qwen35``), the weights loader
(``course.weights``) and the tokenizer (``course.tokenizer``). Submodules are imported on demand so
that graders, which need only the toy data, do not pay for matplotlib."""
