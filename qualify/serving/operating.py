"""The paired level's operating characteristic: how often its rule errs, by design (pure: a design in, rates out).

For a profile's design (its prompts and their categories, concurrencies, confidence, resamples, margins) and a
per-prompt spread, this estimates by simulation how often a draft with **no** real loss fails each criterion
of the paired level, and how often a draft with a real loss passes it. Every simulated run is decided by the
harness's own code (:func:`qualify.serving.paired.decide` and
:func:`~qualify.serving.paired.non_inferiority_findings`, the profile's bootstrap with its seed and resamples),
so the rates are those of the rule as it runs, not of a textbook model of it.

The simulated data: every prompt's source draft accepts ``base_rate`` of its draft tokens over
``SOURCE_DRAFTS`` drafts of ``PROPOSAL_LENGTH`` tokens (large, so that rounding to whole tokens adds no
spread); the candidate's rate on that prompt is the source's times ``1 + d``, with ``d`` drawn from a normal
distribution of mean ``-loss`` and standard deviation ``spread`` (the per-prompt relative difference of the
acceptance rate, as a run measures it); the candidate's drafts follow from the same number of tokens
generated. Each prompt keeps its ``d`` at every concurrency (greedy decoding repeats a prompt's behaviour),
and a concurrency above 1 is measured in consecutive batches of that many prompts, as the level measures it
without per-request metrics. Prompts are weighted alike; a measured spread from prompts of very different
lengths understates the estimate's spread a little.

Draws use only ``random.Random.random()`` (whose sequence Python guarantees for a seed) through
:meth:`statistics.NormalDist.inv_cdf`, so the same design gives the same rates on every machine. Each rate
comes with its trials and Monte-Carlo standard error, and a target counts as met only when the one-sided 95%
Wilson bound of the error rate is within it.
"""

from __future__ import annotations

import math
import random
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from qualify.serving.acceptance_stats import Bootstrap
from qualify.serving.counters import CounterDelta
from qualify.serving.paired import PairedDecision, PairedSample, decide, non_inferiority_findings, rate_of, relative
from qualify.serving.specdecode import AcceptanceMeasurement, AcceptanceThresholds, RequestSample, acceptance_evidence

#: Drafts per simulated prompt: enough that rounding accepted tokens to whole numbers adds < 0.01% of spread.
SOURCE_DRAFTS = 10_000
PROPOSAL_LENGTH = 7
#: The source's acceptance rate per draft token in the simulation (the CPU fixture's measured 0.252): the rate's
#: relative difference does not depend on it; the mean acceptance length's moves by 7r / (1 + 7r) of it.
BASE_RATE = 0.25
#: The error-rate targets: a draft with no loss passes the level, and one that lost twice the margin everywhere
#: fails it, each with at least 99%; a loss of CATEGORY_LOSS confined to the category with the fewest prompts
#: is caught with at least 90%.
PASS_TARGET = 0.99
FAIL_TARGET = 0.99
CATEGORY_CATCH_TARGET = 0.90
#: The loss confined to one category the level promises to catch, whatever the profile's category margin.
#: Confined to 10 prompts of 244 it moves the overall figure by 0.3 points, which the overall bound cannot see;
#: 7% is the smallest loss a category of 10 prompts separates from the measured spreads (2.56% to 3.6%) while a
#: draft with no loss still passes every category with >= 99% (docs/operating-characteristic.md gives the rates).
CATEGORY_LOSS = 0.07
#: The one-sided confidence of the Monte-Carlo bound a target is checked with.
MC_Z = 1.6448536269514722
DEFAULT_TRIALS = 400
DEFAULT_SEED = 0
#: The level as one criterion (every concurrency, overall and every category, both figures).
LEVEL = "paired level"


