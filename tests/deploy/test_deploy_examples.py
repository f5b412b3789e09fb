"""The example job files in deploy/ stay runnable: valid bash and YAML, and every course-grade command they
hold is one course-grade accepts, shards and merge alike."""
import re
import shlex
import subprocess

import pytest
import yaml

from autograder.instructor.classroom.course_grade import _arguments
from course.layout import ROOT as REPO

DEPLOY = REPO / "deploy"


def accepted(command: str) -> None:
    """Parse a course-grade command line as course-grade would (shell variables given sample values)."""
    values = {"SLURM_ARRAY_TASK_ID": "3", "SHARDS": "8", "SLURM_CPUS_PER_TASK": "4", "shards": "s1 s2",
              "OUT": "/out", "CLASS": "/class", "SLURM_ARRAY_JOB_ID": "1"}
    command = re.sub(r"\$\(\(JOB_COMPLETION_INDEX \+ 1\)\)", "3", command)
    command = re.sub(r"\$\{(\w+)\[@\]\}", lambda m: values[m[1]], command)  # a bash array, all of it
    command = re.sub(r"\$\{?(\w+)\}?", lambda m: values[m[1]], command)
    words = shlex.split(command)
    args = _arguments(words[words.index("course-grade") + 1:])
    assert args.merge or args.shard == (3, 8)


def test_the_slurm_array_job():
    """Valid bash; its shard and merge commands are ones course-grade accepts; the sizes are set in one place,
    the variables the submission reads (tests/deploy/test_slurm_cluster.py runs it on a real cluster)."""
    script = (DEPLOY / "slurm-course-grade.sh").read_text(encoding="utf-8")
    assert subprocess.run(["bash", "-n", str(DEPLOY / "slurm-course-grade.sh")]).returncode == 0
    commands = [line.strip() for line in script.replace("\\\n", " ").splitlines()
                if line.strip().startswith("course-grade ")]
    assert len(commands) == 2 and "--merge" in commands[1]
    for command in commands:
        accepted(command)
    # No size in an #SBATCH line (a second place for it, which could disagree with the variables): the one
    # directive is the option sbatch does not know, so that sbatch refuses the script as it is submitted.
    assert [line for line in script.splitlines() if line.startswith("#SBATCH")] == [
        "#SBATCH --run-this-script-with-bash-not-sbatch"]
    for size in ("SHARDS", "CPUS", "MEM_PER_CPU", "TIME"):
        assert re.search(rf"^{size}=\$\{{{size}:-[^}}]+\}}", script, re.MULTILINE), size


def test_the_kubernetes_indexed_job():
    documents = yaml.safe_load_all((DEPLOY / "kubernetes-course-grade.yaml").read_text(encoding="utf-8"))
    grade, merge = [document for document in documents if document["kind"] == "Job"]
    assert grade["spec"]["completionMode"] == "Indexed"
    assert grade["spec"]["completions"] == int(grade["spec"]["template"]["spec"]["containers"][0]["env"][0]["value"])
    for job in (grade, merge):
        accepted(job["spec"]["template"]["spec"]["containers"][0]["command"][2].replace("/data/graded/shard-*",
                                                                                        "s1 s2"))


@pytest.mark.parametrize("command", ["course-grade a b", "course-grade a --shard 9/8", "course-grade a --jobs 0"])
def test_the_check_can_fail(command):
    with pytest.raises((SystemExit, AssertionError)):
        accepted(command)
