"""Level "acceptance": how often the target accepts the draft's tokens, with intervals, gated by lower bounds."""

from __future__ import annotations

from qualify.core import Evidence
from qualify.report.plots import position_acceptance_svg
from qualify.serving.acceptance_stats import AcceptanceStats


def draft_acceptance(acceptance_result: tuple[Evidence, AcceptanceStats | None]) -> Evidence:
    """The measurement's evidence (taken once per run), with the per-position chart where there are statistics."""
    evidence, stats = acceptance_result
    if stats is not None:
        rates: list[tuple[float, float, float]] = [(iv.estimate, iv.low, iv.high) for iv in stats.position_rates]
        evidence.measured["position_chart_svg"] = position_acceptance_svg(rates)
    return evidence

