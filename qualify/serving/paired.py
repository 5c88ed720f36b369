"""Paired non-inferiority of a quantized draft against the draft it was made from (pure: counts in, figures out).

The same prompts are served twice on the same target and engine settings: once with the
*source* draft (the unquantized one the checkpoint was converted from) and once with the
*candidate* (the MXFP8 checkpoint). Each prompt then has two counter deltas, and the
question is whether quantization cost acceptance.

Estimators are ratios of sums, as vLLM defines its figures: acceptance rate = sum of
accepted tokens / sum of draft tokens, mean acceptance length = 1 + sum of accepted tokens
/ sum of drafts, over the prompts of a group. The difference is taken relative to the
source: ``(candidate - source) / source``.

The interval is a paired percentile bootstrap by prompt: each resample draws prompts with
replacement (``int(random.Random(seed).random() * n)``, whose sequence Python guarantees
across versions) and keeps both drafts' counts of a drawn prompt together, so that what a
prompt does to both drafts (a hard prompt is hard for both) cancels out of the difference.
Sums are exact integers (numpy int64 over multiplicities), so the same counts give the same
interval, and the same verdict, on every machine.

The decision is one-sided non-inferiority: a group passes only if the lower bound of the
two-sided ``confidence`` interval of the relative difference is *above* ``-margin``, for the
acceptance rate and for the mean acceptance length. An interval that straddles ``-margin``
(an uncertain answer) fails: too few prompts, or a noisy draft, never qualifies. A resample
in which a figure is undefined (a draft drafted nothing) counts as the worst relative
difference, -1, so an unknown widens the interval towards failing.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from qualify.core import Evidence
from qualify.serving.acceptance_stats import (
    Bootstrap,
    Interval,
    bootstrap_interval,
    figures_dict,
    ratio,
    resample_counts,
)
from qualify.serving.counters import CounterDelta, add

#: The relative difference a resample counts as when a figure is undefined in it: all acceptance lost.
WORST_RELATIVE = -1.0
#: How many of the prompts that lost the most the evidence lists.
LOSERS_SHOWN = 5
FIGURES: tuple[str, ...] = ("acceptance_rate", "mean_acceptance_length")
FIGURE_WORDS = {"acceptance_rate": "acceptance rate", "mean_acceptance_length": "mean acceptance length"}


@dataclass(frozen=True)
class PairedSample:
    """One prompt measured with both drafts: the counters each moved."""

    prompt_id: str
    prompt_set: str
    category: str
    source: CounterDelta
    candidate: CounterDelta

    @property
    def accepted_difference(self) -> int:
        return self.candidate.accepted_tokens - self.source.accepted_tokens

    @property
    def drafts_difference(self) -> int:
        return self.candidate.drafts - self.source.drafts

    def to_dict(self) -> dict[str, Any]:
        return {
            "prompt": self.prompt_id,
            "prompt_set": self.prompt_set,
            "category": self.category,
            "source": self.source.to_dict(),
            "candidate": self.candidate.to_dict(),
            "accepted_difference": self.accepted_difference,
            "drafts_difference": self.drafts_difference,
        }


# -- figures of one draft ------------------------------------------------------------------------


def rate_of(accepted: float, draft_tokens: float) -> float:
    """Accepted / draft tokens; NaN when nothing was drafted (unknown, not zero)."""
    return accepted / draft_tokens if draft_tokens else math.nan


def length_of(accepted: float, drafts: float) -> float:
    """1 + accepted / drafts; NaN when there was no draft."""
    return 1.0 + accepted / drafts if drafts else math.nan


def relative(candidate: float, source: float) -> float:
    """(candidate - source) / source; NaN when either is unknown or the source is 0."""
    if math.isnan(candidate) or math.isnan(source) or source == 0:
        return math.nan
    return (candidate - source) / source


@dataclass(frozen=True)
class DraftFigures:
    """One draft's figures over a group of prompts, each with its (paired-resample) interval."""

    totals: CounterDelta
    acceptance_rate: Interval
    mean_acceptance_length: Interval
    position_rates: tuple[Interval, ...]

    def to_dict(self) -> dict[str, Any]:
        return figures_dict(self)


