"""Check of ``sample_generate(model, input_ids, max_new_tokens, generator, attention_mask=None, **sampling)``: sampled
decoding through one ``KVCache`` per layer of the real SmolLM2-135M-Instruct with the student's own
``LlamaAttention`` in every layer, each token drawn by one ``torch.multinomial(probs, 1, generator=generator)`` from
the student's own ``sampling_probs`` of the last position. With the same seed the tokens must be the reference's,
one for one, and the model must read each position once (``protocols.call_sample_generate``)."""
import torch

from autograder.engine.inputs import smollm2
from autograder.engine.judging import reference_result
from autograder.engine.model import Exercise, Mistake, public
from course.protocols import Case, call_sample_generate
from course.smollm2 import ModelFolder

# The loops below run in a model built with the LlamaAttention found among this module's names, decode with its
# KVCache and filter with its sampling_probs (protocols.call_sample_generate).
from solutions.gqa_kv_cache import KVCache
from solutions.real_model import LlamaAttention, sample_generate, sampling_probs  # noqa: F401

_OWN_PARTS = ("模型的每一层用的是你自己的 LlamaAttention，分布来自你自己的 sampling_probs：它们还没通过的话，先让它们通过，"
              "这一题多半会跟着通过。")


def _case(folder, texts, max_new_tokens, seed, sampling: dict, note) -> Case:
    ids, mask = smollm2.encode_batch(folder, texts)
    prompts = "、".join(f"“{text}”" for text in texts)
    padding = "，短的那句左侧 padding（给了 attention_mask）" if mask is not None else ""
    options = "，".join(f"{name}={value}" for name, value in sampling.items())
    label = (f"{note}提示词 {prompts}（{ids.shape[1]} 个 token{padding}），用 torch.Generator().manual_seed({seed})（交给你之前已经用它抽过"
             f"一个数）抽 {max_new_tokens} 个 token，{options}。{_OWN_PARTS}")
    return Case(label, (ModelFolder(folder), ids, max_new_tokens, mask, seed), sampling)


def cases() -> list[Case]:
    folder = smollm2.model_folder()
    # Few, short cases: every step runs the whole model once, in the sandbox and again for the reference.
    return public([
        _case(folder, ["Once upon a time"], 2, 1, {"temperature": 0.7, "top_p": 0.9}, ""),
        _case(folder, ["The quick brown fox jumps over the", "My favourite food is"], 4, 0,
              {"temperature": 0.8, "top_k": 40}, "一批两句，"),
    ], 0, 1)


def _loop(*, pick="sample", own_generator=True, reseed=False, position=-1, cached=True, options=True, new_mask=1,
          shared_cache=False, tempered=False):
    """Sampled decoding with one thing done wrong: ``pick`` the ``"argmax"`` instead of sampling, or draw from the
    probabilities sorted from the most likely down, mapped back to token ids (``"sorted"``) or not (``"rank"``); draw from
    torch's global generator (``own_generator=False``) or re-seed the given one every step (``reseed``); the
    logits of another ``position``; no cache; the sampling options not passed on; the attention_mask extended by
    ``new_mask`` (0: the new tokens taken for padding); one cache object for every layer; the logits divided by the
    temperature before sampling_probs divides them again (``tempered``)."""
    def generate(model, input_ids, max_new_tokens, generator, attention_mask=None, **sampling):
        caches = [KVCache()] * len(model.layers) if shared_cache else [KVCache() for _ in model.layers]
        step, mask, chosen = input_ids, attention_mask, []
        for _ in range(max_new_tokens):
            logits = model(step, attention_mask=mask, caches=caches if cached else None)
            last = logits[:, position] / (sampling.get("temperature", 1.0) if tempered else 1.0)
            probs = sampling_probs(last, **(sampling if options else {}))
            if reseed:
                generator.manual_seed(generator.initial_seed())
            if pick == "argmax":
                step = probs.argmax(dim=-1, keepdim=True)
            elif pick in ("sorted", "rank"):
                ordered, order = probs.sort(dim=-1, descending=True)
                step = torch.multinomial(ordered, 1, generator=generator)
                step = order.gather(-1, step) if pick == "sorted" else step
            else:
                step = torch.multinomial(probs, 1, generator=generator if own_generator else None)
            chosen.append(step)
            if mask is not None:
                mask = torch.cat([mask, torch.full_like(step, new_mask)], dim=1)
        return torch.cat(chosen, dim=1)
    return generate


def _right_tokens_without_the_cache(case: Case, got) -> bool:
    """The tokens are the reference's, but the model read far more positions than the prompt and the new tokens."""
    want = reference_result(EXERCISE, case)[0]
    return (isinstance(got, (tuple, list)) and len(got) == 3 and isinstance(got[0], torch.Tensor)
            and got[0].shape == want.shape and torch.equal(got[0], want) and not bool(got[1]))


def _extra_draws(case: Case, got) -> bool:
    """The tokens and the reads are the reference's, the generator's state after the call is not."""
    want = reference_result(EXERCISE, case)
    return (isinstance(got, (tuple, list)) and len(got) == 3 and isinstance(got[0], torch.Tensor)
            and got[0].shape == want[0].shape and torch.equal(got[0], want[0]) and bool(got[1]) == bool(want[1])
            and isinstance(got[2], torch.Tensor) and not torch.equal(got[2], want[2]))


