"""The rules that keep the package readable (README, "Design"): what may import what, and where
the profile is read. Each rule is checked on the code itself, so a change that breaks one fails here."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import REPO

PACKAGE = REPO / "qualify"


def python_files(*roots: Path) -> list[Path]:
    return sorted(p for root in roots for p in root.rglob("*.py"))


def test_no_raw_profile_dict_is_read_outside_profile_py() -> None:
    """Everything reads the typed specs; the parsed TOML stays inside qualify/profile.py."""
    offenders = []
    for path in python_files(PACKAGE, REPO / "suites"):
        if path == PACKAGE / "profile.py":
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
