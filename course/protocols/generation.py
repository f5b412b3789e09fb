"""The protocols of 07's generation loops: the student's loop runs in the real model, built with the
``LlamaAttention`` defined next to it, and the protocol counts the positions the model is fed (a loop that
decodes through its caches reads each once). The weights are read here, where the code runs."""
import functools
import threading

import torch
from torch import nn

from course.errors import GraderProblem
from course.protocols.case import Case, layout_problems, neighbour


def call_generate(fn, case: Case) -> tuple:
    """``fn(model, input_ids, max_new_tokens, attention_mask=None)`` (greedy generation) in the real model
    stored in the folder ``case.args[0]``, with the ``LlamaAttention`` defined next to ``fn`` in every layer:
    the student's loop runs the student's attention, the reference's the reference's.

    Returns what ``fn`` returned, and whether the model was given no more positions than the prompt and the
    new tokens, each once (a bool tensor): true of a loop that decodes through its caches, however it feeds
    the prompt; false of one that runs the whole sequence again for every token.

    The weights are read from that folder here, where the code runs (the sandbox may read it), instead of
    travelling with the case.
    """
    folder, input_ids, max_new_tokens, attention_mask = case.args
    kwargs = {} if attention_mask is None else {"attention_mask": attention_mask}
    return _generate(fn, folder, input_ids, max_new_tokens, (), kwargs,
                     "argmax 选出的下一个 token 是 [B]，要写成 argmax(dim=-1, keepdim=True) 或 [:, None] 变成 [B, 1]。")


# Where code that ignores the generator it is given draws from: torch's global generator, seeded from the case's
# seed plus this when the model first runs (building it may draw from it), so that such code gives the same wrong
# tokens on every run, and a mistake can reproduce them.
GLOBAL_SEED_OFFSET = 1000
# Held while torch's global generator is seeded and drawn from for one call: the grader's threads take turns.
_GLOBAL_GENERATOR = threading.Lock()


def call_sample_generate(fn, case: Case) -> tuple:
    """``fn(model, input_ids, max_new_tokens, generator, attention_mask=None, **sampling)`` (sampled generation),
    run as ``call_generate`` runs greedy generation, with ``generator = torch.Generator().manual_seed(seed)``
    made here for each call and used once before it: ``case.args`` is ``(folder, input_ids, max_new_tokens, attention_mask,
    seed)``, ``case.kwargs`` the sampling options (``temperature, top_k, top_p``). Torch's global generator is
    seeded too (``GLOBAL_SEED_OFFSET``) and restored afterwards.

    Returns what ``fn`` returned, whether the model read each position once (as ``call_generate``), and the
    generator's next number after the call: one draw per step and no other use of it leave the reference's.
    """
    folder, input_ids, max_new_tokens, attention_mask, seed = case.args
    kwargs = {**({} if attention_mask is None else {"attention_mask": attention_mask}), **case.kwargs}
    generator = torch.Generator().manual_seed(seed)
    torch.rand((), generator=generator)  # handed over already used, as a notebook's generator often is
    with _GLOBAL_GENERATOR, torch.random.fork_rng(devices=[]):
        tokens, once = _generate(fn, folder, input_ids, max_new_tokens, (generator,), kwargs,
                                 "torch.multinomial(probs, 1, generator=generator) 抽出的正是 [B, 1]：probs 要是 [B, V] 两维。",
                                 first_run=lambda: torch.manual_seed(seed + GLOBAL_SEED_OFFSET))
    return tokens, once, torch.rand((), generator=generator)



