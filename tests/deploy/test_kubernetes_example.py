"""The Kubernetes example as far as this machine allows (no container runtime here): the Dockerfile builds
from what ``course-gradescope --image`` writes, installs with the script the Gradescope test runs for real
(``tests/deploy/test_gradescope_setup.py``, which also runs ``course-grade`` as the image's user from that install),
pins torch and runs as the user the Jobs ask for; and the indexed Job's shell arithmetic, run by a real ``sh``
for every completion index, hands each student of a real class to exactly one shard, whose merge equals one
``course-grade`` run."""
import json
import re
import shlex
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from autograder.engine.assignments import needed_weights
from autograder.instructor.classroom import gradescope_bundle
from autograder.instructor.classroom.graded_class import state_folder
from course.layout import ROOT as REPO
from tests.classroom.test_course_grade import A, course_grade, grades, outputs
from tests.notebooks import filled, released, write_submission
from tests.students import a01

DOCKERFILE = REPO / gradescope_bundle.DOCKERFILE
YAML = (REPO / "deploy" / "kubernetes-course-grade.yaml").read_text(encoding="utf-8")
OBJECTS = {document["metadata"]["name"]: document for document in yaml.safe_load_all(YAML)}
CLAIM, SHELL, GRADE, MERGE = (OBJECTS[name] for name in ("course-data", "course-data-shell", "course-grade",
                                                          "course-grade-merge"))