@dataclass(frozen=True)
class Difference:
    """Candidate minus source, absolute and relative to the source, each with its interval."""

    absolute: Interval
    relative: Interval

    def to_dict(self) -> dict[str, Any]:
        return {"absolute": self.absolute.to_dict(), "relative": self.relative.to_dict()}


@dataclass(frozen=True)
class PairedFigures:
    """Both drafts' figures and their paired differences over one group of prompts."""

    prompts: int
    source: DraftFigures
    candidate: DraftFigures
    acceptance_rate: Difference
    mean_acceptance_length: Difference
    position_rates: tuple[Difference, ...]

    def difference(self, figure: str) -> Difference:
        """The :class:`Difference` of ``figure`` (one of :data:`FIGURES`)."""
        return {"acceptance_rate": self.acceptance_rate, "mean_acceptance_length": self.mean_acceptance_length}[figure]

    def to_dict(self) -> dict[str, Any]:
        return {
            "prompts": self.prompts,
            "source": self.source.to_dict(),
            "candidate": self.candidate.to_dict(),
            "difference": {
                "acceptance_rate": self.acceptance_rate.to_dict(),
                "mean_acceptance_length": self.mean_acceptance_length.to_dict(),
                "position_acceptance_rates": [
                    {"position": i, **d.to_dict()} for i, d in enumerate(self.position_rates)
                ],
            },
        }


# -- the paired bootstrap ------------------------------------------------------------------------


def _columns(deltas: Sequence[CounterDelta], width: int) -> np.ndarray:
    """Per prompt: accepted, draft tokens, drafts, then accepted at each position (zero past a delta's width)."""
    out = np.zeros((len(deltas), 3 + width), dtype=np.int64)
    for i, d in enumerate(deltas):
        out[i, 0:3] = (d.accepted_tokens, d.draft_tokens, d.drafts)
        out[i, 3:3 + len(d.accepted_per_pos)] = d.accepted_per_pos
    return out


def _relative(candidate: np.ndarray, source: np.ndarray) -> np.ndarray:
    """:func:`relative` per resample."""
    with np.errstate(divide="ignore", invalid="ignore"):
        undefined = np.isnan(candidate) | np.isnan(source) | (source == 0)
        return np.where(undefined, math.nan, (candidate - source) / np.where(source == 0, 1.0, source))


