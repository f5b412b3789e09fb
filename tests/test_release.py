"""release/ is generated from source/ by `course-release` and kept in sync; the source notebook is
well formed and runs top to bottom in a real Jupyter kernel."""
import json
import shutil

import pytest
from nbclient import NotebookClient

from autograder.engine.assignments import ASSIGNMENTS
from autograder.instructor.release import ReleaseError, build_source_notebook, main, solution_code
from autograder.instructor.release import source_file as source_path
from tests.notebooks import ASSIGNMENT, released_path


def test_release_is_in_sync_with_source(capsys):
    assert main(["--check"]) == 0, capsys.readouterr().out


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_release_hides_solutions_and_hidden_tests(assignment):
    text = released_path(assignment).read_text(encoding="utf-8")
    for leak in ("BEGIN SOLUTION", "HIDDEN TESTS", "autograder", "solutions"):
        assert leak not in text
    nb = json.loads(text)
    assert all(not c.get("outputs") for c in nb["cells"] if c["cell_type"] == "code")
    stubs = [c for c in nb["cells"] if c["metadata"].get("nbgrader", {}).get("solution") and c["cell_type"] == "code"]
    assert len(stubs) == len(ASSIGNMENTS[assignment])
    assert all("raise NotImplementedError()" in "".join(c["source"]) for c in stubs)


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_points_come_from_the_graders(assignment):
    nb = build_source_notebook(source_path(assignment), assignment)
    points = {c.metadata["nbgrader"]["grade_id"]: c.metadata["nbgrader"]["points"]
              for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade")}
    answers = {grade_id: points.pop(grade_id) for grade_id in list(points) if grade_id.startswith("answer_")}
    assert points == {f"tests_{e.name}": e.points for e in ASSIGNMENTS[assignment]}
    assert set(answers.values()) <= {0}  # thinking questions carry no points


def test_a_tag_for_an_unknown_exercise_is_refused(tmp_path):
    broken = tmp_path / f"{ASSIGNMENT}.py"
    broken.write_text(source_path(ASSIGNMENT).read_text(encoding="utf-8").replace("solution:causal_mask", "solution:causal_msk"),
                      encoding="utf-8")
    with pytest.raises(ReleaseError, match="causal_msk"):
        build_source_notebook(broken, ASSIGNMENT)


def test_thinking_question_answers_stay_with_the_instructor():
    found = 0
    for assignment in ASSIGNMENTS:
        source = build_source_notebook(source_path(assignment), assignment)
        answers = [c for c in source.cells if c.metadata.get("nbgrader", {}).get("grade_id", "").startswith("answer_")]
        released = {c["id"]: c for c in json.loads(released_path(assignment).read_text(encoding="utf-8"))["cells"]}
        for cell in answers:
            answer = cell.source.split("### BEGIN SOLUTION")[1].split("### END SOLUTION")[0].strip()
            assert answer and answer not in "".join(released[cell.id]["source"])
            assert "在这里写下你的想法" in "".join(released[cell.id]["source"])
            found += 1
    assert found >= 5  # 04, 05 and 06 ask some


def test_an_answer_cell_needs_its_markers(tmp_path):
    broken = tmp_path / f"{ASSIGNMENT}.py"
    text = source_path(ASSIGNMENT).read_text(encoding="utf-8")
    broken.write_text(text.replace("# %% [markdown]\n# ## 1.", '# %% [markdown] tags=["answer:q1"]\n# ## 1.', 1),
                      encoding="utf-8")
    with pytest.raises(ReleaseError, match="answer:q1 must be a markdown cell"):
        build_source_notebook(broken, ASSIGNMENT)


def test_provided_cells_hold_the_earlier_solutions_read_only():
    nb = build_source_notebook(source_path("06_qwen35_attention"), "06_qwen35_attention")
    provided = [c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id", "").startswith("provided_")]
    assert len(provided) == 1 and provided[0].metadata["nbgrader"]["locked"]
    for assignment, exercise in [("01_attention_basics", "masked_softmax"), ("03_gqa_kv_cache", "repeat_kv"),
                                 ("04_rope_mla", "apply_rope"), ("05_output_gate", "split_query_gate")]:
        assert solution_code(assignment)[exercise] in provided[0].source
    assert "BEGIN SOLUTION" not in provided[0].source


def test_provided_cells_only_take_earlier_assignments(tmp_path):
    early = tmp_path / "02_multi_head.py"
    early.write_text(source_path("02_multi_head").read_text(encoding="utf-8").replace(
        '"provided:attention"', '"provided:attention", "provided:repeat_kv"'), encoding="utf-8")
    with pytest.raises(ReleaseError, match="repeat_kv must name an exercise of an earlier assignment"):
        build_source_notebook(early, "02_multi_head")


# tests/test_browser.py runs every solved source notebook in JupyterLab itself, where Chromium is installed
# (as in CI); this kernel-only run stands in for it elsewhere.
@pytest.mark.skipif(bool(shutil.which("chromium") or shutil.which("chromium-browser")),
                    reason="tests/test_browser.py runs these notebooks in a real browser")
@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_source_notebook_runs_top_to_bottom(assignment, tmp_path):
    nb = build_source_notebook(source_path(assignment), assignment)
    NotebookClient(nb, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}).execute()
    outputs = "".join(o.get("text", "") for c in nb.cells if c.cell_type == "code" for o in c.outputs)
    for exercise in ASSIGNMENTS[assignment]:
        assert f"✓ {exercise.name}：通过" in outputs
    assert any(o.get("output_type") == "display_data" for c in nb.cells if c.cell_type == "code" for o in c.outputs)
