"""Feedback on mistakes nobody listed: a name only when it explains every case, the broken base named before
the exercise built on it, facts about the output when no name fits, and PyTorch's errors in the course's terms."""
import dataclasses
import itertools
import math

import pytest
import torch

from autograder.engine import clues, limits
from autograder.engine.assignments import ASSIGNMENTS, EXERCISES
from autograder.engine.grading import grade_cells, judge
from autograder.engine.student_code import Cell
from course import torch_errors
from course.compare import compare
from tests import tiers
from tests.natural_mistakes import a08 as natural_a08
from tests.natural_mistakes import patch
from tests.natural_mistakes import source as natural_source
from tests.students import a01, a02, a03, a04, a05, a06, a07, a08

REAL_MODEL = {e.name for e in ASSIGNMENTS["07_real_model"]}


def _code_01(**replace) -> list[Cell]:
    return a01.cells(replace)


def _verdicts(assignment: str, cells: list[Cell], sandbox) -> dict:
    return {v.exercise: v for v in grade_cells(assignment, cells, sandbox)}


@pytest.mark.parametrize("exercise", [pytest.param(e, marks=tiers.marks(e.name), id=e.name) for e in EXERCISES.values()])
def test_no_two_known_mistakes_give_the_same_outputs_on_every_case(exercise, request):
    """A name is only as good as the cases that tell it from the others: every known mistake given as code
    differs from the reference on some case, and from every other such mistake on some case."""
    if exercise.name in REAL_MODEL:
        request.getfixturevalue("smollm2_weights")
    cases = exercise.cases()
    outputs = {}
    for mistake in (m for m in exercise.mistakes if m.fn is not None):
        results = []
        for case in cases:
            try:
                results.append(exercise.graded(exercise.call(mistake.fn, case.in_float64())))
            except Exception:  # noqa: BLE001 - a mistake may not run on every case's shapes
                results.append(None)
        outputs[mistake.name] = results
    reference = [exercise.graded(exercise.call(exercise.reference, case.in_float64())) for case in cases]

    def differ(a, b, case) -> bool:
        if a is None or b is None:
            return a is not b
        return compare(a, b, case.dtype, exercise.tolerance(case.dtype), equal_nan=True) is not None

    for name, results in outputs.items():
        assert any(differ(r, want, c) for r, want, c in zip(results, reference, cases)), \
            f"{exercise.name}: the mistake {name!r} gives the reference's output on every case"
    for (a, ra), (b, rb) in itertools.combinations(outputs.items(), 2):
        assert any(differ(x, y, c) for x, y, c in zip(ra, rb, cases)), \
            f"{exercise.name}: no case tells {a!r} from {b!r}"


def test_every_dependency_is_an_exercise_of_the_course():
    for exercise in EXERCISES.values():
        assert set(exercise.uses) <= set(EXERCISES) - {exercise.name}, exercise.name


def test_a_scale_that_equals_a_known_one_on_one_case_is_not_named(sandbox):
    """Megatron-LM #1501 scales MLA scores by 1/√(hidden/heads). On the first MLA case that equals the
    tutorial's 1/(√d + √d_rope); the cases after it tell them apart, so neither scale is named."""
    cells = a04.cells({"MultiHeadLatentAttention": a04._mla().replace(
        "self.softmax_scale = 1.0 / math.sqrt(d_qk)",
        "self.softmax_scale = 1.0 / math.sqrt(config.hidden_size / self.n_heads)")})
    verdict = judge(EXERCISES["MultiHeadLatentAttention"], cells, sandbox)
    assert not verdict.passed
    assert verdict.mistake == "" and "看起来是" not in verdict.details, verdict.message