def paired_figures(samples: Sequence[PairedSample], boot: Bootstrap, counts: np.ndarray | None = None) -> PairedFigures:
    """Both drafts' figures and their differences over ``samples``, from one set of paired resamples.

    Args:
        samples: the prompts, each with both drafts' counter deltas.
        boot: resamples, confidence and seed.
        counts: the resampled multiplicities (rows of :func:`resample_counts` over these samples);
            drawn from ``boot`` when not given.

    Raises:
        ValueError: ``counts`` does not have one column per sample.
    """
    n = len(samples)
    if counts is None:
        counts = resample_counts(n, boot)
    if counts.shape[1] != n:
        raise ValueError(f"{counts.shape[1]} resample columns for {n} samples")
    width = max((max(len(s.source.accepted_per_pos), len(s.candidate.accepted_per_pos)) for s in samples), default=0)
    src_cols, cand_cols = (_columns([getattr(s, side) for s in samples], width) for side in ("source", "candidate"))
    # Exact integer sums per resample: (resamples x n) @ (n x columns).
    src_sums, cand_sums = counts @ src_cols, counts @ cand_cols
    src_tot, cand_tot = add(s.source for s in samples), add(s.candidate for s in samples)
    src_all, cand_all = src_cols.sum(axis=0), cand_cols.sum(axis=0)

    # Each figure on every resample at once (a Python call per resample made a decision cost a second).
    def rate(sums: np.ndarray) -> np.ndarray:
        return ratio(sums[..., 0], sums[..., 1])

    def length(sums: np.ndarray) -> np.ndarray:
        return 1.0 + ratio(sums[..., 0], sums[..., 2])

    def pos(i: int) -> Callable[[np.ndarray], np.ndarray]:
        return lambda sums: ratio(sums[..., 3 + i], sums[..., 2])

    def point(fn: Callable[[np.ndarray], np.ndarray], totals: np.ndarray) -> float:
        return float(fn(totals[np.newaxis, :])[0])

    def draft(sums: np.ndarray, total: np.ndarray, tot: CounterDelta) -> DraftFigures:
        return DraftFigures(
            totals=tot,
            acceptance_rate=bootstrap_interval(point(rate, total), rate(sums), boot, 0.0),
            mean_acceptance_length=bootstrap_interval(point(length, total), length(sums), boot, 1.0),
            position_rates=tuple(bootstrap_interval(point(pos(i), total), pos(i)(sums), boot, 0.0)
                                 for i in range(width)),
        )

    def diff(fn: Callable[[np.ndarray], np.ndarray], worst_cand: float) -> Difference:
        cand_values = fn(cand_sums)
        # A candidate that drafted nothing is the worst it can be.
        cand_values = np.where(np.isnan(cand_values), worst_cand, cand_values)
        src_values = fn(src_sums)
        abs_point = point(fn, cand_all) - point(fn, src_all)
        rel_point = relative(point(fn, cand_all), point(fn, src_all))
        return Difference(
            absolute=bootstrap_interval(abs_point, cand_values - src_values, boot, -math.inf),
            relative=bootstrap_interval(rel_point, _relative(cand_values, src_values), boot, WORST_RELATIVE),
        )

    return PairedFigures(
        prompts=n,
        source=draft(src_sums, src_all, src_tot),
        candidate=draft(cand_sums, cand_all, cand_tot),
        acceptance_rate=diff(rate, 0.0),
        mean_acceptance_length=diff(length, 1.0),
        position_rates=tuple(diff(pos(i), 0.0) for i in range(width)),
    )


# -- the decision --------------------------------------------------------------------------------


def non_inferiority_findings(fig: PairedFigures, margin: float, where: str) -> list[str]:
    """Why ``fig`` does not show the candidate within ``margin`` of the source (relative), or nothing.

    Passes only if, for the acceptance rate and for the mean acceptance length, the lower
    bound of the relative difference's interval is strictly above ``-margin``; a NaN bound
    (nothing to compare) fails.

    Args:
        fig: the paired figures of one group of prompts.
        margin: the largest relative loss the profile accepts (0.02 = 2%).
        where: what the group is, for the messages ("overall", "category 'math'", ...).
    """
    out = []
    if fig.prompts == 0:
        return [f"{where}: no prompt was measured with both drafts"]
    if fig.source.totals.draft_tokens == 0:
        out.append(f"{where}: the source draft drafted no token over {fig.prompts} prompt(s): there is nothing "
                   "to compare the candidate with")
    if fig.candidate.totals.draft_tokens == 0:
        out.append(f"{where}: the candidate drafted no token over {fig.prompts} prompt(s): nothing was speculated")
    pct = round(fig.acceptance_rate.relative.confidence * 100)
    for name in FIGURES:
        rel = fig.difference(name).relative
        if math.isnan(rel.low) or rel.low <= -margin:
            src = getattr(fig.source, name).estimate
            cand = getattr(fig.candidate, name).estimate
            out.append(
                f"{where}: {FIGURE_WORDS[name]} of the candidate relative to the source draft: the lower bound "
                f"{_pct(rel.low)} of the {pct}% interval is not above -{margin:.1%} (source {src:.3f}, candidate "
                f"{cand:.3f}, difference {_pct(rel.estimate)} [{_pct(rel.low)}, {_pct(rel.high)}], "
                f"{fig.prompts} prompts)"
            )
    return out


def _pct(x: float) -> str:
    return "n/a" if math.isnan(x) else f"{x:+.2%}"


