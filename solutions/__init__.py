"""Reference implementations, one module per assignment: the graders' oracle."""