def test_d_to_the_one_half_is_not_called_a_forgotten_scale(sandbox):
    """``d ** 1/2`` is d / 2: right when D = 4, a factor 2/√D otherwise. It is not "忘了除以 √D"; the clue gives
    the factor."""
    cells = _code_01(attention_scores='''
def attention_scores(q, k):
    d = q.shape[-1]
    return q @ k.transpose(-2, -1) / d ** 1/2
''')
    verdict = judge(EXERCISES["attention_scores"], cells, sandbox)
    assert not verdict.passed and verdict.mistake == "", verdict.message
    assert "线索：整个输出正好是参考的" in verdict.details, verdict.message


def test_a_correct_exercise_on_a_broken_helper_names_the_helper(sandbox):
    broken = a01.CORRECT["masked_softmax"].replace("dim=-1", "dim=-2")
    verdicts = _verdicts("01_attention_basics", _code_01(masked_softmax=broken), sandbox)
    assert not verdicts["masked_softmax"].passed
    attention = verdicts["attention"]
    assert not attention.passed
    assert "masked_softmax" in attention.summary and attention.mistake == "", attention.message
    # The helper's own diagnosis is repeated; none of attention's own is attempted on top of it.
    assert verdicts["masked_softmax"].summary in attention.details and attention.details.count("看起来是") == 1


@pytest.mark.model
def test_an_exercises_own_mistake_is_named_beside_a_broken_base_that_cannot_reach_it(sandbox, smollm2_weights):
    """sample_generate drawing from torch's global generator, on a sampling_probs that fails only its bfloat16
    case (its result is float32 there; the model's logits are float32): both are said, the generator by name."""
    probs_in_float32 = a07.CORRECT["sampling_probs"].replace("z = logits / temperature",
                                                             "z = logits.float() if logits.dtype == torch.bfloat16 else logits\n"
                                                             "    z = z / temperature")
    no_generator = a07.CORRECT["sample_generate"].replace(", generator=generator)", ")")
    verdicts = _verdicts("07_real_model", a07.cells({"sampling_probs": probs_in_float32}), sandbox)
    assert verdicts["sampling_probs"].summary == "没有通过：dtype 不对", verdicts["sampling_probs"].message
    verdict = judge(EXERCISES["sample_generate"], a07.cells({"sampling_probs": probs_in_float32,
                                                             "sample_generate": no_generator}), sandbox)
    assert "采样时没有用给的 generator" in verdict.summary and "sampling_probs" in verdict.summary, verdict.message
    assert verdict.mistake == "采样时没有用给的 generator" and "dtype 不对" in verdict.details, verdict.message
    # A base that does reach the draws (the temperature multiplied in): the base alone is named, as before.
    hot = a07.CORRECT["sampling_probs"].replace("z = logits / temperature", "z = logits * temperature")
    verdict = judge(EXERCISES["sample_generate"], a07.cells({"sampling_probs": hot}), sandbox)
    assert verdict.summary == "没有通过：用到的 sampling_probs 还没通过它自己的检查" and not verdict.mistake, verdict.message


def test_a_gradient_through_a_broken_gate_names_the_gate(sandbox):
    """gate_gradient whose y comes from the student's apply_output_gate, which forgot the sigmoid: the gate is named
    as the cause; with a correct gate the same gradient passes."""
    through_gate = a05.CORRECT["gate_gradient"].replace("err = r + g * o - t", "err = r + apply_output_gate(o, x @ w) - t")
    no_sigmoid = next(code for name, named, code in a05.MISTAKES if named == "没有过 sigmoid")
    assert judge(EXERCISES["gate_gradient"], a05.cells({"gate_gradient": through_gate}), sandbox).passed
    verdict = judge(EXERCISES["gate_gradient"], a05.cells({"gate_gradient": through_gate,
                                                           "apply_output_gate": no_sigmoid}), sandbox)
    assert verdict.summary == "没有通过：用到的 apply_output_gate 还没通过它自己的检查", verdict.message


