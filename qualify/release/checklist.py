"""The checks each level consists of, read from the qualification suites themselves.

A release policy must know which checks a level *is*: a report or attestation that
lists a check the harness never had, or leaves one out, cannot speak for that level.
The one definition is the suites: every module-level ``test_*`` function of a suite
module whose ``pytestmark`` names a level is one check, ``<level>.<name>`` (exactly
the id :func:`qualify.run.suite_plugin.check_id` gives it). They are read by parsing
the source, not importing it, so the gate never loads torch or a suite fixture.
"""

from __future__ import annotations

import ast
from functools import cache
from pathlib import Path

from qualify.errors import HarnessError
from qualify.report.model import LEVELS

#: The qualification suites (a plain pytest folder beside the package, in the checkout).
SUITES_DIR = Path(__file__).resolve().parents[2] / "suites"


def _marked_level(tree: ast.Module) -> str | None:
    """The level of ``pytestmark = pytest.mark.<level>`` at module level, if any."""
    for node in tree.body:
        if not isinstance(node, ast.Assign):
            continue
        if not any(isinstance(t, ast.Name) and t.id == "pytestmark" for t in node.targets):
            continue
        value = node.value
        if isinstance(value, ast.Attribute) and value.attr in LEVELS:
            return value.attr
    return None


def suite_checks(source: str, filename: str = "<suite>") -> tuple[str | None, tuple[str, ...]]:
    """(level, check ids) of one suite module's source; (None, ()) for a module with no level mark.

    Raises:
        HarnessError: the source does not parse, or a check is marked with a level of its own
            (the harness marks levels per module only, so the list would be ambiguous).
    """
    try:
        tree = ast.parse(source, filename=filename)
    except SyntaxError as exc:
        raise HarnessError(f"{filename}: the suite does not parse: {exc.msg} (line {exc.lineno})") from None
    level = _marked_level(tree)
    tests = [n for n in tree.body
             if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef) and n.name.startswith("test_")]
    for fn in tests:
        for dec in fn.decorator_list:
            if isinstance(dec, ast.Attribute) and dec.attr in LEVELS:
                raise HarnessError(f"{filename}: {fn.name} carries a level mark of its own; levels are marked per "
                                   "suite module (pytestmark)")
    if level is None:
        return None, ()
    return level, tuple(f"{level}.{fn.name.removeprefix('test_')}" for fn in tests)


@cache
def level_checks(suites_dir: Path = SUITES_DIR) -> dict[str, tuple[str, ...]]:
    """Every level's check ids, in suite file order, as this harness defines them.

    Raises:
        HarnessError: the suites are missing or cannot be read.
    """
    if not Path(suites_dir).is_dir():
        raise HarnessError(f"{suites_dir}: the qualification suites are missing (install qualify from its checkout)")
    out: dict[str, list[str]] = {name: [] for name in LEVELS}
    for path in sorted(Path(suites_dir).glob("test_*.py")):
        try:
            source = path.read_text(encoding="utf-8")
        except OSError as exc:
            raise HarnessError(f"{path}: cannot read the suite: {exc.strerror or exc}") from None
        level, ids = suite_checks(source, str(path))
        if level is not None:
            out[level].extend(ids)
    return {name: tuple(ids) for name, ids in out.items()}


def level_of_check(check_id: str) -> str | None:
    """The level a check id names (its prefix), or None when the prefix is no level."""
    level = check_id.split(".", 1)[0]
    return level if level in LEVELS and "." in check_id else None
