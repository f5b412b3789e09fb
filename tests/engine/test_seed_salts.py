"""Every check draws its cases from a generator of its own (``inputs.seeded.generator(salt)``): two checks that
shared a salt would test on the same numbers, and a mistake that happens to fit those numbers would fit both."""
import ast
from collections import defaultdict
from pathlib import Path

from autograder.engine import checks, inputs


def _salts() -> dict[int, set[str]]:
    """Salt -> the modules of checks/ and inputs/ that call ``generator`` with it; every call must name its salt
    as a literal, so that this reads them all."""
    found = defaultdict(set)
    for package in (checks, inputs):
        for path in sorted(Path(package.__file__).parent.glob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if isinstance(node, ast.Call) and getattr(node.func, "id", getattr(node.func, "attr", "")) == "generator":
                    assert len(node.args) == 1 and isinstance(node.args[0], ast.Constant), \
                        f"{path.name}:{node.lineno}: generator(...) with a salt that is not a literal"
                    found[node.args[0].value].add(path.stem)
    return found


def test_no_two_checks_share_a_seed_salt():
    salts = _salts()
    shared = {salt: sorted(modules) for salt, modules in salts.items() if len(modules) > 1}
    assert not shared, f"salts used by more than one module: {shared}"
    assert len(salts) >= 20  # the reader sees the checks' calls (29 salts when this was written)