# -- groups, averages, losers --------------------------------------------------------------------


def group_label(sample: PairedSample, sets: int) -> str:
    """A category's name in the evidence: the category alone for one prompt set, ``set/category`` for several."""
    return sample.category if sets <= 1 else f"{sample.prompt_set}/{sample.category}"


def grouped(samples: Sequence[PairedSample], key: Callable[[PairedSample], str]) -> dict[str, list[PairedSample]]:
    out: dict[str, list[PairedSample]] = {}
    for s in samples:
        out.setdefault(key(s), []).append(s)
    return dict(sorted(out.items()))


def _point(samples: Sequence[PairedSample]) -> dict[str, float]:
    src, cand = add(s.source for s in samples), add(s.candidate for s in samples)
    rs, rc = rate_of(src.accepted_tokens, src.draft_tokens), rate_of(cand.accepted_tokens, cand.draft_tokens)
    ls, lc = length_of(src.accepted_tokens, src.drafts), length_of(cand.accepted_tokens, cand.drafts)
    return {"source_acceptance_rate": rs, "candidate_acceptance_rate": rc,
            "relative_acceptance_rate": relative(rc, rs),
            "source_mean_acceptance_length": ls, "candidate_mean_acceptance_length": lc,
            "relative_mean_acceptance_length": relative(lc, ls)}


def averages(samples: Sequence[PairedSample], key: Callable[[PairedSample], str]) -> dict[str, dict[str, float]]:
    """Micro (pooled over every prompt) and macro (mean of each group's pooled figure) averages.

    As SpecForge reports them: the micro average weighs every drafted token alike, so a
    large group dominates it; the macro average weighs every group alike, so a small
    group that collapsed still shows. A group whose figure is undefined makes the macro
    average undefined (NaN), never silently dropped.
    """
    groups = grouped(samples, key)
    micro = _point(samples)
    points = [_point(g) for g in groups.values()]
    macro = {}
    for name in micro:
        values = [p[name] for p in points]
        macro[name] = math.nan if not values or any(math.isnan(v) for v in values) else math.fsum(values) / len(values)
    return {"micro": micro, "macro": macro}


def prompt_rate_difference(s: PairedSample) -> float:
    """The candidate's acceptance rate minus the source's on one prompt (a candidate that drafted nothing counts 0)."""
    src = rate_of(s.source.accepted_tokens, s.source.draft_tokens)
    cand = rate_of(s.candidate.accepted_tokens, s.candidate.draft_tokens)
    return (0.0 if math.isnan(cand) else cand) - src


def biggest_losses(samples: Sequence[PairedSample], count: int = LOSERS_SHOWN) -> list[dict[str, Any]]:
    """The prompts on which the candidate lost the most acceptance rate against the source, worst first.

    Ties are broken by the accepted tokens lost, then by the prompt id, so the list is the
    same on every run. Prompts the source drafted nothing on have no rate to lose and are left out.
    """
    rows = [(prompt_rate_difference(s), s.accepted_difference, s.prompt_id, s) for s in samples]
    rows = [r for r in rows if not math.isnan(r[0]) and r[0] < 0]
    rows.sort(key=lambda r: (r[0], r[1], r[2]))
    return [{"prompt": s.prompt_id, "prompt_set": s.prompt_set, "category": s.category,
             "rate_difference": diff, "accepted_difference": acc, "drafts_difference": s.drafts_difference,
             "source_acceptance_rate": rate_of(s.source.accepted_tokens, s.source.draft_tokens),
             "candidate_acceptance_rate": rate_of(s.candidate.accepted_tokens, s.candidate.draft_tokens)}
            for diff, acc, _, s in rows[:count]]


# -- one concurrency level, decided --------------------------------------------------------------


