"""Tests for qualify.serving.specdecode: the acceptance gate and the losslessness evidence (pure, fast)."""

from __future__ import annotations

import math

from qualify.serving import acceptance_stats as acs
from qualify.serving import specdecode as sd
from qualify.serving.acceptance_stats import Bootstrap
from qualify.serving.counters import CounterDelta
from qualify.serving.specdecode import AcceptanceMeasurement, AcceptanceThresholds, RequestSample
from tests.serving.test_counters import delta

# -- the gate ------------------------------------------------------------------------------


def measurement(rows: list[tuple[str, CounterDelta]]) -> AcceptanceMeasurement:
    return AcceptanceMeasurement(
        samples=[RequestSample(f"p{i}", cat, d, 32, "length") for i, (cat, d) in enumerate(rows)],
        expected_categories=tuple(sorted({c for c, _ in rows})),
    )


GOOD = [("chat", delta(10, [9, 8, 7])), ("code", delta(10, [10, 9, 8])), ("chat", delta(10, [8, 7, 7])),
        ("code", delta(10, [9, 9, 8]))]
THRESHOLDS = AcceptanceThresholds(min_acceptance_rate=0.5, min_mean_acceptance_length=2.0, min_requests=4)


def test_gate_passes_a_good_draft_and_records_everything() -> None:
    ev, stats = sd.acceptance_evidence(measurement(GOOD), THRESHOLDS, Bootstrap(resamples=200))
    assert ev.ok, ev.failure_text()
    assert stats is not None
    m = ev.measured
    assert set(m["categories"]) == {"chat", "code"}
    assert m["counter_totals"] == {"drafts": 40, "draft_tokens": 120, "accepted_tokens": 99,
                                   "accepted_per_pos": [36, 33, 30]}
    assert len(m["per_request"]) == 4 and m["per_request"][0]["accepted_per_pos"] == [9, 8, 7]
    assert [p["position"] for p in m["position_acceptance_rates"]] == [0, 1, 2]
    assert m["bootstrap"]["seed"] == 0
    assert ev.expected["compared"] == "the lower bound of each interval"


def test_gate_uses_the_lower_bound_not_the_estimate() -> None:
    # Estimate above the threshold, lower bound below it: a draft that only clears the bar on
    # some prompts is not qualified.
    rows = [("chat", delta(10, [10, 10, 10])), ("chat", delta(10, [0, 0, 0])), ("chat", delta(10, [10, 10, 10])),
            ("chat", delta(10, [10, 10, 10]))]
    thresholds = AcceptanceThresholds(min_acceptance_rate=0.7, min_mean_acceptance_length=1.0)
    ev, stats = sd.acceptance_evidence(measurement(rows), thresholds, Bootstrap(resamples=500))
    assert stats is not None and stats.acceptance_rate.estimate == 0.75 > 0.7
    assert stats.acceptance_rate.low < 0.7
    assert not ev.ok
    assert "lower bound of the 95% interval" in ev.failure_text()


def test_gate_fails_a_bad_category() -> None:
    rows = [*GOOD, ("math", delta(10, [1, 0, 0])), ("math", delta(10, [2, 0, 0]))]
    thresholds = AcceptanceThresholds(0.1, 1.0, min_category_acceptance_rate=0.3)
    ev, _ = sd.acceptance_evidence(measurement(rows), thresholds, Bootstrap(resamples=200))
    assert [f.message.split(":")[0] for f in ev.findings] == ["category 'math' acceptance rate"]


def test_gate_fails_with_nothing_drafted() -> None:
    rows = [("chat", CounterDelta(0, 0, 0, (0, 0, 0)))] * 3
    ev, _ = sd.acceptance_evidence(measurement(rows), AcceptanceThresholds(0.0, 1.0), Bootstrap(resamples=50))
    assert not ev.ok
    assert any("drafted no token" in f.message for f in ev.findings)


def test_gate_fails_on_failed_requests_and_too_few_prompts() -> None:
    m = measurement(GOOD[:2])
    m.failures.append("prompt p9: counters went backwards")
    ev, _ = sd.acceptance_evidence(m, THRESHOLDS, Bootstrap(resamples=50))
    messages = [f.message for f in ev.findings]
    assert "prompt p9: counters went backwards" in messages
    assert any("at least 4" in msg for msg in messages)


