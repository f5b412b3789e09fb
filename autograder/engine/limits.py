"""What one run of student code may use before it is stopped, and how much of a submission the grader
reads, and how long the grader waits for the sandbox. (Truncations of a message to a line are made where
the message is written.)"""

# Seconds of CPU time for all cases of one exercise (the cases themselves take milliseconds to seconds). CPU
# time, not wall time, so that no verdict depends on how busy the machine is (RLIMIT_CPU stops the run one
# second above it; the sandbox measures what a run used).
EXERCISE_TIMEOUT_S = 20.0
# The wall clock guards only against code that does not get the CPU (a busy machine) or does not use it (it
# sleeps): a run is first given its CPU seconds and this many more, so that on an idle machine the CPU limit
# stops an infinite loop first; a run stopped by the wall clock with CPU time left is run once more with
# BUSY_RETRY_FACTOR times its CPU seconds (a fifth of a core is enough then), and stopped again it is the
# grader's problem ("机器太忙"), never the student's loop.
WALL_MARGIN_S = 2.0
BUSY_RETRY_FACTOR = 5
# Seconds of CPU time for all the exercises of one notebook when a whole class is graded (course-grade,
# Gradescope), so that one notebook cannot hold a worker for long: exercises left when it runs out get no
# verdict (zero, and a message saying so). Six exercises that each run out their own time fit in it; `pytest
# autograder/`, which grades one student, has no such cap. Where the machine is so busy that the notebook's
# wall time passes BUSY_RETRY_FACTOR times the cap, the exercises left are the grader's problem instead.
NOTEBOOK_TIMEOUT_S = 120.0


def first_wall_s(cpu_s: float) -> float:
    """The wall-clock cap of a run that may use ``cpu_s`` seconds of CPU time."""
    return cpu_s + WALL_MARGIN_S


def retry_wall_s(cpu_s: float) -> float:
    """The wall-clock cap of its second run, after the first was stopped by the wall clock with CPU time left."""
    return cpu_s * BUSY_RETRY_FACTOR


def notebook_wall_s(cap_s: float) -> float:
    """The longest a notebook capped at ``cap_s`` CPU seconds may take: exercises start until ``cap_s`` times
    BUSY_RETRY_FACTOR of wall time has passed, and the last to start may take both its runs."""
    return cap_s * BUSY_RETRY_FACTOR + first_wall_s(EXERCISE_TIMEOUT_S) + retry_wall_s(EXERCISE_TIMEOUT_S)

# Address space a run may add on top of what the fork server already maps (torch alone maps ~0.6 GiB).
EXTRA_MEMORY_BYTES = 3 * 1024**3
# Below this much room (a host limit such as `ulimit -v`), no honest solution can run: a grader problem.
MIN_EXTRA_MEMORY_BYTES = 512 * 1024**2

# The private temporary folder (a tmpfs, so its size counts as memory) and the files in it.
TMP_BYTES = 64 * 1024**2
TMP_FILES = 1024
FILE_BYTES = 16 * 1024**2
OPEN_FILES = 64
PROCESSES = 64  # RLIMIT_NPROC where it binds (not for root, whom seccomp stops instead)
MAX_FD = 1 << 16

# What a run may hand back (its outputs, serialised), and what the grader reads of a submission.
OUTPUT_BYTES = 64 * 1024**2
# Axes of one tensor in an output, and levels of tuples and dicts in one output (an honest one has a few): the
# sandbox refuses more with a message, so that nothing it writes is what the grader's reader refuses as forged.
OUTPUT_DIMS = 64
OUTPUT_DEPTH = 32
NOTEBOOK_BYTES = 32 * 1024**2
CODE_BYTES = 2 * 1024**2
# The longest text of a verdict: its one-line summary (and a mistake's name), its details.
SUMMARY_CHARS = 300
MESSAGE_CHARS = 4000
# Lines of a failing dependency's message repeated in the message of an exercise built on it.
DEPENDENCY_LINES = 4

# Seconds the fork server may take to start (it imports torch) before the grader gives up on it, and to tidy
# up when it is told to stop before it is killed.
STARTUP_TIMEOUT_S = 120.0
STOP_GRACE_S = 2.0
# Seconds past an exercise's timeout that the grader waits for the fork server's answer (it kills a child
# at the timeout, so only a stuck fork server needs this).
ANSWER_GRACE_S = 30.0
# Seconds past the longest a notebook may take (``notebook_wall_s``) before a silent class-grading worker counts
# as stuck and is replaced.
WORKER_STUCK_AFTER_S = 60.0
# Below this many seconds left of a notebook's cap, an exercise is not started: it could not finish, and its
# message would blame a timeout the student's code did not cause.
LEAST_EXERCISE_S = 1.0
# The largest message header between grader and fork server (and the largest header of a report, its names,
# strings and tensor records), and the largest job the fork server reads.
HEADER_BYTES = 1 << 20
JOB_BYTES = 1 << 34
# The most bytes of pickled cases a fork server keeps between jobs (``sandbox/held_cases.py``): every exercise's
# cases come to about 110 MB, of which 06's layer takes 74.
HELD_CASES_BYTES = 256 << 20
