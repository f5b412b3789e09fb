"""release/ is generated from source/ by `course-release` and kept in sync; nbgrader reads each exercise's
points from it; the gradebook records only the assignments released to the class, so that a fresh clone
autogrades and exports them; the source notebook is well formed and runs top to bottom in a real Jupyter
kernel."""
import csv
import json
import os
import shutil
import subprocess
import sys

import nbformat
import pytest
from nbclient import NotebookClient
from nbgrader.api import Gradebook

from autograder.engine.assignments import ASSIGNMENTS
from autograder.instructor.release import (
    ReleaseError,
    build_source_notebook,
    differing_files,
    generate,
    main,
    solution_code,
)
from autograder.instructor.release import source_file as source_path
from course.layout import ROOT as REPO
from tests.notebooks import ASSIGNMENT, IN_THE_BROWSER, filled, released_path, source_solutions, write_submission


@pytest.mark.nbgrader
def test_release_is_in_sync_with_source(generated_course):
    assert differing_files(generated_course) == [], "release/ is out of date with source/: run `course-release`"


@pytest.mark.nbgrader
def test_a_stale_release_is_listed_file_by_file(generated_course, tmp_path):
    stale = tmp_path / "course"
    shutil.copytree(generated_course / "release", stale / "release")
    changed, gone = (stale / "release" / a / f"{a}.ipynb" for a in ("02_multi_head", "04_rope_mla"))
    changed.write_text(changed.read_text(encoding="utf-8").replace("raise NotImplementedError()", "pass"),
                       encoding="utf-8")
    gone.unlink()
    (stale / "release" / "stray.txt").write_text("", encoding="utf-8")
    made = {f"release/{name}" for name in
            ("02_multi_head/02_multi_head.ipynb", "04_rope_mla/04_rope_mla.ipynb", "stray.txt")}
    # On top of whatever a fresh generation already finds (nothing, when test_release_is_in_sync_with_source passes).
    assert differing_files(stale) == sorted(made | set(differing_files(generated_course)))


@pytest.mark.slow  # nbgrader generates every assignment again, as the command does
@pytest.mark.parametrize("capability", [None, "default"], ids=["this CPU", "no vector instructions"])
def test_course_release_check_says_so_as_typed(capability):
    """Also as on a CPU without AVX: torch's plain kernels round the checks files' floats (the cases made by a
    reference, the outputs) otherwise than this CPU's vector ones, as another machine's would, and release/ made
    elsewhere must still be current (``same_checks``)."""
    env = {**os.environ, **({"ATEN_CPU_CAPABILITY": capability} if capability else {})}
    done = subprocess.run(["course-release", "--check"], cwd=REPO, capture_output=True, text=True, env=env)
    assert done.returncode == 0 and "release/ is current." in done.stdout, done.stdout + done.stderr


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


@pytest.mark.nbgrader
@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_nbgrader_gives_each_exercise_the_graders_points(assignment, generated_course):
    """What nbgrader recorded when it generated the assignment, and what the released notebook carries,
    are the points the graders give; thinking questions carry none."""
    expected = {f"tests_{e.name}": e.points for e in ASSIGNMENTS[assignment]}
    with Gradebook(f"sqlite:///{generated_course / 'gradebook.db'}") as gradebook:
        recorded = {c.name: c.max_score for c in gradebook.find_notebook(assignment, assignment).grade_cells}
        total = gradebook.find_assignment(assignment).max_score
    assert {name: points for name, points in recorded.items() if name.startswith("tests_")} == expected
    assert {points for name, points in recorded.items() if not name.startswith("tests_")} <= {0}
    assert total == sum(expected.values())
    released = nbformat.read(released_path(assignment), as_version=4)
    assert {c.metadata["nbgrader"]["grade_id"]: c.metadata["nbgrader"]["points"] for c in released.cells
            if c.metadata.get("nbgrader", {}).get("grade_id", "").startswith("tests_")} == expected


def nbgrader(root, *args) -> subprocess.CompletedProcess:
    done = subprocess.run([sys.executable, "-m", "nbgrader", *args], cwd=root, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
    return done


@pytest.mark.nbgrader
@pytest.mark.slow  # nbgrader generates every assignment twice and autogrades once: about 25 s
def test_a_fresh_clone_grades_and_exports_only_what_was_released(tmp_path):
    """The README's steps on a clone with no gradebook: `course-release --assignment 01_attention_basics`,
    `nbgrader autograde 01_attention_basics`, a later `course-release`, `nbgrader export`."""
    root = tmp_path / "course"
    root.mkdir()
    shutil.copy(REPO / "nbgrader_config.py", root)
    assert generate(root, released=[ASSIGNMENT]) == [ASSIGNMENT]
    assert sorted(p.name for p in (root / "release").iterdir()) == sorted(ASSIGNMENTS)  # release/ stays whole
    write_submission(root / "submitted" / "student", filled(source_solutions()))
    nbgrader(root, "autograde", ASSIGNMENT)
    assert generate(root, released=()) == [ASSIGNMENT]  # rebuilt after an edit: what was released stays
    nbgrader(root, "export")
    with open(root / "grades.csv", encoding="utf-8", newline="") as f:
        rows = list(csv.DictReader(f))
    assert [(r["assignment"], r["student_id"]) for r in rows] == [(ASSIGNMENT, "student")]
    assert float(rows[0]["score"]) == float(rows[0]["max_score"]) == sum(e.points for e in ASSIGNMENTS[ASSIGNMENT])


def test_without_the_models_weights_a_release_keeps_the_visible_checks_it_has(tmp_path, monkeypatch, capsys):
    """An instructor who releases 01 on a machine without SmolLM2 keeps 07's checks file (made from the same pinned
    weights); with no file to keep, the release stops and says how to get the weights."""
    from autograder.instructor import release
    from course.cache import CACHE_ENV

    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "empty-cache"))
    monkeypatch.setattr(release, "ASSIGNMENTS", {"07_real_model": ASSIGNMENTS["07_real_model"]})
    committed = REPO / "release" / "07_real_model" / "checks.pt.xz"
    assert release.checks_files(REPO / "release") == {"07_real_model": committed.read_bytes()}
    assert "kept as they were" in capsys.readouterr().err
    with pytest.raises(ReleaseError, match="course-weights smollm2"):
        release.checks_files(tmp_path)


def test_course_release_refuses_an_unknown_assignment(capsys):
    assert main(["--assignment", "01_attention"]) == 1  # refused before anything is written
    said = capsys.readouterr().err
    assert "no assignment called 01_attention" in said and ASSIGNMENT in said


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


@pytest.mark.slow  # a kernel each: 5 to 30 s
@pytest.mark.parametrize("assignment", [a for a in ASSIGNMENTS if a not in IN_THE_BROWSER])
def test_source_notebook_runs_top_to_bottom(assignment, tmp_path):
    nb = build_source_notebook(source_path(assignment), assignment)
    NotebookClient(nb, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}).execute()
    outputs = "".join(o.get("text", "") for c in nb.cells if c.cell_type == "code" for o in c.outputs)
    for exercise in ASSIGNMENTS[assignment]:
        assert f"✓ {exercise.name}：通过" in outputs
    assert any(o.get("output_type") == "display_data" for c in nb.cells if c.cell_type == "code" for o in c.outputs)
