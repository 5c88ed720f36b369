"""Level "throughput": output tokens/s, TTFT and ITL as measured; qualified only against bounds the profile states."""

from __future__ import annotations

from typing import Any

from qualify.core import Evidence
from qualify.profile import ThroughputSpec
from qualify.run.checks.result import Measured
from qualify.serving import client as serving
from qualify.serving import prompt_sets as ps
from qualify.serving.throughput import throughput_evidence


def serving_throughput(openai_client: Any, served_model: str, prompt_set: ps.PromptSet,
                       throughput_spec: ThroughputSpec, server_info: dict[str, Any]) -> Evidence | Measured:
    """Streamed requests at the profile's concurrency: output tokens/s, time to first token, inter-token latency."""
    measured = serving.measure_throughput(
        openai_client, served_model, prompt_set.prompts, max_tokens=throughput_spec.max_tokens,
        temperature=throughput_spec.temperature, concurrency=throughput_spec.concurrency,
        timeout_s=throughput_spec.request_timeout_s, rounds=throughput_spec.rounds,
    )
    measured.update(prompts=prompt_set.identity(), server=server_info)
    evidence, gated = throughput_evidence(
        measured, min_output_tokens_per_s=throughput_spec.min_output_tokens_per_s,
        max_mean_ttft_s=throughput_spec.max_mean_ttft_s, max_mean_itl_s=throughput_spec.max_mean_itl_s,
    )
    if not gated:
        # Recorded, but a figure with no bound to meet is a measurement, not a qualification.
        return Measured(evidence, "the profile states no bound")
    return evidence
