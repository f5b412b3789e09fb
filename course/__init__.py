"""Runtime helpers imported by the course notebooks: toy data (``course.toy``), plots
(``course.tools.plotting``), and for the Qwen3.5 layer the config (``course.qwen35``), the weights loader
(``course.qwen35_weights``) and the tokenizer (``course.tools.tokenizer``). For the real model of assignment 07: the
Llama model around a student's attention (``course.llama``) and its SmolLM2 weights (``course.smollm2``,
converted by ``course.tools.gguf_llama``). ``course-weights`` (``course.tools.weights_cli``) fetches real weights into the
cache folder of ``course.cache``; ``course.tools.qwen35_fetch`` takes only layer 3 of the real Qwen3.5 from the Hub.
Submodules are imported on demand so that graders, which need only the toy data, do not pay for matplotlib."""
