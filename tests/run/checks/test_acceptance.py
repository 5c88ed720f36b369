"""qualify.run.checks.acceptance: the measurement's evidence, with the per-position chart drawn from its
statistics (the statistics themselves are tested in tests/serving/test_acceptance_stats.py)."""

from __future__ import annotations

from types import SimpleNamespace

from qualify.core import Evidence
from qualify.report.plots import position_acceptance_svg
from qualify.run.checks.acceptance import draft_acceptance


def test_the_chart_shows_each_positions_rate_and_interval() -> None:
    rates = [SimpleNamespace(estimate=0.9, low=0.8, high=0.95), SimpleNamespace(estimate=0.5, low=0.4, high=0.6)]
    evidence = Evidence("measured")
    result = draft_acceptance((evidence, SimpleNamespace(position_rates=rates)))  # type: ignore[arg-type]
    assert result is evidence
    assert evidence.measured["position_chart_svg"] == position_acceptance_svg([(0.9, 0.8, 0.95), (0.5, 0.4, 0.6)])


def test_without_statistics_there_is_no_chart() -> None:
    evidence = Evidence("nothing was measured")
    evidence.add("no request was answered")
    assert draft_acceptance((evidence, None)) is evidence
    assert "position_chart_svg" not in evidence.measured and not evidence.ok
