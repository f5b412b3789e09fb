"""The rooms of the code and the rule between them: the engine, which decides verdicts, imports nothing from
the instructor tools or the student's pytest folder; the references and the ``course`` modules verdicts read
import no tool; every module the engine can reach is one the class store's key hashes. Imports are read from
the source (``autograder.engine.provenance``), in functions too."""
import pkgutil

import pytest

import autograder
import course
import solutions
from autograder.engine import provenance
from autograder.engine.assignments import ASSIGNMENTS


def modules_of(package) -> list[str]:
    return [package.__name__] + [m.name for m in pkgutil.walk_packages(package.__path__, package.__name__ + ".")]


ENGINE = [m for m in modules_of(autograder) if m.startswith("autograder.engine")]
TOOLS = [m for m in modules_of(autograder) if m.startswith("autograder.instructor")]
PLUGIN = [m for m in modules_of(autograder) if m.count(".") == 1 and not m.startswith(("autograder.engine",
                                                                                        "autograder.instructor"))]
COURSE_CORE = [m for m in modules_of(course) if not m.startswith("course.tools")]


def imported_in(rooms: list[str], package_prefixes: tuple[str, ...]) -> list[tuple[str, str]]:
    """(importer, imported) for each import from ``rooms`` of a module starting with one of the prefixes."""
    return sorted((name, target) for name in rooms for target in provenance.imports_of(name)
                  if target.startswith(package_prefixes))


def test_the_rooms_are_what_the_layout_says():
    assert {"autograder.engine.model", "autograder.engine.judging"} <= set(ENGINE) and "autograder.engine.sandbox.zygote" in ENGINE
    assert "autograder.instructor.classroom.course_grade" in TOOLS and "autograder.instructor.doctor" in TOOLS
    assert {"autograder.conftest", "autograder.scoreboard", "autograder.test_01_attention_basics"} <= set(PLUGIN)
    assert "course.toy" in COURSE_CORE and "course.tools.plotting" not in COURSE_CORE


def test_the_engine_imports_no_tool_and_not_the_plugin():
    assert imported_in(ENGINE, ("autograder.instructor",)) == []
    assert imported_in(ENGINE, tuple(PLUGIN)) == []
    assert imported_in(ENGINE, ("course.tools",)) == []


def test_references_and_the_course_modules_verdicts_read_import_no_tool():
    assert imported_in(modules_of(solutions), ("autograder", "course.tools")) == []
    assert imported_in(COURSE_CORE, ("autograder", "solutions", "course.tools")) == []


def test_the_plugin_imports_no_tool():
    assert imported_in(PLUGIN, ("autograder.instructor",)) == []


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_the_store_key_covers_every_module_the_engine_reaches(assignment):
    hashed = set(provenance.verdict_modules(assignment))
    reached = provenance.closure(provenance.CORE, lambda name: name == "autograder.engine.assignments")
    assert reached - {"autograder"} <= hashed | {m for m in reached if m.startswith(provenance.CHECKS + ".")}
    assert not {m for m in hashed if m.startswith(("autograder.instructor", "course.tools"))}


def test_the_store_key_of_an_assignment_leaves_out_the_checks_it_does_not_use():
    first = set(provenance.verdict_modules("01_attention_basics"))
    real_model = set(provenance.verdict_modules("07_real_model"))
    assert "autograder.engine.checks.causal_mask" in first
    assert "autograder.engine.checks.greedy_generate" not in first
    # 07's LlamaAttention builds on 03's step-by-step GQA: editing that check regrades 07 too.
    assert "autograder.engine.checks.grouped_query_attention" in real_model


def test_the_import_reader_sees_imports_inside_functions():
    # the protocols import the Llama model only where they build one
    assert "course.llama" in provenance.imports_of("course.protocols.generation")
