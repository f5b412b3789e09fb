"""Sandboxes started with some walls turned off, for the tests that show the walls left hold on their own."""
import os

from autograder.engine.sandbox.client import Sandbox

OFF_ENV = "ATTENTION_COURSE_SANDBOX_OFF"  # read by the fork server as it starts


def started_without(*walls: str) -> Sandbox:
    """A new sandbox, greeted, whose fork server put up every wall but ``walls`` (all of them when none is named)."""
    if walls:
        os.environ[OFF_ENV] = ",".join(walls)
    try:
        box = Sandbox()
        box.hello()
        return box
    finally:
        os.environ.pop(OFF_ENV, None)