def test_two_mistakes_in_one_function_are_both_named(sandbox):
    """Keys from q_proj and no o_proj: no one known mistake fits, the two together do."""
    both = a02.CORRECT["MultiHeadAttention"].replace("self.k_proj(x)", "self.q_proj(x)").replace(
        "return self.o_proj(merge_heads(out))", "return merge_heads(out)")
    verdict = judge(EXERCISES["MultiHeadAttention"], a02.cells({"MultiHeadAttention": both}), sandbox)
    assert verdict.mistake == "忘了 o_proj；key 用 q_proj 算了", verdict.message
    assert "这里有两个错" in verdict.details, verdict.message


def test_an_own_mistake_on_a_broken_base_is_named_through_the_bases_mistake(sandbox):
    """merge_heads transposing the last two dims and keys from q_proj: MultiHeadAttention's own mistake is found
    with merge_heads' named mistake put into the reference, and said beside the broken base."""
    merge = a02.CORRECT["merge_heads"].replace("x.transpose(1, 2)", "x.transpose(-2, -1)")
    keys = a02.CORRECT["MultiHeadAttention"].replace("self.k_proj(x)", "self.q_proj(x)")
    verdicts = _verdicts("02_multi_head", a02.cells({"merge_heads": merge, "MultiHeadAttention": keys}), sandbox)
    assert verdicts["merge_heads"].mistake.startswith("transpose 的是最后两维"), verdicts["merge_heads"].message
    verdict = verdicts["MultiHeadAttention"]
    assert verdict.mistake == "key 用 q_proj 算了" and "merge_heads" in verdict.summary, verdict.message
    # Right apart from the base: said so, and nothing of its own is named.
    verdict = _verdicts("02_multi_head", a02.cells({"merge_heads": merge}), sandbox)["MultiHeadAttention"]
    assert "这一题自己的代码看来没有错" in verdict.details and not verdict.mistake, verdict.message


@pytest.mark.model
def test_a_stage_that_goes_wrong_before_the_broken_base_is_the_layers_own(sandbox):
    """A chunked rule solving (I − A) and a layer scaling k as well as q: the layer's first wrong stage (the
    heads) runs before the rule, so the layer is told it has a mistake of its own there."""
    entry = next(e for e in natural_a08.ENTRIES if e.id == "08-double-i-minus-a-and-k-scaled")
    layer = EXERCISES["Qwen35GatedDeltaNet"]
    verdict = judge(layer, [Cell("代码单元 #1", natural_source(natural_a08, entry))], sandbox)
    assert "chunked_gated_delta_rule" in verdict.summary, verdict.message
    assert "这一题自己也有错：第一个和参考不一样的步骤是heads 返回的" in verdict.details, verdict.message
    # The rule broken alone: the layer's stages agree with the reference's up to the rule, so nothing is said.
    rule_only = dataclasses.replace(entry, code={name: code for name, code in entry.code.items()
                                                 if name == "chunked_gated_delta_rule"})
    verdict = judge(layer, [Cell("代码单元 #1", natural_source(natural_a08, rule_only))], sandbox)
    assert "先不诊断" in verdict.details, verdict.message


def test_a_later_exercise_the_code_calls_is_blamed_too(sandbox):
    """delta_rule written as gated_delta_rule with g = 0, on a gated_delta_rule whose β multiplies v alone: the
    delta rule's own catalogue has that mistake too, but it is the base's, which names it."""
    cells = a08.cells({
        "delta_rule": "def delta_rule(q, k, v, beta, state=None):\n"
                      "    return gated_delta_rule(q, k, v, torch.zeros_like(beta), beta, state)\n",
        "gated_delta_rule": next(code for name, named, code in a08.MISTAKES if (name, named) == ("gated_delta_rule", "β 只乘了 v"))})
    verdict = judge(EXERCISES["delta_rule"], cells, sandbox)
    assert verdict.summary == "没有通过：用到的 gated_delta_rule 还没通过它自己的检查", verdict.message