def _generate(fn, folder: str, input_ids: torch.Tensor, max_new_tokens: int, extra: tuple, kwargs: dict,
              shape_hint: str, first_run=None) -> tuple:
    """``fn(model, input_ids, max_new_tokens, *extra, **kwargs)`` in the real model in ``folder`` with the
    ``LlamaAttention`` that goes with ``fn`` (``neighbour``): what it returned, and whether the model read each
    position at most once. ``shape_hint`` says how the code should shape the next token when it feeds the model a
    wrong shape; ``first_run()``, when given, is called as the model is first run."""
    attention = neighbour(fn, "LlamaAttention")
    fed = []

    def record(args, named):
        ids = args[0] if args else named.get("input_ids")
        if isinstance(ids, torch.Tensor) and ids.dim() != 2:
            raise ValueError(f"第 {len(fed) + 1} 次调用模型时，input_ids 的形状是 {list(ids.shape)}，应是 [B, T] 两维："
                             + shape_hint)
        if first_run is not None and not fed:
            first_run()
        fed.append(ids.shape[-1] if isinstance(ids, torch.Tensor) else 0)

    with torch.no_grad():
        tokens = fn(_Counted(lambda: real_model(folder, attention), record), input_ids, max_new_tokens, *extra, **kwargs)
    return tokens, torch.tensor(sum(fed) <= input_ids.shape[-1] + max_new_tokens)


class _Counted:
    """Stands for the model: ``record(args, kwargs)`` sees every call of it (``model(...)`` or ``model.forward(...)``)
    before it runs, and the model is built the first time the code under test uses it, so that a loop that is not
    written yet fails as such, before the attention it would run is even built. The counting is this object's, not
    a hook on the model, which ``real_model`` shares between the calls (and the threads) of a grading run."""

    def __init__(self, build, record):
        self._build, self._record, self._model = build, record, None

    def _real(self) -> nn.Module:
        if self._model is None:
            self._model = self._build()
        return self._model

    def __getattr__(self, name):
        return self.__call__ if name == "forward" else getattr(self._real(), name)

    def __call__(self, *args, **kwargs):
        model = self._real()
        self._record(args, kwargs)
        return model(*args, **kwargs)


@functools.lru_cache(maxsize=2)
def real_model(folder: str, attention) -> nn.Module:
    """The model in ``folder`` with ``attention`` in every layer (kept for the next case of the same run)."""
    from course import llama  # the weights loader: only the protocols that need a model import it

    config = llama.read_config(folder)
    with torch.device("cpu"):
        probe = attention(config)
    problems = layout_problems({name: list(t.shape) for name, t in probe.state_dict().items()},
                                {name: list(shape) for name, shape in llama.attention_shapes(config).items()})
    if problems:
        raise ValueError("LlamaAttention(config) 的参数和约定不一致：" + "；".join(problems) + "。")
    try:
        return llama.load_model(folder, attention)
    except OSError as e:
        raise GraderProblem(f"读不到 {folder} 里的模型权重（{type(e).__name__}: {e}）") from None


def call_beam(fn, case: Case):
    """``fn(next_log_probs, input_ids, num_beams, max_new_tokens)`` (beam search) on a toy language model: the case's
    table ``[V, V, V]`` holds the log-probabilities of the next token after each pair of tokens, and
    ``next_log_probs(ids [N, L])`` reads them for the last two tokens of each sequence."""
    table, input_ids, num_beams, max_new_tokens = case.args

    def next_log_probs(ids):
        if not (isinstance(ids, torch.Tensor) and ids.dim() == 2 and not ids.is_floating_point()):
            raise TypeError(f"next_log_probs 要的是 [N, L] 的整数 token id（N 个序列，一样长），得到的是 "
                            f"{list(ids.shape) if isinstance(ids, torch.Tensor) else type(ids).__name__}"
                            f"{f' 的 {ids.dtype}' if isinstance(ids, torch.Tensor) else ''}：只有一个序列时也要是 [1, L]。")
        if ids.shape[-1] < input_ids.shape[-1]:
            raise ValueError(f"next_log_probs 要看整条序列（提示词和已经生成的 token），得到的 ids 每条只有 {ids.shape[-1]} 个 token，"
                             f"比提示词的 {input_ids.shape[-1]} 个还短。")
        return table[ids[:, -2], ids[:, -1]]

    return fn(next_log_probs, input_ids, num_beams, max_new_tokens)
