"""Level "acceptance": how often the target accepts the draft's tokens, with intervals, gated by lower bounds."""

from __future__ import annotations

import pytest

from qualify.report.plots import position_acceptance_svg

pytestmark = pytest.mark.acceptance


def test_draft_acceptance(acceptance_result, acceptance_spec, record):
    """Acceptance rate, mean acceptance length and per-position rates, overall and per category, clear the profile."""
    evidence, stats = acceptance_result
    if stats is not None:
        rates = [(iv.estimate, iv.low, iv.high) for iv in stats.position_rates]
        evidence.measured["position_chart_svg"] = position_acceptance_svg(rates)
    record(evidence)
