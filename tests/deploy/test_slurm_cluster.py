"""deploy/slurm-course-grade.sh on a real single-node Slurm cluster (tests/slurm.py), run as its header
says: the array and the merge give exactly the files of one `course-grade` run, with the default sizes on a
2-core node; a request the node can never satisfy is refused at once, not left pending."""
import os
import re
import subprocess
import sys

import pytest

from course.layout import ROOT as REPO
from tests.class_of_students import with_mistake
from tests.classroom.test_course_grade import course_grade, outputs
from tests.notebooks import filled, released, source_solutions, write_submission
from tests.slurm import missing, single_node_cluster
from tests.students import a01

SCRIPT = REPO / "deploy" / "slurm-course-grade.sh"
A = "01_attention_basics"
WHY_NOT = missing()
pytestmark = [pytest.mark.slow, pytest.mark.skipif(WHY_NOT is not None, reason=f"no Slurm cluster: {WHY_NOT}")]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with single_node_cluster(tmp_path_factory.mktemp("slurm")) as cluster:
        # The instructor's shell: the course's environment active (its console scripts first on PATH), and
        # the course this checkout, whichever checkout the environment's editable install names.
        cluster.env["PATH"] = f"{os.path.dirname(sys.executable)}:{cluster.env['PATH']}"
        cluster.env["PYTHONPATH"] = str(REPO)
        yield cluster


@pytest.fixture(autouse=True)
def empty_queue(cluster):
    """Each test starts with no job queued, whatever the one before left."""
    yield
    cluster.run("scancel", "--user=root")
    cluster.wait(timeout=30)


def submitted(cluster, *args, **variables) -> subprocess.CompletedProcess:
    """`VARIABLES bash deploy/slurm-course-grade.sh ARGS`, as the script's header shows."""
    return subprocess.run(["bash", SCRIPT, *args], cwd=cluster.folder, env={**cluster.env, **variables},
                          capture_output=True, text=True, timeout=60)


def test_the_array_and_the_merge_give_one_runs_outputs(cluster, tmp_path):
    folder, out = tmp_path / "submitted", tmp_path / "graded"
    write_submission(folder / "alice", filled(source_solutions(A)))
    write_submission(folder / "bob", with_mistake(A, a01.MISTAKES[0]))
    write_submission(folder / "carol", released(A))
    run = submitted(cluster, CLASS=str(folder), OUT=str(out), SHARDS="2")  # every other size its default
    assert run.returncode == 0, run.stdout + run.stderr
    one = course_grade(folder, "--out", tmp_path / "one-run")  # while Slurm grades
    assert one.returncode == 0, one.stdout + one.stderr
    ids = re.search(r"array job (\d+) .* merge job (\d+)", run.stdout).groups()
    states = cluster.wait(*ids, timeout=240)
    assert states == {f"{ids[0]}_1": "COMPLETED", f"{ids[0]}_2": "COMPLETED", ids[1]: "COMPLETED"}, \
        (states, cluster.logs(out / "logs"))
    assert outputs(out / "class") == outputs(tmp_path / "one-run")


def test_a_request_bigger_than_the_node_is_refused_at_once(cluster, tmp_path):
    too_many = str(cluster.cpus + 1)
    plain = cluster.run("sbatch", "--parsable", f"--cpus-per-task={too_many}", "--wrap=true")
    assert cluster.jobs() == [(plain.stdout.strip(), "wrap", "PENDING", "PartitionConfig")]  # what sbatch alone does
    cluster.run("scancel", plain.stdout.strip())
    run = submitted(cluster, CLASS=str(tmp_path), OUT=str(tmp_path / "graded"), CPUS=too_many)
    assert run.returncode == 1 and "can never start" in run.stderr and "PartitionConfig" in run.stderr, run.stderr
    assert f"{cluster.cpus} CPUs" in run.stderr  # what the partition offers
    assert cluster.jobs() == []
    run = submitted(cluster, CLASS=str(tmp_path), OUT=str(tmp_path / "graded"), CPUS="1",
                    MEM_PER_CPU=f"{cluster.memory_mb + 1}M")  # refused by sbatch itself
    assert run.returncode == 1 and "Requested node configuration is not available" in run.stderr, run.stderr
    assert cluster.jobs() == []


def test_a_time_over_the_partitions_limit_is_refused_array_and_merge(cluster, tmp_path):
    cluster.run("scontrol", "update", f"PartitionName={cluster.partition}", "MaxTime=00:30:00")
    try:
        for variables in ({"TIME": "01:00:00"}, {"MERGE_TIME": "01:00:00"}):
            run = submitted(cluster, CLASS=str(tmp_path), OUT=str(tmp_path / "graded"), **variables)
            assert run.returncode == 1 and "can never start" in run.stderr, (variables, run.stderr)
            assert cluster.jobs() == []  # a merge refused takes its array with it
    finally:
        cluster.run("scontrol", "update", f"PartitionName={cluster.partition}", "MaxTime=INFINITE")


def test_sizes_come_from_the_variables_and_sbatch_alone_is_refused(cluster, tmp_path):
    run = submitted(cluster, "--array=1-8", CLASS=str(tmp_path), OUT=str(tmp_path / "graded"))
    assert run.returncode == 2 and "SHARDS" in run.stderr and cluster.jobs() == []
    job = cluster.run("sbatch", f"--output={tmp_path / 'sbatch.log'}", SCRIPT, check=False)
    assert job.returncode != 0 and "--run-this-script-with-bash-not-sbatch" in job.stderr, job.stderr
    assert cluster.jobs() == []  # refused as it is submitted, not once it runs
