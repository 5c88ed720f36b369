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


@dataclass(frozen=True)
class TokenLookup:
    """A divergence looked up in the target alone: its log-probabilities after the prompt and the common prefix.

    Attributes:
        prompt_id: the prompt whose outputs diverge.
        position: the index of the first output token that differs.
        speculative_token, reference_token: the two outputs' tokens there.
        logprobs: token id -> log-probability, as the target alone answered (both tokens when it could, and
            the token it would itself choose there).
        most_likely: the token the target alone chose in the lookup (its greedy token); None if not returned.
        error: why the lookup could not be made (then ``logprobs`` is empty).
    """

    prompt_id: str
    position: int
    speculative_token: int | None
    reference_token: int | None
    logprobs: Mapping[int, float] = field(default_factory=dict)
    most_likely: int | None = None
    error: str | None = None


def _divergence(p: OutputPair, at: int, lookup: TokenLookup | None, tolerance: float) -> tuple[str, dict[str, Any],
                                                                                           str | None]:
    """A divergence judged by the target's own distribution: its kind, its figures, and its finding (if any).

    A near-tie (both tokens within ``tolerance`` nats) is listed and passes; a wider gap fails; a
    divergence whose lookup is missing or incomplete is unverified, and fails too.
    """
    where = f"prompt {p.prompt_id}, output token {at}"
    assert p.speculative is not None and p.reference is not None
    spec = p.speculative[at] if at < len(p.speculative) else None
    ref = p.reference[at] if at < len(p.reference) else None
    figures: dict[str, Any] = {}
    if lookup is None:
        return "unverified", figures, (f"{where}: the divergence was not looked up in the target alone (the reference "
                                       f"arm made no lookup), so it is unverified")
    if lookup.error is not None:
        return "unverified", figures, f"{where}: the divergence could not be looked up, so it is unverified: " \
                                      f"{lookup.error}"
    lp_ref = lookup.logprobs.get(ref) if ref is not None else None
    lp_spec = lookup.logprobs.get(spec) if spec is not None else None
    figures.update(reference_logprob=lp_ref, speculative_logprob=lp_spec, lookup_most_likely=lookup.most_likely)
    missing = [str(t) for t, lp in ((ref, lp_ref), (spec, lp_spec)) if t is not None and lp is None]
    if missing:
        return "unverified", figures, (
            f"{where}: the target alone's answer has no log-probability of token {' or '.join(missing)}, so the "
            f"divergence is unverified: ask for the tokens by id (vLLM's logprob_token_ids, 0.32 and later) or for "
            f"enough top log-probabilities (the server's --max-logprobs)")
    assert lp_ref is not None and lp_spec is not None
    best_token, best = max(lookup.logprobs.items(), key=lambda kv: kv[1])
    if best - lp_ref > tolerance:
        # The reference's own greedy token is not what the target alone chooses here: neither output is the
        # target's, so the pair says nothing about the speculator.
        return "unverified", figures, (
            f"{where}: the target alone's most likely token here is {best_token} (log-probability {best:.4f}), not "
            f"its own greedy output's {ref} ({lp_ref:.4f}): the reference did not reproduce itself, so the "
            f"divergence is unverified; rerun the level")
    gap = lp_ref - lp_spec
    figures["gap"] = gap
    if abs(gap) <= tolerance:
        return "near_tie", figures, None
    return "real", figures, (
        f"{where} (category {p.category}): the speculative output has token {spec} (log-probability {lp_spec:.4f} "
        f"in the target alone) where the target alone chose {ref} ({lp_ref:.4f}): {gap:.4f} nats apart, beyond the "
        f"near-tie tolerance {tolerance:g}")


def losslessness_evidence(
    pairs: Sequence[OutputPair], *, near_tie_tolerance: float, max_tokens: int,
    lookups: Mapping[str, TokenLookup] | None = None, near_tie_reason: str | None = None,
    failures: Sequence[str] = (), extra_measured: Mapping[str, Any] | None = None,
) -> Evidence:
    """Greedy speculative decoding must reproduce the target's own greedy output, up to the target's own near-ties.

    Each divergent prompt's first differing token is judged by the target alone's
    log-probabilities of the two tokens after the common prefix (``lookups``): within
    ``near_tie_tolerance`` nats it is a near-tie, listed with both values; a wider gap fails
    naming the prompt, position, tokens and log-probabilities; a divergence that could not be
    looked up is unverified and fails too (never a pass on missing data).
    """
    ev = Evidence("greedy outputs could not be compared")
    ev.expected.update(near_tie_tolerance=near_tie_tolerance, max_tokens=max_tokens,
                       compared="each divergence's two tokens, by their log-probabilities in the target alone")
    if near_tie_reason is not None:
        ev.expected["near_tie_reason"] = near_tie_reason
    ev.measured.update(extra_measured or {})
    for f in failures:
        ev.add(f)
    lookups = lookups or {}
    rows = []
    near_ties: list[dict[str, Any]] = []
    kinds: dict[str, int] = {"near_tie": 0, "real": 0, "unverified": 0}
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
            kind, figures, finding = _divergence(p, at, lookups.get(p.prompt_id), near_tie_tolerance)
            row.update(figures, divergence=kind)
            kinds[kind] += 1
            if finding is not None:
                ev.add(finding)
            if kind == "near_tie":
                near_ties.append({"prompt": p.prompt_id, "category": p.category, "position": at,
                                  "speculative_token": row["speculative_token"],
                                  "speculative_logprob": figures["speculative_logprob"],
                                  "reference_token": row["reference_token"],
                                  "reference_logprob": figures["reference_logprob"]})
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
    ev.measured.update(prompts=len(rows), identical=identical, identical_fraction=fraction, categories=per_category,
                       divergences=kinds, near_ties=near_ties)
    ev.summary = (f"{identical} of {len(rows)} greedy outputs ({max_tokens} tokens) identical with and without "
                  f"the speculator")
    if near_ties:
        listed = "; ".join(f"prompt {t['prompt']} at token {t['position']}: {t['speculative_token']} "
                           f"({t['speculative_logprob']:.4f}) against {t['reference_token']} "
                           f"({t['reference_logprob']:.4f})" for t in near_ties)
        ev.summary += (f"; {len(near_ties)} divergence(s) a near-tie in the target alone (within "
                       f"{near_tie_tolerance:g} nats): {listed}")
    elif identical == len(rows):
        ev.summary += "; no divergence"
    return ev
