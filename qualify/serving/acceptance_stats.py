"""Acceptance figures and their bootstrap intervals, from counter deltas measured one prompt at a time
(pure: deltas in, figures out).

The figures are vLLM's own definitions: acceptance rate = accepted / draft tokens; mean
acceptance length = 1 + accepted / drafts (the 1 is the token the target adds to every
step); per-position rate = accepted at position i / drafts.

Each prompt is measured alone (counter deltas around one request), so a prompt is the
unit a bootstrap resamples: the intervals say how much the figures depend on which
prompts were asked, and the gate (:mod:`qualify.serving.specdecode`) compares the interval's
*lower bound* with the threshold so that a draft that only just clears it on this prompt set
is not qualified. The bootstrap is seeded and uses only ``random.Random.random()``, whose
sequence Python guarantees for a given seed across versions, so the same deltas give the same
interval and the same verdict on every machine.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any, Protocol

from qualify.serving.counters import CounterDelta, add
from qualify.util.records import record_dict


def acceptance_rate(d: CounterDelta) -> float:
    """Accepted / draft tokens; NaN when nothing was drafted (unknown, not zero)."""
    return d.accepted_tokens / d.draft_tokens if d.draft_tokens else math.nan


def mean_acceptance_length(d: CounterDelta) -> float:
    """1 + accepted / drafts: tokens each verification step yields, the target's own included."""
    return 1.0 + d.accepted_tokens / d.drafts if d.drafts else math.nan


def position_rates(d: CounterDelta) -> tuple[float, ...]:
    """Per draft position, the fraction of drafts whose token there was accepted."""
    return tuple((n / d.drafts if d.drafts else math.nan) for n in d.accepted_per_pos)


@dataclass(frozen=True)
class Interval:
    """A point estimate (from all prompts) and its percentile-bootstrap interval."""

    estimate: float
    low: float
    high: float
    confidence: float

    def to_dict(self) -> dict[str, float]:
        return record_dict(self)


@dataclass(frozen=True)
class Bootstrap:
    """How intervals are computed; part of the evidence so a reader can recompute them."""

    resamples: int = 2000
    confidence: float = 0.95
    seed: int = 0

    def __post_init__(self) -> None:
        if self.resamples < 1:
            raise ValueError(f"resamples must be >= 1, not {self.resamples}")
        if not 0 < self.confidence < 1:
            raise ValueError(f"confidence must be in (0, 1), not {self.confidence}")

    def to_dict(self) -> dict[str, Any]:
        return {
            "resamples": self.resamples,
            "confidence": self.confidence,
            "seed": self.seed,
            "method": "percentile bootstrap; prompts resampled with replacement; "
                      "indices int(random.Random(seed).random() * n); quantiles linearly interpolated",
        }


def quantile(sorted_values: Sequence[float], q: float) -> float:
    """The q-quantile of already sorted values, interpolating linearly between order statistics."""
    if not sorted_values:
        return math.nan
    pos = q * (len(sorted_values) - 1)
    lo = math.floor(pos)
    hi = min(lo + 1, len(sorted_values) - 1)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (pos - lo)


def resample_totals(deltas: Sequence[CounterDelta], boot: Bootstrap) -> list[CounterDelta]:
    """``boot.resamples`` totals, each over len(deltas) prompts drawn with replacement."""
    n = len(deltas)
    if n == 0:
        return []
    rng = random.Random(boot.seed)
    out = []
    for _ in range(boot.resamples):
        # int(random() * n) rather than randrange: only random()'s sequence is guaranteed
        # across Python versions, and the interval must not change with the interpreter.
        out.append(add(deltas[int(rng.random() * n)] for _ in range(n)))
    return out


def _position_rate(d: CounterDelta, position: int) -> float:
    return position_rates(d)[position]


def interval(
    point: CounterDelta, resampled: Sequence[CounterDelta], statistic: Callable[[CounterDelta], float],
    boot: Bootstrap, *, worst: float,
) -> Interval:
    """The statistic on all prompts, and the bootstrap quantiles of it over the resamples.

    A resample in which the statistic is undefined (nothing drafted) counts as ``worst``:
    an unknown figure must widen the interval towards failing, not be dropped.
    """
    values = sorted(worst if math.isnan(v := statistic(r)) else v for r in resampled)
    alpha = (1.0 - boot.confidence) / 2.0
    return Interval(statistic(point), quantile(values, alpha), quantile(values, 1.0 - alpha), boot.confidence)


@dataclass(frozen=True)
class AcceptanceStats:
    """Acceptance figures over a set of prompts, each with its interval."""

    requests: int
    totals: CounterDelta
    acceptance_rate: Interval
    mean_acceptance_length: Interval
    position_rates: tuple[Interval, ...]

    def to_dict(self) -> dict[str, Any]:
        return {"requests": self.requests, **figures_dict(self)}


class Figures(Protocol):
    """What one draft's acceptance figures consist of (:class:`AcceptanceStats`, the paired level's drafts)."""

    @property
    def totals(self) -> CounterDelta: ...
    @property
    def acceptance_rate(self) -> Interval: ...
    @property
    def mean_acceptance_length(self) -> Interval: ...
    @property
    def position_rates(self) -> tuple[Interval, ...]: ...


def figures_dict(stats: Figures) -> dict[str, Any]:
    """The acceptance figures of ``stats`` as the report records them."""
    return {
        "acceptance_rate": stats.acceptance_rate.to_dict(),
        "mean_acceptance_length": stats.mean_acceptance_length.to_dict(),
        "position_acceptance_rates": [{"position": i, **iv.to_dict()} for i, iv in enumerate(stats.position_rates)],
        "counter_totals": stats.totals.to_dict(),
    }


def acceptance_stats(deltas: Sequence[CounterDelta], boot: Bootstrap | None = None) -> AcceptanceStats:
    """All acceptance figures and their intervals, from one set of resamples (so they agree)."""
    boot = boot or Bootstrap()
    totals = add(deltas)
    resampled = resample_totals(deltas, boot)
    width = len(totals.accepted_per_pos)
    return AcceptanceStats(
        requests=len(deltas),
        totals=totals,
        acceptance_rate=interval(totals, resampled, acceptance_rate, boot, worst=0.0),
        mean_acceptance_length=interval(totals, resampled, mean_acceptance_length, boot, worst=1.0),
        position_rates=tuple(
            interval(totals, resampled, partial(_position_rate, position=i), boot, worst=0.0) for i in range(width)
        ),
    )
