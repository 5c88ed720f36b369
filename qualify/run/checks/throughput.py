"""Level "throughput": output tokens/s, TTFT and ITL as measured; qualified only against bounds the profile states."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from qualify.core import Evidence
from qualify.profile import ThroughputSpec
from qualify.run.arms import ArmResult, required
from qualify.run.checks.result import Measured
from qualify.runtime.companions import CHECKPOINT
from qualify.serving import prompt_sets as ps
from qualify.serving.throughput import throughput_evidence


def serving_throughput(throughput_run: Mapping[str, ArmResult], prompt_set: ps.PromptSet,
                       throughput_spec: ThroughputSpec, server_info: dict[str, Any]) -> Evidence | Measured:
    """Streamed requests at the profile's concurrency: output tokens/s, time to first token, inter-token latency.

    Raises:
        RuntimeNotStarted: the checkpoint's arm did not serve (its reason).
    """
    measured = dict(required(throughput_run, (CHECKPOINT,))[CHECKPOINT])
    measured.update(prompts=prompt_set.identity(), server=server_info)
    evidence, gated = throughput_evidence(
        measured, min_output_tokens_per_s=throughput_spec.min_output_tokens_per_s,
        max_mean_ttft_s=throughput_spec.max_mean_ttft_s, max_mean_itl_s=throughput_spec.max_mean_itl_s,
    )
    if not gated:
        # Recorded, but a figure with no bound to meet is a measurement, not a qualification.
        return Measured(evidence, "the profile states no bound")
    return evidence
