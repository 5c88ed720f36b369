"""``qualify run`` as a user runs it, every level for real, on both fixture profiles.

``fixture``: the checkpoint levels on the shipped DFlash 2 fixture, the load level in the
stand-in container (built by the run if missing), smoke, acceptance and losslessness against the
local vLLM CPU servers of the profile's ``[local_server]`` (the draft's and the target's alone;
the paired level's source-draft server and the two measured levels are make qualify's run's, below,
and the paired level against local servers is tests/scenarios/test_paired_live.py's); then the
release gate and the card on the report it wrote. ``fixture-dflash2-cpu`` (``make qualify``): the
serving levels talk to the real vLLM CPU container the load level launched, then to the source draft's,
the target alone's and both as published, one after another from the same image; the CPU DFlash (1)
fixture's scrambled variant fails acceptance in that container. Without Docker or
the vLLM venv this FAILS with the setup hint: a release gate's own end-to-end test must not
pass by skipping its runtimes.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from qualify.core import Status, Verdict
from qualify.report.model import Run
from qualify.runtime import labels
from qualify.runtime.engine import docker_client
from tests.helpers import FIXTURE, REPO
from tests.live_runs import MAKE_QUALIFY_FIXTURE, QualifyRun

pytestmark = [pytest.mark.slow, pytest.mark.serving]

RUN_TIMEOUT_S = 900


def qualify(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "qualify.cli", *args], cwd=REPO, capture_output=True, text=True,
                          timeout=RUN_TIMEOUT_S)


@pytest.fixture(scope="module")
def full_run(fixture_run: QualifyRun) -> tuple[subprocess.CompletedProcess[str], Run, Path]:
    """The ``fixture`` run (tests/scenarios/conftest.py: levels FIXTURE_LEVELS, signed with ``sign_keys``)."""
    done = fixture_run.wait()
    return done.proc, done.run, done.path


def test_every_level_runs_for_real_and_qualifies(full_run) -> None:
    proc, run, _ = full_run
    statuses = {lv.name: lv.status for lv in run.levels}
    assert statuses == {
        "structure": Status.PASSED, "format": Status.PASSED, "reproduction": Status.PASSED, "load": Status.PASSED,
        "smoke": Status.PASSED, "acceptance": Status.PASSED, "losslessness": Status.PASSED,
    }, proc.stdout[-4000:]
    # The runtime levels ran on the stand-in image and a stand-in draft: plumbing that can fail, never
    # qualification (the profile may not require them), so only the checkpoint levels are qualified.
    for level in ("load", "smoke", "acceptance", "losslessness"):
        assert not run.level(level).required, level
    assert run.verdict is Verdict.QUALIFIED and proc.returncode == 0
    assert run.qualified_levels == ["structure", "format", "reproduction"]
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
    assert set(local["servers"]) == {"speculative", "reference"}  # no paired level: no source draft's server
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
                   str(FIXTURE / "mxfp8"), "--revision", run.checkpoint["revision"], "--profile", "fixture")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "qualified: structure, format, reproduction passed" in proc.stdout
    assert f"under profile fixture (sha256 {run.profile['sha256']})" in proc.stdout
    # The load level passed on the stand-in image: plumbing, which no release may require.
    standin = qualify("gate", "--attestation", str(attestation), "--verify-key", str(sign_keys[1]), "--checkpoint",
                      str(FIXTURE / "mxfp8"), "--require", "load")
    assert standin.returncode == 1
    assert standin.stdout.startswith("refused: required level load ran on a stand-in (plumbing, it qualifies "
                                     "nothing)"), standin.stdout
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
    assert status == ("Status: qualified for checkpoint structure and exact format reproduction under the "
                      "following conditions:")
    assert "draft acceptance" not in status and "loading" not in status


# -- make qualify's own profile: the serving levels talk to the load level's container ----------------------

#: The arms [speedup] as_published adds: the checkpoint and the target alone launched as published.
PUBLISHED = ("checkpoint-published", "reference-published")
#: The checks whose evidence names the server they talked to.
SERVED_CHECKS = ("smoke.models_listed", "acceptance.draft_acceptance", "paired.non_inferiority",
                 "losslessness.greedy_identical", "speedup.speculative_speedup", "throughput.serving_throughput")


def _check(run: Run, check_id: str) -> Any:
    level = check_id.split(".")[0]
    return next(c for c in run.level(level).checks if c.id == check_id)


@pytest.fixture(scope="module")
def cpu_run(make_qualify_run: QualifyRun) -> tuple[subprocess.CompletedProcess[str], Run, Path]:
    """make qualify's run (tests/scenarios/conftest.py; tests/scenarios/test_dflash2_cpu_live.py reads it too)."""
    done = make_qualify_run.wait()
    return done.proc, done.run, done.path


