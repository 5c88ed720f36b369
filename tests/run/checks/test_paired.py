"""qualify.run.checks.paired: the paired measurement's evidence, with its charts drawn at the profile's margin
(the comparison is tested in tests/serving/, the charts in tests/report/)."""

from __future__ import annotations

from typing import Any

import pytest

from qualify.core import Evidence
from qualify.profile import load_profile
from qualify.run.checks import paired


def test_the_charts_are_drawn_at_the_profiles_margin(monkeypatch: pytest.MonkeyPatch) -> None:
    spec = load_profile("fixture").paired
    assert spec is not None
    seen: list[tuple[Any, float]] = []

    def paired_charts(decisions: Any, *, margin: float) -> dict[str, str]:
        seen.append((decisions, margin))
        return {"1": "<svg/>"}

    monkeypatch.setattr(paired, "paired_charts", paired_charts)
    evidence, decisions = Evidence("paired"), [object()]
    assert paired.non_inferiority((evidence, decisions), spec) is evidence
    assert seen == [(decisions, spec.margin)]
    assert evidence.measured["charts_svg"] == {"1": "<svg/>"}


def test_the_error_rates_at_the_measured_spread_are_recorded(monkeypatch: pytest.MonkeyPatch) -> None:
    spec = load_profile("fixture").paired
    assert spec is not None
    monkeypatch.setattr(paired, "paired_charts", lambda decisions, *, margin: {})
    seen: list[Any] = []

    def measured_characteristic(per_prompt: Any, paired_spec: Any) -> dict[str, Any]:
        seen.append((per_prompt, paired_spec))
        return {"computed": True}

    monkeypatch.setattr(paired, "measured_characteristic", measured_characteristic)
    evidence = Evidence("paired")
    evidence.measured["concurrency"] = {"1": {"per_prompt": [{"prompt": "p"}]}, "4": {"per_prompt": []}}
    paired.non_inferiority((evidence, []), spec)
    assert seen == [([{"prompt": "p"}], spec)] and evidence.measured["operating_characteristic"] == {"computed": True}
    nothing = Evidence("paired")  # nothing measured one request at a time: no spread, no record
    paired.non_inferiority((nothing, []), spec)
    assert "operating_characteristic" not in nothing.measured