def test_gate_fails_with_no_samples_and_a_missing_category() -> None:
    empty = AcceptanceMeasurement(expected_categories=("chat",))
    ev, stats = sd.acceptance_evidence(empty, THRESHOLDS)
    assert stats is None and not ev.ok
    m = measurement(GOOD)
    m.expected_categories = ("chat", "code", "math")
    ev, _ = sd.acceptance_evidence(m, THRESHOLDS, Bootstrap(resamples=50))
    assert [f.message for f in ev.findings] == ["category 'math': no prompt of it was measured"]


def test_same_inputs_same_verdict() -> None:
    one = sd.acceptance_evidence(measurement(GOOD), THRESHOLDS)[0].to_dict()
    two = sd.acceptance_evidence(measurement(GOOD), THRESHOLDS)[0].to_dict()
    assert one == two


# -- losslessness --------------------------------------------------------------------------


def test_first_divergence() -> None:
    assert sd.first_divergence([1, 2, 3], [1, 2, 3]) is None
    assert sd.first_divergence([1, 2, 3], [1, 5, 3]) == 1
    assert sd.first_divergence([1, 2], [1, 2, 3]) == 2
    assert sd.first_divergence([], []) is None


TOL = 0.25


def lookup(pid: str, at: int, spec: int, ref: int, logprobs: dict[int, float], chosen: int | None = None,
           error: str | None = None) -> sd.TokenLookup:
    return sd.TokenLookup(pid, at, spec, ref, logprobs, ref if chosen is None else chosen, error)


def test_losslessness_a_near_tie_passes_and_is_listed_with_both_values() -> None:
    pairs = [sd.OutputPair("a", "chat", (1, 2, 3), (1, 2, 3)), sd.OutputPair("b", "code", (1, 2, 3), (1, 9, 3))]
    ev = sd.losslessness_evidence(pairs, near_tie_tolerance=TOL, max_tokens=3,
                                  lookups={"b": lookup("b", 1, 2, 9, {9: -0.70, 2: -0.71})})
    assert ev.ok, ev.failure_text()
    assert ev.measured["near_ties"] == [{"prompt": "b", "category": "code", "position": 1, "speculative_token": 2,
                                         "speculative_logprob": -0.71, "reference_token": 9,
                                         "reference_logprob": -0.70}]
    assert ev.measured["divergences"] == {"near_tie": 1, "real": 0, "unverified": 0}
    assert "prompt b at token 1: 2 (-0.7100) against 9 (-0.7000)" in ev.summary
    row = ev.measured["per_prompt"][1]
    assert (row["first_divergence"], row["speculative_token"], row["reference_token"]) == (1, 2, 9)
    assert row["divergence"] == "near_tie" and abs(row["gap"] - 0.01) < 1e-12


def test_losslessness_a_real_divergence_fails_naming_prompt_position_tokens_and_logprobs() -> None:
    pairs = [sd.OutputPair("b", "code", (1, 2, 3), (1, 9, 3))]
    ev = sd.losslessness_evidence(pairs, near_tie_tolerance=TOL, max_tokens=3,
                                  lookups={"b": lookup("b", 1, 2, 9, {9: -0.10, 2: -2.40})})
    assert not ev.ok
    assert [f.message for f in ev.findings] == [
        "prompt b, output token 1 (category code): the speculative output has token 2 (log-probability -2.4000 in "
        "the target alone) where the target alone chose 9 (-0.1000): 2.3000 nats apart, beyond the near-tie "
        "tolerance 0.25"]
    assert ev.measured["near_ties"] == [] and ev.measured["divergences"]["real"] == 1
    # the same gap within a wider tolerance is a near-tie
    assert sd.losslessness_evidence(pairs, near_tie_tolerance=2.5, max_tokens=3,
                                    lookups={"b": lookup("b", 1, 2, 9, {9: -0.10, 2: -2.40})}).ok


