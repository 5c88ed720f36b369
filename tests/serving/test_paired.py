"""Tests for qualify.serving.paired: the paired bootstrap and the non-inferiority decision (pure, fast)."""

from __future__ import annotations

import math
import random

import numpy as np
import pytest

from qualify.serving import paired as pr
from qualify.serving.acceptance_stats import Bootstrap, quantile
from qualify.serving.counters import CounterDelta, add
from qualify.serving.paired import PairedSample

K = 7
BOOT = Bootstrap(resamples=1000, confidence=0.95, seed=0)


def from_steps(steps: list[int], k: int = K) -> CounterDelta:
    """The counters a request moves when its verification steps accepted ``steps`` tokens each."""
    per_pos = tuple(sum(a > i for a in steps) for i in range(k))
    return CounterDelta(len(steps), len(steps) * k, sum(steps), per_pos)


def hardness(i: int) -> list[int]:
    """A prompt's steps: prompts differ a lot in how much is accepted (what pairing cancels)."""
    rng = random.Random(1000 + i)
    base = rng.choice([1, 2, 4, 6, 7])
    return [max(0, min(K, base + rng.choice([-1, 0, 0, 1]))) for _ in range(20)]


def worse(steps: list[int], every: int, offset: int = 0) -> list[int]:
    """The same steps with one token fewer accepted on every ``every``-th step that accepted any.

    ``offset`` (the prompt's index) staggers the steps hit, so a rare loss spreads over the prompts.
    """
    out, seen = [], offset * len(steps)
    for a in steps:
        if a > 0:
            seen += 1
            if seen % every == 0:
                a -= 1
        out.append(a)
    return out


def samples(n: int, candidate: object, *, categories: tuple[str, ...] = ("chat", "code"),
            prompt_set: str = "set") -> list[PairedSample]:
    out = []
    for i in range(n):
        steps = hardness(i)
        out.append(PairedSample(f"p{i:03d}", prompt_set, categories[i % len(categories)], from_steps(steps),
                                from_steps(candidate(i, steps))))  # type: ignore[operator]
    return out


def relative_rate(s: list[PairedSample]) -> float:
    src, cand = add(x.source for x in s), add(x.candidate for x in s)
    return (cand.accepted_tokens / cand.draft_tokens) / (src.accepted_tokens / src.draft_tokens) - 1


# -- the decision --------------------------------------------------------------------------------


def test_identical_drafts_pass_with_a_zero_interval() -> None:
    s = samples(30, lambda i, steps: steps)
    d = pr.decide(s, concurrency=1, margin=0.02, boot=BOOT)
    assert d.ok, d.findings
    assert d.overall is not None
    rel = d.overall.acceptance_rate.relative
    assert (rel.estimate, rel.low, rel.high) == (0.0, 0.0, 0.0)


def test_slightly_worse_within_margin_passes() -> None:
    s = samples(60, lambda i, steps: worse(steps, 25, i))  # about 1% of accepted tokens lost on every prompt
    loss = relative_rate(s)
    assert -0.02 < loss < -0.003
    d = pr.decide(s, concurrency=1, margin=0.02, boot=BOOT)
    assert d.ok, d.findings
    assert d.overall is not None
    assert -0.02 < d.overall.acceptance_rate.relative.low < loss < d.overall.acceptance_rate.relative.high <= 0


def test_worse_beyond_margin_fails_naming_both_figures() -> None:
    s = samples(60, lambda i, steps: worse(steps, 3, i))  # about 8% lost
    assert relative_rate(s) < -0.05
    d = pr.decide(s, concurrency=4, margin=0.02, boot=BOOT)
    assert not d.ok
    text = "\n".join(d.findings)
    assert "at concurrency 4, overall: acceptance rate of the candidate relative to the source draft" in text
    assert "at concurrency 4, overall: mean acceptance length" in text
    assert "is not above -2.0%" in text


def test_a_noisy_equal_draft_whose_interval_straddles_the_margin_fails() -> None:
    # Equal in total (the estimate is exactly 0), but few prompts and large per-prompt noise:
    # the interval reaches below -margin, and an uncertain answer is never a pass.
    s = [PairedSample(f"p{i}", "s", "c", from_steps([4] * 20), from_steps([5 if i % 2 else 3] * 20)) for i in range(8)]
    d = pr.decide(s, concurrency=1, margin=0.02, boot=BOOT)
    assert d.overall is not None
    rel = d.overall.acceptance_rate.relative
    assert rel.estimate == 0.0  # the point estimate alone would pass
    assert rel.low <= -0.02 < rel.high
    assert not d.ok
    assert any("overall: acceptance rate" in f for f in d.findings)


