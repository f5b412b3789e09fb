"""Rules about *how* code runs, enforced by what its run cannot do (``model.Budget``): the run of a budget's cases is
measured by the fork server, how far its resident memory rose and how much CPU time it used, so code that slips
past the in-process watches, or writes its own report, still fails.

Every attack here gives the right numbers and scores full marks on the ordinary cases (each test shows it, with
the budget taken away): that is how they scored before there were budgets. The walls that hide the answers do not
matter to a budget, which is measured outside the run: the attacks fail with Landlock, namespaces or seccomp off
too.
"""
import dataclasses

import pytest

from autograder.engine.assignments import EXERCISES
from autograder.engine.checks import greedy_generate, online_softmax_attention
from autograder.engine.judging import check_output, grade
from autograder.engine.sandbox.client import shared
from autograder.engine.sandbox.report import Ok, from_bytes
from tests.sandbox import Keeping
from tests.students import a01, a07

ONLINE, GREEDY = EXERCISES["online_softmax_attention"], EXERCISES["greedy_generate"]

# Online softmax that holds the whole table of scores: with torch's function modes switched off, the block watch
# (protocols.call_blockwise) sees nothing; every block kept in a list passes it, each product being one block wide.
HOLDING = {
    "the whole table, watch switched off": '''
import math
import torch
def online_softmax_attention(q, k, v, mask=None, block_size=16):
    with torch._C.DisableTorchFunction():
        scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
        if mask is not None:
            scores = scores.masked_fill(~mask, float("-inf"))
        return torch.softmax(scores, dim=-1).nan_to_num(0.0) @ v
''',
    "every block kept, then one softmax": '''
import math
import torch
def online_softmax_attention(q, k, v, mask=None, block_size=16):
    starts = range(0, k.shape[-2], block_size)
    scores = torch.cat([q @ k[..., s:s + block_size, :].transpose(-2, -1) / math.sqrt(q.shape[-1]) for s in starts], -1)
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.softmax(scores, dim=-1).nan_to_num(0.0)
    return sum(weights[..., s:s + block_size] @ v[..., s:s + block_size, :] for s in starts)
''',
    "all blocks in one batched product, watch switched off": '''
import math
import torch
import torch.nn.functional as F
def online_softmax_attention(q, k, v, mask=None, block_size=16):
    with torch._C.DisableTorchFunction():
        blocks = -(-k.shape[-2] // block_size)
        pad = blocks * block_size - k.shape[-2]
        kb = F.pad(k, (0, 0, 0, pad)).unflatten(-2, (blocks, block_size))
        vb = F.pad(v, (0, 0, 0, pad)).unflatten(-2, (blocks, block_size))
        scores = q.unsqueeze(-3) @ kb.transpose(-2, -1) / math.sqrt(q.shape[-1])  # [..., blocks, Tq, block]
        rows = (*q.shape[:-1], k.shape[-2])
        seen = torch.ones(rows, dtype=torch.bool) if mask is None else mask.expand(rows)
        seen = F.pad(seen, (0, pad)).unflatten(-1, (blocks, block_size)).movedim(-2, -3)
        scores = scores.masked_fill(~seen, float("-inf"))
        top = scores.amax(dim=(-3, -1), keepdim=True).nan_to_num(neginf=0.0)
        weights = torch.exp(scores - top)
        total = weights.sum(dim=(-3, -1), keepdim=True).squeeze(-3)
        out = (weights @ vb).sum(-3)
        return torch.where(total > 0, out / total, 0.0)
''',
}

# Greedy decoding without a cache, through the model itself rather than the object the protocol hands over (which
# counts the positions it is fed): the tokens are right, and the count says "read once".
UNCOUNTED = '''
def greedy_generate(model, input_ids, max_new_tokens, attention_mask=None):
    real = model._real()
    sequence, mask, chosen = input_ids, attention_mask, []
    for _ in range(max_new_tokens):
        step = real(sequence, attention_mask=mask)[:, -1].argmax(dim=-1, keepdim=True)
        chosen.append(step)
        sequence = torch.cat([sequence, step], dim=1)
        if mask is not None:
            mask = torch.cat([mask, torch.ones_like(step)], dim=1)
    return torch.cat(chosen, dim=1)
'''

# torch's own CPU flash attention in place of the loop, the watch switched off; and the same after looking for the
# registration that refuses the kernel, to undo it (protocols.watches.refuse_flash_kernels).
FLASH = {
    "scaled_dot_product_attention, watch switched off": '''
import torch
import torch.nn.functional as F
def online_softmax_attention(q, k, v, mask=None, block_size=16):
    with torch._C.DisableTorchFunction():
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask).nan_to_num(0.0)
''',
    "the kernel's refusal undone first": '''
import gc
import torch
import torch.nn.functional as F
def online_softmax_attention(q, k, v, mask=None, block_size=16):
    for found in gc.get_objects():
        if isinstance(found, torch.library.Library):
            found._destroy()
        elif type(found).__name__ == "_DispatchModule":
            found.reset()
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask).nan_to_num(0.0)
''',
}

