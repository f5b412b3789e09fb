"""What one exercise's run in the sandbox may use before it is stopped."""

# Seconds for all cases of one exercise; the cases themselves take milliseconds.
EXERCISE_TIMEOUT_S = 20.0

# Address space a sandboxed run may add on top of what the grader process already maps.
EXTRA_MEMORY_BYTES = 3 * 1024**3