@dataclass(frozen=True)
class PairedDesign:
    """What decides the paired level's error rates: the prompts and how their bounds are judged."""

    prompt_categories: tuple[str, ...]  # one group label per prompt, in the order they are sent
    concurrency: tuple[int, ...]
    margin: float
    category_margin: float
    boot: Bootstrap
    min_prompts: int

    def __post_init__(self) -> None:
        if not self.prompt_categories:
            raise ValueError("a paired design needs at least one prompt")
        if not self.concurrency or min(self.concurrency) < 1:
            raise ValueError(f"concurrency must be one or more levels >= 1, not {self.concurrency}")

    @property
    def categories(self) -> dict[str, int]:
        """Prompts per category label, in label order."""
        out: dict[str, int] = {}
        for label in self.prompt_categories:
            out[label] = out.get(label, 0) + 1
        return dict(sorted(out.items()))

    @property
    def smallest_category(self) -> str:
        """The category with the fewest prompts (the first by name among equals): the hardest to judge."""
        return min(self.categories.items(), key=lambda kv: (kv[1], kv[0]))[0]

    def to_dict(self) -> dict[str, Any]:
        return {"prompts": len(self.prompt_categories), "categories": self.categories,
                "concurrency": list(self.concurrency), "margin": self.margin, "category_margin": self.category_margin,
                "confidence": self.boot.confidence, "bootstrap_resamples": self.boot.resamples,
                "bootstrap_seed": self.boot.seed, "min_prompts": self.min_prompts,
                "batches": {str(c): math.ceil(len(self.prompt_categories) / c) for c in self.concurrency if c > 1}}


@dataclass(frozen=True)
class Scenario:
    """A true loss, everywhere (``category`` None) or confined to one category, and what the level should say."""

    name: str
    loss: float  # the true mean relative loss of the acceptance rate (0.04 = 4%)
    category: str | None
    should_pass: bool

    @property
    def description(self) -> str:
        where = "on every prompt" if self.category is None else f"confined to category {self.category!r}"
        return f"a true loss of {self.loss:.1%} {where}"


@dataclass(frozen=True)
class Rate:
    """How often a criterion said the wrong thing, over ``trials`` simulated runs."""

    criterion: str
    wrong: int
    trials: int

    @property
    def probability(self) -> float:
        return self.wrong / self.trials

    @property
    def mc_error(self) -> float:
        """The Monte-Carlo standard error of :attr:`probability`."""
        p = self.probability
        return math.sqrt(p * (1.0 - p) / self.trials)

    @property
    def upper(self) -> float:
        """The one-sided 95% Wilson upper bound of the error probability (0 errors still bound it above 0)."""
        n, p, z = self.trials, self.probability, MC_Z
        centre = p + z * z / (2 * n)
        half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
        return min(1.0, (centre + half) / (1 + z * z / n))

    def to_dict(self) -> dict[str, Any]:
        return {"criterion": self.criterion, "wrong": self.wrong, "trials": self.trials,
                "probability": self.probability, "mc_error": self.mc_error, "upper_95": self.upper}


@dataclass(frozen=True)
class ScenarioRates:
    """One scenario's error rate at every criterion: failing a good draft, or passing a lossy one."""

    scenario: Scenario
    rates: tuple[Rate, ...]  # the level first, then each criterion

    @property
    def level(self) -> Rate:
        return self.rates[0]

    def to_dict(self) -> dict[str, Any]:
        wrong = "fails" if self.scenario.should_pass else "passes"
        return {"scenario": self.scenario.name, "description": self.scenario.description,
                "loss": self.scenario.loss, "category": self.scenario.category,
                "error": f"the probability that the criterion {wrong} such a draft",
                "rates": [r.to_dict() for r in self.rates]}


@dataclass(frozen=True)
class Target:
    """An error-rate target and whether the simulated rate meets it (its 95% bound within the target)."""

    scenario: str
    criterion: str
    wanted: float  # the least probability of the right answer
    rate: Rate

    @property
    def met(self) -> bool:
        return 1.0 - self.rate.upper >= self.wanted

    def line(self) -> str:
        right = 1.0 - self.rate.probability
        return (f"{self.scenario}: {self.criterion} right {right:.2%} (+/- {self.rate.mc_error:.2%}, "
                f"{self.rate.trials} trials; 95% bound {1.0 - self.rate.upper:.2%}), wanted >= {self.wanted:.0%}: "
                f"{'met' if self.met else 'NOT MET'}")

    def to_dict(self) -> dict[str, Any]:
        return {"scenario": self.scenario, "criterion": self.criterion, "wanted": self.wanted, "met": self.met,
                "right": 1.0 - self.rate.probability, "right_95_bound": 1.0 - self.rate.upper}


