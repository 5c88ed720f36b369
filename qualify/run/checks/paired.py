"""Level "paired": the checkpoint against the draft it was made from, on the same prompts, at each concurrency."""

from __future__ import annotations

from typing import Any

from qualify.core import Evidence
from qualify.profile import PairedSpec
from qualify.report.plots import paired_charts


def non_inferiority(paired_result: tuple[Evidence, list[Any]], paired_spec: PairedSpec) -> Evidence:
    """Both drafts' measurement and decisions (taken once per run), with the charts of each concurrency."""
    evidence, decisions = paired_result
    evidence.measured["charts_svg"] = paired_charts(decisions, margin=paired_spec.margin)
    return evidence
