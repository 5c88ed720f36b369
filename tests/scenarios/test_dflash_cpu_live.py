"""The CPU DFlash fixture on the real vLLM CPU server: the good draft accepted, every damaged variant refused.

Servers of the serving fixture's target with each MXFP8 draft of ``fixtures/dflash-cpu`` as its
speculator (vLLM's ``dflash`` method, the plugin loaded), from the session's pool
(tests/live_servers.py); the acceptance level runs through the suites as a user runs them
(``pytest suites --endpoint``), on two servers at a time, and the report it wrote is read back.
Without the vLLM venv these tests FAIL and name the setup script.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from fixtures import dflash_cpu
from qualify.profile import load_profile
from qualify.report.model import Run, Status, read_json
from qualify.runtime import vllm_cpu_plugin as plugin
from qualify.serving import client as cl
from qualify.serving import paired_measure as pm
from tests.helpers import REPO
from tests.live_servers import Launch, LiveServer, LiveServers

pytestmark = [pytest.mark.slow, pytest.mark.serving]

PROFILE = "fixture-dflash-cpu"
SUITE_TIMEOUT_S = 900
SUMMARY = os.environ.get("QUALIFY_DFLASH_SUMMARY")
#: How far the good draft's interval sits above the gate, and every damaged variant's below it.
GAP = 0.05


def _drafts() -> dict[str, Path]:
    variants = dflash_cpu.build_variants()
    return {"good": dflash_cpu.DEFAULT_OUT / "mxfp8", **{k: v / "mxfp8" for k, v in variants.items()}}


def _run_acceptance(draft: Path, endpoint: str, report_root: Path) -> Run:
    report_root.mkdir(parents=True, exist_ok=True)
    args = [sys.executable, "-m", "pytest", "suites", "-p", "no:cacheprovider", "-q", "--checkpoint", str(draft),
            "--profile", PROFILE, "--levels", "acceptance", "--endpoint", endpoint, "--report-dir", str(report_root)]
    proc = subprocess.run(args, cwd=REPO, capture_output=True, text=True, timeout=SUITE_TIMEOUT_S)
    reports = sorted(report_root.glob("*/report.json"))
    assert len(reports) == 1, f"no report under {report_root}:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    assert "Traceback (most recent call last)" not in proc.stderr, proc.stderr[-3000:]
    return read_json(reports[0])


def _figures(run: Run) -> dict[str, Any]:
    (c,) = [c for lv in run.levels for c in lv.checks if c.id == "acceptance.draft_acceptance"]
    assert c.evidence is not None
    m = c.evidence.measured
    return {"status": str(c.status), "message": c.message, "acceptance_rate": m.get("acceptance_rate"),
            "mean_acceptance_length": m.get("mean_acceptance_length"),
            "position_acceptance_rates": m.get("position_acceptance_rates"), "counter_totals": m.get("counter_totals")}


@pytest.fixture(scope="module")
def measured(live_servers: LiveServers, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The acceptance level on the good draft and on each damaged variant, two at a time (one per core)."""
    drafts = _drafts()
    servers = live_servers.get({name: Launch(PROFILE, draft, method="dflash") for name, draft in drafts.items()})

    def measure(name: str) -> dict[str, Any]:
        run = _run_acceptance(drafts[name], servers[name].endpoint, tmp_path_factory.mktemp(name))
        figures = _figures(run)
        figures["plugin_active"] = plugin.active_in_worker(servers[name].log_path.read_text(errors="replace"))
        return figures

    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else 1
    # Each server has its own client and its own counters: measuring two at once moves none of the other's.
    with ThreadPoolExecutor(max(1, min(cores, len(drafts)))) as ex:
        futures = {name: ex.submit(measure, name) for name in drafts}
        out = {name: f.result() for name, f in futures.items()}
    if SUMMARY:
        Path(SUMMARY).write_text(json.dumps(out, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    return out


def _gate() -> float:
    acceptance = load_profile(PROFILE).acceptance
    assert acceptance is not None
    return acceptance.min_mean_acceptance_length


def test_the_good_draft_passes_acceptance_with_real_acceptance(measured: dict[str, Any]) -> None:
    good = measured["good"]
    assert good["status"] == str(Status.PASSED), good["message"]
    # Not one rounding away from the gate: its whole interval clears it with room to spare.
    assert good["mean_acceptance_length"]["low"] >= _gate() + GAP, (good["mean_acceptance_length"], _gate())
    assert good["plugin_active"]


@pytest.mark.parametrize("name", dflash_cpu.VARIANTS)
def test_every_damaged_variant_fails_acceptance(measured: dict[str, Any], name: str) -> None:
    figures = measured[name]
    assert figures["status"] == str(Status.FAILED), figures
    length = figures["mean_acceptance_length"]
    # Its whole interval below the gate with room to spare (and so far below the good draft's): the
    # gate separates them by a wide margin, not by noise.
    assert length["high"] <= _gate() - GAP, (length, _gate())


def test_a_checkpoint_vllm_cannot_load_fails_load_with_vllms_own_error(tmp_path: Path) -> None:
    """The shipped DFlash 2 fixture in the real vLLM CPU runtime: vLLM 0.32's CPU build refuses DFlash 2."""
    from tests.helpers import FIXTURE, TRACEBACK, run_qualify

    done = run_qualify("run", "--profile", PROFILE, "--checkpoint", str(FIXTURE / "mxfp8"), "--levels", "load",
                       "--report-dir", str(tmp_path), timeout=1200)
    assert done.returncode == 1 and TRACEBACK not in done.stdout + done.stderr
    (report,) = tmp_path.glob("*/report.json")
    run = read_json(report)
    (ready,) = [c for lv in run.levels for c in lv.checks if c.id == "load.ready"]
    assert ready.status is Status.FAILED
    assert ready.evidence is not None
    said = " ".join(f.message for f in ready.evidence.findings)
    assert "the runtime's last error: Value error, Model Runner V1 does not support: DFlash candidate-head drafts" \
        in said, said


# ---- the paired level: the MXFP8 checkpoint against the BF16 draft it was converted from

PAIRED_SUMMARY = os.environ.get("QUALIFY_DFLASH_PAIRED_SUMMARY")


@pytest.fixture(scope="module")
def paired_servers(live_servers: LiveServers, tmp_path_factory: pytest.TempPathFactory) -> dict[str, LiveServer]:
    """Servers of the target with the BF16 source, the shipped MXFP8 conversion and a scale-damaged copy of it.

    From the session's pool (the shipped conversion's server is the acceptance tests' good one), each with
    vLLM's per-request metrics and the profile's settings (the DFlash proposer, float32), as the run's
    [local_server] starts the source and the checkpoint.
    """
    spec = load_profile(PROFILE).local_server
    assert spec is not None and spec.source_draft is not None
    damaged = dflash_cpu.scale_bytes_off_by_one(dflash_cpu.DEFAULT_OUT / "mxfp8",
                                                tmp_path_factory.mktemp("damaged") / "mxfp8")
    drafts = {"source": spec.source_draft, "good": dflash_cpu.DEFAULT_OUT / "mxfp8", "damaged": damaged}
    return live_servers.get({name: Launch(PROFILE, draft, method=spec.method, dtype=spec.dtype)
                             for name, draft in drafts.items()})


PAIRED: dict[str, Any] = {}


def _paired(servers: dict[str, LiveServer], candidate: str) -> tuple[Any, list[Any]]:
    profile = load_profile(PROFILE)
    spec = profile.paired
    assert spec is not None
    req = pm.Request(model=profile.served_model_name, max_tokens=spec.max_tokens, temperature=spec.temperature,
                     timeout_s=spec.request_timeout_s, proposal_length=profile.proposal_length,
                     full_block=spec.full_block)
    cand, src = servers[candidate].endpoint, servers["source"].endpoint
    ev, decisions = pm.paired_level((cl.make_client(cand), cand), (cl.make_client(src), src), spec, req)
    PAIRED[candidate] = {str(d.concurrency): {
        "source_rate": d.overall.source.acceptance_rate.estimate,
        "candidate_rate": d.overall.candidate.acceptance_rate.estimate,
        "source_length": d.overall.source.mean_acceptance_length.estimate,
        "candidate_length": d.overall.candidate.mean_acceptance_length.estimate,
        "relative_rate": d.overall.acceptance_rate.relative.to_dict(),
        "relative_length": d.overall.mean_acceptance_length.relative.to_dict(),
        "passed": d.ok} for d in decisions}
    if PAIRED_SUMMARY:
        Path(PAIRED_SUMMARY).write_text(json.dumps(PAIRED, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    return ev, decisions


def test_the_mxfp8_draft_is_within_the_margin_of_its_bf16_source(paired_servers) -> None:
    ev, decisions = _paired(paired_servers, "good")
    assert ev.ok, ev.failure_text()
    assert [d.concurrency for d in decisions] == [1, 4]


def test_a_scale_damaged_mxfp8_draft_fails_the_paired_gate(paired_servers) -> None:
    """Every 256th scale byte one too high, the folder self-consistent: only serving the draft shows it."""
    ev, _ = _paired(paired_servers, "damaged")
    assert not ev.ok
    assert "relative to the source draft" in ev.failure_text(), ev.failure_text()
