"""make qualify and make gate take their inputs as data: nothing in a value is run by make or by the shell.

A value may hold ';', a command substitution, backticks, make's own $(shell ...), a space or a
newline: each reaches the harness as the one argument it was, or (QUALIFY_ARGS) as its words, and
nothing in it runs. The harness is replaced by a recorder in a stand-in venv whose stamp is current.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
from pathlib import Path

import pytest

from tests.helpers import REPO

RECORDER = """#!/usr/bin/env bash
printf '%s\\0' "$@" > "$RECORDED"
"""


@pytest.fixture
def venv(tmp_path: Path) -> Path:
    root = tmp_path / "venv"
    (root / "bin").mkdir(parents=True)
    for name in ("qualify", "python"):
        (root / "bin" / name).write_text(RECORDER)
        (root / "bin" / name).chmod(0o755)
    stamp = hashlib.sha256((REPO / "pyproject.toml").read_bytes()).hexdigest()[:12]
    (root / f".installed-{stamp}").touch()  # the venv is current: make installs nothing
    return root


def _make(venv: Path, target: str, **variables: str) -> tuple[subprocess.CompletedProcess[str], list[str]]:
    recorded = venv / "argv"
    args = ["make", "-s", target, f"VENV={venv}", *(f"{k}={v}" for k, v in variables.items())]
    proc = subprocess.run(args, cwd=REPO, capture_output=True, text=True, timeout=60,
                          env={**os.environ, "RECORDED": str(recorded)})
    argv = recorded.read_text().split("\0")[:-1] if recorded.exists() else []
    return proc, argv


MARKER = Path("/tmp/qualify-make-injected")
HOSTILE = [
    f"x; touch {MARKER}",
    f"$(touch {MARKER})",
    f"`touch {MARKER}`",
    f"$(shell touch {MARKER})",
    f"x\ntouch {MARKER}",
    "a path with spaces",
]


@pytest.mark.parametrize("value", HOSTILE)
@pytest.mark.parametrize("name", ["CHECKPOINT", "SOURCE", "DRAFT_REVISION", "REPORTS"])
def test_make_qualify_passes_each_input_as_one_argument_and_runs_nothing(venv: Path, name: str, value: str) -> None:
    MARKER.unlink(missing_ok=True)
    proc, argv = _make(venv, "qualify", PROFILE="other", **{name: value})
    assert proc.returncode == 0, proc.stderr
    assert not MARKER.exists(), f"{name}={value!r} ran"
    flag = {"CHECKPOINT": "--checkpoint", "SOURCE": "--source", "DRAFT_REVISION": "--draft-revision",
            "REPORTS": "--report-dir"}[name]
    assert argv[argv.index(flag) + 1] == value


def test_qualify_args_are_words_never_code(venv: Path) -> None:
    MARKER.unlink(missing_ok=True)
    proc, argv = _make(venv, "qualify", PROFILE="other", QUALIFY_ARGS=f"--sign-model $(touch {MARKER}) *")
    assert proc.returncode == 0, proc.stderr
    assert not MARKER.exists()
    assert argv[-4:] == ["--sign-model", "$(touch", f"{MARKER})", "*"]  # split on spaces, not globbed


@pytest.mark.parametrize("value", HOSTILE)
def test_make_gate_passes_each_input_as_one_argument_and_runs_nothing(venv: Path, value: str) -> None:
    MARKER.unlink(missing_ok=True)
    proc, argv = _make(venv, "gate", PROFILE="fixture", ATTESTATION=value, VERIFY_KEY="k.pem", REVISION=value)
    assert proc.returncode == 0, proc.stderr
    assert not MARKER.exists()
    assert argv[argv.index("--attestation") + 1] == value and argv[argv.index("--revision") + 1] == value
