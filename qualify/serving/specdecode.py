"""Speculative-decoding evidence: the acceptance gate over a prompt set's counter deltas, and the
losslessness of greedy outputs with the speculator (pure: numbers in, Evidence out).

The counters are read by :mod:`qualify.serving.counters`; the figures and their bootstrap
intervals are :mod:`qualify.serving.acceptance_stats`'s. The gate compares each interval's
*lower bound* with the profile's threshold, so that a draft that only just clears it on this
prompt set is not qualified.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from qualify.core import Evidence
from qualify.serving.acceptance_stats import AcceptanceStats, Bootstrap, Interval, acceptance_stats
from qualify.serving.counters import CounterDelta

# -- the gate ------------------------------------------------------------------------------


@dataclass(frozen=True)
class AcceptanceThresholds:
    """The profile's acceptance gate. Every bound is compared with an interval's lower end."""

    min_acceptance_rate: float
    min_mean_acceptance_length: float
    min_category_acceptance_rate: float | None = None
    min_requests: int = 1


@dataclass(frozen=True)
class RequestSample:
    """One prompt's request and the counters it moved."""

    prompt_id: str
    category: str
    delta: CounterDelta
    completion_tokens: int | None = None
    finish_reason: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "prompt": self.prompt_id,
            "category": self.category,
            "completion_tokens": self.completion_tokens,
            "finish_reason": self.finish_reason,
            **self.delta.to_dict(),
        }


@dataclass
class AcceptanceMeasurement:
    """What the serving side measured: samples, and the prompts it could not measure."""

    samples: list[RequestSample] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)  # one readable line per prompt that failed
    expected_categories: tuple[str, ...] = ()


def _lower_bound_finding(what: str, iv: Interval, minimum: float, fmt: str = ".3f") -> str | None:
    if math.isnan(iv.low) or iv.low < minimum:
        pct = round(iv.confidence * 100)
        return (f"{what}: lower bound of the {pct}% interval {iv.low:{fmt}} is below the threshold {minimum:{fmt}} "
                f"(estimate {iv.estimate:{fmt}}, interval [{iv.low:{fmt}}, {iv.high:{fmt}}])")
    return None


def acceptance_evidence(
    measurement: AcceptanceMeasurement,
    thresholds: AcceptanceThresholds,
    boot: Bootstrap | None = None,
    *,
    extra_measured: Mapping[str, Any] | None = None,
) -> tuple[Evidence, AcceptanceStats | None]:
    """The acceptance gate: figures with intervals, overall and per category, compared by their lower bounds."""
    boot = boot or Bootstrap()
    samples = measurement.samples
    ev = Evidence("draft acceptance could not be measured")
    ev.measured["bootstrap"] = boot.to_dict()
    ev.measured.update(extra_measured or {})
    ev.expected.update(
        min_acceptance_rate=thresholds.min_acceptance_rate,
        min_mean_acceptance_length=thresholds.min_mean_acceptance_length,
        min_category_acceptance_rate=thresholds.min_category_acceptance_rate,
        min_requests=thresholds.min_requests,
        compared="the lower bound of each interval",
    )
    for failure in measurement.failures:
        ev.add(failure)
    ev.measured["per_request"] = [s.to_dict() for s in samples]
    if len(samples) < thresholds.min_requests:
        ev.add(f"{len(samples)} prompt(s) measured, the profile requires at least {thresholds.min_requests}")
    if not samples:
        return ev, None

    stats = acceptance_stats([s.delta for s in samples], boot)
    ev.measured.update(stats.to_dict())
    if stats.totals.draft_tokens == 0:
        ev.add(f"the server drafted no token over {len(samples)} request(s): nothing was speculated")
    for finding in (
        _lower_bound_finding("acceptance rate", stats.acceptance_rate, thresholds.min_acceptance_rate),
        _lower_bound_finding("mean acceptance length", stats.mean_acceptance_length,
                             thresholds.min_mean_acceptance_length, ".2f"),
    ):
        if finding:
            ev.add(finding)

    categories: dict[str, list[RequestSample]] = {}
    for s in samples:
        categories.setdefault(s.category, []).append(s)
    per_category = {}
    for name in sorted(set(categories) | set(measurement.expected_categories)):
        members = categories.get(name, [])
        if not members:
            ev.add(f"category {name!r}: no prompt of it was measured")
            continue
        cstats = acceptance_stats([s.delta for s in members], boot)
        per_category[name] = cstats.to_dict()
        if thresholds.min_category_acceptance_rate is not None:
            finding = _lower_bound_finding(
                f"category {name!r} acceptance rate", cstats.acceptance_rate, thresholds.min_category_acceptance_rate
            )
            if finding:
                ev.add(finding)
    ev.measured["categories"] = per_category

    rate, length = stats.acceptance_rate, stats.mean_acceptance_length
    pct = round(boot.confidence * 100)
    ev.summary = (
        f"acceptance rate {rate.estimate:.3f} ({pct}% interval [{rate.low:.3f}, {rate.high:.3f}]), "
        f"mean acceptance length {length.estimate:.2f} [{length.low:.2f}, {length.high:.2f}] "
        f"over {len(samples)} prompts in {len(per_category)} categories"
    )
    return ev, stats


