"""Level "speedup": output tokens/s and inter-token latency with and without the speculator, same server settings."""

from __future__ import annotations

from typing import Any

from qualify.core import Evidence
from qualify.profile import PairedSpec, SpeedupSpec
from qualify.run.checks.result import Measured
from qualify.serving import client as serving
from qualify.serving import paired_measure as pm
from qualify.serving.throughput import speedup_evidence


def speculative_speedup(openai_client: Any, reference_endpoint: str, served_model: str, paired_spec: PairedSpec,
                        speedup_spec: SpeedupSpec, server_info: dict[str, Any]) -> Evidence | Measured:
    """Streamed requests on the speculative server and on the reference, at each concurrency of ``[paired]``."""
    prompts = [p for _, p in pm.load_sets(paired_spec).prompts][: speedup_spec.prompts]
    plain_client = serving.make_client(reference_endpoint)
    runs: dict[str, dict[int, dict[str, Any]]] = {"speculative": {}, "plain": {}}
    for concurrency in paired_spec.concurrency:
        for side, client in (("speculative", openai_client), ("plain", plain_client)):
            runs[side][concurrency] = serving.measure_throughput(
                client, served_model, prompts, max_tokens=speedup_spec.max_tokens, temperature=0.0,
                concurrency=concurrency, timeout_s=speedup_spec.request_timeout_s, rounds=speedup_spec.rounds)
    evidence, gated = speedup_evidence(runs["speculative"], runs["plain"], min_speedup=speedup_spec.min_speedup)
    evidence.measured.update(server=server_info, reference_endpoint=reference_endpoint)
    if not gated:
        return Measured(evidence, "the profile states no min_speedup")
    return evidence