def instructions(text: str) -> list[tuple[str, str]]:
    """A Dockerfile's instructions, (keyword, arguments), continuation lines joined and comments left out."""
    joined = re.sub(r"\\\n", " ", "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("#")))
    return [(line.split(None, 1)[0].upper(), line.split(None, 1)[1]) for line in joined.splitlines() if line.strip()]


def pod(job: dict) -> dict:
    return job["spec"]["template"]["spec"]


@pytest.fixture(scope="module")
def context(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("image") / "build"
    assert gradescope_bundle.main(["--image", str(folder)]) == 0
    return folder


def test_the_dockerfile_installs_with_the_gradescope_script_as_a_user_of_its_own():
    steps = instructions(DOCKERFILE.read_text(encoding="utf-8"))
    assert steps[0] == ("FROM", "debian:12-slim")  # Debian 12's Python 3.11, as the Gradescope test uses
    assert ("COPY", ". /tmp/course") in steps  # the context course-gradescope --image writes
    runs = " ".join(arguments for keyword, arguments in steps if keyword == "RUN")
    assert f"bash /tmp/course/{gradescope_bundle.INSTALL} /tmp/course /opt/attention-course" in runs
    assert "pip" not in runs  # nothing installed besides what the script installs, pinned
    last = max(i for i, (keyword, _) in enumerate(steps) if keyword == "USER")
    uid, gid = (int(n) for n in steps[last][1].split(":"))
    assert uid != 0 and gid != 0 and "RUN" not in [keyword for keyword, _ in steps[last:]]
    assert f"useradd --uid {uid} --user-group" in runs
    for spec in (pod(GRADE), pod(MERGE), SHELL["spec"]):
        security = spec["securityContext"]
        assert security["runAsNonRoot"] is True
        assert (security["runAsUser"], security["runAsGroup"], security["fsGroup"]) == (uid, gid, gid)
        assert [c["image"] for c in spec["containers"]] == [gradescope_bundle.IMAGE]
    assert f"docker build -t {gradescope_bundle.IMAGE} " in DOCKERFILE.read_text(encoding="utf-8")


def test_the_image_context_has_what_the_dockerfile_copies_and_pins_torch(context):
    assert (context / "Dockerfile").read_bytes() == DOCKERFILE.read_bytes()
    assert (context / gradescope_bundle.INSTALL).read_bytes() == (REPO / gradescope_bundle.INSTALL).read_bytes()
    runs = " ".join(a for k, a in instructions(DOCKERFILE.read_text(encoding="utf-8")) if k == "RUN")
    for used in re.findall(r"/tmp/course/(\S+)", runs):  # COPY . /tmp/course: each file a step runs is there
        assert (context / used).is_file(), used
    pins = (context / gradescope_bundle.CONSTRAINTS).read_text(encoding="utf-8").splitlines()
    assert f"torch=={gradescope_bundle.tested_torch()}" in pins
    assert (context / "pyproject.toml").is_file() and (context / "solutions").is_dir()
    assert not (context / "setup.sh").exists() and not (context / "run_autograder").exists()
    prefetch = (context / "prefetch.sh").read_text(encoding="utf-8").splitlines()
    assert needed_weights() and all(w.command in prefetch for w in needed_weights())
    assert (context / "prefetch.sh").stat().st_mode & stat.S_IXUSR


def test_the_volume_is_read_write_many_and_the_sandbox_needs_are_said():
    assert CLAIM["kind"] == "PersistentVolumeClaim" and CLAIM["spec"]["accessModes"] == ["ReadWriteMany"]
    assert "RuntimeDefault" in YAML and "Landlock" in YAML
    assert GRADE["spec"]["parallelism"] == GRADE["spec"]["completions"]


def test_the_class_goes_onto_the_claim_and_the_results_come_off_it_through_the_shell_pod():
    """Every pod mounts the one claim at /data; the header's steps copy the class in where the grading Job reads it
    and the merged outputs out from where the merge Job writes them, through the shell pod, and apply each step
    by a label the objects carry."""
    for spec in (pod(GRADE), pod(MERGE), SHELL["spec"]):
        assert [v["persistentVolumeClaim"]["claimName"] for v in spec["volumes"]] == [CLAIM["metadata"]["name"]]
        assert [m["mountPath"] for c in spec["containers"] for m in c["volumeMounts"]] == ["/data"]
    steps = [line.lstrip("# ").split("#")[0].split() for line in YAML.splitlines() if line.startswith("#   kubectl")]
    shell = SHELL["metadata"]["name"]
    copied_in = next(step[-1] for step in steps if step[1] == "cp" and step[-1].startswith(f"{shell}:"))
    copied_out = next(step[2] for step in steps if step[1] == "cp" and step[2].startswith(f"{shell}:"))
    assert recorded_path(GRADE) == copied_in.removeprefix(f"{shell}:")
    assert copied_out.removeprefix(f"{shell}:") == pod(MERGE)["containers"][0]["command"][2].split("--out ")[1]
    labels = {document["metadata"]["labels"]["step"] for document in OBJECTS.values()}
    assert {step[-1].removeprefix("step=") for step in steps if step[1] == "apply"} == labels
    order = [step[-1] for step in steps if step[1] == "apply"]
    assert order == ["step=volume", "step=grade", "step=merge"]


def recorded_path(job: dict) -> str:
    """The class folder a grading Job's command hands course-grade."""
    return shlex.split(pod(job)["containers"][0]["command"][2])[1]


def recorded(command: str, data: Path, env: dict[str, str]) -> list[str]:
    """The arguments a Job's container command hands course-grade, /data being ``data``: run by a real sh with,
    first on PATH, a course-grade that prints them."""
    shim = data.parent / "recording-bin"
    shim.mkdir(exist_ok=True)
    (shim / "course-grade").write_text(f"#!/bin/sh\nexec {shlex.quote(sys.executable)} -c "
                                       "'import json, sys; print(json.dumps(sys.argv[1:]))' \"$@\"\n", encoding="utf-8")
    (shim / "course-grade").chmod(0o755)
    done = subprocess.run(["sh", "-c", command.replace("/data/", f"{data}/")], capture_output=True, text=True,
                          env={"PATH": f"{shim}:/usr/bin:/bin", **env})
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


@pytest.mark.slow  # one course-grade run over a class of nine, then eight shards and their merge
def test_every_completion_index_grades_its_shard_and_the_merge_equals_one_run(tmp_path):
    data = tmp_path / "data"
    mistake = next(m for m in a01.MISTAKES if m[0] == "padding_mask")
    kinds = [filled(a01.CORRECT), filled({**a01.CORRECT, mistake[0]: mistake[2]}), released()]
    students = [f"{name}_{i}" for i, name in enumerate(["li", "wang", "zhang", "liu", "chen", "yang", "zhao",
                                                         "huang", "zhou"])]
    for i, student in enumerate(students):  # three kinds of notebook, each graded once however many hand it in
        write_submission(data / "submitted" / student, kinds[i % 3], A)
    one_run = course_grade(data / "submitted", "--out", tmp_path / "one-run", "--jobs", 1)
    assert one_run.returncode == 0, one_run.stdout + one_run.stderr

    container = pod(GRADE)["containers"][0]
    env = {e["name"]: e["value"] for e in container["env"]}
    shards = []
    for index in range(GRADE["spec"]["completions"]):
        argv = recorded(container["command"][2], data, {**env, "JOB_COMPLETION_INDEX": str(index)})
        out = Path(argv[argv.index("--out") + 1])
        # The one run's results, as a retried pod finds its own: the shard grades nothing again.
        shutil.copytree(state_folder(tmp_path / "one-run") / "results", state_folder(out) / "results")
        run = course_grade(*argv)
        assert run.returncode == 0 and "all unchanged since the last run" in run.stdout, run.stdout + run.stderr
        shards.append(set(grades(out)))
    assert all(shards) and sum(len(s) for s in shards) == len(students) and set().union(*shards) == set(students)

    merge = recorded(pod(MERGE)["containers"][0]["command"][2], data, {})
    assert merge[merge.index("--merge") + 1:merge.index("--out")] == sorted(
        str(data / "graded" / f"shard-{i}") for i in range(1, len(shards) + 1))  # the glob found every shard
    merged = course_grade(*merge)
    assert merged.returncode == 0, merged.stdout + merged.stderr
    assert outputs(data / "graded" / "class") == outputs(tmp_path / "one-run")


def test_the_check_of_the_arithmetic_can_fail(tmp_path):
    """A command that forgot the +1 names shard 0 for the first pod, which course-grade refuses."""
    wrong = pod(GRADE)["containers"][0]["command"][2].replace("JOB_COMPLETION_INDEX + 1", "JOB_COMPLETION_INDEX")
    argv = recorded(wrong, tmp_path / "data", {"SHARDS": "8", "JOB_COMPLETION_INDEX": "0"})
    assert argv[argv.index("--shard") + 1] == "0/8"
    with pytest.raises(SystemExit):
        course_grade(*argv)