# -- losslessness --------------------------------------------------------------------------


def first_divergence(a: Sequence[int], b: Sequence[int]) -> int | None:
    """The index of the first token where two outputs differ (a shorter prefix differs at its end); None if equal."""
    for i, (x, y) in enumerate(zip(a, b, strict=False)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


@dataclass(frozen=True)
class OutputPair:
    """One prompt's greedy output with the speculator and without it (token ids; None = not returned)."""

    prompt_id: str
    category: str
    speculative: tuple[int, ...] | None
    reference: tuple[int, ...] | None


def losslessness_evidence(
    pairs: Sequence[OutputPair], *, min_identical_fraction: float, max_tokens: int,
    failures: Sequence[str] = (), extra_measured: Mapping[str, Any] | None = None,
) -> Evidence:
    """Greedy speculative decoding must reproduce the target's own greedy output token for token.

    The fraction of prompts whose outputs are identical is compared with the profile's
    minimum; every divergent prompt is listed with the first token that differs, so a
    reader can tell a numerical near-tie late in a long output from a broken verifier.
    """
    ev = Evidence("greedy outputs could not be compared")
    ev.expected.update(min_identical_fraction=min_identical_fraction, max_tokens=max_tokens)
    ev.measured.update(extra_measured or {})
    for f in failures:
        ev.add(f)
    rows = []
    for p in pairs:
        if p.speculative is None or p.reference is None:
            side = "speculative" if p.speculative is None else "reference"
            ev.add(f"prompt {p.prompt_id}: the {side} server returned no token ids")
            continue
        at = first_divergence(p.speculative, p.reference)
        row: dict[str, Any] = {"prompt": p.prompt_id, "category": p.category, "identical": at is None,
                               "first_divergence": at, "speculative_tokens": len(p.speculative),
                               "reference_tokens": len(p.reference)}
        if at is not None:
            row["speculative_token"] = p.speculative[at] if at < len(p.speculative) else None
            row["reference_token"] = p.reference[at] if at < len(p.reference) else None
        rows.append(row)
    ev.measured["per_prompt"] = rows
    if not rows:
        ev.add("no prompt's outputs could be compared")
        return ev
    identical = sum(r["identical"] for r in rows)
    fraction = identical / len(rows)
    per_category: dict[str, dict[str, Any]] = {}
    for r in rows:
        c = per_category.setdefault(r["category"], {"prompts": 0, "identical": 0})
        c["prompts"] += 1
        c["identical"] += int(r["identical"])
    for c in per_category.values():
        c["identical_fraction"] = c["identical"] / c["prompts"]
    ev.measured.update(prompts=len(rows), identical=identical, identical_fraction=fraction, categories=per_category)
    if fraction < min_identical_fraction:
        divergent = ", ".join(f"{r['prompt']} at token {r['first_divergence']}" for r in rows if not r["identical"])
        ev.add(f"{identical} of {len(rows)} greedy outputs identical ({fraction:.3f}), the profile requires "
               f"{min_identical_fraction:.3f}; first divergent token: {divergent}")
    ev.summary = (f"{identical} of {len(rows)} greedy outputs ({max_tokens} tokens) identical with and without "
                  f"the speculator ({fraction:.3f})")
    return ev
