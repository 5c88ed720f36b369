"""The rules that keep the package readable: what may import what (the one statement of it is
qualify/layers.py), where the profile is read, how long a module may grow. Each rule is checked on
the code itself, so a change that breaks one fails here."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

import pytest

from qualify.layers import MAY_IMPORT
from tests.helpers import REPO

PACKAGE = REPO / "qualify"


def python_files(*roots: Path) -> list[Path]:
    return sorted(p for root in roots for p in root.rglob("*.py"))


def test_no_raw_profile_dict_is_read_outside_the_profile_package() -> None:
    """Everything reads the typed specs; the parsed TOML stays inside qualify/profile/."""
    offenders = []
    for path in python_files(PACKAGE, REPO / "suites"):
        if path.is_relative_to(PACKAGE / "profile"):
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            owner = node.value if isinstance(node, ast.Attribute) else None
            if (isinstance(node, ast.Attribute) and node.attr == "data"
                    and (getattr(owner, "attr", None) or getattr(owner, "id", None)) == "profile"):
                offenders.append(f"{path.relative_to(REPO)}:{node.lineno}")
    assert offenders == []


@pytest.mark.parametrize("module", [
    "qualify.report.model", "qualify.report.markdown", "qualify.report.card", "qualify.report.diff",
    "qualify.release.gate", "qualify.release.attestation", "qualify.commands.gate", "qualify.cli",
    "qualify.run.runner", "qualify.checkpoint.manifest",
])
def test_the_modules_that_decide_or_render_a_verdict_do_not_load_torch(module: str) -> None:
    """The gate and the renderers run on a release machine without torch, and start fast."""
    code = f"import sys, {module}; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, check=True)
    assert out.stdout.strip() == "False", f"{module} imports torch"


#: The most lines a module of the package may have: past it, a module holds more than one concept.
MAX_MODULE_LINES = 600


def test_no_module_is_over_600_lines() -> None:
    """A module that grows past MAX_MODULE_LINES is split along a seam (one concept per module), not cut at a line."""
    lengths = {path.relative_to(REPO).as_posix(): len(path.read_text(encoding="utf-8").splitlines())
               for path in python_files(PACKAGE)}
    assert len(lengths) > 50  # the walk found the package, not an empty folder
    over = {name: n for name, n in sorted(lengths.items()) if n > MAX_MODULE_LINES}
    assert over == {}, f"modules over {MAX_MODULE_LINES} lines: " + ", ".join(f"{k} ({v})" for k, v in over.items())


def imported_parts(path: Path) -> set[str]:
    parts = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        names = []
        if isinstance(node, ast.ImportFrom) and node.module:
            names = [node.module, *(f"{node.module}.{a.name}" for a in node.names)]
        elif isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        for name in names:
            bits = name.split(".")
            if bits[0] == "qualify" and len(bits) > 1 and bits[1] in MAY_IMPORT:
                parts.add(bits[1])
    return parts


def package_parts() -> set[str]:
    """Every subpackage and top-level module of qualify/ (its __init__ and __main__ aside)."""
    return {p.name if p.is_dir() else p.stem for p in PACKAGE.iterdir()
            if (p.is_dir() and (p / "__init__.py").is_file()) or (p.suffix == ".py" and not p.stem.startswith("__"))}


def test_every_part_of_the_package_is_in_the_rule() -> None:
    """A new part is placed in qualify/layers.py before it can be imported, so the rule never has a blind spot."""
    assert package_parts() == set(MAY_IMPORT)


def test_the_rule_points_down_its_table() -> None:
    """Each part may import only parts listed before it: the graph has no cycle, and the table reads top-down."""
    earlier: set[str] = set()
    upward = []
    for part, allowed in MAY_IMPORT.items():
        upward += [f"{part} -> {other}" for other in sorted(allowed - earlier)]
        earlier.add(part)
    assert upward == []


def test_the_core_and_the_errors_import_nothing_of_ours() -> None:
    for module in (PACKAGE / "core.py", PACKAGE / "errors.py"):
        assert imported_parts(module) - {module.stem} == set(), module.name


def test_each_part_imports_only_the_parts_below_it() -> None:
    wrong = []
    for path in python_files(PACKAGE):
        rel = path.relative_to(PACKAGE)
        part = rel.parts[0] if len(rel.parts) > 1 else rel.stem
        if part not in MAY_IMPORT:
            continue
        for other in sorted(imported_parts(path) - MAY_IMPORT[part] - {part}):
            wrong.append(f"{rel} imports qualify.{other}")
    assert wrong == []


def mirror_of(module: Path) -> Path:
    """The test module of a library module: tests/<part>/test_<module>.py, or tests/test_<module>.py at the top."""
    rel = module.relative_to(PACKAGE)
    return REPO / "tests" / rel.parent / f"test_{rel.name}"


#: How a test runs a subcommand through the CLI: run_qualify("card", ...), [python, "-m", "qualify.cli", "card", ...]
#: or main(["card", ...]).
CLI_CALL = r'(?:run_qualify\(\s*|"qualify\.cli",\s*|main\(\[\s*){name}'


def test_every_library_module_has_its_mirror_test_module() -> None:
    """Tests mirror the package (README, "Development"): each module qualify/<part>/<m>.py has its tests in
    tests/<part>/test_<m>.py, and qualify/<m>.py in tests/test_<m>.py; a package's __init__.py holds nothing of
    its own to test.

    The subcommands (qualify/commands/<name>.py) are the exception: each parses its arguments and calls the
    library, whose modules have their mirrors, so its tests are the CLI's own. A command module needs either
    tests/commands/test_<name>.py or a test that runs ``qualify <name>`` through the CLI (run_qualify,
    ``python -m qualify.cli <name>`` or ``main([<name>, ...])``).
    """
    modules = [p for p in python_files(PACKAGE) if p.name != "__init__.py"]
    commands = [p for p in modules if p.parent == PACKAGE / "commands"]
    missing = [f"{p.relative_to(REPO)} -> {mirror_of(p).relative_to(REPO)}"
               for p in modules if p not in commands and not mirror_of(p).is_file()]
    assert missing == [], "library modules without their mirror test module"

    tests = "\n".join(p.read_text(encoding="utf-8") for p in python_files(REPO / "tests"))
    unexercised = [p.relative_to(REPO).as_posix() for p in commands
                   if not mirror_of(p).is_file()
                   and not re.search(CLI_CALL.format(name=re.escape(f'"{p.stem}"')), tests)]
    assert unexercised == [], "subcommands neither mirrored in tests/commands/ nor run through the CLI by a test"
    assert len(modules) > 50 and len(commands) >= 7  # the walk found the package, not an empty folder
