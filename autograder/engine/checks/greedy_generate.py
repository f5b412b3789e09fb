"""Check of ``greedy_generate(model, input_ids, max_new_tokens, attention_mask=None)``: greedy decoding through one
``KVCache`` per layer of the real SmolLM2-135M-Instruct, whose every layer runs the student's own
``LlamaAttention``. The tokens must be the reference's, one for one, and the model must read each position once
(the prompt, then the new tokens through the caches), not the whole sequence again for every token."""
import torch

from autograder.engine.inputs import smollm2
from autograder.engine.inputs.seeded import generator
from autograder.engine.judging import reference_result
from autograder.engine.model import Budget, Exercise, Mistake, public
from course import toy_llama
from course.protocols import Case, call_generate
from course.smollm2 import ModelFolder, chat_prompt

# The loops below run in a model built with the LlamaAttention found among this module's names, and
# decode with its KVCache (protocols.call_generate).
from solutions.gqa_kv_cache import KVCache
from solutions.real_model import LlamaAttention, greedy_generate  # noqa: F401

QUESTION = "What is the capital of France?"
# Every case says so: when the student's attention is wrong, the tokens are wrong, however right the loop is.
_OWN_ATTENTION = "模型的每一层用的是你自己的 LlamaAttention：它还没通过的话，先让它通过，这一题多半会跟着通过。"


def _case(folder, texts, max_new_tokens, note, shown=None) -> Case:
    ids, mask = smollm2.encode_batch(folder, texts)
    prompts = "、".join(f"“{text}”" for text in (shown or texts))
    padding = "，短的那句左侧 padding（给了 attention_mask）" if mask is not None else ""
    label = (f"{note}提示词 {prompts}（{ids.shape[1]} 个 token{padding}），生成 {max_new_tokens} 个 token。"
             f"{_OWN_ATTENTION}")
    return Case(label, (ModelFolder(folder), ids, max_new_tokens, mask))


def cases() -> list[Case]:
    folder = smollm2.model_folder()
    return public([
        _case(folder, ["The capital of France is"], 3, ""),
        _case(folder, ["The quick brown fox jumps over the", "Paris is the capital of"], 4, "一批两句，"),
        _case(folder, [chat_prompt(QUESTION)], 3, "对话格式，", shown=[f"用户问：{QUESTION}"]),
        _case(folder, ["Once upon a time"], 1, "只生成一个 token，"),
    ], 0, 1, 2)


def _loop(*, position=-1, shared_cache=False, cached=True, whole_sequence=False, extend_mask=True):
    """Greedy decoding with one thing done wrong: the logits of another ``position``, one cache object for
    every layer, no cache (each step sees only its new token), the whole sequence fed again each step, or the
    attention_mask never extended by the new tokens."""
    def generate(model, input_ids, max_new_tokens, attention_mask=None):
        caches = [KVCache()] * len(model.layers) if shared_cache else [KVCache() for _ in model.layers]
        sequence, step, mask, chosen = input_ids, input_ids, attention_mask, []
        for _ in range(max_new_tokens):
            logits = model(sequence if whole_sequence else step, attention_mask=mask,
                           caches=caches if cached else None)
            step = logits[:, position].argmax(dim=-1, keepdim=True)
            chosen.append(step)
            sequence = torch.cat([sequence, step], dim=1)
            if mask is not None and extend_mask:
                mask = torch.cat([mask, torch.ones_like(step)], dim=1)
        return torch.cat(chosen, dim=1)
    return generate


def _returned_the_prompt(case: Case, got) -> bool:
    """The prompt came back in front of the new tokens: ``[B, T + max_new_tokens]``."""
    _, input_ids, max_new_tokens, _ = case.args
    tokens = got[0] if isinstance(got, (tuple, list)) and got else None
    return (isinstance(tokens, torch.Tensor)
            and tokens.shape == (input_ids.shape[0], input_ids.shape[1] + max_new_tokens)
            and torch.equal(tokens[:, :input_ids.shape[1]], input_ids))