def test_losslessness_an_unverified_divergence_is_not_a_pass() -> None:
    pairs = [sd.OutputPair("b", "code", (1, 2, 3), (1, 9, 3))]

    def judged(lk: sd.TokenLookup | None) -> str:
        ev = sd.losslessness_evidence(pairs, near_tie_tolerance=TOL, max_tokens=3,
                                      lookups={"b": lk} if lk is not None else {})
        assert not ev.ok and ev.measured["divergences"]["unverified"] == 1
        return ev.failure_text()

    assert "was not looked up in the target alone" in judged(None)
    assert "could not be looked up, so it is unverified: HTTP 400: too many" in judged(
        lookup("b", 1, 2, 9, {}, error="HTTP 400: too many"))
    # the speculative token is not in the answer: say how to ask for it
    text = judged(lookup("b", 1, 2, 9, {9: -0.1}))
    assert "no log-probability of token 2" in text and "logprob_token_ids" in text and "--max-logprobs" in text
    # the target alone would choose a third token: the reference did not reproduce itself
    text = judged(lookup("b", 1, 2, 9, {9: -1.5, 2: -1.5, 4: -0.3}, chosen=4))
    assert "most likely token here is 4 (log-probability -0.3000), not its own greedy output's 9" in text


def test_losslessness_never_passes_on_missing_data() -> None:
    assert not sd.losslessness_evidence([], near_tie_tolerance=TOL, max_tokens=3).ok
    pairs = [sd.OutputPair("a", "chat", None, (1, 2))]
    ev = sd.losslessness_evidence(pairs, near_tie_tolerance=TOL, max_tokens=2)
    assert "returned no token ids" in ev.failure_text()
    ok = [sd.OutputPair("a", "chat", (1,), (1,))]
    assert not sd.losslessness_evidence(ok, near_tie_tolerance=TOL, max_tokens=1, failures=["reference: x"]).ok


# -- the gate, exactly ---------------------------------------------------------------------
# Every finding and figure the gate reports, pinned: these cases come from mutation testing
# (see docs/development.md, Mutation testing) and each one fails if a comparison or a count is off.


def test_lower_bound_findings() -> None:
    iv = acs.Interval(0.8, 0.5, 0.9, 0.9)
    assert sd._lower_bound_finding("rate", iv, 0.5) is None  # equal to the threshold passes
    assert sd._lower_bound_finding("rate", iv, 0.5001) == (
        "rate: lower bound of the 90% interval 0.500 is below the threshold 0.500 (estimate 0.800, "
        "interval [0.500, 0.900])")
    assert sd._lower_bound_finding("length", acs.Interval(2.0, 1.5, 2.5, 0.95), 1.75, ".2f") == (
        "length: lower bound of the 95% interval 1.50 is below the threshold 1.75 (estimate 2.00, "
        "interval [1.50, 2.50])")
    nan = sd._lower_bound_finding("rate", acs.Interval(math.nan, math.nan, math.nan, 0.95), 0.0)
    assert nan is not None and nan.startswith("rate: lower bound of the 95% interval nan")


def test_gate_reports_every_failure_exactly() -> None:
    rows = [("chat", delta(10, [9, 8, 7])), ("chat", delta(10, [2, 1, 0])), ("code", delta(10, [9, 9, 8]))]
    m = measurement(rows)
    m.failures.append("prompt p9: timed out")
    m.expected_categories = ("chat", "code", "math")
    thresholds = AcceptanceThresholds(min_acceptance_rate=0.6, min_mean_acceptance_length=3.0,
                                      min_category_acceptance_rate=0.5, min_requests=4)
    ev, stats = sd.acceptance_evidence(m, thresholds, Bootstrap(resamples=100, seed=3), extra_measured={"server": "x"})
    assert [f.message for f in ev.findings] == [
        "prompt p9: timed out",
        "3 prompt(s) measured, the profile requires at least 4",
        "acceptance rate: lower bound of the 95% interval 0.211 is below the threshold 0.600 (estimate 0.589, "
        "interval [0.211, 0.844])",
        "mean acceptance length: lower bound of the 95% interval 1.63 is below the threshold 3.00 (estimate 2.77, "
        "interval [1.63, 3.53])",
        "category 'chat' acceptance rate: lower bound of the 95% interval 0.100 is below the threshold 0.500 "
        "(estimate 0.450, interval [0.100, 0.800])",
        "category 'math': no prompt of it was measured",
    ]
    assert ev.summary == ("acceptance rate 0.589 (95% interval [0.211, 0.844]), mean acceptance length 2.77 "
                          "[1.63, 3.53] over 3 prompts in 2 categories")
    assert ev.expected == {"min_acceptance_rate": 0.6, "min_mean_acceptance_length": 3.0,
                           "min_category_acceptance_rate": 0.5, "min_requests": 4,
                           "compared": "the lower bound of each interval"}
    assert stats is not None
    boot = Bootstrap(resamples=100, seed=3)
    assert ev.measured == {
        "bootstrap": boot.to_dict(), "server": "x", "per_request": [s.to_dict() for s in m.samples],
        **stats.to_dict(),
        "categories": {"chat": acs.acceptance_stats([d for c, d in rows if c == "chat"], boot).to_dict(),
                       "code": acs.acceptance_stats([d for c, d in rows if c == "code"], boot).to_dict()},
    }
    assert stats.to_dict()["requests"] == 3
    assert stats.to_dict()["position_acceptance_rates"][2] == {"position": 2, **stats.position_rates[2].to_dict()}
    assert m.samples[0].to_dict() == {"prompt": "p0", "category": "chat", "completion_tokens": 32,
                                      "finish_reason": "length", "drafts": 10, "draft_tokens": 30,
                                      "accepted_tokens": 24, "accepted_per_pos": [9, 8, 7]}