def test_a_helper_the_exercise_does_not_call_is_not_blamed(sandbox):
    broken = a01.CORRECT["masked_softmax"].replace("dim=-1", "dim=-2")
    own_softmax = '''
def attention(q, k, v, mask=None):
    scores = attention_scores(q, k)
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.softmax(scores, dim=-1).nan_to_num(0.0)
    return weights @ v, weights
'''
    verdicts = _verdicts("01_attention_basics", _code_01(masked_softmax=broken, attention=own_softmax), sandbox)
    assert not verdicts["masked_softmax"].passed and verdicts["attention"].passed, verdicts["attention"].message


def test_a_helper_reached_through_another_function_is_found(sandbox):
    """The exercise calls a function of the student's own, which calls the broken helper."""
    broken = a01.CORRECT["masked_softmax"].replace("dim=-1", "dim=-2")
    through = '''
def _weights(q, k, mask):
    return masked_softmax(attention_scores(q, k), mask)

def attention(q, k, v, mask=None):
    weights = _weights(q, k, mask)
    return weights @ v, weights
'''
    verdicts = _verdicts("01_attention_basics", _code_01(masked_softmax=broken, attention=through), sandbox)
    assert "masked_softmax" in verdicts["attention"].summary, verdicts["attention"].message


def test_a_cache_that_takes_more_arguments_is_called_as_the_module_calls_it(sandbox):
    """The decode check records what the module hands its cache, and forwards every argument."""
    cache = a03.CORRECT["KVCache"].replace("def update(self, k, v):", "def update(self, k, v, layer=None):")
    module = a03.CORRECT["GroupedQueryAttention"].replace(
        "k, v = cache.update(k, v)", "k, v = cache.update(k, v, layer=0)")
    assert module != a03.CORRECT["GroupedQueryAttention"]
    verdict = judge(EXERCISES["GroupedQueryAttention"], a03.cells({"KVCache": cache, "GroupedQueryAttention": module}),
                    sandbox)
    assert verdict.passed, verdict.message


def _raised(fn) -> str:
    with pytest.raises(Exception) as caught:
        fn()
    return f"{type(caught.value).__name__}: {caught.value}"


