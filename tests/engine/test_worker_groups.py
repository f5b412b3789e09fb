"""The full run's groups take effect: ``--dist loadgroup`` (.ci/run) keeps the tests of a file that share a fixture
of the file on one worker (tests/conftest.py marks them), which xdist says by adding the group to each nodeid. Where
it cannot (pytest-xdist 3.8 with pytest 9.2), the tests of such a file run on several workers, each making the
fixture: the JupyterHub file's accounts were then removed by one worker under the other's running course-release."""
import pytest


@pytest.fixture(scope="module")
def shared():
    return object()


def test_a_test_of_a_module_fixture_runs_in_its_files_group(shared, request):
    config = request.config
    if not hasattr(config, "workerinput") or not config.getvalue("loadgroup"):
        pytest.skip("groups exist only on the workers of a --dist loadgroup run")
    assert request.node.nodeid.endswith(f"@{__name__}"), (
        f"{request.node.nodeid}: xdist did not add the group to the nodeid; this pytest and pytest-xdist do not "
        "work together (see the pytest pin in pyproject.toml)")