@dataclass(frozen=True)
class OperatingCharacteristic:
    """The paired level's error rates for one design at one per-prompt spread."""

    design: PairedDesign
    spread: float
    base_rate: float
    trials: int
    seed: int
    scenarios: tuple[ScenarioRates, ...]

    def scenario(self, name: str) -> ScenarioRates:
        return next(s for s in self.scenarios if s.scenario.name == name)

    @property
    def targets(self) -> tuple[Target, ...]:
        no_loss, overall, category = (self.scenario(n) for n in ("no loss", "twice the margin", "category loss"))
        return (Target(no_loss.scenario.name, LEVEL, PASS_TARGET, no_loss.level),
                Target(overall.scenario.name, LEVEL, FAIL_TARGET, overall.level),
                Target(category.scenario.name, LEVEL, CATEGORY_CATCH_TARGET, category.level))

    @property
    def met(self) -> bool:
        return all(t.met for t in self.targets)

    def to_dict(self) -> dict[str, Any]:
        return {"design": self.design.to_dict(), "spread": self.spread, "base_rate": self.base_rate,
                "trials": self.trials, "seed": self.seed, "model": MODEL,
                "scenarios": [s.to_dict() for s in self.scenarios],
                "targets": [t.to_dict() for t in self.targets], "targets_met": self.met}


MODEL = ("per prompt, the candidate's acceptance rate is the source's times 1 + d, d normal with the scenario's "
         "mean and the stated spread, the same d at every concurrency; batches of the concurrency above 1; "
         "each simulated run decided by qualify.serving.paired.decide with the profile's bootstrap")


def scenarios_for(design: PairedDesign) -> tuple[Scenario, ...]:
    """No loss; twice the margin on every prompt; :data:`CATEGORY_LOSS` in the smallest category alone."""
    return (Scenario("no loss", 0.0, None, True),
            Scenario("twice the margin", 2.0 * design.margin, None, False),
            Scenario("category loss", CATEGORY_LOSS, design.smallest_category, False))


def _prompt_delta(rate: float, base_rate: float) -> CounterDelta:
    """One prompt's counters at acceptance ``rate``, its drafts set by as many tokens as the source's."""
    tokens = SOURCE_DRAFTS * (1.0 + PROPOSAL_LENGTH * base_rate)
    drafts = max(1, round(tokens / (1.0 + PROPOSAL_LENGTH * rate)))
    return CounterDelta(drafts=drafts, draft_tokens=PROPOSAL_LENGTH * drafts,
                        accepted_tokens=round(rate * PROPOSAL_LENGTH * drafts), accepted_per_pos=())


def simulate_samples(design: PairedDesign, scenario: Scenario, spread: float, rng: random.Random,
                     base_rate: float = BASE_RATE) -> list[PairedSample]:
    """One simulated run's prompts, both drafts' counters each (see the module's docstring for the model)."""
    normal = statistics.NormalDist()
    source = _prompt_delta(base_rate, base_rate)
    out = []
    for i, label in enumerate(design.prompt_categories):
        loss = scenario.loss if scenario.category in (None, label) else 0.0
        # 1 - random() lies in (0, 1]: inv_cdf refuses 0.
        d = -loss + spread * normal.inv_cdf(1.0 - rng.random())
        rate = min(1.0, max(0.0, base_rate * (1.0 + d)))
        out.append(PairedSample(f"p{i:04d}", "sim", label, source, _prompt_delta(rate, base_rate)))
    return out


def batches(samples: Sequence[PairedSample], size: int) -> list[PairedSample]:
    """Consecutive batches of ``size`` prompts as the level pairs them without per-request metrics."""
    out = []
    for start in range(0, len(samples), size):
        group = samples[start:start + size]
        bid = f"batch-{start // size + 1:03d}"
        out.append(PairedSample(bid, "all", "batch", _sum(s.source for s in group), _sum(s.candidate for s in group)))
    return out