def test_a_lower_bound_exactly_at_minus_margin_fails() -> None:
    # Every prompt loses exactly a quarter of its rate: the interval is one point; "above -margin" is strict.
    s = [PairedSample(f"p{i}", "s", "c", CounterDelta(8, 64, 32, (8, 8, 8, 8, 0, 0, 0, 0)),
                      CounterDelta(8, 64, 24, (8, 8, 8, 0, 0, 0, 0, 0))) for i in range(5)]
    fig = pr.paired_figures(s, BOOT)
    assert fig.acceptance_rate.relative.low == -0.25
    assert fig.mean_acceptance_length.relative.low == -0.2
    assert [f for f in pr.non_inferiority_findings(fig, 0.25, "overall") if "acceptance rate" in f]
    assert pr.non_inferiority_findings(fig, 0.2501, "overall") == []


def test_a_category_that_collapsed_fails_while_the_overall_figure_passes() -> None:
    cats = ("chat", "code", "math", "long")

    def collapse_math(i: int, steps: list[int]) -> list[int]:
        return worse(steps, 1) if cats[i % 4] == "math" else steps

    s = samples(80, collapse_math, categories=cats)
    d = pr.decide(s, concurrency=1, margin=0.1, boot=BOOT)
    assert not [f for f in d.findings if "overall" in f], d.findings
    assert d.findings and all("category 'math'" in f for f in d.findings), d.findings
    assert set(d.categories) == set(cats)


def test_an_expected_category_without_prompts_fails() -> None:
    s = samples(10, lambda i, steps: steps, categories=("chat",))
    d = pr.decide(s, concurrency=1, margin=0.02, boot=BOOT, expected_categories=("chat", "code"))
    assert d.findings == ("at concurrency 1: category 'code': no prompt of it was measured",)


def test_no_samples_fails_and_names_every_expected_category() -> None:
    d = pr.decide([], concurrency=4, margin=0.02, boot=BOOT, expected_categories=("a", "b"))
    assert not d.ok and d.overall is None
    assert "at concurrency 4: no prompt was measured with both drafts" in d.findings
    assert "at concurrency 4: category 'b': no prompt of it was measured" in d.findings


def test_too_few_prompts_fails() -> None:
    s = samples(6, lambda i, steps: steps)
    d = pr.decide(s, concurrency=1, margin=0.02, boot=BOOT, min_prompts=20)
    assert d.findings == ("at concurrency 1: 6 prompt(s) measured with both drafts, the profile requires at least 20",)


def test_a_candidate_that_drafted_nothing_fails() -> None:
    s = [PairedSample(x.prompt_id, x.prompt_set, x.category, x.source, CounterDelta(0, 0, 0, (0,) * K))
         for x in samples(20, lambda i, steps: steps)]
    d = pr.decide(s, concurrency=1, margin=0.02, boot=BOOT)
    assert d.overall is not None
    assert d.overall.acceptance_rate.relative.low == -1.0  # the worst, not an unknown dropped
    assert any("the candidate drafted no token" in f for f in d.findings)
    assert any("overall: acceptance rate" in f for f in d.findings)


def test_a_source_that_drafted_nothing_is_no_comparison() -> None:
    s = [PairedSample(x.prompt_id, x.prompt_set, x.category, CounterDelta(0, 0, 0, (0,) * K), x.candidate)
         for x in samples(20, lambda i, steps: steps)]
    d = pr.decide(s, concurrency=1, margin=0.02, boot=BOOT)
    assert any("the source draft drafted no token" in f for f in d.findings)
    assert any("lower bound n/a" in f for f in d.findings) or any("-100.00%" in f for f in d.findings)
    assert not d.ok


def test_a_prompt_the_candidate_drafted_nothing_on_fails_naming_it() -> None:
    # A ratio of sums would simply leave such a prompt out (and could even look better without it).
    base = samples(5, lambda i, steps: steps)
    s = [PairedSample(x.prompt_id, x.prompt_set, x.category, x.source,
                      CounterDelta(0, 0, 0, (0,) * K) if i < 2 else x.candidate) for i, x in enumerate(base)]
    d = pr.decide(s, concurrency=1, margin=0.5, boot=BOOT)
    assert not d.ok
    assert [f for f in d.findings if "prompt p000" in f and "candidate drafted no token" in f]
    assert [f for f in d.findings if "prompt p001" in f]
    assert not [f for f in d.findings if "prompt p002" in f]


# -- the bootstrap itself ------------------------------------------------------------------------


def test_the_interval_is_the_same_as_a_plain_loop_over_the_same_draws() -> None:
    s = samples(17, lambda i, steps: worse(steps, 5 + i % 3), categories=("a",))
    boot = Bootstrap(resamples=300, confidence=0.9, seed=11)
    fig = pr.paired_figures(s, boot)
    rng = random.Random(11)
    rel, pos2 = [], []
    for _ in range(300):
        drawn = [s[int(rng.random() * 17)] for _ in range(17)]
        src, cand = add(x.source for x in drawn), add(x.candidate for x in drawn)
        rel.append((cand.accepted_tokens / cand.drafts + 1) / (src.accepted_tokens / src.drafts + 1) - 1)
        pos2.append(cand.accepted_per_pos[2] / cand.drafts - src.accepted_per_pos[2] / src.drafts)
    rel.sort()
    pos2.sort()
    got = fig.mean_acceptance_length.relative
    assert (got.low, got.high) == pytest.approx((quantile(rel, 0.05), quantile(rel, 0.95)), rel=1e-12)
    got2 = fig.position_rates[2].absolute
    assert (got2.low, got2.high) == pytest.approx((quantile(pos2, 0.05), quantile(pos2, 0.95)), rel=1e-12)


