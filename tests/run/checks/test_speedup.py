"""qualify.run.checks.speedup: the same prompts with the speculator and without it, at each paired concurrency;
recorded, and qualified only against a stated min_speedup (the figures are tested in
tests/serving/test_throughput.py)."""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace
from typing import Any

import pytest

from qualify.core import Evidence
from qualify.profile import Profile, load_profile
from qualify.run.arm_jobs import arm_jobs
from qualify.run.arms import Arms, GivenArms
from qualify.run.checks.result import Measured
from qualify.run.checks.speedup import speculative_speedup
from qualify.serving import client as serving
from qualify.serving import paired_measure as pm
from qualify.serving import prompt_sets as ps

SPECULATIVE, PLAIN = "speculative client", "plain client"
SPECULATIVE_URL, REFERENCE_URL = "http://127.0.0.1:8/v1", "http://127.0.0.1:9/v1"


@pytest.fixture(scope="module")
def profile() -> Profile:
    return load_profile("fixture")


@pytest.fixture
def calls(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, int, int]]:
    seen: list[tuple[str, int, int]] = []
    prompts = tuple(("set", ps.Prompt(f"p{i}", "c", "completion", prompt="x")) for i in range(50))

    def measure_throughput(client: str, model: str, ps: Any, **kw: Any) -> dict[str, Any]:
        seen.append((client, kw["concurrency"], len(ps)))
        rate = 120.0 if client == SPECULATIVE else 100.0
        return {"output_tokens_per_s": rate, "output_tokens": 640, "itl_s": {"mean": 0.01}}

    monkeypatch.setattr(pm, "load_sets", lambda spec: SimpleNamespace(prompts=prompts))
    monkeypatch.setattr(serving, "measure_throughput", measure_throughput)
    return seen


def _run(profile: Profile, **speedup: Any) -> Evidence | Measured:
    assert profile.paired is not None and profile.speedup is not None
    spec = dataclasses.replace(profile.speedup, **speedup)
    arms = Arms(GivenArms({"checkpoint": lambda: SPECULATIVE_URL, "reference": lambda: REFERENCE_URL}),
                arm_jobs(profile, {"speedup"}), lambda url: PLAIN if url == REFERENCE_URL else SPECULATIVE)
    return speculative_speedup(arms.results("speedup"), spec, {"endpoint": "e"})


def test_both_sides_at_each_paired_concurrency_on_the_first_prompts(calls: list[tuple[str, int, int]],
                                                                    profile: Profile) -> None:
    assert profile.paired is not None and profile.speedup is not None
    result = _run(profile, min_speedup=None)
    assert isinstance(result, Measured)
    assert result.not_qualified_because == "the profile states no min_speedup"
    n = min(profile.speedup.prompts, 50)
    # One arm after the other: every concurrency on the speculative arm, then on the target alone.
    assert calls == [(side, c, n) for side in (SPECULATIVE, PLAIN) for c in profile.paired.concurrency]
    assert result.evidence.measured["reference_endpoint"] == REFERENCE_URL
    assert {row["speedup"] for row in result.evidence.measured["concurrency"].values()} == {1.2}


def test_a_stated_min_speedup_qualifies_it(calls: list[tuple[str, int, int]], profile: Profile) -> None:
    met = _run(profile, min_speedup=1.1)
    assert isinstance(met, Evidence) and met.ok
    missed = _run(profile, min_speedup=1.5)
    assert isinstance(missed, Evidence) and not missed.ok
    assert "below the required 1.50x" in missed.failure_text()