def _sum(deltas: Any) -> CounterDelta:
    items = list(deltas)
    return CounterDelta(drafts=sum(d.drafts for d in items), draft_tokens=sum(d.draft_tokens for d in items),
                        accepted_tokens=sum(d.accepted_tokens for d in items), accepted_per_pos=())


def decide_run(design: PairedDesign, samples: Sequence[PairedSample]) -> dict[int, PairedDecision]:
    """Every concurrency of ``design`` decided as the level decides it (categories at batch 1 only)."""
    out = {}
    for c in design.concurrency:
        if c == 1:
            out[c] = decide(samples, concurrency=1, margin=design.margin, boot=design.boot,
                            expected_categories=tuple(design.categories), min_prompts=design.min_prompts,
                            category_margin=design.category_margin)
        else:
            out[c] = decide(batches(samples, c), concurrency=c, margin=design.margin, boot=design.boot,
                            min_prompts=2, category_margin=design.category_margin)
    return out


def criteria_failed(design: PairedDesign, decisions: Mapping[int, PairedDecision]) -> dict[str, bool]:
    """Whether each criterion failed: the level, each concurrency overall, each category at batch 1, any category."""
    out = {LEVEL: not all(d.ok for d in decisions.values())}
    for c, d in decisions.items():
        out[f"concurrency {c}, overall"] = d.overall is None or bool(
            non_inferiority_findings(d.overall, design.margin, "overall"))
    if 1 in decisions:
        cats = decisions[1].categories
        failed = {name: name not in cats or bool(non_inferiority_findings(cats[name], design.category_margin, name))
                  for name in design.categories}
        out["concurrency 1, any category"] = any(failed.values())
        out.update({f"concurrency 1, category {name!r}": f for name, f in failed.items()})
    return out


def operating_characteristic(design: PairedDesign, spread: float, *, trials: int = DEFAULT_TRIALS,
                             seed: int = DEFAULT_SEED, base_rate: float = BASE_RATE) -> OperatingCharacteristic:
    """The paired level's error rates at ``spread`` for the three scenarios of :func:`scenarios_for`.

    Raises:
        ValueError: a spread that is not a positive fraction, or fewer than one trial.
    """
    if not 0.0 < spread < 1.0:
        raise ValueError(f"the per-prompt spread must be a fraction in (0, 1), not {spread!r}")
    if trials < 1:
        raise ValueError(f"trials must be >= 1, not {trials}")
    results = []
    for k, scenario in enumerate(scenarios_for(design)):
        rng = random.Random(seed * 1000 + k)
        wrong: dict[str, int] = {}
        for _ in range(trials):
            failed = criteria_failed(design, decide_run(design, simulate_samples(design, scenario, spread, rng,
                                                                                 base_rate)))
            for criterion, f in failed.items():
                wrong[criterion] = wrong.get(criterion, 0) + (f if scenario.should_pass else not f)
        results.append(ScenarioRates(scenario, tuple(Rate(c, n, trials) for c, n in wrong.items())))
    return OperatingCharacteristic(design, spread, base_rate, trials, seed, tuple(results))


# -- the acceptance floors ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class AcceptanceDesign:
    """What decides the acceptance gate's error rates: its prompts, floors and bootstrap."""

    prompt_categories: tuple[str, ...]  # one category per prompt, in the order they are sent
    thresholds: AcceptanceThresholds
    boot: Bootstrap

    def __post_init__(self) -> None:
        if not self.prompt_categories:
            raise ValueError("an acceptance design needs at least one prompt")

    @property
    def floor_rate(self) -> float:
        """The floors as one acceptance rate: a full block of PROPOSAL_LENGTH has length 1 + 7 x rate."""
        t = self.thresholds
        return max(t.min_acceptance_rate, (t.min_mean_acceptance_length - 1.0) / PROPOSAL_LENGTH)

    def to_dict(self) -> dict[str, Any]:
        t = self.thresholds
        return {"prompts": len(self.prompt_categories), "min_acceptance_rate": t.min_acceptance_rate,
                "min_mean_acceptance_length": t.min_mean_acceptance_length,
                "min_category_acceptance_rate": t.min_category_acceptance_rate, "min_prompts": t.min_requests,
                "floor_rate": self.floor_rate, "confidence": self.boot.confidence,
                "bootstrap_resamples": self.boot.resamples}


