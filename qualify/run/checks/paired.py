"""Level "paired": the checkpoint against the draft it was made from, on the same prompts, at each concurrency."""

from __future__ import annotations

from typing import Any

from qualify.core import Evidence
from qualify.profile import PairedSpec
from qualify.report.plots import paired_charts
from qualify.run.operating import measured_characteristic


def non_inferiority(paired_result: tuple[Evidence, list[Any]], paired_spec: PairedSpec) -> Evidence:
    """Both drafts' measurement and decisions (taken once per run), with the charts of each concurrency, and the
    level's error rates by design at the per-prompt spread this run measured one request at a time."""
    evidence, decisions = paired_result
    evidence.measured["charts_svg"] = paired_charts(decisions, margin=paired_spec.margin)
    per_prompt = ((evidence.measured.get("concurrency") or {}).get("1") or {}).get("per_prompt")
    if isinstance(per_prompt, list) and per_prompt:
        # Reported, never gating: the verdict is the level's own decision above.
        evidence.measured["operating_characteristic"] = measured_characteristic(per_prompt, paired_spec)
    return evidence
