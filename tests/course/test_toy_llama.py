"""The toy Llama of 07's long-prompt case (``course.toy_llama``): written once, whole, readable by the sandbox's user;
and a model whose greedy tokens depend on the prompt, so that the case tests decoding, not a constant."""
import stat

import torch

from autograder.engine.checks import greedy_generate
from course import llama, toy_llama
from course.cache import CACHE_ENV
from solutions.gqa_kv_cache import KVCache
from solutions.real_model import LlamaAttention


def test_the_folder_is_written_once_whole_and_readable_by_all(tmp_path, monkeypatch):
    monkeypatch.setenv(CACHE_ENV, str(tmp_path))
    (toy_llama.home() / ".writing-left-by-a-crash").mkdir(parents=True)  # a writer that died half way
    folder = toy_llama.folder()
    files = sorted(p.name for p in folder.iterdir())
    assert files == [llama.CONFIG_FILE, llama.WEIGHTS_FILE]
    assert stat.S_IMODE(folder.stat().st_mode) == 0o755
    assert all(stat.S_IMODE((folder / name).stat().st_mode) == 0o644 for name in files)
    written = (folder / llama.WEIGHTS_FILE).stat().st_mtime_ns
    assert toy_llama.folder() == folder and (folder / llama.WEIGHTS_FILE).stat().st_mtime_ns == written
    loaded = llama.load_model(folder, LlamaAttention).state_dict()
    assert all(torch.equal(loaded[key.removeprefix("model.")], value) for key, value in toy_llama.weights().items())


def _decode(model, ids, steps: int, cached: bool) -> tuple[list[int], list[float]]:
    """Greedy tokens, and the gap between the two best logits at each step; without ``cached``, each step sees only
    its own token (no context)."""
    caches = [KVCache() for _ in model.layers]
    step, tokens, gaps = ids, [], []
    with torch.no_grad():
        for _ in range(steps):
            logits = model(step, caches=caches if cached else None)[:, -1]
            best = logits.topk(2, dim=-1).values[0]
            gaps.append(float(best[0] - best[1]))
            step = logits.argmax(dim=-1, keepdim=True)
            tokens.append(int(step))
    return tokens, gaps


def test_the_long_prompt_case_decodes_varied_tokens_that_need_the_context():
    folder, ids, steps, _ = greedy_generate.BUDGET.cases()[0].args
    model = llama.load_model(folder, LlamaAttention)
    tokens, gaps = _decode(model, ids, steps, cached=True)
    blind, _ = _decode(model, ids, steps, cached=False)
    assert len(set(tokens)) >= 20  # not one token repeated
    assert sum(a != b for a, b in zip(tokens, blind)) >= 0.8 * steps  # the prompt decides them
    assert min(gaps) > 0.01  # far above float32 rounding: any right attention picks the same tokens