@dataclass(frozen=True)
class AcceptanceCharacteristic:
    """The acceptance gate's error rates for a draft like the pilot, and for one that lost twice the margin."""

    design: AcceptanceDesign
    pilot_rate: float  # the mean of the per-prompt rates (the gate's ratio of sums weighs slower prompts more)
    spread: float  # the standard deviation of the per-prompt acceptance rate (absolute)
    trials: int
    seed: int
    no_loss: tuple[Rate, ...]  # how often each criterion fails a draft at the pilot rate
    twice_the_margin: tuple[Rate, ...]  # how often each criterion passes one at pilot - 2 x (pilot - floor)

    @property
    def margin(self) -> float:
        return self.pilot_rate - self.design.floor_rate

    def to_dict(self) -> dict[str, Any]:
        return {"design": self.design.to_dict(), "pilot_rate": self.pilot_rate, "spread": self.spread,
                "margin": self.margin, "trials": self.trials, "seed": self.seed,
                "no_loss": [r.to_dict() for r in self.no_loss],
                "twice_the_margin": [r.to_dict() for r in self.twice_the_margin]}


ACCEPTANCE_LEVEL = "acceptance level"


def acceptance_samples(design: AcceptanceDesign, rate: float, spread: float,
                       rng: random.Random) -> list[RequestSample]:
    """One simulated acceptance run: each prompt's rate normal around ``rate`` with ``spread`` (absolute)."""
    normal = statistics.NormalDist()
    out = []
    for i, category in enumerate(design.prompt_categories):
        r = min(1.0, max(0.0, rate + spread * normal.inv_cdf(1.0 - rng.random())))
        out.append(RequestSample(f"p{i:04d}", category, _prompt_delta(r, BASE_RATE)))
    return out


def acceptance_failed(design: AcceptanceDesign, samples: Sequence[RequestSample]) -> dict[str, bool]:
    """Each floor's verdict, from the gate's own findings (qualify.serving.specdecode.acceptance_evidence)."""
    measurement = AcceptanceMeasurement(list(samples), [], tuple(sorted(set(design.prompt_categories))))
    ev, _ = acceptance_evidence(measurement, design.thresholds, design.boot)
    said = [f.message for f in ev.findings]
    return {ACCEPTANCE_LEVEL: not ev.ok,
            "acceptance rate floor": any(m.startswith("acceptance rate:") for m in said),
            "mean acceptance length floor": any(m.startswith("mean acceptance length:") for m in said),
            "category floor": any(m.startswith("category ") for m in said)}


def acceptance_characteristic(design: AcceptanceDesign, pilot_rate: float, spread: float, *,
                              trials: int = DEFAULT_TRIALS, seed: int = DEFAULT_SEED) -> AcceptanceCharacteristic:
    """How often the floors fail a draft at ``pilot_rate``, and pass one that lost twice the margin to the floor.

    Raises:
        ValueError: a pilot rate not above the floor (a draft like the pilot fails by design), a spread that is
            not a positive fraction, or fewer than one trial.
    """
    if not design.floor_rate < pilot_rate <= 1.0:
        raise ValueError(f"the pilot acceptance rate {pilot_rate!r} is not above the floor {design.floor_rate:.3f}: "
                         "a draft like the pilot fails the floor by design")
    if not 0.0 < spread < 1.0:
        raise ValueError(f"the per-prompt spread must be a fraction in (0, 1), not {spread!r}")
    if trials < 1:
        raise ValueError(f"trials must be >= 1, not {trials}")
    lossy = max(0.0, pilot_rate - 2.0 * (pilot_rate - design.floor_rate))
    results = []
    for k, (rate, should_pass) in enumerate(((pilot_rate, True), (lossy, False))):
        rng = random.Random(seed * 1000 + 100 + k)
        wrong: dict[str, int] = {}
        for _ in range(trials):
            for criterion, f in acceptance_failed(design, acceptance_samples(design, rate, spread, rng)).items():
                wrong[criterion] = wrong.get(criterion, 0) + (f if should_pass else not f)
        results.append(tuple(Rate(c, n, trials) for c, n in wrong.items()))
    return AcceptanceCharacteristic(design, pilot_rate, spread, trials, seed, results[0], results[1])


