"""qualify.run.checks.throughput: throughput is measured at the profile's settings and recorded; it is qualified
only against a bound the profile states (the figures are tested in tests/serving/test_throughput.py)."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from qualify.core import Evidence
from qualify.profile import Profile, ThroughputSpec, load_profile
from qualify.run.arm_jobs import arm_jobs
from qualify.run.arms import Arms, GivenArms
from qualify.run.checks.result import Measured
from qualify.run.checks.throughput import serving_throughput
from qualify.serving import client as serving
from qualify.serving import prompt_sets as ps

FIGURES = {"output_tokens_per_s": 100.0, "output_tokens": 640, "requests": 20, "concurrency": 4,
           "ttft_s": {"mean": 0.05}, "itl_s": {"mean": 0.01}}


@pytest.fixture(scope="module")
def profile() -> Profile:
    return load_profile("fixture")


@pytest.fixture
def calls(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    seen: list[dict[str, Any]] = []

    def measure_throughput(client: Any, model: str, prompts: Any, **kw: Any) -> dict[str, Any]:
        seen.append({"prompts": len(prompts), **kw})
        return dict(FIGURES)

    monkeypatch.setattr(serving, "measure_throughput", measure_throughput)
    return seen


def _run(spec: ThroughputSpec, profile: Profile) -> Evidence | Measured:
    assert profile.acceptance is not None
    prompts = ps.load_prompts(profile.acceptance.prompts)
    # The bounds differ between the calls; what is measured is the profile's (its jobs read it).
    arms = Arms(GivenArms({"checkpoint": lambda: "http://127.0.0.1:8/v1"}), arm_jobs(profile, {"throughput"}),
                lambda url: None)
    return serving_throughput(arms.results("throughput"), prompts, spec, {"endpoint": "http://127.0.0.1:8/v1"})


def test_with_no_bound_it_is_measured_not_qualified(calls: list[dict[str, Any]], profile: Profile) -> None:
    spec = profile.throughput
    assert spec is not None and spec.min_output_tokens_per_s is None
    result = _run(spec, profile)
    assert isinstance(result, Measured)
    assert result.not_qualified_because == "the profile states no bound"
    assert result.evidence.ok and result.evidence.measured["output_tokens_per_s"] == 100.0
    assert result.evidence.measured["server"] == {"endpoint": "http://127.0.0.1:8/v1"}
    assert calls == [{"prompts": 20, "max_tokens": spec.max_tokens, "temperature": spec.temperature,
                      "concurrency": spec.concurrency, "timeout_s": spec.request_timeout_s, "rounds": spec.rounds}]


def test_a_stated_bound_qualifies_it(calls: list[dict[str, Any]], profile: Profile) -> None:
    assert profile.throughput is not None
    met = _run(dataclasses.replace(profile.throughput, min_output_tokens_per_s=50.0), profile)
    assert isinstance(met, Evidence) and met.ok
    missed = _run(dataclasses.replace(profile.throughput, min_output_tokens_per_s=500.0), profile)
    assert isinstance(missed, Evidence) and not missed.ok
    assert "below the required 500.0" in missed.failure_text()
