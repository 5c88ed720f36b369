"""The paired level's operating characteristic for a profile, and for a run's own measured spread.

The numerics are :mod:`qualify.serving.operating`'s; this module builds their design from what a profile
states (its prompt sets, read and checked against their digests) or from what a run measured (its paired
prompts), so that ``qualify profile-check`` and the report price the same rule.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from qualify.errors import UsageError
from qualify.profile import PairedSpec, Profile
from qualify.serving.acceptance_stats import Bootstrap
from qualify.serving.counters import CounterDelta
from qualify.serving.operating import (
    DEFAULT_SEED,
    DEFAULT_TRIALS,
    AcceptanceCharacteristic,
    AcceptanceDesign,
    OperatingCharacteristic,
    PairedDesign,
    acceptance_characteristic,
    measured_spread,
    operating_characteristic,
    render,
    render_acceptance,
)
from qualify.serving.paired import PairedSample
from qualify.serving.paired_measure import load_sets
from qualify.serving.prompt_sets import load_prompts
from qualify.serving.specdecode import AcceptanceThresholds

#: Simulated runs per scenario for the report's figures: as many as profile-check's, the fewest that can show a
#: 99% target met (0 errors in 268 bound the rate at 1%); about a minute of a run on 2 cores.
REPORT_TRIALS = DEFAULT_TRIALS


def _design(spec: PairedSpec, labels: Sequence[str]) -> PairedDesign:
    return PairedDesign(tuple(labels), tuple(spec.concurrency), spec.margin, spec.margin_in_category,
                        Bootstrap(spec.bootstrap_resamples, spec.confidence, spec.bootstrap_seed), spec.min_prompts)


def _labels(pairs: Sequence[tuple[str, str]]) -> list[str]:
    """Group labels as the level makes them (qualify.serving.paired.group_label): set/category for several sets."""
    several = len({s for s, _ in pairs}) > 1
    return [f"{s}/{c}" if several else c for s, c in pairs]


def profile_design(profile: Profile) -> PairedDesign:
    """The design ``profile``'s ``[paired]`` states: its prompt sets' categories in the order they are sent.

    Raises:
        UsageError: the profile has no ``[paired]``, or a prompt set is missing, changed or malformed.
    """
    spec = profile.paired
    if spec is None:
        raise UsageError(f"profile {profile.name!r} states no [paired] comparison: it has no paired level to price")
    sets = load_sets(spec)
    return _design(spec, _labels([(name, p.category) for name, p in sets.prompts]))


@dataclass(frozen=True)
class ProfileCheck:
    """A profile's operating characteristic at its pilot spread, or why there is none."""

    profile: str
    oc: OperatingCharacteristic | None
    spread_source: str  # where the spread came from (the profile's pilot_source, or the command line)
    missing: str | None = None  # why no characteristic was computed
    # The acceptance floors' error rates at the [acceptance] pilot, or why there are none (reported, no target).
    acceptance: AcceptanceCharacteristic | None = None
    acceptance_missing: str | None = None


def acceptance_check(profile: Profile, *, trials: int = DEFAULT_TRIALS,
                     seed: int = DEFAULT_SEED) -> tuple[AcceptanceCharacteristic | None, str | None]:
    """The acceptance floors' error rates at the ``[acceptance]`` pilot, or why there are none.

    Raises:
        UsageError: the prompt set is missing, changed or malformed.
    """
    spec = profile.acceptance
    if spec is None:
        return None, f"profile {profile.name!r} states no [acceptance] gate"
    if spec.pilot_rate is None or spec.pilot_spread is None:
        return None, (f"profile {profile.name!r} states no [acceptance] pilot_rate and pilot_spread: the floors' "
                      "error rates cannot be computed, so they are not claimed")
    prompts = load_prompts(spec.prompts, sha256=spec.prompts_sha256)
    design = AcceptanceDesign(
        tuple(p.category for p in prompts.prompts),
        AcceptanceThresholds(spec.min_acceptance_rate, spec.min_mean_acceptance_length,
                             spec.min_category_acceptance_rate, spec.min_prompts),
        Bootstrap(spec.bootstrap_resamples, spec.confidence, spec.bootstrap_seed))
    try:
        return acceptance_characteristic(design, spec.pilot_rate, spec.pilot_spread, trials=trials, seed=seed), None
    except ValueError as exc:
        return None, f"profile {profile.name!r}: {exc}"


def profile_check(profile: Profile, *, spread: float | None = None, trials: int = DEFAULT_TRIALS,
                  seed: int = DEFAULT_SEED) -> ProfileCheck:
    """The paired level's error rates for ``profile`` at ``spread``, else at the pilot spread it states.

    Raises:
        UsageError: as :func:`profile_design`; or ``spread`` or ``trials`` out of range.
    """
    design = profile_design(profile)
    spec = profile.paired
    assert spec is not None  # profile_design refused a profile without one
    if trials < 1:
        raise UsageError(f"qualify profile-check: trials must be >= 1, not {trials}")
    acceptance, acceptance_missing = acceptance_check(profile, trials=trials, seed=seed)
    if spread is None:
        if spec.pilot_spread is None:
            return ProfileCheck(profile.name, None, "", missing=(
                f"profile {profile.name!r} states no [paired] pilot_spread (and its pilot_source): its error rates "
                "cannot be computed, so they are not claimed"), acceptance=acceptance,
                acceptance_missing=acceptance_missing)
        spread, source = spec.pilot_spread, spec.pilot_source or ""
    else:
        source = "given on the command line"
    try:
        oc = operating_characteristic(design, spread, trials=trials, seed=seed)
    except ValueError as exc:
        raise UsageError(f"qualify profile-check: {exc}") from exc
    return ProfileCheck(profile.name, oc, source, acceptance=acceptance, acceptance_missing=acceptance_missing)


def _delta(data: Mapping[str, Any]) -> CounterDelta:
    return CounterDelta(drafts=int(data["drafts"]), draft_tokens=int(data["draft_tokens"]),
                        accepted_tokens=int(data["accepted_tokens"]), accepted_per_pos=())


def measured_characteristic(per_prompt: Sequence[Mapping[str, Any]], spec: PairedSpec, *,
                            trials: int = REPORT_TRIALS) -> dict[str, Any]:
    """The operating characteristic at the spread a run measured at batch 1, for the report.

    ``per_prompt`` is the level's own record of its batch-1 prompts (``PairedSample.to_dict``); the design
    is those prompts' categories with the profile's rule. Without two prompts to measure a spread from,
    the record says so and holds no rates.
    """
    samples = [PairedSample(str(p["prompt"]), str(p["prompt_set"]), str(p["category"]), _delta(p["source"]),
                            _delta(p["candidate"])) for p in per_prompt]
    spread = measured_spread(samples)
    if spread is None or spread <= 0.0 or spread >= 1.0:
        return {"spread": spread, "computed": False,
                "why": "fewer than two prompts with a measured acceptance rate on both drafts, or no spread: the "
                       "error rates at the measured spread cannot be computed"}
    design = _design(spec, _labels([(s.prompt_set, s.category) for s in samples]))
    oc = operating_characteristic(design, spread, trials=trials)
    return {"computed": True, "pilot_spread": spec.pilot_spread, "pilot_source": spec.pilot_source, **oc.to_dict()}


__all__ = ["REPORT_TRIALS", "ProfileCheck", "acceptance_check", "measured_characteristic", "profile_check",
           "profile_design", "render", "render_acceptance"]