def test_gate_on_the_threshold_and_without_a_category_bound() -> None:
    rows = [("chat", delta(10, [5, 5]))] * 4  # rate 0.5, length 2.0, zero-width intervals
    exact = AcceptanceThresholds(min_acceptance_rate=0.5, min_mean_acceptance_length=2.0, min_requests=4)
    ev, _ = sd.acceptance_evidence(measurement(rows), exact, Bootstrap(resamples=20))
    assert ev.ok, ev.failure_text()
    assert ev.summary == ("acceptance rate 0.500 (95% interval [0.500, 0.500]), mean acceptance length 2.00 "
                          "[2.00, 2.00] over 4 prompts in 1 categories")
    low_category = AcceptanceThresholds(0.5, 2.0, min_category_acceptance_rate=0.51, min_requests=4)
    ev, _ = sd.acceptance_evidence(measurement(rows), low_category, Bootstrap(resamples=20))
    assert [f.message.split(":")[0] for f in ev.findings] == ["category 'chat' acceptance rate"]


def test_gate_with_nothing_drafted_and_no_samples_exactly() -> None:
    rows = [("chat", CounterDelta(0, 0, 0, (0, 0)))] * 2
    ev, _ = sd.acceptance_evidence(measurement(rows), AcceptanceThresholds(0.0, 1.0, min_requests=2),
                                   Bootstrap(resamples=10))
    assert [f.message for f in ev.findings][:1] == ["the server drafted no token over 2 request(s): nothing was "
                                                    "speculated"]
    empty, stats = sd.acceptance_evidence(AcceptanceMeasurement(), AcceptanceThresholds(0.0, 1.0, min_requests=1))
    assert stats is None
    assert [f.message for f in empty.findings] == ["0 prompt(s) measured, the profile requires at least 1"]
    assert empty.summary == "draft acceptance could not be measured"
    assert empty.measured == {"bootstrap": Bootstrap().to_dict(), "per_request": []}


