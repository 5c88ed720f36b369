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


def _variables_make_reads() -> set[str]:
    """Every variable a user may set on make's command line or in its environment: those given a default with
    ``?=`` (the Makefile's own derived values are set with ``:=`` and cannot be set from outside by design)."""
    text = (REPO / "Makefile").read_text()
    return {line.split("?=")[0].strip() for line in text.splitlines() if "?=" in line and not line.startswith("\t")}


def test_the_variables_tested_are_every_one_make_reads() -> None:
    assert _variables_make_reads() == set(EVERY_INPUT)


EVERY_INPUT = ["PYTHON", "VENV", "BENCH_FIXTURE", "PROFILE", "REPORTS", "LEVELS", "DRAFT_REVISION", "QUALIFY_ARGS",
               "SIGN_KEY", "VERIFY_KEY", "ATTESTATION", "REVISION", "REQUIRE", "MUTANTS", "CHECKPOINT", "SOURCE"]
# Every target a user or CI names; `make -n` expands each one's recipe without running it, so what make itself
# evaluates (conditionals, target names, recipe text) is all that can act.
TARGETS = ["qualify", "gate", "test", "test-variants", "test-fast", "lint", "lock", "reliability", "mutation",
           "fixtures", "fixtures-full", "bench", "venv", "clean-venv", "local-runtimes"]


@pytest.mark.parametrize("where", ["command line", "environment"])
@pytest.mark.parametrize("name", EVERY_INPUT)
def test_no_input_is_evaluated_by_make_even_dry(tmp_path: Path, name: str, where: str) -> None:
    marker = tmp_path / "evaluated"
    value = f"$(shell touch {marker})"
    args = ["make", "-n", "-k", *TARGETS] + ([f"{name}={value}"] if where == "command line" else [])
    env = {**os.environ, **({name: value} if where == "environment" else {})}
    subprocess.run(args, cwd=REPO, capture_output=True, text=True, timeout=120, env=env)
    assert not marker.exists(), f"make evaluated {name} given in the {where}"


def test_a_python_whose_path_holds_shell_syntax_is_that_path(tmp_path: Path) -> None:
    """PYTHON reaches the shell as data: the interpreter at that exact path makes the venv, nothing in it runs."""
    marker = "qualify-make-injected-tool"
    (REPO / marker).unlink(missing_ok=True)
    odd = tmp_path / f"v;touch {marker};`touch {marker}`$(touch {marker}) x"
    odd.mkdir()
    python = odd / "python3"
    python.write_text(RECORDER)
    python.chmod(0o755)
    recorded = tmp_path / "argv"
    venv = tmp_path / "venv"  # no stamp: the venv recipe runs and calls PYTHON
    proc = subprocess.run(["make", "-s", "venv", f"VENV={venv}", f"PYTHON={python}"], cwd=REPO,
                          capture_output=True, text=True, timeout=60, env={**os.environ, "RECORDED": str(recorded)})
    assert not (REPO / marker).exists(), f"PYTHON={str(python)!r} ran"
    assert recorded.read_text().split("\0")[:-1] == ["-m", "venv", str(venv)], proc.stderr


@pytest.mark.parametrize("value", ["v;touch x", "a venv", "$(shell touch x)", "v:w", "v#x", "v`x`"])
def test_a_venv_folder_make_cannot_name_is_refused_before_anything_runs(tmp_path: Path, value: str) -> None:
    """The venv's folder is a make target (its stamp), where make's syntax cannot be quoted: refused, named."""
    proc = subprocess.run(["make", "lint", f"VENV={value}"], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert proc.returncode != 0
    assert f"VENV must be one path of letters, digits and _ . / - + @ ~ (it names a make target); got '{value}'" \
        in proc.stderr
    assert not (REPO / "x").exists()
