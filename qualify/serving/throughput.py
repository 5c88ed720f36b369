"""Throughput figures -> Evidence (pure). Measured always; qualified only against bounds a profile states.

The measuring is :func:`qualify.serving.client.measure_throughput`; this module decides. A
profile that states no bound gets its figures recorded and the level *not qualified*:
a number with nothing to compare it with is a measurement, not a qualification.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from qualify.core import Evidence


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


def speedup_evidence(
    speculative: Mapping[int, Mapping[str, Any]], plain: Mapping[int, Mapping[str, Any]], *,
    min_speedup: float | None = None,
) -> tuple[Evidence, bool]:
    """(evidence, gated): the speculator's speedup at each concurrency, from runs with and without it.

    ``speculative`` and ``plain`` map a concurrency to what
    :func:`qualify.serving.client.measure_throughput` measured on the same prompts and settings,
    with the draft as speculator and without one. The speedup is the ratio of output tokens
    per second; the inter-token latencies are set side by side. A concurrency at which the
    speculator did not make decoding faster is listed in ``measured["no_speedup_at"]``: the
    report calls out an acceptance that buys no speed. Only a stated ``min_speedup`` gates.
    """
    ev = Evidence("the speedup could not be measured")
    if min_speedup is not None:
        ev.expected["min_speedup"] = min_speedup
    rows: dict[str, Any] = {}
    slow: list[int] = []
    parts = []
    for concurrency in sorted(set(speculative) | set(plain)):
        spec, base = speculative.get(concurrency), plain.get(concurrency)
        if spec is None or base is None:
            ev.add(f"at concurrency {concurrency}: measured only {'with' if spec else 'without'} the speculator")
            continue
        for side, m in (("with the speculator", spec), ("without it", base)):
            for failure in m.get("failed_requests", []):
                ev.add(f"at concurrency {concurrency}, {side}: {failure}")
            if not m.get("output_tokens"):
                ev.add(f"at concurrency {concurrency}, {side}: no output tokens were measured")
        fast, ref = float(spec.get("output_tokens_per_s", math.nan)), float(base.get("output_tokens_per_s", math.nan))
        ratio = fast / ref if ref > 0 and math.isfinite(fast) else math.nan
        itl_spec, itl_base = (spec.get("itl_s") or {}).get("mean"), (base.get("itl_s") or {}).get("mean")
        rows[str(concurrency)] = {"speedup": ratio, "output_tokens_per_s": {"speculative": fast, "plain": ref},
                                  "mean_itl_s": {"speculative": itl_spec, "plain": itl_base},
                                  "speculative": dict(spec), "plain": dict(base)}
        if not ratio > 1.0:
            slow.append(concurrency)
        if min_speedup is not None and not ratio >= min_speedup:
            ev.add(f"at concurrency {concurrency}: speedup {ratio:.2f}x ({fast:.1f} / {ref:.1f} output tokens/s) is "
                   f"below the required {min_speedup:.2f}x")
        parts.append(f"concurrency {concurrency}: {ratio:.2f}x ({fast:.1f} vs {ref:.1f} tokens/s, mean ITL "
                     f"{_s(itl_spec)} vs {_s(itl_base)})")
    ev.measured.update(concurrency=rows, no_speedup_at=slow)
    if parts:
        ev.summary = "speedup with the speculator over the target alone: " + "; ".join(parts)
    return ev, min_speedup is not None
