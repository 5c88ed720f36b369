"""Level "paired": the checkpoint against the draft it was made from, on the same prompts, at each concurrency."""

from __future__ import annotations

import pytest

from qualify.report.plots import paired_charts

pytestmark = pytest.mark.paired


def test_non_inferiority(paired_result, paired_spec, record):
    """No worse than the source draft by more than the margin: acceptance rate and length, overall and per category."""
    evidence, decisions = paired_result
    evidence.measured["charts_svg"] = paired_charts(decisions, margin=paired_spec.margin)
    record(evidence)