@dataclass(frozen=True)
class PairedDecision:
    """The comparison at one concurrency: figures overall, per category and per set, and the findings."""

    concurrency: int
    overall: PairedFigures | None
    categories: Mapping[str, PairedFigures]
    sets: Mapping[str, PairedFigures]
    findings: tuple[str, ...]
    losers: tuple[dict[str, Any], ...]
    averages: Mapping[str, Any]

    @property
    def ok(self) -> bool:
        return not self.findings

    def to_dict(self) -> dict[str, Any]:
        return {
            "concurrency": self.concurrency,
            "passed": self.ok,
            "overall": self.overall.to_dict() if self.overall is not None else None,
            "categories": {k: v.to_dict() for k, v in self.categories.items()},
            "prompt_sets": {k: v.to_dict() for k, v in self.sets.items()},
            "averages": dict(self.averages),
            "biggest_losses": list(self.losers),
            "findings": list(self.findings),
        }


def decide(
    samples: Sequence[PairedSample], *, concurrency: int, margin: float, boot: Bootstrap,
    expected_categories: Sequence[str] = (), min_prompts: int = 1, category_margin: float | None = None,
) -> PairedDecision:
    """The non-inferiority decision at one concurrency: overall and in every category.

    Args:
        samples: the prompts measured with both drafts at this concurrency.
        concurrency: requests in flight while they were measured (1 = one at a time).
        margin: the largest relative loss accepted, as a fraction of the source's figure.
        category_margin: the largest relative loss accepted in one category (``margin`` when None): a
            category's few prompts resolve a loss less finely than all of them together
            (docs/operating-characteristic.md).
        boot: resamples, confidence and seed (each group is resampled with the same seed).
        expected_categories: group labels (see :func:`group_label`) that must have prompts; one without
            any is a finding, never a pass by absence.
        min_prompts: fewer paired prompts than this is a finding.
    """
    where = f"at concurrency {concurrency}"
    findings: list[str] = []
    if len(samples) < min_prompts:
        findings.append(f"{where}: {len(samples)} prompt(s) measured with both drafts, the profile requires at "
                        f"least {min_prompts}")
    sets = len({s.prompt_set for s in samples})
    if not samples:
        findings.append(f"{where}: no prompt was measured with both drafts")
        for name in expected_categories:
            findings.append(f"{where}: category {name!r}: no prompt of it was measured")
        return PairedDecision(concurrency, None, {}, {}, tuple(findings), (), {})
    for s in samples:
        # A ratio of sums leaves out a prompt with no draft, so a candidate that stopped
        # speculating on some prompts would be judged on the others alone.
        if s.candidate.draft_tokens == 0 and s.source.draft_tokens > 0:
            findings.append(f"{where}: prompt {s.prompt_id}: the candidate drafted no token where the source "
                            f"drafted {s.source.draft_tokens}: it stopped speculating")
    overall = paired_figures(samples, boot)
    findings += non_inferiority_findings(overall, margin, f"{where}, overall")
    by_category = grouped(samples, lambda s: group_label(s, sets))
    categories = {}
    for name in sorted(set(by_category) | set(expected_categories)):
        members = by_category.get(name, [])
        if not members:
            findings.append(f"{where}: category {name!r}: no prompt of it was measured")
            continue
        categories[name] = fig = paired_figures(members, boot)
        findings += non_inferiority_findings(fig, margin if category_margin is None else category_margin,
                                             f"{where}, category {name!r}")
    by_set = grouped(samples, lambda s: s.prompt_set)
    per_set = {name: paired_figures(members, boot) for name, members in by_set.items()} if sets > 1 else {}
    avg: dict[str, Any] = {
        "overall": averages(samples, lambda s: s.prompt_set),
        "prompt_sets": {name: averages(members, lambda s: s.category) for name, members in by_set.items()},
        "note": "micro: pooled over every prompt; macro: the mean of each group's pooled figure "
                "(overall: over prompt sets; per set: over its categories)",
    }
    return PairedDecision(concurrency, overall, categories, per_set, tuple(findings),
                          tuple(biggest_losses(samples)), avg)


