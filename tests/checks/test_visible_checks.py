"""The notebooks' visible checks (``course.checking``) are the grader's public cases: each case a checks file
ships is a grader case marked public, with the reference's output the grader computes; a check cell is the one
line ``check("name")``; and the check agrees with the grader on the simulated students of ``tests/students``:
correct code (every way it is written) passes, the released stub is "not yet implemented", every seeded mistake
fails, and where the check names a mistake it is the one the grader names. Then a ✓ in the notebook is a promise
the grader keeps, and a ✗ says what the grader will say."""
import functools
import types

import jupytext
import nbformat
import pytest
import torch
from nbclient import NotebookClient

from autograder.engine.assignments import ASSIGNMENTS, EXERCISES
from autograder.engine.judging import reference_result
from autograder.engine.sandbox.harness import NOT_IMPLEMENTED
from autograder.instructor.same_checks import close
from course import checking, layout
from course.layout import ROOT as REPO
from tests import natural_mistakes, tiers
from tests.natural_mistakes.judged import NAMES
from tests.students import BY_ASSIGNMENT

CHECKED = [a for a in ASSIGNMENTS if (REPO / layout.RELEASE / a / layout.CHECKS).is_file()]
# The grader runs just the public cases of this one: its two cases each run the real model, and both are needed
# to catch the loop's own mistakes (the sampling rules have their own exercise, sampling_probs).
ALL_PUBLIC = {"sample_generate"}


@functools.cache  # read once per process: 08's file takes a tenth of a second to decompress
def _data(assignment: str) -> dict:
    return checking.load(REPO / layout.RELEASE / assignment / layout.CHECKS)


def test_every_assignment_has_visible_checks_from_public_cases():
    assert CHECKED == list(ASSIGNMENTS)


@pytest.mark.parametrize("assignment", CHECKED)
def test_each_public_case_is_a_grader_case_with_the_graders_reference(assignment):
    data = _data(assignment)
    assert set(data) == {e.name for e in ASSIGNMENTS[assignment]}
    for name, exercise_data in data.items():
        exercise = EXERCISES[name]
        public = [case for case in exercise.made_cases() if case.public]
        assert [c["label"] for c in exercise_data["cases"]] == [case.label for case in public], name
        assert exercise_data["hidden"] == len(exercise.made_cases()) - len(public), name
        assert exercise_data["hidden"] > 0 or name in ALL_PUBLIC, name
        for stored, case in zip(exercise_data["cases"], public):
            # Equal to a hundredth of the case's tolerance: another CPU rounds the inputs a reference or float32
            # makes, and so every output, in their last bits
            atol, rtol = (t / 100 for t in stored["tolerance"])
            assert close(checking.decoded(stored["args"]), case.args, within=(atol, rtol)), (name, case.label)
            assert close(checking.decoded(stored["kwargs"]), case.kwargs, within=(atol, rtol)), (name, case.label)
            expected = exercise.graded(reference_result(exercise, case))
            torch.testing.assert_close(stored["expected"], expected, rtol=rtol, atol=atol, msg=f"{name}: {case.label}")


@pytest.mark.parametrize("assignment", CHECKED)
def test_a_check_cell_is_one_call_of_the_shared_public_cases(assignment):
    nb = jupytext.read(REPO / layout.SOURCE / assignment / f"{assignment}.py")
    visible = {tag.removeprefix("tests:"): cell.source.split("### BEGIN HIDDEN TESTS")[0].strip()
               for cell in nb.cells for tag in cell.metadata.get("tags", []) if tag.startswith("tests:")}
    assert visible == {e.name: f'from course.checking import check\ncheck("{e.name}")' for e in ASSIGNMENTS[assignment]}


def _verdict(module, assignment: str, name: str, replace: dict):
    """What the check of ``name`` says on the student's notebook with ``replace`` (None: ✓)."""
    namespace = {}
    exec(compile(module.source(replace), f"<{assignment}>", "exec"), namespace)
    notebook = types.ModuleType("notebook")
    vars(notebook).update(namespace)
    data = _data(assignment)[name]
    found = checking.judge(data, namespace[data["definition"]], notebook)
    return None if found is None else found.message


STUDENTS = [(BY_ASSIGNMENT[a], name) for a in CHECKED for name in BY_ASSIGNMENT[a].CORRECT if name in _data(a)]


@pytest.mark.parametrize("module, name", STUDENTS, ids=[f"{m.ASSIGNMENT[:2]}-{name}" for m, name in STUDENTS])
def test_the_check_passes_correct_code_and_calls_the_stub_not_implemented(module, name):
    assert _verdict(module, module.ASSIGNMENT, name, {}) is None
    assert _verdict(module, module.ASSIGNMENT, name, {name: module.STUBS[name]}) == NOT_IMPLEMENTED
    for exercise, how, code in module.OTHER_CORRECT:
        if exercise == name:
            assert _verdict(module, module.ASSIGNMENT, name, {name: code}) is None, how


_SEEDED = [(BY_ASSIGNMENT[a], *mistake) for a in CHECKED for mistake in BY_ASSIGNMENT[a].MISTAKES if mistake[0] in _data(a)]
# A real-size exercise's seeded mistakes but the first run in the full run (tests/tiers.py).
SEEDED = [pytest.param(*seeded, marks=tiers.beyond_the_first([seeded[1]], [[s[1]] for s in _SEEDED[:i]]),
                       id=f"{seeded[0].ASSIGNMENT[:2]}-{seeded[1]}-{seeded[2]}") for i, seeded in enumerate(_SEEDED)]