ERRORS = {
    "matmul": (lambda: torch.nn.Linear(16, 8)(torch.zeros(2, 3, 8)), "左边的最后一维 8 应该等于右边的第一维 16"),
    "matmul of two tensors": (lambda: torch.zeros(6, 4) @ torch.zeros(1, 4), "左边的最后一维 4 应该等于右边的第一维 1"),
    "unflatten": (lambda: torch.zeros(2, 19).unflatten(-1, (2, 8)), "拆成 [2, 8]，可这几个数乘起来不等于 19"),
    "grouped conv on [B, T, C]": (lambda: torch.nn.functional.conv1d(torch.zeros(1, 5, 48), torch.zeros(48, 1, 4), groups=5),
                                  "通道在第 1 维。x 是 [B, T, 通道] 的话，先 transpose(1, 2)"),
    "bmm": (lambda: torch.zeros(2, 3, 4) @ torch.zeros(2, 6, 5), "A 的最后一维是 4，B 的倒数第二维却是 6"),
    "broadcast": (lambda: torch.zeros(2, 4, 3, 3) + torch.zeros(2, 2, 3, 3), "第 1 维一个是 4，一个是 2"),
    "cat": (lambda: torch.cat([torch.zeros(1, 2, 3, 4), torch.zeros(1, 3, 3, 4)], dim=2), "torch.cat 沿第 2 维"),
    "view": (lambda: torch.zeros(2, 3, 4, 5).transpose(1, 2).view(2, 4, 15), "contiguous"),
    "reshape": (lambda: torch.zeros(2, 3, 8).view(2, 3, 4, 3), "目标形状 [2, 3, 4, 3]"),
    "dtype": (lambda: torch.zeros(2, 3) @ torch.zeros(3, 2, dtype=torch.float64), "dtype 不一样"),
    "bf16 linear": (lambda: torch.nn.Linear(4, 4)(torch.zeros(2, 4, dtype=torch.bfloat16)), "dtype 不一样"),
    "unpack": (lambda: _unpack(), "要拆成 2 个值"),
    "dim": (lambda: torch.zeros(2, 3).softmax(dim=3), "这个张量只有 2 维"),
    "tuple": (lambda: (torch.zeros(1), torch.zeros(1)).transpose(0, 1), "tuple，不是张量"),
    "None": (lambda: None.shape, "这里的值是 None"),
    "bool mask": (lambda: torch.zeros(2, 2).masked_fill(torch.ones(2, 2), 0.0), "bool 张量"),
    "math on a tensor": (lambda: __import__("math").exp(torch.zeros(2, 3)), "torch.exp(x)"),
    "multinomial on 3-D": (lambda: torch.multinomial(torch.ones(2, 1, 5), 1), "logits[:, -1]"),
    "an empty slice": (lambda: torch.zeros(2, 5)[:, 4:2][..., -1], "第 1 维是空的（长度 0）"),
    "an index past the end": (lambda: torch.zeros(2, 5)[:, 7], "第 1 维只有 5 个"),
    "a token id past the vocabulary": (lambda: torch.nn.Embedding(10, 4)(torch.tensor([[3, 12]])), "argmax(dim=-1)"),
    "counts of one dtype, ones of another": (
        lambda: torch.zeros(2, 6).scatter_add_(-1, torch.tensor([[1, 1], [0, 3]]), torch.ones(2, 2, dtype=torch.long)),
        "dtype 相同"),
    "bincount of a batch of token ids": (lambda: torch.bincount(torch.tensor([[1, 1], [0, 3]])), "一行一行地 bincount"),
    "the (values, indices) of max times a number": (lambda: 0.5 * torch.zeros(2, 3).max(dim=-1, keepdim=True), ".values"),
    "a weight that is no parameter": (lambda: _plain_weight().load_state_dict({"weight": torch.ones(3)}),
                                      "存成普通张量"),
    # PyTorch's words depend on the CPU's convolution kernel: oneDNN's name the input's and the weight's types
    # (explained below), the native kernel's say only "expected scalar type BFloat16 but found Float".
    "conv weight": (lambda: torch.nn.functional.conv1d(torch.zeros(1, 2, 5, dtype=torch.bfloat16), torch.zeros(2, 1, 3),
                                                       groups=2), ("卷积的输入是 bfloat16，权重却是 float32", "dtype 不一样")),
}


def _plain_weight() -> torch.nn.Module:
    norm = torch.nn.Module()
    norm.weight = torch.zeros(3)
    return norm


def _unpack():
    a, b = torch.zeros(3)
    return a, b


@pytest.mark.parametrize("what", ERRORS)
def test_pytorchs_errors_are_told_in_the_courses_terms(what):
    make, said = ERRORS[what]
    raised = _raised(make)
    meaning = torch_errors.explain(raised)
    if isinstance(said, tuple):  # (what oneDNN's message is told as, what the native kernel's is)
        said = said[0] if "Input type" in raised else said[1]
    assert meaning is not None and said in meaning, meaning


def test_onednns_convolution_dtype_message_names_the_input_and_the_weight():
    """The message oneDNN's kernel gives (on CPUs that have it) for a bf16 input and a float32 weight."""
    meaning = torch_errors.explain("RuntimeError: Input type (CPUBFloat16Type) and weight type (CPUFloatType) "
                                   "should be the same or input should be a MKLDNN tensor and weight is a dense tensor")
    assert meaning is not None and "卷积的输入是 bfloat16，权重却是 float32" in meaning, meaning


