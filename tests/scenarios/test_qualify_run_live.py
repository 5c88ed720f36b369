"""``make qualify`` as a user runs it: ``qualify run --profile fixture``, every level for real.

The checkpoint levels on the shipped fixture, the load level in the stand-in container
(built by the run if missing), the serving levels against the local vLLM CPU servers of
the profile's ``[local_server]``; then the release gate and the card on the report it
wrote. Without Docker or the vLLM venv this FAILS with the setup hint: a release gate's
own end-to-end test must not pass by skipping its runtimes.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from qualify.report.model import Run, Status, Verdict, read_json
from tests.helpers import FIXTURE, REPO, TRACEBACK, write_key

pytestmark = [pytest.mark.slow, pytest.mark.serving]

RUN_TIMEOUT_S = 900


def qualify(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "qualify.cli", *args], cwd=REPO, capture_output=True, text=True,
                          timeout=RUN_TIMEOUT_S)


@pytest.fixture(scope="module")
def sign_keys(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(private, public) PEM of an EC P-256 key generated for this module: the run is signed with it."""
    return write_key(tmp_path_factory.mktemp("keys"), "release")


@pytest.fixture(scope="module")
def full_run(tmp_path_factory: pytest.TempPathFactory,
             sign_keys: tuple[Path, Path]) -> tuple[subprocess.CompletedProcess[str], Run, Path]:
    from fixtures.serving import build

    build()  # the serving fixture the profile's [local_server] serves (reused when already built)
    reports = tmp_path_factory.mktemp("reports")
    proc = qualify("run", "--profile", "fixture", "--checkpoint", str(FIXTURE / "mxfp8"), "--source",
                   str(FIXTURE / "source"), "--report-dir", str(reports), "--sign-key", str(sign_keys[0]))
    assert TRACEBACK not in proc.stderr, proc.stderr[-3000:]
    (path,) = reports.glob("*/report.json")
    return proc, read_json(path), path


def test_every_level_runs_for_real_and_qualifies(full_run) -> None:
    proc, run, _ = full_run
    statuses = {lv.name: lv.status for lv in run.levels}
    assert statuses == {
        "structure": Status.PASSED, "format": Status.PASSED, "reproduction": Status.PASSED, "load": Status.PASSED,
        "smoke": Status.PASSED, "acceptance": Status.PASSED, "paired": Status.PASSED,
        "losslessness": Status.PASSED,
        # Measured with no bound: recorded, not qualified, not required.
        "throughput": Status.SKIPPED, "speedup": Status.SKIPPED,
    }, proc.stdout[-4000:]
    assert not run.level("throughput").required and not run.level("speedup").required
    assert run.verdict is Verdict.QUALIFIED and proc.returncode == 0
    assert run.qualified_levels == ["structure", "format", "reproduction", "load", "smoke", "acceptance",
                                    "paired", "losslessness"]
    assert "verdict: qualified" in proc.stdout


def test_the_report_records_what_ran_and_what_was_served(full_run) -> None:
    _, run, path = full_run
    ck = run.checkpoint
    assert ck["revision_source"] == "content of the local folder" and len(ck["revision"]) == 40
    assert {f["path"] for f in ck["files"]} >= {"model.safetensors", "conversion_manifest.json"}
    build = run.environment["runtime_image_build"]
    assert build["image_id"].startswith("sha256:")
    local = run.environment["local_server"]
    assert local["error"] is None and local["target"]["revision"] == "e6b7f88f172c6ab930f512d3a393cc2c273fc43c"
    assert set(local["servers"]) == {"speculative", "reference", "source"}
    assert all(s["exit_code"] is not None for s in local["servers"].values())  # stopped at the end
    # The launched stand-in is gone, and the container names were this run's.
    assert run.environment["runtime"]["teardown"]["left"] == []
    md = (path.parent / "report.md").read_text()
    assert "## Serving runtime" in md and "CPU stand-in for the checkpoint" in md
    assert (path.parent / "vllm-speculative.log").is_file() and (path.parent / "server.log").is_file()


def test_the_gate_accepts_its_attestation_for_the_checkpoint_and_its_revision(full_run, sign_keys) -> None:
    """Every level the fixture profile requires, signed by the run and verified by the gate (no --require)."""
    _, run, path = full_run
    attestation = path.parent / "attestation.intoto.jsonl"
    proc = qualify("gate", "--attestation", str(attestation), "--verify-key", str(sign_keys[1]), "--checkpoint",
                   str(FIXTURE / "mxfp8"), "--revision", run.checkpoint["revision"])
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "acceptance, paired, losslessness passed" in proc.stdout
    other = qualify("gate", "--attestation", str(attestation), "--verify-key", str(sign_keys[1]), "--checkpoint",
                    str(FIXTURE / "mxfp8"), "--revision", "0" * 40)
    assert other.returncode == 1 and "not " + "0" * 40 in other.stdout
    unsigned = qualify("gate", str(path), "--checkpoint", str(FIXTURE / "mxfp8"), "--revision",
                       run.checkpoint["revision"], "--allow-unsigned")
    assert unsigned.returncode == 0 and "UNSIGNED" in unsigned.stdout


def test_the_card_claims_exactly_the_qualified_levels(full_run) -> None:
    _, _, path = full_run
    proc = qualify("card", str(path))
    assert proc.returncode == 0, proc.stderr
    assert "smoke" in proc.stdout and "acceptance" in proc.stdout
    status = next(line for line in proc.stdout.splitlines() if line.startswith("Status:"))
    assert "draft acceptance" in status and "lossless speculative decoding" in status
    assert "throughput" not in status
