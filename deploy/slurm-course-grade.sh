#!/usr/bin/env bash
#SBATCH --run-this-script-with-bash-not-sbatch
# Grade a large class on a Slurm cluster: an array of SHARDS tasks, each grading every SHARDS-th student on
# the cores Slurm gives it, then one job that merges the shards' outputs into the files one run writes.
# Run this script, do not sbatch it (sbatch stops at once at the option above, which it does not know): it
# submits the array and the merge itself, and cancels at once, with
# Slurm's reason, a request the cluster can never start (more cores or memory than any node of the
# partition has, a time over its limit), which sbatch would accept and leave pending forever.
#
#   bash deploy/slurm-course-grade.sh
#   SHARDS=16 CPUS=8 MEM_PER_CPU=3G TIME=02:00:00 bash deploy/slurm-course-grade.sh --partition=short
#
# Arguments go to sbatch for both jobs (--partition, --account, --qos, --constraint, ...); the sizes are the
# variables below. CLASS and OUT must be on a file system every node sees, and the course installed where
# the jobs find it: they get this shell's environment, so activate the course's virtual environment first.
# Logs go to $OUT/logs/. Run the same command again after a failure: each shard grades only what it has
# not graded yet.
set -euo pipefail

CLASS=${CLASS:-$HOME/attention-course/submitted}   # nbgrader's submitted/, or an LMS download
OUT=${OUT:-$HOME/attention-course/graded}
SHARDS=${SHARDS:-4}              # array tasks, each grading every SHARDS-th student
CPUS=${CPUS:-2}                  # cores per task: one grading worker each
MEM_PER_CPU=${MEM_PER_CPU:-2G}   # per worker: two grading 07 and 08 side by side peaked at 1.6 GiB in all
TIME=${TIME:-01:00:00}           # per task
MERGE_TIME=${MERGE_TIME:-00:20:00}
# Reasons a pending job gives when the cluster's configuration can never start it (squeue's %r).
NEVER='^(PartitionConfig|PartitionNodeLimit|PartitionTimeLimit|BadConstraints|InvalidAccount|InvalidQOS|(Assoc|QOS)Max[A-Za-z]*PerJob[A-Za-z]*|QOSMin[A-Za-z]*)$'

submit() {  # sbatch ARGS; prints the job's id, or cancels it and fails when Slurm can never start it
    # (set -e does not reach into a function called in $(...) || ..., hence each || return)
    local id reasons
    id=$(sbatch --parsable "$@") || return 1
    id=${id%%;*}
    reasons=$(squeue --noheader --jobs="$id" --format=%r) || return 1
    if grep -qE "$NEVER" <<<"$reasons"; then
        scancel "$id"
        echo "course-grade: Slurm can never start job $id (${reasons//$'\n'/, }), so it is cancelled. What the" \
            "partitions offer (CPUs and MB of memory per node, time limit):" >&2
        sinfo --noheader --format="  %P  %c CPUs  %m MB  %l" >&2
        echo "Ask for less (CPUS, MEM_PER_CPU, TIME) or another partition (--partition=...)." >&2
        return 1
    fi
    echo "$id"
}

case ${COURSE_GRADE_STEP:-submit} in
shard)  # one task of the array: the shard is its index, and the array has SHARDS tasks by construction
    course-grade "$CLASS" --out "$OUT/shard-$SLURM_ARRAY_TASK_ID" --shard "$SLURM_ARRAY_TASK_ID/$SHARDS" \
        --jobs "$SLURM_CPUS_PER_TASK"
    ;;
merge)
    shards=()
    for i in $(seq 1 "$SHARDS"); do shards+=("$OUT/shard-$i"); done
    course-grade --merge "${shards[@]}" --out "$OUT/class"
    ;;
submit)
    if [ "${ENVIRONMENT:-}" = BATCH ]; then
        echo "course-grade: run this script with bash, do not sbatch it: it submits the array and the merge" >&2
        exit 2
    fi
    for arg in "$@"; do
        case $arg in
        -a* | --array* | -c* | --cpus-per-task* | --mem* | -t* | --time* | --export* | -d* | --dependency*)
            echo "course-grade: $arg is set by this script; set SHARDS, CPUS, MEM_PER_CPU, TIME instead" >&2
            exit 2
            ;;
        esac
    done
    mkdir -p "$OUT/logs"
    # Each job runs this script through --wrap: sbatch given the file itself would stop at its #SBATCH line.
    job=(--wrap="exec bash $(printf '%q' "$(readlink -f "$0")")")
    export CLASS OUT SHARDS COURSE_GRADE_STEP=shard   # the jobs' environment is this one's (sbatch --export=ALL)
    array=$(submit "$@" --job-name=course-grade --array="1-$SHARDS" --cpus-per-task="$CPUS" \
        --mem-per-cpu="$MEM_PER_CPU" --time="$TIME" --output="$OUT/logs/course-grade-%A_%a.log" "${job[@]}")
    # The merge starts once every task has succeeded; if one fails, Slurm cancels the merge.
    COURSE_GRADE_STEP=merge
    merge=$(submit "$@" --job-name=course-grade-merge --dependency="afterok:$array" --kill-on-invalid-dep=yes \
        --cpus-per-task=1 --mem-per-cpu="$MEM_PER_CPU" --time="$MERGE_TIME" \
        --output="$OUT/logs/course-grade-merge-%j.log" "${job[@]}") || { scancel "$array"; exit 1; }
    echo "course-grade: array job $array ($SHARDS tasks of $CPUS CPUs) and merge job $merge submitted;" \
        "squeue --jobs=$array,$merge shows them, the class's files will be in $OUT/class"
    ;;
*)
    echo "course-grade: unknown COURSE_GRADE_STEP=$COURSE_GRADE_STEP" >&2
    exit 2
    ;;
esac