WALLS = [pytest.param((), id="all walls"), pytest.param(("landlock",), id="no landlock"),
         pytest.param(("namespaces",), id="no namespaces"), pytest.param(("seccomp",), id="no seccomp")]


def _without_budget(exercise):
    return dataclasses.replace(exercise, budget=None)


@pytest.mark.parametrize("attack", HOLDING)
def test_online_softmax_that_holds_more_than_a_block_fails_however_it_hides(attack):
    cells = a01.cells({"online_softmax_attention": HOLDING[attack]})
    assert grade(_without_budget(ONLINE), cells).passed  # every ordinary case: the attack's numbers are right
    keeping = Keeping()
    verdict = grade(ONLINE, cells, sandbox=keeping)
    assert not verdict.passed and not verdict.grader_problem
    assert verdict.mistake == online_softmax_attention.WHOLE_SCORES.name, verdict.message
    assert "这个用例最多只能多 160 MiB" in verdict.details and "很长的 k/v" in verdict.details, verdict.details
    # What the run reported is a well-formed report with the right output: the measurement alone fails it.
    cases = ONLINE.made_budget_cases()
    report = from_bytes(keeping.answer.data, len(cases))
    assert all(isinstance(o, Ok) and check_output(ONLINE, c, o.output) is None for c, o in zip(cases, report.outcomes))


@pytest.mark.parametrize("attack", FLASH)
def test_torchs_own_flash_attention_is_refused_in_online_softmax(attack):
    verdict = grade(ONLINE, a01.cells({"online_softmax_attention": FLASH[attack]}))
    assert not verdict.passed and verdict.mistake == online_softmax_attention.FLASH_KERNEL_USED.name, verdict.message


@pytest.mark.slow
@pytest.mark.parametrize("walls_off", WALLS)
def test_the_memory_budget_holds_without_each_wall(walls_off, sandbox_without):
    box = sandbox_without(*walls_off) if walls_off else shared()
    held = grade(ONLINE, a01.cells({"online_softmax_attention": HOLDING["every block kept, then one softmax"]}),
                 sandbox=box)
    assert held.mistake == online_softmax_attention.WHOLE_SCORES.name, held.message
    assert grade(ONLINE, a01.cells(), sandbox=box).passed


@pytest.mark.slow  # the real model's cases, then the attack's four seconds of CPU
def test_greedy_decoding_without_the_cache_fails_however_it_feeds_the_model():
    cells = a07.cells({"greedy_generate": UNCOUNTED})
    assert grade(_without_budget(GREEDY), cells).passed  # the tokens are right and the count says "read once"
    verdict = grade(GREEDY, cells)
    assert not verdict.passed and not verdict.grader_problem
    assert verdict.mistake == greedy_generate.MISTAKES[0].name, verdict.message
    assert "这个用例最多只能用 4 秒" in verdict.details and "提示词 2048 个随机 token" in verdict.details, verdict.details


@pytest.mark.slow
@pytest.mark.parametrize("walls_off", WALLS)
def test_the_cpu_budget_holds_without_each_wall(walls_off, sandbox_without):
    box = sandbox_without(*walls_off) if walls_off else shared()
    verdict = grade(GREEDY, a07.cells({"greedy_generate": UNCOUNTED}), sandbox=box)
    assert verdict.mistake == greedy_generate.MISTAKES[0].name, verdict.message
    assert grade(GREEDY, a07.cells(), sandbox=box).passed  # the toy model is readable behind these walls


def test_a_budget_run_is_graded_on_its_outputs_too():
    """Within the budget, a wrong output on the budget's case fails: code that fits but computes something else
    (here, the long case's keys cut short) gains nothing either."""
    cut = a01.CORRECT["online_softmax_attention"].replace("def online_softmax_attention(", "def _blockwise(") + '''
def online_softmax_attention(q, k, v, mask=None, block_size=16):
    if k.shape[-2] > 4096:
        k, v = k[..., :4096, :], v[..., :4096, :]
    return _blockwise(q, k, v, mask, block_size)
'''
    verdict = grade(ONLINE, a01.cells({"online_softmax_attention": cut}))
    assert not verdict.passed and verdict.summary == "没有通过：数值不对", verdict.message
    assert verdict.details.startswith("用例：很长的 k/v"), verdict.details
