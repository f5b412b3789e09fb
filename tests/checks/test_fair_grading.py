"""Correct alternatives pass and the messages are exact: Hugging Face's own layer, answers that work in
float32 inside, padding rows that no implementation defines — but not NaN there."""
import torch

from autograder.engine.assignments import EXERCISES
from autograder.engine.judging import grade
from autograder.engine.student_code import Cell
from course.compare import compare
from course.tolerances import Tolerance
from tests.students import a01, a02, notebook

HUGGING_FACE_LAYER = '''
import torch
from transformers.models.qwen3_5.configuration_qwen3_5 import Qwen3_5TextConfig
from transformers.models.qwen3_5.modeling_qwen3_5 import Qwen3_5Attention as HuggingFace


class Qwen35Attention(HuggingFace):
    """Hugging Face's own layer behind the exercise's interface."""

    def __init__(self, config):
        hf = Qwen3_5TextConfig(hidden_size=config.hidden_size, num_attention_heads=config.num_attention_heads,
                               num_key_value_heads=config.num_key_value_heads, head_dim=config.head_dim,
                               rms_norm_eps=config.rms_norm_eps, attention_bias=False, attention_dropout=0.0)
        hf._attn_implementation = "eager"
        super().__init__(hf, layer_idx=3)

    def forward(self, x, cos, sin, attention_mask=None):
        batch, seq = x.shape[:2]
        mask = torch.ones(batch, seq, dtype=torch.long) if attention_mask is None else attention_mask
        allowed = torch.ones(seq, seq, dtype=torch.bool).tril() & mask.bool()[:, None, None, :]
        additive = torch.zeros(allowed.shape, dtype=x.dtype).masked_fill(~allowed, torch.finfo(x.dtype).min)
        out, _ = super().forward(x, (cos[None].to(x.dtype), sin[None].to(x.dtype)), additive)
        return out
'''

FLOAT32_INSIDE = {
    "masked_softmax": '''
def masked_softmax(scores, mask=None):
    s = scores.float()
    if mask is not None:
        s = s.masked_fill(~mask, float("-inf"))
    return torch.softmax(s, dim=-1).nan_to_num(0.0).to(scores.dtype)
''',
    "attention": '''
def attention(q, k, v, mask=None):
    weights = masked_softmax(attention_scores(q.float(), k.float()), mask)
    return (weights @ v.float()).to(v.dtype), weights.to(q.dtype)
''',
}


def test_hugging_faces_own_layer_passes_every_case_of_the_qwen35_check():
    """Including left padding, where it fills the rows of padding queries its own way."""
    verdict = grade(EXERCISES["Qwen35Attention"], [Cell("代码单元 #1", HUGGING_FACE_LAYER)])
    assert verdict.passed, verdict.message


def test_nan_in_the_rows_of_padding_queries_is_still_a_mistake():
    blind_rows_nan = a01.CORRECT["masked_softmax"].replace("torch.nan_to_num(weights, nan=0.0)", "weights")
    header = a02.HEADER.replace(a01.CORRECT["masked_softmax"], blind_rows_nan)  # in the cell the notebook provides
    verdict = grade(EXERCISES["MultiHeadAttention"], notebook.cells(notebook.layout(header, a02.CORRECT)))
    assert not verdict.passed
    assert "输出里有 NaN 或 inf" in verdict.summary and "padding 的 query 那几行" in verdict.details, verdict.message
    assert "左侧" in verdict.details


def test_answers_computed_in_float32_inside_pass_the_float64_cases():
    cells = a01.cells(FLOAT32_INSIDE)
    for name in FLOAT32_INSIDE:
        verdict = grade(EXERCISES[name], cells)
        assert verdict.passed, verdict.message


def test_close_numbers_are_printed_with_the_digits_that_differ():
    want = torch.tensor([-1.5112701], dtype=torch.float64)
    got = torch.tensor([-1.5112734], dtype=torch.float64)
    text = compare(got, want, torch.float64, Tolerance(atol=1e-9, rtol=0.0)).text
    assert "期望 -1.5112701，得到 -1.5112734" in text, text


def test_an_expected_zero_has_no_relative_error():
    text = compare(torch.tensor([0.25]), torch.tensor([0.0], dtype=torch.float64), torch.float32,
                   Tolerance(atol=1e-5, rtol=1e-4)).text
    assert "期望值是 0，没有相对误差" in text and "e+" not in text, text
