"""What the project's tests share: the real model of assignment 07, fetched once per run into the course's
cache (``course-weights smollm2``; nothing happens when it is already there)."""
import pytest

from course import smollm2


@pytest.fixture(scope="session", autouse=True)
def _smollm2_fetched():
    """Fetch the weights before any test starts the grading sandbox, which may read them only if they exist
    when it starts. A failure (offline, no cache) is kept for the tests that need the weights."""
    try:
        return smollm2.fetch(progress=False), None
    except (smollm2.FetchError, OSError) as error:
        return None, error


@pytest.fixture(scope="session")
def smollm2_weights(_smollm2_fetched):
    """The converted SmolLM2-135M-Instruct folder; the test fails with the reason when it could not be fetched."""
    folder, error = _smollm2_fetched
    if folder is None:
        pytest.fail(f"the SmolLM2 weights could not be fetched: {error}")
    return folder
