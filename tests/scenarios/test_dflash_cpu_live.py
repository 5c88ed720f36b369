"""The CPU DFlash fixture on the real vLLM CPU server: the good draft accepted, the damaged variants refused.

In every ``make test``: the good draft's acceptance, read from the session's ``qualify run`` that serves
it in the vLLM CPU container (tests/live_runs.py), and a draft vLLM cannot load. The DFlash 2 fixture, the
released architecture, is what make qualify's run and its damaged variants' runs serve
(tests/scenarios/test_dflash2_cpu_live.py: wrong layers caught at load, a scrambled selector at acceptance,
scale damage at the paired level), so the DFlash (1) variants' own servers are ``make test-variants``'
(tests marked ``variants``, left out of ``make test``): every damaged variant served from the session's
pool (QUALIFY_LIVE_VARIANTS=all) on the serving fixture's target with vLLM's ``dflash`` method, the
acceptance level run through the suites as a user runs them (``pytest suites --endpoint``) two servers at a
time; the wrong-layers pairs simulated offline with the fixture's own model code (within 0.03 of vLLM's
figures wherever both were measured); and the paired level on a scale-damaged conversion.
Without the vLLM venv these tests FAIL and name the setup script.
"""

from __future__ import annotations

import dataclasses
import json
import multiprocessing
import os
import subprocess
import sys
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from fixtures import dflash_cpu
from qualify.core import Status
from qualify.profile import load_profile
from qualify.report.model import Run, read_json
from qualify.runtime import vllm_cpu_plugin as plugin
from qualify.runtime.companions import usable_cores
from qualify.serving import client as cl
from qualify.serving import paired_measure as pm
from qualify.serving.counters import CounterDelta, RequestBound
from tests.helpers import REPO
from tests.live_runs import QualifyRun
from tests.live_servers import Launch, LiveServer, LiveServers

pytestmark = [pytest.mark.slow, pytest.mark.serving]

PROFILE = "fixture-dflash-cpu"
SUITE_TIMEOUT_S = 900
SUMMARY = os.environ.get("QUALIFY_DFLASH_SUMMARY")
#: How far the good draft's interval sits above the gate, and every damaged variant's below it.
GAP = 0.05
#: The wrong-layers pair nearest the gate: every other pair's offline estimate must stay below it.
NEAREST_LAYERS = "wrong-target-layers-2-3"
#: The damaged variant served when only this module's ``variants`` tests ask (plain ``pytest tests``).
LIVE_VARIANTS = ("scrambled",)
#: Every variant served from this module's own servers (make test-variants), the good draft's among them.
ALL = os.environ.get("QUALIFY_LIVE_VARIANTS") == "all"
#: The variants measured: LIVE_VARIANTS, or every one with QUALIFY_LIVE_VARIANTS=all (make test-variants).
SERVED = dflash_cpu.VARIANTS if ALL else LIVE_VARIANTS
#: The drafts whose acceptance a session's ``qualify run`` measures in the vLLM CPU container (read from its report).
FROM_RUNS = () if ALL else ("good",)


def _drafts(session: pytest.Session) -> dict[str, Path]:
    """The drafts measured on the pool's servers: the variants only when a ``variants`` test of this module runs."""
    variants = dflash_cpu.build_variants()
    wanted = SERVED if any(item.path == Path(__file__) and item.get_closest_marker("variants")
                           for item in session.items) else ()
    drafts = {"good": dflash_cpu.DEFAULT_OUT / "mxfp8", **{k: variants[k] / "mxfp8" for k in wanted}}
    return {name: path for name, path in drafts.items() if name not in FROM_RUNS}


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
    return {"status": str(c.status), "message": c.message, "failure": c.evidence.failure_text(),
            "acceptance_rate": m.get("acceptance_rate"), "mean_acceptance_length": m.get("mean_acceptance_length"),
            "position_acceptance_rates": m.get("position_acceptance_rates"), "counter_totals": m.get("counter_totals"),
            "per_request": m.get("per_request")}


if ALL:
    @pytest.fixture(scope="module")
    def draft_runs() -> dict[str, QualifyRun]:
        """None: under make test-variants every draft is served here."""
        return {}
else:
    @pytest.fixture(scope="module")
    def draft_runs(dflash_cpu_run: QualifyRun) -> dict[str, QualifyRun]:
        """The run serving the good draft, started: it goes on while this module's servers start."""
        return {"good": dflash_cpu_run}


