"""Throughput figures -> Evidence (pure). Measured always; qualified only against bounds a profile states.

The measuring is :func:`qualify.serving.client.measure_throughput`; this module decides. A
profile that states no bound gets its figures recorded and the level *not qualified*:
a number with nothing to compare it with is a measurement, not a qualification.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from qualify.report.model import Evidence


def throughput_evidence(
    measured: Mapping[str, Any], *, min_output_tokens_per_s: float | None = None,
    max_mean_ttft_s: float | None = None, max_mean_itl_s: float | None = None,
) -> tuple[Evidence, bool]:
    """(evidence, gated): findings for every stated bound missed; ``gated`` is False when no bound is stated."""
    rate = float(measured.get("output_tokens_per_s", math.nan))
    ttft = (measured.get("ttft_s") or {}).get("mean")
    itl = (measured.get("itl_s") or {}).get("mean")
    ev = Evidence(
        f"{rate:.1f} output tokens/s over {measured.get('requests', 0)} requests at concurrency "
        f"{measured.get('concurrency')}; mean TTFT {_s(ttft)}, mean ITL {_s(itl)}"
    )
    ev.measured.update(dict(measured))
    bounds = {"min_output_tokens_per_s": min_output_tokens_per_s, "max_mean_ttft_s": max_mean_ttft_s,
              "max_mean_itl_s": max_mean_itl_s}
    ev.expected.update({k: v for k, v in bounds.items() if v is not None})
    for failure in measured.get("failed_requests", []):
        ev.add(failure)
    if not measured.get("output_tokens"):
        ev.add("no output tokens were measured")
    if min_output_tokens_per_s is not None and not rate >= min_output_tokens_per_s:
        ev.add(f"output throughput {rate:.1f} tokens/s is below the required {min_output_tokens_per_s:.1f}")
    if max_mean_ttft_s is not None and not (ttft is not None and ttft <= max_mean_ttft_s):
        ev.add(f"mean time to first token {_s(ttft)} exceeds the allowed {max_mean_ttft_s:.3f} s")
    if max_mean_itl_s is not None and not (itl is not None and itl <= max_mean_itl_s):
        ev.add(f"mean inter-token latency {_s(itl)} exceeds the allowed {max_mean_itl_s:.4f} s")
    return ev, any(v is not None for v in bounds.values())


def _s(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.4f} s"
