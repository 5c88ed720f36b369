"""Tests for qualify.serving.throughput: throughput and speedup evidence, measured, and gated only by a
bound the profile states; a NaN or a missing side never clears a bound."""

from __future__ import annotations

import math

from qualify.serving.throughput import speedup_evidence, throughput_evidence

MEASURED = {"requests": 4, "failed_requests": [], "concurrency": 2, "output_tokens": 256,
            "output_tokens_per_s": 100.0, "ttft_s": {"mean": 0.2}, "itl_s": {"mean": 0.01}}


def test_throughput_without_bounds_is_not_gated() -> None:
    ev, gated = throughput_evidence(MEASURED)
    assert ev.ok and not gated
    assert ev.measured["output_tokens_per_s"] == 100.0


def test_throughput_bounds() -> None:
    ev, gated = throughput_evidence(MEASURED, min_output_tokens_per_s=150.0, max_mean_ttft_s=0.1)
    assert gated and len(ev.findings) == 2
    ev, _ = throughput_evidence({**MEASURED, "output_tokens": 0, "output_tokens_per_s": math.nan},
                                min_output_tokens_per_s=1.0)
    assert not ev.ok  # NaN never clears a bound



def throughput(tokens_per_s: float, itl: float, failed: tuple[str, ...] = ()) -> dict[str, object]:
    return {"output_tokens_per_s": tokens_per_s, "output_tokens": 640, "itl_s": {"mean": itl},
            "failed_requests": list(failed)}


def test_speedup_measured_and_gated_only_by_a_stated_bound() -> None:
    ev, gated = speedup_evidence({1: throughput(30, 0.03), 4: throughput(50, 0.05)},
                                 {1: throughput(20, 0.05), 4: throughput(60, 0.04)})
    assert ev.ok and not gated
    assert ev.measured["no_speedup_at"] == [4]
    assert ev.measured["concurrency"]["1"]["speedup"] == 1.5
    ev, gated = speedup_evidence({1: throughput(30, 0.03)}, {1: throughput(20, 0.05)}, min_speedup=1.6)
    assert gated and [str(f) for f in ev.findings] == [
        "at concurrency 1: speedup 1.50x (30.0 / 20.0 output tokens/s) is below the required 1.60x"]
    ev, _ = speedup_evidence({1: throughput(30, 0.03, ("prompt a: timed out",))}, {})
    assert {str(f) for f in ev.findings} == {"at concurrency 1: measured only with the speculator"}
    ev, _ = speedup_evidence({1: throughput(30, 0.03, ("prompt a: timed out",))}, {1: throughput(0, 0.1)},
                             min_speedup=1.0)
    text = "\n".join(str(f) for f in ev.findings)
    assert "with the speculator: prompt a: timed out" in text and "speedup nanx" in text

