"""The release workflow's scripts (scripts/ci/) take hostile inputs as data, never as code.

Every workflow input reaches them as an environment variable. Each value that could run a
command, if anything pasted it into a shell or a Makefile -- ``;``, ``$(...)``, backticks,
a newline -- must be refused with the input's name, and the command in it must never run.
A plain path with a space must reach the harness as one argument. The harness itself is
replaced by a recorder that writes down the arguments it was given.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from tests.helpers import REPO

COMMIT = "0123456789abcdef0123456789abcdef01234567"
DIGEST = "sha256:" + "ab" * 32
RECORDER = """#!/usr/bin/env bash
printf '%s\\0' "$@" > "$RECORDED"
"""


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    recorder = tmp_path / "qualify"
    recorder.write_text(RECORDER)
    recorder.chmod(0o755)
    (tmp_path / "ckpt dir").mkdir()
    (tmp_path / "source").mkdir()
    (tmp_path / "snapshot").mkdir()
    (tmp_path / "runs" / "run-1").mkdir(parents=True)
    (tmp_path / "runs" / "run-1" / "attestation.intoto.jsonl").write_text("{}\n")
    base = {k: v for k, v in os.environ.items() if not k.startswith(("GITHUB_", "HF_"))}
    base.update(QUALIFY_BIN=str(recorder), RECORDED=str(tmp_path / "argv"), CHECKPOINT=str(tmp_path / "ckpt dir"),
                SOURCE=str(tmp_path / "source"), DRAFT_REVISION=COMMIT, IMAGE_DIGEST=DIGEST,
                TARGET_SNAPSHOT=str(tmp_path / "snapshot"),
                REPORTS=str(tmp_path / "reports"), RUNS=str(tmp_path / "runs"), SIGN_KEY_PEM="-----BEGIN KEY-----",
                VERIFY_KEY_PEM="-----BEGIN PUBLIC KEY-----", HF_TOKEN="hf_secret_token_value",
                QUALIFY_PYTHON=str(REPO / ".venv" / "bin" / "python"), RUNNER_TEMP=str(tmp_path))
    return base


def _run(script: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["bash", str(REPO / "scripts" / "ci" / script)], env=env, capture_output=True, text=True,
                          timeout=60, cwd="/")


def _argv(env: dict[str, str]) -> list[str]:
    return Path(env["RECORDED"]).read_text().split("\0")[:-1]


MARKER = "/tmp/qualify-ci-injected"
HOSTILE = {
    "semicolon": f"x; touch {MARKER}",
    "command substitution": f"$(touch {MARKER})",
    "backticks": f"`touch {MARKER}`",
    "newline": f"x\ntouch {MARKER}",
    "option": "--levels=structure",
}


@pytest.mark.parametrize("script", ["qualify.sh", "gate.sh", "release.sh"])
@pytest.mark.parametrize("name", ["CHECKPOINT", "DRAFT_REVISION"])
@pytest.mark.parametrize("kind", list(HOSTILE))
def test_a_hostile_input_is_refused_by_name_and_never_runs(env: dict[str, str], script: str, name: str,
                                                           kind: str) -> None:
    Path(MARKER).unlink(missing_ok=True)
    env[name] = HOSTILE[kind]
    proc = _run(script, env)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stderr.startswith(f"::error::{name} "), proc.stderr
    assert "\n" not in proc.stderr.rstrip("\n")  # one line: a newline in the value cannot forge another
    assert not Path(MARKER).exists()
    assert not Path(env["RECORDED"]).exists()  # the harness was never called


@pytest.mark.parametrize(("name", "value", "rule"), [
    ("SOURCE", "relative/path", "is not an absolute path"),
    ("SOURCE", "/no/such/folder", "is not an existing folder"),
    ("TARGET_SNAPSHOT", "/no/such/folder", "is not an existing folder"),
    ("IMAGE_DIGEST", "latest", "is not a sha256:<64 hex> digest"),
    ("DRAFT_REVISION", "main", "is not a 40-hex lowercase commit"),
    ("DRAFT_REVISION", COMMIT.upper(), "is not a 40-hex lowercase commit"),
    ("SIGN_KEY_PEM", "", "is not set"),
])
def test_each_qualify_input_is_checked_against_its_rule(env: dict[str, str], name: str, value: str,
                                                        rule: str) -> None:
    env[name] = value
    proc = _run("qualify.sh", env)
    assert proc.returncode == 2 and rule in proc.stderr and proc.stderr.startswith(f"::error::{name} ")


def test_qualify_runs_the_policy_profile_with_each_input_one_argument(env: dict[str, str]) -> None:
    proc = _run("qualify.sh", env)
    assert proc.returncode == 0, proc.stderr
    argv = _argv(env)
    assert argv[:3] == ["run", "--profile", "glm53-flash-dflash2-mxfp8-tp4"]  # the committed policy's
    assert argv[argv.index("--checkpoint") + 1] == env["CHECKPOINT"]  # "ckpt dir": one argument
    assert argv[argv.index("--draft-revision") + 1] == COMMIT
    assert argv[argv.index("--target-snapshot") + 1] == env["TARGET_SNAPSHOT"]  # the target held to its commit
    key = Path(argv[argv.index("--sign-key") + 1])
    assert not key.exists()  # the key file is gone once the step ends
    assert "-----BEGIN KEY-----" not in proc.stdout + proc.stderr


def test_the_gate_applies_the_release_policy_to_the_one_run_folder(env: dict[str, str], tmp_path: Path) -> None:
    proc = _run("gate.sh", env)
    assert proc.returncode == 0, proc.stderr
    argv = _argv(env)
    assert argv[0] == "gate" and "--release-policy" in argv
    assert argv[argv.index("--attestation") + 1] == str(tmp_path / "runs" / "run-1" / "attestation.intoto.jsonl")
    assert proc.stdout.splitlines()[-1] == str(tmp_path / "runs" / "run-1")
    (tmp_path / "runs" / "run-2").mkdir()
    (tmp_path / "runs" / "run-2" / "attestation.intoto.jsonl").write_text("{}\n")
    proc = _run("gate.sh", env)
    assert proc.returncode == 2 and "found 2" in proc.stderr


def test_the_release_publishes_to_the_policy_repository_never_an_input(env: dict[str, str]) -> None:
    env["RELEASE_REPO"] = "attacker/elsewhere"  # an input the old workflow took; nothing reads it now
    proc = _run("release.sh", env)
    assert proc.returncode == 0, proc.stderr
    argv = _argv(env)
    assert argv[:1] == ["publish"]
    assert argv[argv.index("--repo") + 1] == "local-inference-lab/GLM-5.3-Flash-DFlash2-MXFP8"
    # publish gates again itself, under the same policy and revision as gate.sh, with the key the workflow gave.
    assert "--release-policy" in argv and argv[argv.index("--draft-revision") + 1] == COMMIT
    assert not Path(argv[argv.index("--verify-key") + 1]).exists()  # the key file is gone once the step ends
    assert "hf_secret_token_value" not in proc.stdout + proc.stderr + " ".join(argv)
