"""Level "speedup": output tokens/s and inter-token latency with and without the speculator, same server settings."""

from __future__ import annotations

import pytest

from qualify.serving import client as serving
from qualify.serving import paired_measure as pm
from qualify.serving.throughput import speedup_evidence

pytestmark = pytest.mark.speedup


def test_speculative_speedup(openai_client, reference_endpoint, served_model, paired_spec, speedup_spec, server_info,
                             record):
    """Streamed requests with the speculator and without it at each concurrency of [paired]: the speedup."""
    prompts = [p for _, p in pm.load_sets(paired_spec).prompts][: speedup_spec.prompts]
    plain_client = serving.make_client(reference_endpoint)
    runs: dict[str, dict[int, dict]] = {"speculative": {}, "plain": {}}
    for concurrency in paired_spec.concurrency:
        for side, client in (("speculative", openai_client), ("plain", plain_client)):
            runs[side][concurrency] = serving.measure_throughput(
                client, served_model, prompts, max_tokens=speedup_spec.max_tokens, temperature=0.0,
                concurrency=concurrency, timeout_s=speedup_spec.request_timeout_s, rounds=speedup_spec.rounds)
    evidence, gated = speedup_evidence(runs["speculative"], runs["plain"], min_speedup=speedup_spec.min_speedup)
    evidence.measured.update(server=server_info, reference_endpoint=reference_endpoint)
    record(evidence)
    if not gated:
        pytest.skip(f"speedup measured ({evidence.summary}) but not qualified: the profile states no min_speedup")