def test_a_norm_whose_weight_is_no_parameter_is_explained_when_graded(sandbox):
    """The explanation reaches the verdict: the grader sees only the first line of PyTorch's message."""
    plain = a06.CORRECT["ZeroCenteredRMSNorm"].replace("nn.Parameter(torch.zeros(dim))", "torch.zeros(dim)")
    assert plain != a06.CORRECT["ZeroCenteredRMSNorm"]
    verdict = judge(EXERCISES["ZeroCenteredRMSNorm"], a06.cells({"ZeroCenteredRMSNorm": plain}), sandbox)
    assert "loading state_dict" in verdict.summary and "存成普通张量" in verdict.details, verdict.message


def test_mixed_dtypes_are_explained_by_the_exercises_own_rule(sandbox):
    """A chunked rule that never converts bf16 inputs to float32 mixes them with its float32 state: the advice
    is the notebook's (work in float32, cast back), not the input-dtype advice that suits the earlier layers."""
    unconverted = patch(natural_a08.CORRECT["chunked_gated_delta_rule"],
                        ("q, k, v, g, beta = q.to(work), k.to(work), v.to(work), g.to(work), beta.to(work)", "pass"))
    verdict = judge(EXERCISES["chunked_gated_delta_rule"], [Cell("代码单元 #1", natural_a08.HEADER + unconverted)], sandbox)
    assert "这一题的约定是在 float32 里算" in verdict.details and "要用输入的 dtype" not in verdict.details, verdict.message
    assert torch_errors.explain("RuntimeError: expected scalar type BFloat16 but found Float") == torch_errors._IN_INPUT_DTYPE


def test_a_raising_exercise_gets_the_meaning_of_its_error(sandbox):
    """KV heads repeated along the sequence (prime-rl #2681): the scores cannot be formed."""
    cells = a03.cells({"repeat_kv": '''
def repeat_kv(x, n_rep):
    return torch.repeat_interleave(x, n_rep, dim=2)
'''})
    verdict = judge(EXERCISES["GroupedQueryAttention"], cells, sandbox)
    assert not verdict.passed
    assert "repeat_kv" in verdict.summary or "这是什么意思" in verdict.details, verdict.message


CLUES = {
    "a factor of √D": (lambda w: w * math.sqrt(8), "正好是参考的 2.82843 倍，也就是 √8（q 的最后一维 8"),
    "the sign": (lambda w: -w, "符号全反了"),
    "axes swapped": (lambda w: w.transpose(-1, -2).contiguous(), "第 2 维和第 3 维对调了"),
    "a shift": (lambda w: w.roll(1, -2), "错开了 1 个位置"),
    "some positions": (lambda w: torch.cat([w[..., :2], w[..., 2:] + 1], -1), "错只出在第 3 维（大小 4）的 2 个位置上：2–3"),
}


@pytest.mark.parametrize("what", CLUES)
def test_a_clue_states_what_is_true_of_the_output(what):
    change, said = CLUES[what]
    case = EXERCISES["attention_scores"].cases()[2]
    want = EXERCISES["attention_scores"].call(EXERCISES["attention_scores"].reference, case.in_float64())
    if what == "some positions":
        want = want[..., :4, :4]
    got = change(want.double()).float()
    found = clues.about_output(EXERCISES["attention_scores"].reference, case, got, want,
                               EXERCISES["attention_scores"].tolerance(torch.float32))
    assert any(said in clue for clue in found), (found, case.label)


def test_which_cases_came_out_right_is_said():
    cases = EXERCISES["causal_mask"].cases()[:3]
    said = clues.about_cases(cases, [True, False, True])
    assert said.startswith("3 个跑完的用例里对了 2 个") and cases[1].label in said.split("错的：")[1]