def test_resampling_is_deterministic_and_seeded() -> None:
    a = pr.resample_counts(9, Bootstrap(resamples=50, seed=5))
    b = pr.resample_counts(9, Bootstrap(resamples=50, seed=5))
    c = pr.resample_counts(9, Bootstrap(resamples=50, seed=6))
    assert np.array_equal(a, b) and not np.array_equal(a, c)
    assert (a.sum(axis=1) == 9).all()
    assert pr.resample_counts(0, Bootstrap(resamples=3)).shape == (3, 0)


def test_pairing_is_tighter_than_comparing_two_unpaired_intervals() -> None:
    s = samples(40, lambda i, steps: worse(steps, 50, i))
    fig = pr.paired_figures(s, BOOT)
    paired_width = fig.acceptance_rate.absolute.high - fig.acceptance_rate.absolute.low
    src_width = fig.source.acceptance_rate.high - fig.source.acceptance_rate.low
    assert paired_width < src_width / 5


def test_both_drafts_figures_are_the_ratio_of_sums() -> None:
    s = samples(12, lambda i, steps: worse(steps, 4))
    fig = pr.paired_figures(s, BOOT)
    src, cand = add(x.source for x in s), add(x.candidate for x in s)
    assert fig.source.acceptance_rate.estimate == src.accepted_tokens / src.draft_tokens
    assert fig.candidate.mean_acceptance_length.estimate == 1 + cand.accepted_tokens / cand.drafts
    assert fig.candidate.position_rates[0].estimate == cand.accepted_per_pos[0] / cand.drafts
    assert fig.acceptance_rate.relative.estimate == pytest.approx(relative_rate(s))


# -- averages and the prompts that lost the most -------------------------------------------------


def test_micro_and_macro_averages() -> None:
    big = [PairedSample(f"b{i}", "s", "big", CounterDelta(10, 70, 70, (10,) * 7), CounterDelta(10, 70, 70, (10,) * 7))
           for i in range(9)]
    small = [PairedSample("s0", "s", "small", CounterDelta(10, 70, 70, (10,) * 7), CounterDelta(10, 70, 0, (0,) * 7))]
    avg = pr.averages(big + small, lambda x: x.category)
    assert avg["micro"]["relative_acceptance_rate"] == pytest.approx(-0.1)  # one prompt in ten lost everything
    assert avg["macro"]["relative_acceptance_rate"] == pytest.approx(-0.5)  # one group in two did
    assert avg["macro"]["candidate_mean_acceptance_length"] == pytest.approx((8 + 1) / 2)


def test_a_macro_average_over_an_undefined_group_is_undefined() -> None:
    none = PairedSample("n", "s", "none", CounterDelta(0, 0, 0, ()), CounterDelta(0, 0, 0, ()))
    some = PairedSample("a", "s", "some", CounterDelta(1, 7, 7, (1,) * 7), CounterDelta(1, 7, 7, (1,) * 7))
    avg = pr.averages([none, some], lambda x: x.category)
    assert math.isnan(avg["macro"]["source_acceptance_rate"])
    assert avg["micro"]["source_acceptance_rate"] == 1.0


def test_biggest_losses_worst_first_and_only_losses() -> None:
    def by_index(i: int, steps: list[int]) -> list[int]:
        return worse(steps, [1, 2, 100, 0][i % 4]) if i % 4 != 3 else [min(K, a + 1) for a in steps]

    s = samples(8, by_index)
    losers = pr.biggest_losses(s, count=10)
    diffs = [row["rate_difference"] for row in losers]
    assert diffs == sorted(diffs) and all(d < 0 for d in diffs)
    assert {row["prompt"] for row in losers} <= {f"p{i:03d}" for i in range(8) if i % 4 != 3}
    assert pr.biggest_losses(s, count=2) == losers[:2]


def test_several_prompt_sets_label_categories_by_set() -> None:
    a = samples(6, lambda i, steps: steps, categories=("math",), prompt_set="gsm8k")
    b = samples(6, lambda i, steps: steps, categories=("math",), prompt_set="mt-bench")
    d = pr.decide(a + b, concurrency=1, margin=0.02, boot=BOOT)
    assert set(d.categories) == {"gsm8k/math", "mt-bench/math"}
    assert set(d.sets) == {"gsm8k", "mt-bench"}
    assert set(d.averages["prompt_sets"]) == {"gsm8k", "mt-bench"}
    assert d.to_dict()["passed"] is True
