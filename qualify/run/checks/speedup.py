"""Level "speedup": output tokens/s and inter-token latency with and without the speculator, same server settings."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from qualify.core import Evidence
from qualify.profile import SpeedupSpec
from qualify.run.arms import ArmResult, required
from qualify.run.checks.result import Measured
from qualify.runtime.companions import CHECKPOINT, CHECKPOINT_PUBLISHED, REFERENCE, REFERENCE_PUBLISHED
from qualify.serving.throughput import speedup_evidence


def speculative_speedup(speedup_runs: Mapping[str, ArmResult], speedup_spec: SpeedupSpec,
                        server_info: dict[str, Any]) -> Evidence | Measured:
    """Streamed requests on the speculative arm and on the target alone, at each concurrency of ``[paired]``.

    Raises:
        RuntimeNotStarted: an arm did not serve (its reason).
    """
    sides = required(speedup_runs, (CHECKPOINT, REFERENCE))
    evidence, gated = speedup_evidence(sides[CHECKPOINT], sides[REFERENCE], min_speedup=speedup_spec.min_speedup)
    evidence.measured.update(server=server_info, reference_endpoint=speedup_runs[REFERENCE].endpoint)
    if speedup_spec.as_published:
        evidence.measured["as_published"] = _as_published(speedup_runs, evidence)
    if not gated:
        return Measured(evidence, "the profile states no min_speedup")
    return evidence


def _as_published(speedup_runs: Mapping[str, ArmResult], evidence: Evidence) -> dict[str, Any]:
    """The speedup as users run it (the published environment): measured only, never gated; a missing arm is named."""
    note = ("measured only: both arms launched with the published environment (without the qualification "
            "overrides), as users run it; never part of the verdict")
    published = {arm: speedup_runs.get(arm) for arm in (CHECKPOINT_PUBLISHED, REFERENCE_PUBLISHED)}
    failed = [f"{arm}: {res.error if res is not None else 'not measured in this run'}"
              for arm, res in published.items() if res is None or res.error is not None]
    if failed:
        evidence.add("the speedup as published was not measured: " + "; ".join(failed))
        return {"note": note, "measured": False, "why": failed}
    spec_side, plain_side = (published[a].value for a in (CHECKPOINT_PUBLISHED, REFERENCE_PUBLISHED))  # type: ignore[union-attr]
    as_published, _ = speedup_evidence(spec_side, plain_side, min_speedup=None)
    return {"note": note, "measured": True, "summary": as_published.summary, **as_published.measured}