def _returned_the_prompt(case: Case, got) -> bool:
    """The prompt came back in front of the new tokens: ``[B, T + max_new_tokens]``."""
    _, input_ids, max_new_tokens, _, _ = case.args
    tokens = got[0] if isinstance(got, (tuple, list)) and got else None
    return (isinstance(tokens, torch.Tensor)
            and tokens.shape == (input_ids.shape[0], input_ids.shape[1] + max_new_tokens)
            and torch.equal(tokens[:, :input_ids.shape[1]], input_ids))


_DRAW = ("每一步只抽一次：torch.multinomial(probs, 1, generator=generator)，probs 是最后一个位置的 "
         "sampling_probs(logits[:, -1], **sampling)，[B, V]；除此之外不要从 generator 里取随机数。")
_STEP = ("第一步把整段提示词送进模型（prefill），之后每一步只送上一步抽出的那一个 token [B, 1]，"
         "缓存里已经有前面所有位置的 K、V。")

MISTAKES = (
    Mistake("每一步都把整个序列又送了一遍，没有靠 KV cache 只送新 token", "抽出的 token 对了，可是每一步都把越来越长的整个序列"
            "送进模型，前面位置的 K、V 一遍遍重算。" + _STEP, matches=_right_tokens_without_the_cache),
    Mistake("返回的 token 里包括了提示词", "只返回新生成的 max_new_tokens 个 token：形状 [B, max_new_tokens]。",
            matches=_returned_the_prompt),
    Mistake("用了 argmax，没有采样", "这一题是采样：按 sampling_probs 给的概率随机抽一个 token，"
            "不是每次都挑最可能的那个（那是 greedy_generate）。" + _DRAW, _loop(pick="argmax")),
    Mistake("在按概率从大到小排好序的分布上采样", "分布没有错，可同一个随机数落在排好序的概率上和落在词表原来顺序的概率上，"
            "抽到的是不同的 token：这门课（和 Hugging Face 一样）直接在 sampling_probs 给出的 [B, V] 上抽，同一个种子才得到"
            "同样的 token。Meta 的 Llama 代码在排好序的概率上抽再换回 token id，那是另一个约定。" + _DRAW,
            _loop(pick="sorted")),
    Mistake("在排好序的分布上采样，返回的是名次而不是 token id", "在 probs.sort(descending=True) 的结果上抽到的是名次"
            "（第几可能），还要用排序给出的下标换回 token id（order.gather(-1, 名次)）。更简单的是直接在 sampling_probs 给出的 "
            "[B, V] 上抽：" + _DRAW, _loop(pick="rank")),
    Mistake("采样时没有用给的 generator", "torch.multinomial 不传 generator=generator，就从 torch 的全局随机数里抽："
            "同一个种子得不到同样的文字，评分也没法复现。" + _DRAW, _loop(own_generator=False)),
    Mistake("每一步都重新给 generator 播种", "generator.manual_seed(...) 每一步都把随机数拨回起点，每一步抽到的随机数都一样。"
            "generator 在调用前已经播好种，循环里直接用它。" + _DRAW, _loop(reseed=True)),
    Mistake("从 generator 里多取了随机数", "抽出的 token 对了，可调用之后 generator 的状态和参考的不一样：除了每一步那一次 "
            "torch.multinomial，代码还从 generator 里取过随机数（或多抽了一步）。" + _DRAW, matches=_extra_draws),
    Mistake("采样时没有把 temperature、top_k、top_p 交给 sampling_probs", "sample_generate 收到的 **sampling 要原样传下去："
            "sampling_probs(logits[:, -1], **sampling)。", _loop(options=False)),
    Mistake("attention_mask 接上的是 0：新 token 被当成了 padding", "attention_mask 里 1 是真实的 token，0 是 padding："
            "每抽出一个 token，就在 mask 后面接一列 1（torch.ones_like(next_token)），否则新 token 在之后的注意力里都被遮住了。",
            _loop(new_mask=0)),
    Mistake("所有层共用了一个 KVCache", "[KVCache()] * n 是同一个对象重复 n 次，所有层的 K、V 会挤进同一个缓存。"
            "每层要有自己的缓存：[KVCache() for _ in model.layers]。", _loop(shared_cache=True)),
    Mistake("温度除了两次：先自己除了 temperature，又交给了 sampling_probs", "温度只由 sampling_probs 来除："
            "把 logits[:, -1] 原样交给它，temperature 放在 **sampling 里传下去。", _loop(tempered=True)),
    Mistake("解码时模型的缓存里没有前文（没有把缓存交给模型，或每一步都新建了空缓存）", _STEP + "缓存在循环之前建一次，"
            "之后每一步都把同一组 caches 交给模型；不给 caches 或每步新建，模型看到的就只有这一个 token，前文全丢了。", _loop(cached=False)),
    Mistake("取了第一个位置的 logits", "下一个 token 看的是最后一个位置的预测：logits[:, -1]，[B, T, vocab] 里 T 这一维取 −1。",
            _loop(position=0)),
)

OUTPUT_NAMES = ("抽出的 token id [B, max_new_tokens]", "模型是否只读了一遍提示词、每个新 token 各一次（带缓存解码）",
                "调用之后 generator 抽出的下一个随机数（每一步正好抽一次、不做别的用时，和参考一样）")

EXERCISE = Exercise("sample_generate", 3, sample_generate, cases, MISTAKES, output_names=OUTPUT_NAMES,
                    call=call_sample_generate, uses=("LlamaAttention", "KVCache", "sampling_probs"))
