"""Tests for qualify.serving.acceptance_stats: the figures by vLLM's definitions and their seeded bootstrap intervals
(pure, fast)."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from qualify.serving import acceptance_stats as acs
from qualify.serving import counters as ctr
from qualify.serving.acceptance_stats import Bootstrap
from qualify.serving.counters import CounterDelta
from tests.serving.test_counters import delta

# -- figures and intervals -----------------------------------------------------------------


def test_figures_follow_vllm_definitions() -> None:
    d = CounterDelta(drafts=10, draft_tokens=30, accepted_tokens=15, accepted_per_pos=(8, 5, 2))
    assert acs.acceptance_rate(d) == 0.5
    assert acs.mean_acceptance_length(d) == 2.5
    assert acs.position_rates(d) == (0.8, 0.5, 0.2)
    empty = CounterDelta(0, 0, 0, (0, 0, 0))
    assert math.isnan(acs.acceptance_rate(empty)) and math.isnan(acs.mean_acceptance_length(empty))


def test_quantile_interpolates() -> None:
    assert acs.quantile([0.0, 1.0, 2.0, 3.0], 0.5) == 1.5
    assert acs.quantile([5.0], 0.025) == 5.0
    assert math.isnan(acs.quantile([], 0.5))


DELTAS = [delta(10, [9, 7, 5]), delta(8, [4, 2, 1]), delta(12, [12, 11, 10]), delta(9, [6, 3, 1]),
          delta(11, [10, 9, 6]), delta(7, [2, 1, 0])]


def test_interval_contains_the_estimate_and_is_deterministic() -> None:
    a = acs.acceptance_stats(DELTAS, Bootstrap(resamples=500, seed=7))
    b = acs.acceptance_stats(DELTAS, Bootstrap(resamples=500, seed=7))
    assert a == b
    for iv in (a.acceptance_rate, a.mean_acceptance_length, *a.position_rates):
        assert iv.low <= iv.estimate <= iv.high
    assert a.acceptance_rate.low < a.acceptance_rate.high  # the prompts differ: the interval has width
    assert a.acceptance_rate.estimate == acs.acceptance_rate(ctr.add(DELTAS))
    c = acs.acceptance_stats(DELTAS, Bootstrap(resamples=500, seed=8))
    assert c.acceptance_rate.estimate == a.acceptance_rate.estimate
    assert c.acceptance_rate != a.acceptance_rate  # the seed is what fixes the interval


def test_interval_pinned_values() -> None:
    """The bootstrap's exact output for a fixed input: a change in it changes verdicts, so it is pinned."""
    stats = acs.acceptance_stats(DELTAS, Bootstrap(resamples=200, seed=0))
    assert stats.acceptance_rate.estimate == 99 / 171
    assert (round(stats.acceptance_rate.low, 6), round(stats.acceptance_rate.high, 6)) == (0.3665, 0.787879)


def test_identical_prompts_give_a_zero_width_interval() -> None:
    stats = acs.acceptance_stats([delta(10, [8, 6, 4])] * 5, Bootstrap(resamples=100))
    assert stats.acceptance_rate.low == stats.acceptance_rate.estimate == stats.acceptance_rate.high == 0.6


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 20), st.integers(0, 3)), min_size=1, max_size=12), st.integers(0, 2**32))
def test_interval_bounds_the_estimate_for_any_prompts(rows: list[tuple[int, int]], seed: int) -> None:
    deltas = [delta(d, [d] * a + [0] * (3 - a)) for d, a in rows]
    stats = acs.acceptance_stats(deltas, Bootstrap(resamples=50, seed=seed))
    iv = stats.acceptance_rate
    assert 0.0 <= iv.low <= iv.estimate <= iv.high <= 1.0



# -- exactly: pinned by mutation testing (see docs/development.md, Mutation testing) -----------------


def test_bootstrap_settings_are_validated() -> None:
    assert Bootstrap(resamples=1, confidence=0.5).resamples == 1
    for bad, words in [({"resamples": 0}, "resamples must be >= 1, not 0"),
                       ({"confidence": 0.0}, "confidence must be in (0, 1), not 0.0"),
                       ({"confidence": 1.0}, "confidence must be in (0, 1), not 1.0")]:
        with pytest.raises(ValueError) as err:
            Bootstrap(**bad)
        assert str(err.value) == words
    assert Bootstrap().to_dict() == {
        "resamples": 2000, "confidence": 0.95, "seed": 0,
        "method": "percentile bootstrap; prompts resampled with replacement; indices int(random.Random(seed).random() "
                  "* n); quantiles linearly interpolated"}


def test_quantile_ends_and_interpolation() -> None:
    values = [1.0, 2.0, 4.0, 8.0, 16.0]
    assert [acs.quantile(values, q) for q in (0.0, 0.25, 0.5, 0.6, 1.0)] == [1.0, 2.0, 4.0, 5.6, 16.0]
    assert acs.quantile([3.0, 5.0], 0.75) == 4.5


def test_resampling_draws_each_prompt_by_the_documented_index_rule() -> None:
    import random

    boot = Bootstrap(resamples=7, seed=11)
    got = acs.resample_totals(DELTAS, boot)
    rng = random.Random(11)
    n = len(DELTAS)
    want = [ctr.add(DELTAS[int(rng.random() * n)] for _ in range(n)) for _ in range(7)]
    assert got == want and len(got) == 7
    assert acs.resample_totals([], boot) == []


def test_interval_takes_the_two_tail_quantiles() -> None:
    boot = Bootstrap(resamples=300, seed=5, confidence=0.8)
    resampled = acs.resample_totals(DELTAS, boot)
    values = sorted(acs.acceptance_rate(r) for r in resampled)
    iv = acs.interval(ctr.add(DELTAS), resampled, acs.acceptance_rate, boot, worst=0.0)
    assert iv == acs.Interval(99 / 171, acs.quantile(values, 0.1), acs.quantile(values, 0.9), 0.8)
    assert iv.to_dict() == {"estimate": iv.estimate, "low": iv.low, "high": iv.high, "confidence": 0.8}


def test_an_undefined_resample_counts_as_the_worst_value() -> None:
    # Half the prompts drafted nothing: a resample of only those has no rate at all.
    deltas = [CounterDelta(0, 0, 0, (0, 0)), delta(10, [10, 10])]
    stats = acs.acceptance_stats(deltas, Bootstrap(resamples=400, seed=1))
    assert stats.acceptance_rate.estimate == 1.0 and stats.acceptance_rate.low == 0.0
    assert stats.mean_acceptance_length.estimate == 3.0 and stats.mean_acceptance_length.low == 1.0
    assert [iv.low for iv in stats.position_rates] == [0.0, 0.0]
    assert stats.requests == 2 and stats.totals == ctr.add(deltas)


def test_acceptance_stats_report_keys() -> None:
    stats = acs.acceptance_stats(DELTAS, Bootstrap(resamples=20))
    d = stats.to_dict()
    assert list(d) == ["requests", "acceptance_rate", "mean_acceptance_length", "position_acceptance_rates",
                       "counter_totals"]
    assert d["acceptance_rate"] == stats.acceptance_rate.to_dict()
    assert d["mean_acceptance_length"] == stats.mean_acceptance_length.to_dict()
    assert d["counter_totals"] == stats.totals.to_dict() and d["requests"] == 6


