"""qualify.checks.catalogue: every check declared once, well-formed, in run order; each entry's function exists
and takes exactly the inputs it declares, each a fixture the suites provide; the catalogue loads without torch,
and docs/checks.md is what it renders."""

from __future__ import annotations

import ast
import importlib
import inspect
import subprocess
import sys

import pytest

from qualify.checks import catalogue
from qualify.checks.catalogue import CATALOGUE, CHECK_ID, LEVEL_SUMMARY, by_id, level_checks, level_of_check
from qualify.core import LEVELS
from tests.helpers import REPO

REGENERATE = ".venv/bin/python -m qualify.checks.catalogue > docs/checks.md"


def suite_fixtures() -> set[str]:
    """The fixtures the suites are given: each qualify/run/fixtures/ module's ``__all__``, and ``record``."""
    names = {"record"}
    for path in sorted((REPO / "qualify" / "run" / "fixtures").glob("*.py")):
        if path.name == "__init__.py":
            continue
        module = importlib.import_module(f"qualify.run.fixtures.{path.stem}")
        names.update(module.__all__)
    return names


def test_ids_are_unique_and_well_formed() -> None:
    ids = [spec.id for spec in CATALOGUE]
    assert len(ids) == len(set(ids)), [i for i in ids if ids.count(i) > 1]
    malformed = [i for i in ids if not CHECK_ID.match(i) or i.split(".")[0] not in LEVELS]
    assert malformed == []


@pytest.mark.parametrize("spec", CATALOGUE, ids=lambda s: s.id)
def test_an_entry_is_one_line_of_title_some_words_of_what_and_runs_its_levels_function(
        spec: catalogue.CheckSpec) -> None:
    assert spec.title.strip() == spec.title and spec.title and "\n" not in spec.title
    assert spec.what.strip() == spec.what and len(spec.what.split()) >= 5 and "\n" not in spec.what
    assert spec.runs == f"qualify.run.checks.{spec.level}:{spec.name}"
    assert (spec.module, spec.function) == (f"qualify.run.checks.{spec.level}", spec.name)
    assert len(set(spec.inputs)) == len(spec.inputs)


def test_the_catalogue_is_in_run_order_and_every_level_has_checks() -> None:
    order = [LEVELS.index(spec.level) for spec in CATALOGUE]
    assert order == sorted(order)
    assert {spec.level for spec in CATALOGUE} == set(LEVELS)
    assert set(LEVEL_SUMMARY) == set(LEVELS)


def test_every_function_exists_and_takes_exactly_its_declared_inputs() -> None:
    """Renaming a check's function, or one of its parameters, without its entry fails here, naming the entry."""
    wrong = []
    for spec in CATALOGUE:
        module = importlib.import_module(spec.module)
        function = getattr(module, spec.function, None)
        if not inspect.isfunction(function):
            wrong.append(f"{spec.id}: {spec.runs} does not exist")
            continue
        params = tuple(inspect.signature(function).parameters)
        if params != spec.inputs:
            wrong.append(f"{spec.id}: {spec.runs} takes {params}, the catalogue declares {spec.inputs}")
    assert wrong == []


def test_no_check_function_is_left_out_of_the_catalogue() -> None:
    """Each level's module holds the functions of its checks, and nothing else public."""
    extra = []
    for level in LEVELS:
        path = REPO / "qualify" / "run" / "checks" / f"{level}.py"
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in tree.body:
            if isinstance(node, ast.FunctionDef) and not node.name.startswith("_") \
                    and by_id(f"{level}.{node.name}") is None:
                extra.append(f"{path.relative_to(REPO)}: {node.name}")
    assert extra == []


def test_every_input_is_a_fixture_the_suites_provide() -> None:
    provided = suite_fixtures()
    assert {"checkpoint", "profile", "runtime", "openai_client", "plan"} <= provided  # the walk found the modules
    unknown = [f"{spec.id}: {name}" for spec in CATALOGUE for name in spec.inputs if name not in provided]
    assert unknown == []
    assert all("record" not in spec.inputs for spec in CATALOGUE)  # every suite test takes it besides


def test_lookups() -> None:
    assert by_id("structure.paths") is CATALOGUE[[s.id for s in CATALOGUE].index("structure.paths")]
    assert by_id("structure.nothing") is None
    checks = level_checks()
    assert list(checks) == list(LEVELS)
    assert [cid for ids in checks.values() for cid in ids] == [spec.id for spec in CATALOGUE]
    assert checks["reproduction"] == ("reproduction.quantized_tensors", "reproduction.unquantized_tensors")
    checks["format"] = ()
    assert level_checks()["format"]  # a new dict on each call: a caller cannot change the definition
    assert level_of_check("format.scales") == "format"
    assert level_of_check("format") is None  # a bare level is no check
    assert level_of_check("nolevel.check") is None


def test_the_catalogue_loads_without_torch_or_pytest() -> None:
    """The gate reads it on a release machine without torch, and starts fast."""
    code = "import sys, qualify.checks.catalogue; print(sorted({'torch', 'pytest', 'numpy'} & set(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, check=True)
    assert out.stdout.strip() == "[]"


def test_docs_checks_md_is_what_the_catalogue_renders() -> None:
    path = REPO / "docs" / "checks.md"
    assert path.is_file() and path.read_text(encoding="utf-8") == catalogue.markdown(), (
        f"docs/checks.md differs from the catalogue; regenerate it: {REGENERATE}")


def test_the_command_prints_the_table_with_every_check_once() -> None:
    out = subprocess.run([sys.executable, "-m", "qualify.checks.catalogue"], capture_output=True, text=True,
                         cwd=REPO, check=True)
    text = out.stdout
    assert text == catalogue.markdown()
    rows = [line for line in text.splitlines() if line.startswith("| `")]
    assert [row.split("`")[1] for row in rows] == [spec.id for spec in CATALOGUE]
    assert f"| all | {len(CATALOGUE)} |" in text