def test_losslessness_evidence_exactly() -> None:
    pairs = [sd.OutputPair("a", "chat", (1, 2, 3), (1, 2, 3)), sd.OutputPair("b", "code", (1, 2), (1, 2, 7)),
             sd.OutputPair("c", "code", (4, 5, 6), (4, 0, 6)), sd.OutputPair("d", "chat", (1,), None),
             sd.OutputPair("e", "chat", None, (1,)), sd.OutputPair("g", "chat", (7,), (7,))]
    lookups = {"b": lookup("b", 2, 0, 7, {}, error="the speculative output ends at token 2 while the other goes on"),
               "c": lookup("c", 1, 5, 0, {0: -0.5, 5: -0.6})}
    ev = sd.losslessness_evidence(pairs, near_tie_tolerance=0.25, near_tie_reason="rounding", max_tokens=3,
                                  lookups=lookups, failures=["x: refused"], extra_measured={"server": "y"})
    assert [f.message for f in ev.findings] == [
        "x: refused",
        "prompt b, output token 2: the divergence could not be looked up, so it is unverified: the speculative "
        "output ends at token 2 while the other goes on",
        "prompt d: the reference server returned no token ids",
        "prompt e: the speculative server returned no token ids",
    ]
    assert ev.summary == ("2 of 4 greedy outputs (3 tokens) identical with and without the speculator; 1 "
                          "divergence(s) a near-tie in the target alone (within 0.25 nats): prompt c at token 1: 5 "
                          "(-0.6000) against 0 (-0.5000)")
    assert ev.expected == {"near_tie_tolerance": 0.25, "near_tie_reason": "rounding", "max_tokens": 3,
                           "compared": "each divergence's two tokens, by their log-probabilities in the target alone"}
    gap = ev.measured["per_prompt"][2].pop("gap")
    assert abs(gap - 0.1) < 1e-12
    assert ev.measured == {
        "server": "y",
        "per_prompt": [
            {"prompt": "a", "category": "chat", "identical": True, "first_divergence": None,
             "speculative_tokens": 3, "reference_tokens": 3},
            {"prompt": "b", "category": "code", "identical": False, "first_divergence": 2,
             "speculative_tokens": 2, "reference_tokens": 3, "speculative_token": None, "reference_token": 7,
             "divergence": "unverified"},
            {"prompt": "c", "category": "code", "identical": False, "first_divergence": 1,
             "speculative_tokens": 3, "reference_tokens": 3, "speculative_token": 5, "reference_token": 0,
             "reference_logprob": -0.5, "speculative_logprob": -0.6, "lookup_most_likely": 0,
             "divergence": "near_tie"},
            {"prompt": "g", "category": "chat", "identical": True, "first_divergence": None,
             "speculative_tokens": 1, "reference_tokens": 1},
        ],
        "prompts": 4, "identical": 2, "identical_fraction": 0.5,
        "categories": {"chat": {"prompts": 2, "identical": 2, "identical_fraction": 1.0},
                       "code": {"prompts": 2, "identical": 0, "identical_fraction": 0.0}},
        "divergences": {"near_tie": 1, "real": 0, "unverified": 1},
        "near_ties": [{"prompt": "c", "category": "code", "position": 1, "speculative_token": 5,
                       "speculative_logprob": -0.6, "reference_token": 0, "reference_logprob": -0.5}],
    }
    same = sd.losslessness_evidence(pairs[:1], near_tie_tolerance=0.25, max_tokens=3)
    assert same.ok and same.summary.endswith("; no divergence")
    none = sd.losslessness_evidence([], near_tie_tolerance=0.25, max_tokens=3)
    assert [f.message for f in none.findings] == ["no prompt's outputs could be compared"]
    assert none.summary == "greedy outputs could not be compared" and none.measured == {"per_prompt": []}


def test_gate_prints_an_undefined_estimate_as_nan() -> None:
    rows = [("chat", CounterDelta(0, 0, 0, (0, 0)))] * 2
    ev, _ = sd.acceptance_evidence(measurement(rows), AcceptanceThresholds(0.0, 1.5, min_requests=2),
                                   Bootstrap(resamples=10))
    assert [f.message for f in ev.findings] == [
        "the server drafted no token over 2 request(s): nothing was speculated",
        "mean acceptance length: lower bound of the 95% interval 1.00 is below the threshold 1.50 (estimate nan, "
        "interval [1.00, 1.00])",
    ]


def test_gate_checks_every_category_after_a_missing_one() -> None:
    rows = [("chat", delta(10, [9, 8, 7])), ("chat", delta(10, [1, 0, 0])), ("chat", delta(10, [5, 2, 1])),
            ("chat", delta(10, [3, 3, 0]))]
    m = measurement(rows)
    m.expected_categories = ("art", "chat")
    boot = Bootstrap(resamples=60, seed=2)
    ev, _ = sd.acceptance_evidence(m, AcceptanceThresholds(0.0, 1.0, min_category_acceptance_rate=0.5), boot)
    chat = acs.acceptance_stats([d for _, d in rows], boot)
    assert [f.message for f in ev.findings] == [
        "category 'art': no prompt of it was measured",
        f"category 'chat' acceptance rate: lower bound of the 95% interval {chat.acceptance_rate.low:.3f} is below "
        f"the threshold 0.500 (estimate {chat.acceptance_rate.estimate:.3f}, interval "
        f"[{chat.acceptance_rate.low:.3f}, {chat.acceptance_rate.high:.3f}])",
    ]
    # Categories are bootstrapped with the run's settings, not the defaults.
    assert ev.measured["categories"] == {"chat": chat.to_dict()}
    assert chat.to_dict() != acs.acceptance_stats([d for _, d in rows]).to_dict()