def render_acceptance(oc: AcceptanceCharacteristic) -> list[str]:
    """The acceptance gate's error rates as text lines."""
    d = oc.design
    lines = [f"acceptance: {len(d.prompt_categories)} prompts; floors rate {d.thresholds.min_acceptance_rate:.3f}, "
             f"length {d.thresholds.min_mean_acceptance_length:.2f} (rate {d.floor_rate:.3f}); pilot rate "
             f"{oc.pilot_rate:.3f}, per-prompt spread {oc.spread:.3f}; {oc.trials} simulated runs each",
             "a draft at the pilot rate: probability the criterion fails"]
    lines += [f"  {r.criterion}: {r.probability:.2%} (+/- {r.mc_error:.2%})" for r in oc.no_loss]
    lines.append(f"a draft at rate {max(0.0, oc.pilot_rate - 2 * oc.margin):.3f} (twice the margin "
                 f"{oc.margin:.3f} under the pilot): probability the criterion passes")
    lines += [f"  {r.criterion}: {r.probability:.2%} (+/- {r.mc_error:.2%})" for r in oc.twice_the_margin]
    return lines


def measured_spread(samples: Sequence[PairedSample]) -> float | None:
    """The sample standard deviation of the per-prompt relative difference of the acceptance rate.

    Prompts either draft drafted nothing on are left out (they have no rate); None with fewer than two left.
    """
    values = []
    for s in samples:
        d = relative(rate_of(s.candidate.accepted_tokens, s.candidate.draft_tokens),
                     rate_of(s.source.accepted_tokens, s.source.draft_tokens))
        if not math.isnan(d):
            values.append(d)
    return statistics.stdev(values) if len(values) >= 2 else None


def render(oc: OperatingCharacteristic) -> list[str]:
    """The operating characteristic as text lines: the design, each scenario's rates, the targets."""
    d = oc.design
    cats = ", ".join(f"{name} {n}" for name, n in d.categories.items())
    lines = [f"design: {len(d.prompt_categories)} prompts ({cats}); concurrency {list(d.concurrency)}; "
             f"margin {d.margin:.1%} overall, {d.category_margin:.1%} per category; "
             f"{d.boot.confidence:.0%} intervals, {d.boot.resamples} resamples",
             f"per-prompt spread {oc.spread:.2%}; {oc.trials} simulated runs per scenario (seed {oc.seed})"]
    for s in oc.scenarios:
        wrong = "fails" if s.scenario.should_pass else "passes"
        lines.append(f"{s.scenario.name} ({s.scenario.description}): probability the criterion {wrong}")
        for r in s.rates:
            lines.append(f"  {r.criterion}: {r.probability:.2%} (+/- {r.mc_error:.2%})")
    lines += ["targets:"] + [f"  {t.line()}" for t in oc.targets]
    return lines


__all__ = [
    "ACCEPTANCE_LEVEL",
    "CATEGORY_LOSS",
    "LEVEL",
    "AcceptanceCharacteristic",
    "AcceptanceDesign",
    "OperatingCharacteristic",
    "PairedDesign",
    "Rate",
    "Scenario",
    "ScenarioRates",
    "Target",
    "acceptance_characteristic",
    "acceptance_failed",
    "acceptance_samples",
    "batches",
    "criteria_failed",
    "decide_run",
    "measured_spread",
    "operating_characteristic",
    "render",
    "render_acceptance",
    "scenarios_for",
    "simulate_samples",
]
