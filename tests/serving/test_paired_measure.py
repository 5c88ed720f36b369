"""Tests for qualify.serving.paired_measure: two drafts measured on stand-in vLLM servers, paired and decided."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from qualify.errors import UsageError
from qualify.profile import PairedSpec, PromptSetSpec
from qualify.serving import client as cl
from qualify.serving import paired_measure as pm
from qualify.serving.paired_measure import Request
from tests.fault_server import MODEL, fault_server
from tests.helpers import REPO

SHIPPED = REPO / "qualify" / "prompt_sets" / "acceptance-v1" / "acceptance-v1.json"
REQ = Request(model=MODEL, max_tokens=32, temperature=0.0, timeout_s=5.0, proposal_length=7, full_block=True)


def spec(*, margin: float = 0.05, concurrency: tuple[int, ...] = (1, 4), sets: tuple[PromptSetSpec, ...] | None = None,
         min_prompts: int = 1) -> PairedSpec:
    return PairedSpec(
        prompt_sets=sets or (PromptSetSpec(SHIPPED, "qualify", None, 8),), max_tokens=32, temperature=0.0,
        margin=margin, concurrency=concurrency, min_prompts=min_prompts, confidence=0.95, bootstrap_resamples=500,
        bootstrap_seed=0, full_block=True, request_timeout_s=5.0, source_endpoint=None,
    )


def level(cand: object, src: object, s: PairedSpec) -> tuple[object, list[object]]:
    return pm.paired_level((cl.make_client(cand.endpoint), cand.endpoint),  # type: ignore[attr-defined]
                           (cl.make_client(src.endpoint), src.endpoint), s, REQ)  # type: ignore[attr-defined]


@pytest.mark.slow
def test_an_equal_candidate_passes_at_every_concurrency() -> None:
    with fault_server(per_request=True, accepted=5) as cand, fault_server(per_request=True, accepted=5) as src:
        ev, decisions = level(cand, src, spec())
    assert ev.ok, ev.findings  # type: ignore[attr-defined]
    assert [d.concurrency for d in decisions] == [1, 4]  # type: ignore[attr-defined]
    m = ev.measured  # type: ignore[attr-defined]
    assert m["concurrency"]["1"]["measured"]["candidate"]["figures_from"] == "response"
    assert m["prompt_sets"][0]["sha256"] and m["prompt_sets"][0]["used"] == "the first 8 of 20 prompts"
    assert len(m["concurrency"]["4"]["per_prompt"]) == 8


@pytest.mark.slow
def test_a_worse_candidate_fails_at_both_concurrencies() -> None:
    with fault_server(per_request=True, accepted=4) as cand, fault_server(per_request=True, accepted=5) as src:
        ev, _ = level(cand, src, spec())
    text = "\n".join(str(f) for f in ev.findings)  # type: ignore[attr-defined]
    assert "at concurrency 1, overall: acceptance rate of the candidate relative to the source draft" in text
    assert "at concurrency 4, overall: acceptance rate" in text


@pytest.mark.slow
def test_without_per_request_metrics_load_is_measured_per_batch_and_said_so() -> None:
    with fault_server(accepted=5) as cand, fault_server(accepted=5) as src:
        ev, decisions = level(cand, src, spec())
    assert ev.ok, ev.findings  # type: ignore[attr-defined]
    assert [d.ok for d in decisions] == [True, True]  # type: ignore[attr-defined]
    m = ev.measured  # type: ignore[attr-defined]
    assert m["concurrency"]["1"]["measured"]["candidate"]["figures_from"] == "counters"
    at_load = m["concurrency"]["4"]
    assert at_load["measured"]["candidate"]["figures_from"] == "counters per batch"
    assert at_load["measured"]["candidate"]["batches"] == at_load["measured"]["source"]["batches"]
    assert [row["prompt"] for row in at_load["per_prompt"]] == ["batch-001", "batch-002"]
    assert "run-level: no per-request metrics in the responses, so prompts went in batches of 4" in \
        at_load["measured"]["method"]


@pytest.mark.slow
def test_without_per_request_metrics_a_worse_candidate_fails_at_load_too() -> None:
    with fault_server(accepted=3) as cand, fault_server(accepted=5) as src:
        ev, _ = level(cand, src, spec(concurrency=(4,)))
    text = "\n".join(str(f) for f in ev.findings)  # type: ignore[attr-defined]
    assert "at concurrency 4, overall: acceptance rate of the candidate relative to the source draft" in text


def test_batches_that_cannot_be_paired_fail_naming_why() -> None:
    with fault_server(accepted=5) as cand, fault_server(per_request=True, accepted=5) as src:
        ev, _ = level(cand, src, spec(concurrency=(4,)))
    text = "\n".join(str(f) for f in ev.findings)  # type: ignore[attr-defined]
    assert "the two drafts were not measured on the same batches" in text


@pytest.mark.slow
def test_a_response_that_contradicts_the_counters_is_a_finding_naming_the_counter() -> None:
    with fault_server(per_request=True, misreport=1) as cand, fault_server(per_request=True) as src:
        ev, _ = level(cand, src, spec())
    text = "\n".join(str(f) for f in ev.findings)  # type: ignore[attr-defined]
    assert "at concurrency 1: candidate: prompt chat-01: the counters and the response disagree: " \
           "vllm:spec_decode_num_accepted_tokens_total moved by" in text
    assert "at concurrency 4: candidate: over the run at concurrency 4, the counters and the responses' per-request " \
           "metrics disagree" in text
    assert "not measured with the candidate: it cannot be paired" in text


def test_another_client_under_load_fails_the_run() -> None:
    with fault_server(per_request=True, fault="concurrent") as cand, fault_server(per_request=True) as src:
        ev, _ = level(cand, src, spec(concurrency=(4,)))
    assert any("over the run at concurrency 4" in str(f) for f in ev.findings)  # type: ignore[attr-defined]


def test_a_server_that_stops_answering_is_a_finding_not_a_pass() -> None:
    with fault_server(per_request=True, fault="die", fault_after=3) as cand, fault_server(per_request=True) as src:
        ev, _ = level(cand, src, spec(concurrency=(1,), min_prompts=8))
    text = "\n".join(str(f) for f in ev.findings)  # type: ignore[attr-defined]
    assert "further prompt(s) not asked" in text and "8 prompt(s)" not in text
    assert "3 prompt(s) measured with both drafts, the profile requires at least 8" in text


def test_a_missing_prompt_set_is_a_usage_error_naming_it(tmp_path: Path) -> None:
    missing = tmp_path / "question.jsonl"
    with fault_server(per_request=True) as cand, fault_server(per_request=True) as src, \
            pytest.raises(UsageError, match=r"question.jsonl \(mt-bench\): no such file"):
        level(cand, src, spec(sets=(PromptSetSpec(missing, "mt-bench", None, None),)))


def test_several_sets_need_distinct_names_and_ids(tmp_path: Path) -> None:
    a = tmp_path / "a.jsonl"
    a.write_text(json.dumps({"task_id": "T/0", "prompt": "def f():\n"}) + "\n", encoding="utf-8")
    with pytest.raises(UsageError, match="two sets are called 'humaneval'"):
        pm.load_sets(spec(sets=(PromptSetSpec(a, "humaneval", None, None), PromptSetSpec(a, "humaneval", None, None))))
    sets = pm.load_sets(spec(sets=(PromptSetSpec(a, "humaneval", "he-a", None), PromptSetSpec(a, "humaneval", "he-b",
                                                                                           None))))
    assert sets.categories == ("he-a/code", "he-b/code")
    with pytest.raises(UsageError, match="prompt id 'T/0' is in both 'he-a' and 'he-b'"):
        pm.unique_ids(sets.prompts)