def test_make_qualify_serves_every_serving_level_from_the_load_levels_container(cpu_run) -> None:
    proc, run, path = cpu_run
    assert run.verdict is Verdict.QUALIFIED and proc.returncode == 0, proc.stdout[-4000:]
    started = _check(run, "load.container_started").evidence
    assert started is not None
    container = started.measured["container"]
    for check_id in SERVED_CHECKS:
        evidence = _check(run, check_id).evidence
        assert evidence is not None, check_id
        served = evidence.measured["server"]["runtime"]
        assert (served["container"], served["container_id"]) == (container["name"], container["id"]), check_id
        assert served["image_id"] == container["image"] == run.environment["runtime_image_build"]["image_id"]
        # The folder the container mounts is the checkpoint under test, at its content revision.
        assert served["checkpoint"]["revision"] == run.checkpoint["revision"], check_id
        assert served["checkpoint"]["content_revision"] == run.checkpoint["revision"], check_id
        # Mounted from the run's pinned copy of it (the bytes the checks read), never the folder as named.
        assert served["checkpoint"]["mounted_from"] != str((MAKE_QUALIFY_FIXTURE / "mxfp8").resolve()), check_id
        assert Path(served["checkpoint"]["mounted_from"]).name == "draft", check_id
    # The reference and the source draft ran beside it, from the same image; no local vLLM process served.
    serving = run.environment["local_server"]
    assert serving["kind"] == "runtime" and serving["error"] is None
    assert set(serving["servers"]) == {"speculative", "reference", "source", *PUBLISHED}
    assert serving["servers"]["speculative"]["container"] == container["name"]
    assert {s["image_id"] for s in serving["servers"].values()} == {container["image"]}
    assert all(s["plugin_active"] for s in serving["servers"].values())
    assert not list(path.parent.glob("vllm-*.log"))
    # Both paired arms ran identical engine settings but for the draft (vLLM's own logged configuration).
    engine = _check(run, "paired.non_inferiority").evidence.measured["engine_settings"]  # type: ignore[union-attr]
    assert engine["verified"] is True and engine["differing_keys"] == [] and engine["findings"] == []
    # As the release run must (its launcher takes no flag for them): no per-request metrics, so batch 1 is measured
    # per prompt from /metrics and MAX_NUM_SEQS per batch, and the report says so.
    assert "per_request_spec_decode_metrics='none'" in engine["engine_configs"]["checkpoint"]["observability_config"]
    paired = _check(run, "paired.non_inferiority").evidence.measured["concurrency"]  # type: ignore[union-attr]
    assert paired["1"]["measured"]["candidate"]["figures_from"] == "counters"
    assert paired["4"]["measured"]["candidate"]["figures_from"] == "counters per batch"
    assert paired["4"]["measured"]["method"].startswith("run-level: no per-request metrics in the responses")
    # One arm at a time, as the profile says ([orchestration]), each stopped before the next started; and
    # every container of the run is gone: the engine holds none labelled with the run's id.
    arms = run.environment["runtime"]["arms"]
    assert arms["mode"] == "sequential"
    assert [a["arm"] for a in arms["timeline"]] == ["checkpoint", "source", "reference", *PUBLISHED]
    assert all(a["stopped"] <= b["started"] for a, b in zip(arms["timeline"], arms["timeline"][1:], strict=False))
    assert run.environment["runtime"]["teardown"]["left"] == []
    run_id = run.environment["runtime"]["plan"]["run_id"]
    assert docker_client().containers.list(all=True, filters={"label": f"{labels.LABEL_RUN}={run_id}"}) == []
    md = (path.parent / "report.md").read_text()
    assert f"in container `{container['name']}`" in md


def test_a_damaged_checkpoint_fails_acceptance_on_the_load_levels_container(dflash2_scrambled_run: QualifyRun) -> None:
    """A scrambled candidate selector (the file self-consistent) loads, serves and drafts; acceptance fails it."""
    from fixtures.dflash2_cpu import build_variants

    scrambled = build_variants()["scrambled-selector"] / "mxfp8"  # the folder the run was given (built already)
    done = dflash2_scrambled_run.wait()
    proc, run = done.proc, done.run
    assert run.level("load").status is Status.PASSED and run.level("smoke").status is Status.PASSED, proc.stdout
    assert run.level("acceptance").status is Status.FAILED and run.verdict is Verdict.NOT_QUALIFIED
    evidence = _check(run, "acceptance.draft_acceptance").evidence
    container = _check(run, "load.container_started").evidence.measured["container"]  # type: ignore[union-attr]
    assert evidence is not None and evidence.measured["server"]["runtime"]["container_id"] == container["id"]
    served = evidence.measured["server"]["runtime"]["checkpoint"]
    # The run's pinned copy of the scrambled folder, at the revision of the scrambled bytes.
    assert served["mounted_from"] != str(scrambled.resolve())
    assert served["content_revision"] == run.checkpoint["revision"]
    # No reference or source server for a run without the levels that need them.
    assert run.environment["runtime"]["companions"] == {}