_STEP = ("第一步把整段提示词送进模型（prefill），之后每一步只送上一步选出的那一个 token [B, 1]，"
         "缓存里已经有前面所有位置的 K、V。")


def _right_tokens_without_the_cache(case: Case, got) -> bool:
    """The tokens are the reference's, but the model read far more positions than the prompt and the new tokens."""
    want, _ = reference_result(EXERCISE, case)
    return (isinstance(got, (tuple, list)) and len(got) == 2 and isinstance(got[0], torch.Tensor)
            and got[0].shape == want.shape and torch.equal(got[0], want) and not bool(got[1]))


MISTAKES = (
    Mistake("每一步都把整个序列又送了一遍，没有靠 KV cache 只送新 token", "生成的 token 对了，可是每一步都把越来越长的整个序列"
            "送进模型，前面位置的 K、V 一遍遍重算，生成 n 个 token 的计算量随 n² 增长（带着缓存这样送，缓存里的位置还会重复）。"
            + _STEP, matches=_right_tokens_without_the_cache),
    Mistake("返回的 token 里包括了提示词", "只返回新生成的 max_new_tokens 个 token：形状 [B, max_new_tokens]。",
            matches=_returned_the_prompt),
    Mistake("所有层共用了一个 KVCache", "[KVCache()] * n 是同一个对象重复 n 次，所有层的 K、V 会挤进同一个缓存。"
            "每层要有自己的缓存：[KVCache() for _ in model.layers]。", _loop(shared_cache=True)),
    Mistake("带着缓存把整个序列又送了一遍", _STEP + "缓存里已有的位置再送一遍，它们就在缓存里出现了两次。",
            _loop(whole_sequence=True)),
    Mistake("解码时模型的缓存里没有前文（没有把缓存交给模型，或每一步都新建了空缓存）", _STEP + "缓存在循环之前建一次，"
            "之后每一步都把同一组 caches 交给模型；不给 caches 或每步新建，模型看到的就只有这一个 token，前文全丢了。", _loop(cached=False)),
    Mistake("attention_mask 没有跟着新 token 变长", "attention_mask 盖住缓存里的和新来的所有位置：每生成一个 token，"
            "就在它后面接一列 1：torch.cat([mask, torch.ones_like(next_token)], dim=1)。",
            _loop(extend_mask=False)),
    Mistake("取了第一个位置的 logits", "下一个 token 看的是最后一个位置的预测：logits[:, -1]，[B, T, vocab] 里 T 这一维取 −1。",
            _loop(position=0)),
)

OUTPUT_NAMES = ("生成的 token id [B, max_new_tokens]", "模型是否只读了一遍提示词、每个新 token 各一次（带缓存解码）")

# The long-prompt case: a one-layer Llama of random weights (course.toy_llama) with a long prompt. Decoding
# through the caches reads the prompt once, then one position a step; reading the whole sequence again for each
# new token costs a prompt's worth of attention every step, tens of times more CPU time than the budget.
_PROMPT, _NEW, _CPU_S = 2048, 96, 4.0


def _long_prompt() -> list[Case]:
    ids = torch.randint(2, toy_llama.CONFIG["vocab_size"], (1, _PROMPT), generator=generator(72))
    return [Case(f"一层的小 Llama（随机权重），提示词 {_PROMPT} 个随机 token，生成 {_NEW} 个 token。{_OWN_ATTENTION}",
                 (str(toy_llama.folder()), ids, _NEW, None))]


BUDGET = Budget(_long_prompt, MISTAKES[0], f"带着缓存解码，提示词只读一遍，之后每一步只算一个新位置，用不了 {_CPU_S:.0f} 秒的零头；"
                f"每一步都把 {_PROMPT} 多个位置重算一遍，要多花几十倍。这个上限是评分的沙盒在你的进程之外量的。", cpu_s=_CPU_S)

EXERCISE = Exercise("greedy_generate", 4, greedy_generate, cases, MISTAKES, output_names=OUTPUT_NAMES,
                    call=call_generate, uses=("LlamaAttention", "KVCache"), budget=BUDGET)