@pytest.mark.parametrize("module, name, want, code", SEEDED)
def test_the_check_fails_every_seeded_mistake_and_names_none_but_the_graders(module, name, want, code):
    said = _verdict(module, module.ASSIGNMENT, name, {name: code})
    assert said is not None, f"the check passes what the grader fails ({want})"
    # A mistake of the catalogue given as code or as an error pattern has what the check needs to name it; one
    # given as a test of the output (``Mistake.matches``) is code the checks file does not ship.
    nameable = any(want in m.name and (m.fn is not None or m.error) for m in EXERCISES[name].mistakes)
    assert want in said if nameable else (want in said or "看起来是：" not in said), said


def test_where_the_grader_may_name_a_mistake_the_file_cannot_test_the_check_lists_both():
    """Greedy decoding without the cache gives the right tokens: the grader names it by a test of the output (code
    the checks file does not ship), which also accepts what decoding the whole sequence through the cache gives
    on the public cases; the check lists both rather than name the second."""
    module = BY_ASSIGNMENT["07_real_model"]
    code = next(code for name, want, code in module.MISTAKES if (name, want) == ("greedy_generate", "没有靠 KV cache"))
    said = _verdict(module, module.ASSIGNMENT, "greedy_generate", {"greedy_generate": code})
    assert "看起来是：" not in said
    assert ("公开的用例分不出是下面哪一种：每一步都把整个序列又送了一遍，没有靠 KV cache 只送新 token；"
            "带着缓存把整个序列又送了一遍。") in said, said


_KERNEL_CELLS = [
    "import torch",
    # the student's own helper, in a cell of its own below the function that calls it
    "def causal_mask(q_len, k_len=None, window=None):\n    return ones_below(q_len, k_len or q_len, window)",
    "def ones_below(q_len, k_len, window):\n    return torch.ones(q_len, k_len).tril(k_len - q_len) > 0.5",
    'from course.checking import check\ncheck("causal_mask")',
    "def ones_below(q_len, k_len, window):\n    return torch.ones(q_len, k_len).tril(k_len - q_len - 1) > 0.5",
    'check("causal_mask")',
    "def ones_below(q_len, k_len, window):\n    return torch.ones(q_len, k_len).tril(k_len - q_len) @ torch.ones(2, 3)",
    'check("causal_mask")',
]


@pytest.mark.slow  # a kernel: about 5 s
def test_in_a_kernel_a_check_shows_the_students_frames_and_the_graders_words(tmp_path):
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(source) for source in _KERNEL_CELLS])
    NotebookClient(nb, timeout=120, kernel_name="python3", allow_errors=True,
                   resources={"metadata": {"path": str(tmp_path)}}).execute()
    said = ["".join(o.get("text", "") for o in cell.outputs) + "\n".join(
        line for o in cell.outputs if o.output_type == "error" for line in o.traceback) for cell in nb.cells]
    # a window the code ignores: the worked-out public cases up to the window pass, the window's fail
    assert "causal_mask：没有通过：没有用 window" in said[3], said[3]
    assert "causal_mask：没有通过：对角线被遮住了" in said[5] and "看起来是：对角线被遮住了" in said[5], said[5]
    assert "运行出错：RuntimeError: mat1 and mat2 shapes cannot be multiplied" in said[7], said[7]
    assert "这是什么意思：矩阵乘法两边对不上" in said[7] and "ones_below" in said[7], said[7]
    assert all("checking.py" not in text for text in said), "the check's own frames are hidden"


_NATURAL = [(module, entry) for module in natural_mistakes.ASSIGNMENTS if module.ASSIGNMENT in CHECKED
            for entry in module.ENTRIES]
# The mistakes that run a real-size exercise another mistake already ran in the default tier: the full run.
NATURAL = [pytest.param(module, entry, marks=tiers.beyond_the_first(entry.exercises, [e.exercises for _, e in _NATURAL[:i]]),
                        id=entry.id) for i, (module, entry) in enumerate(_NATURAL)]


def _said(module, entry) -> dict[str, checking.Failure | None]:
    """Exercise -> what the check says on the natural mistake's notebook, for each exercise it fails."""
    notebook = types.ModuleType("notebook")
    exec(compile(natural_mistakes.source(module, entry), entry.id, "exec"), vars(notebook))
    return {name: checking.verdict(name, notebook) for name in entry.exercises if name in _data(module.ASSIGNMENT)}


@pytest.mark.parametrize("module, entry", NATURAL)
def test_on_natural_mistakes_the_check_names_only_what_the_grader_names(module, entry):
    """Mistakes written from the notebook alone: a mistake the check names is the one the grader names (its
    judged names, ``tests/natural_mistakes/judged.py``), and an exercise it blames first is one the mistake breaks."""
    graders = NAMES.get(entry.id, {})
    for name, failure in _said(module, entry).items():
        if failure is None:
            continue  # passes the public cases: counted and listed by benchmarks/visible_checks.py
        if failure.mistake:
            assert failure.mistake == graders.get(name), (name, failure.message)
        first = failure.message.splitlines()[0]
        if first.startswith("没有通过：用到的 "):
            blamed = first.removeprefix("没有通过：用到的 ").split(" 还没通过")[0]
            assert first.removeprefix("没有通过：") == graders.get(name) or set(blamed.split("、")) <= set(entry.exercises), \
                (name, failure.message)