@dataclass(frozen=True)
class ConcurrencyRun:
    """What was measured at one concurrency: the paired prompts, and a line per prompt that could not be paired."""

    concurrency: int
    samples: Sequence[PairedSample]
    failures: Sequence[str]
    measured: Mapping[str, Any]  # how it was measured (wall times, where the figures came from)
    # False where a sample is a batch of prompts (no per-request metrics under load): no category is decided.
    per_category: bool = True
    # The least number of samples, where it is not the profile's min_prompts (batches: an interval needs two).
    min_prompts: int | None = None


def paired_evidence(
    runs: Sequence[ConcurrencyRun], *, margin: float, boot: Bootstrap, expected_categories: Sequence[str] = (),
    min_prompts: int = 1, extra_measured: Mapping[str, Any] | None = None, category_margin: float | None = None,
) -> tuple[Evidence, list[PairedDecision]]:
    """The paired level's evidence: a decision per concurrency, each failure naming where it happened.

    Args:
        runs: one per concurrency the profile asks for (1 = one request at a time).
        margin: the largest relative loss accepted.
        boot: resamples, confidence and seed.
        expected_categories: group labels every concurrency must have prompts of.
        category_margin: the largest relative loss accepted in one category (``margin`` when None).
        min_prompts: the least number of paired prompts at each concurrency.
        extra_measured: what else the evidence records (prompt sets, servers, requests).
    """
    ev = Evidence("the checkpoint could not be compared with its source draft")
    in_category = margin if category_margin is None else category_margin
    categories_rule = ("overall and in every category" if in_category == margin
                       else f"overall, and above -{in_category:.1%} in every category")
    ev.expected.update(
        margin=margin, category_margin=in_category, concurrency=[r.concurrency for r in runs],
        min_prompts=min_prompts,
        rule=(f"at every concurrency: the lower bound of the {round(boot.confidence * 100)}% paired-bootstrap "
              f"interval of (checkpoint - source) / source is above -{margin:.1%} {categories_rule}, for the "
              "acceptance rate and for the mean acceptance length"),
    )
    ev.measured["bootstrap"] = {**boot.to_dict(), "paired": "both drafts' counts of a drawn prompt are kept together"}
    ev.measured.update(extra_measured or {})
    if not runs:
        ev.add("no concurrency was measured")
        return ev, []
    decisions = []
    per_concurrency = {}
    for run in runs:
        for failure in run.failures:
            ev.add(f"at concurrency {run.concurrency}: {failure}")
        d = decide(run.samples, concurrency=run.concurrency, margin=margin, boot=boot, category_margin=category_margin,
                   expected_categories=expected_categories if run.per_category else (),
                   min_prompts=min_prompts if run.min_prompts is None else run.min_prompts)
        decisions.append(d)
        for finding in d.findings:
            ev.add(finding)
        per_concurrency[str(run.concurrency)] = {
            **d.to_dict(), "measured": dict(run.measured), "failures": list(run.failures),
            "per_prompt": [s.to_dict() for s in run.samples],
        }
    ev.measured["concurrency"] = per_concurrency
    parts = []
    for d in decisions:
        if d.overall is None:
            parts.append(f"concurrency {d.concurrency}: not measured")
            continue
        rate = d.overall.acceptance_rate
        parts.append(f"concurrency {d.concurrency}: acceptance rate {d.overall.source.acceptance_rate.estimate:.3f} "
                     f"-> {d.overall.candidate.acceptance_rate.estimate:.3f}, {_pct(rate.relative.estimate)} "
                     f"[{_pct(rate.relative.low)}, {_pct(rate.relative.high)}]")
    ev.summary = (f"checkpoint against its source draft, margin -{margin:.1%} relative: " + "; ".join(parts))
    return ev, decisions


__all__ = [
    "FIGURES",
    "ConcurrencyRun",
    "Difference",
    "DraftFigures",
    "PairedDecision",
    "PairedFigures",
    "PairedSample",
    "averages",
    "biggest_losses",
    "decide",
    "group_label",
    "length_of",
    "non_inferiority_findings",
    "paired_evidence",
    "paired_figures",
    "rate_of",
    "relative",
    "resample_counts",
]
