"""One module per exercise: its cases, its known mistakes and its ``EXERCISE``."""