def test_a_huge_string_with_terminal_escapes_reaches_no_channel_whole(sandbox):
    """A returned string of 20 M characters with escapes: every text of the verdict is cleaned and capped, so the
    terminal, results.json, the class store, feedback pages and nbgrader cells only ever see that."""
    source = '''
def attention_scores(q, k):
    return "\\x1b[2J\\x1b[31m" + "A" * 20_000_000
'''
    verdict = judge(EXERCISES["attention_scores"], [Cell("代码单元 #1", source)], sandbox)
    assert not verdict.passed and not verdict.grader_problem
    for text, cap in ((verdict.summary, limits.SUMMARY_CHARS), (verdict.details, limits.MESSAGE_CHARS)):
        assert len(text) <= cap and "\x1b" not in text, text[:200]


def test_an_output_with_one_entry_too_many_is_said_so():
    want = torch.tensor([[5, 7, 9]])
    (said,) = clues.about_output(EXERCISES["greedy_generate"].reference, EXERCISES["attention_scores"].cases()[0],
                                 (torch.tensor([[5, 7, 9, 11]]), torch.tensor(True)), (want, torch.tensor(True)),
                                 EXERCISES["attention_scores"].tolerance(torch.float32))
    assert said.startswith("沿第 1 维，前 3 个都和参考一样，只是多了 1 个"), said


def test_a_class_defined_again_keeps_what_it_used_before():
    """A notebook's ``class M(M)`` cell adds a method: M still reaches what the first definition used."""
    from autograder.engine.student_code import student_code

    code = student_code([Cell("代码单元 #1", "def f():\n    return 1\n\nclass M:\n    def a(self):\n        return f()\n"),
                         Cell("代码单元 #2", "class M(M):\n    def b(self):\n        return 2\n")])
    assert code.reaches("M") == ("f",)


@pytest.mark.parametrize("got, want", [(torch.tensor(3), torch.tensor(4)), (torch.tensor(3.0), torch.tensor(4.0)),
                                       (torch.tensor(float("nan")), torch.tensor(4.0))])
def test_a_wrong_single_number_is_said_without_an_empty_position(got, want):
    said = compare(got, want.double() if want.is_floating_point() else want, torch.float32,
                   EXERCISES["attention_scores"].tolerance(torch.float32))
    assert "[]" not in said.text and "4" in said.text, said.text


def test_the_element_furthest_out_of_tolerance_is_named_by_its_index():
    want = torch.zeros(2, 3, 4, dtype=torch.float64)
    got = want.clone().float()
    got[1, 2, 0], got[0, 1, 3] = 0.5, 0.1  # both out of tolerance; [1, 2, 0] by far
    said = compare(got, want, torch.float32, EXERCISES["attention_scores"].tolerance(torch.float32))
    assert "2 个元素" in said.text and "差得最多的在 [1, 2, 0]：期望 0，得到 0.5" in said.text, said.text


@pytest.mark.parametrize("later", [0.08851201, 0.08851199], ids=["later one larger", "later one smaller"])
def test_of_differences_equal_but_for_rounding_the_first_is_named_whichever_is_larger(later):
    """Another CPU rounds the student's float32 output otherwise: which of two equal differences is a last bit
    larger must not move the position the message names."""
    want = torch.zeros(4, 40, dtype=torch.float64)
    got = want.clone().float()
    got[1, 13], got[3, 29], got[2, 5] = 0.088512, later, 0.01
    said = compare(got, want, torch.float32, EXERCISES["attention_scores"].tolerance(torch.float32))
    assert "差得最多的在 [1, 13]：期望 0，得到 0.088512" in said.text, said.text


def test_a_number_of_another_type_is_said_to_be_of_the_wrong_type():
    """numpy.prod's numpy.int64 reaches the grader as the sandbox's text for an object it cannot hand back."""
    said = compare("numpy.int64 对象", 512, torch.float32, EXERCISES["attention_flops"].tolerance(torch.float32))
    assert said.kind == "type" and "Python 的 int" in said.text and "int(…)" in said.text, said.text
    assert compare(511, 512, torch.float32, EXERCISES["attention_flops"].tolerance(torch.float32)).kind == "values"
