"""Level "speedup": output tokens/s and inter-token latency with and without the speculator, same server settings."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from qualify.core import Evidence
from qualify.profile import SpeedupSpec
from qualify.run.arms import ArmResult, required
from qualify.run.checks.result import Measured
from qualify.runtime.companions import CHECKPOINT, REFERENCE
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
    if not gated:
        return Measured(evidence, "the profile states no min_speedup")
    return evidence