@pytest.fixture(scope="module")
def paired_drafts(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The BF16 source the shipped conversion was made from, and a scale-damaged copy of that conversion."""
    spec = load_profile(PROFILE).local_server
    assert spec is not None and spec.source_draft is not None
    damaged = dflash_cpu.scale_bytes_off_by_one(dflash_cpu.DEFAULT_OUT / "mxfp8",
                                                tmp_path_factory.mktemp("damaged") / "mxfp8")
    return {"source": spec.source_draft, "damaged": damaged}


def _paired_launches(drafts: dict[str, Path]) -> dict[str, Launch]:
    spec = load_profile(PROFILE).local_server
    assert spec is not None
    return {name: Launch(PROFILE, draft, method=spec.method, dtype=spec.dtype) for name, draft in drafts.items()}


def _run_figures(run: Run) -> dict[str, Any]:
    """A run's acceptance figures, and whether the plugin was active in the container that served the draft."""
    figures = _figures(run)
    figures["plugin_active"] = run.environment["local_server"]["servers"]["speculative"]["plugin_active"]
    return figures


@pytest.fixture(scope="module")
def measured(live_servers: LiveServers, draft_runs: dict[str, QualifyRun],
             tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest) -> dict[str, Any]:
    """The acceptance level on the good draft and on each damaged variant served: two at a time (one per core) on
    the pool's servers, the rest read from the runs that served them."""
    drafts = _drafts(request.session)
    servers = live_servers.get({name: Launch(PROFILE, draft, method="dflash") for name, draft in drafts.items()}) \
        if drafts else {}

    def measure(name: str) -> dict[str, Any]:
        run = _run_acceptance(drafts[name], servers[name].endpoint, tmp_path_factory.mktemp(name))
        figures = _figures(run)
        figures["plugin_active"] = plugin.active_in_worker(servers[name].log_path.read_text(errors="replace"))
        return figures

    cores = len(usable_cores()) or 1
    # Each server has its own client and its own counters: measuring two at once moves none of the other's.
    with ThreadPoolExecutor(max(1, min(cores, len(drafts)))) as ex:
        futures = {name: ex.submit(measure, name) for name in drafts}
        out = {name: f.result() for name, f in futures.items()}
    for name, run in draft_runs.items():
        out[name] = _run_figures(run.wait().run)
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


@pytest.mark.variants
@pytest.mark.parametrize("name", SERVED)
def test_every_served_damaged_variant_fails_acceptance(measured: dict[str, Any], name: str) -> None:
    figures = measured[name]
    assert figures["status"] == str(Status.FAILED), figures
    length = figures["mean_acceptance_length"]
    # Its whole interval below the gate with room to spare (and so far below the good draft's): the
    # gate separates them by a wide margin, not by noise.
    assert length["high"] <= _gate() - GAP, (length, _gate())
    assert "mean acceptance length: lower bound of the 95% interval" in figures["failure"], figures["failure"]
    assert figures["counter_totals"]["draft_tokens"] > 0  # it did speculate: the failure is the acceptance


@pytest.mark.variants
def test_a_scrambled_draft_is_accepted_far_less_than_the_good_one(measured: dict[str, Any]) -> None:
    """Far less, and sitting on the drafts bound of qualify.serving.counters.RequestBound, which is exact for a draft
    nothing of which is accepted."""
    good, scrambled = measured["good"]["acceptance_rate"], measured["scrambled"]["acceptance_rate"]
    assert scrambled["high"] < good["low"] and scrambled["estimate"] < 0.25 * good["estimate"]
    assert any(RequestBound(r["completion_tokens"], 7).max_drafts == r["drafts"]
               for r in measured["scrambled"]["per_request"]), "the scrambled draft never sat on the drafts bound"


def test_no_request_on_a_server_of_its_own_looks_like_another_clients(measured: dict[str, Any]) -> None:
    """No false alarm from qualify.serving.counters.RequestBound: every prompt of every draft measured is a
    sample, within its bound (drafts + accepted tokens is the answer's tokens after the first plus those cut
    at its end)."""
    for name, figures in measured.items():
        assert "another client" not in figures["failure"], (name, figures["failure"])
        k = len(figures["position_acceptance_rates"])
        rows = figures["per_request"]
        assert len(rows) == 20 and k == 7, name
        for r in rows:
            bound = RequestBound(r["completion_tokens"], k)
            assert bound.excess(CounterDelta(r["drafts"], r["draft_tokens"], r["accepted_tokens"],
                                                tuple(r["accepted_per_pos"]))) is None, (name, r)


@pytest.mark.variants
def test_no_wrong_layers_pair_drafts_better_offline_than_the_nearest_one() -> None:
    """Every wrong-layers pair simulated offline (the fixture's model code, greedy speculative decoding on the
    acceptance prompts): each at or below the pair nearest the gate, and that one far below the gate."""
    names = [NEAREST_LAYERS, *(n for n in dflash_cpu.WRONG_TARGET_LAYERS if n != NEAREST_LAYERS)]
    cores = len(usable_cores()) or 1
    # One fresh interpreter per core: the simulations share nothing (a forked torch can hang).
    with ProcessPoolExecutor(max(1, cores), mp_context=multiprocessing.get_context("spawn")) as ex:
        lengths = dict(zip(names, ex.map(dflash_cpu.shipped_variant_estimate, names), strict=True))
    nearest = lengths.pop(NEAREST_LAYERS)
    assert nearest <= _gate() - 2 * GAP, nearest
    assert all(length <= nearest for length in lengths.values()), (lengths, nearest)


def test_a_checkpoint_vllm_cannot_load_fails_load_with_vllms_own_error(tmp_path: Path) -> None:
    """A DFlash draft that mixes sliding and full attention layers: vLLM 0.32's CPU runner refuses it at start."""
    import shutil

    from tests.helpers import TRACEBACK, run_qualify

    draft = tmp_path / "draft"
    shutil.copytree(REPO / "fixtures" / "dflash-cpu" / "mxfp8", draft)
    config = json.loads((draft / "config.json").read_text())
    config["layer_types"] = ["sliding_attention"] + ["full_attention"] * (config["num_hidden_layers"] - 1)
    config["sliding_window"] = 16
    (draft / "config.json").write_text(json.dumps(config, indent=2))
    done = run_qualify("run", "--profile", PROFILE, "--checkpoint", str(draft), "--levels", "load",
                       "--report-dir", str(tmp_path / "reports"), timeout=1200)
    assert done.returncode == 1 and TRACEBACK not in done.stdout + done.stderr
    (report,) = (tmp_path / "reports").glob("*/report.json")
    run = read_json(report)
    (ready,) = [c for lv in run.levels for c in lv.checks if c.id == "load.ready"]
    assert ready.status is Status.FAILED
    assert ready.evidence is not None
    said = " ".join(f.message for f in ready.evidence.findings)
    assert "the runtime's last error: Value error, Model Runner V1 does not support: mixed sliding/full dflash " \
           "drafts" in said, said


# ---- the paired level: the MXFP8 checkpoint against the BF16 draft it was converted from

PAIRED_SUMMARY = os.environ.get("QUALIFY_DFLASH_PAIRED_SUMMARY")


@pytest.fixture(scope="module")
def paired_servers(live_servers: LiveServers, paired_drafts: dict[str, Path]) -> dict[str, LiveServer]:
    """Servers of the target with the BF16 source and a scale-damaged copy of the shipped MXFP8 conversion.

    From the session's pool, each with
    vLLM's per-request metrics and the profile's settings (the DFlash proposer, float32), as the run's
    [local_server] starts the source and the checkpoint. The shipped conversion against its source is make
    qualify's own paired level (tests/scenarios/test_qualify_run_live.py).
    """
    servers = live_servers.get({f"paired-{name}": launch for name, launch in _paired_launches(paired_drafts).items()})
    return {name.removeprefix("paired-"): server for name, server in servers.items()}


PAIRED: dict[str, Any] = {}


def _paired(servers: dict[str, LiveServer], candidate: str) -> tuple[Any, list[Any]]:
    """The profile's paired level at its batched concurrency only (MAX_NUM_SEQS): greedy decoding gives the
    same counts one request at a time (make qualify's run measures both for the shipped conversion)."""
    profile = load_profile(PROFILE)
    spec = profile.paired
    assert spec is not None
    spec = dataclasses.replace(spec, concurrency=(max(spec.concurrency),))
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


@pytest.mark.variants
def test_a_scale_damaged_mxfp8_draft_fails_the_paired_gate(paired_servers) -> None:
    """Every 256th scale byte one too high, the folder self-consistent: only serving the draft shows it."""
    ev, _ = _paired(paired_servers, "damaged")
    assert not ev.ok
    assert "relative to the source draft" in ev.failure_text(), ev.failure_text()
