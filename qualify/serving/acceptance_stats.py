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

import functools
import math
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

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


@functools.lru_cache(maxsize=64)
def resample_counts(n: int, boot: Bootstrap) -> np.ndarray:
    """``boot.resamples`` rows of how often each of ``n`` prompts was drawn (each row sums to ``n``).

    The draws are ``int(rng.random() * n)`` (not ``randrange``): only ``random()``'s sequence is
    guaranteed across Python versions, and the interval must not change with the interpreter.
    The rows depend on ``n`` and ``boot`` alone, so they are drawn once per pair and shared (read-only).
    """
    counts = np.zeros((boot.resamples, n), dtype=np.int64)
    if n > 0:
        rng = random.Random(boot.seed)
        for r in range(boot.resamples):
            counts[r] = np.bincount([int(rng.random() * n) for _ in range(n)], minlength=n)
    counts.flags.writeable = False
    return counts


def resample_totals(deltas: Sequence[CounterDelta], boot: Bootstrap) -> list[CounterDelta]:
    """``boot.resamples`` totals, each over len(deltas) prompts drawn with replacement (:func:`resample_counts`)."""
    n = len(deltas)
    if n == 0:
        return []
    width = max(len(d.accepted_per_pos) for d in deltas)
    columns = np.zeros((n, 3 + width), dtype=np.int64)
    for i, d in enumerate(deltas):
        columns[i, 0:3] = (d.drafts, d.draft_tokens, d.accepted_tokens)
        columns[i, 3:3 + len(d.accepted_per_pos)] = d.accepted_per_pos
    # Exact integer sums of the drawn prompts, every resample at once.
    return [CounterDelta(drafts=row[0], draft_tokens=row[1], accepted_tokens=row[2], accepted_per_pos=tuple(row[3:]))
            for row in (resample_counts(n, boot) @ columns).tolist()]


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


def bootstrap_interval(estimate: float, values: np.ndarray, boot: Bootstrap, worst: float) -> Interval:
    """:func:`interval`'s quantiles over a statistic already computed on every resample (NaN counts as ``worst``).

    The same order statistics and interpolation as :func:`quantile`, selected instead of sorting every value.
    """
    values = np.where(np.isnan(values), worst, values)
    n = len(values)
    alpha = (1.0 - boot.confidence) / 2.0
    positions = (alpha * (n - 1), (1.0 - alpha) * (n - 1))
    ranks = sorted({r for pos in positions for r in (math.floor(pos), min(math.floor(pos) + 1, n - 1))})
    chosen = np.partition(values, ranks)

    def at(pos: float) -> float:
        lo = math.floor(pos)
        below, above = float(chosen[lo]), float(chosen[min(lo + 1, n - 1)])
        return below + (above - below) * (pos - lo)

    return Interval(estimate, at(positions[0]), at(positions[1]), boot.confidence)


def ratio(num: np.ndarray, den: np.ndarray) -> np.ndarray:
    """num / den per resample, NaN where den is 0 (the scalar figures' rule, the same IEEE divisions)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(den != 0, num.astype(np.float64) / np.where(den != 0, den, 1).astype(np.float64), math.nan)


def acceptance_stats(deltas: Sequence[CounterDelta], boot: Bootstrap | None = None) -> AcceptanceStats:
    """All acceptance figures and their intervals, from one set of resamples (so they agree)."""
    boot = boot or Bootstrap()
    totals = add(deltas)
    width = len(totals.accepted_per_pos)
    n = len(deltas)
    columns = np.zeros((n, 3 + width), dtype=np.int64)
    for i, d in enumerate(deltas):
        columns[i, 0:3] = (d.drafts, d.draft_tokens, d.accepted_tokens)
        columns[i, 3:3 + len(d.accepted_per_pos)] = d.accepted_per_pos
    # Every resample's exact integer sums at once (a Python total per resample made this the slow part).
    sums = resample_counts(n, boot) @ columns
    drafts, draft_tokens, accepted = sums[:, 0], sums[:, 1], sums[:, 2]
    return AcceptanceStats(
        requests=n,
        totals=totals,
        acceptance_rate=bootstrap_interval(acceptance_rate(totals), ratio(accepted, draft_tokens), boot, 0.0),
        mean_acceptance_length=bootstrap_interval(mean_acceptance_length(totals), 1.0 + ratio(accepted, drafts),
                                                  boot, 1.0),
        position_rates=tuple(
            bootstrap_interval(_position_rate(totals, i), ratio(sums[:, 3 + i], drafts), boot, 0.0)
            for i in range(width)
        ),
    )
