"""qualify.run.checks.losslessness: every prompt goes to the speculative arm and to the reference arm with the
same size and timeout (the run's arm jobs), and the outputs are paired by prompt (the comparison itself is
tested in tests/serving/test_specdecode.py)."""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace
from typing import Any

import pytest

from qualify import errors
from qualify.profile import Profile, load_profile
from qualify.run.arm_jobs import arm_jobs
from qualify.run.arms import Arms, GivenArms
from qualify.run.checks.losslessness import greedy_identical
from qualify.serving import client as serving
from qualify.serving import prompt_sets as ps

SPECULATIVE, REFERENCE = object(), object()
SPECULATIVE_URL, REFERENCE_URL = "http://127.0.0.1:8/v1", "http://127.0.0.1:9/v1"


@pytest.fixture(scope="module")
def profile() -> Profile:
    return load_profile("fixture")


@pytest.fixture(scope="module")
def prompts(profile: Profile) -> ps.PromptSet:
    assert profile.acceptance is not None
    return ps.load_prompts(profile.acceptance.prompts)


def _serve(monkeypatch: pytest.MonkeyPatch, outputs: dict[object, tuple[dict[str, Any], list[str]]],
           version: Any) -> list[tuple[object, dict[str, Any]]]:
    calls: list[tuple[object, dict[str, Any]]] = []

    def greedy_outputs(client: object, model: str, prompts: Any, **kw: Any) -> tuple[dict[str, Any], list[str]]:
        calls.append((client, kw))
        return outputs[client]

    def fetch_version(url: str) -> dict[str, Any]:
        assert url == REFERENCE_URL
        if isinstance(version, Exception):
            raise version
        return dict(version)

    monkeypatch.setattr(serving, "greedy_outputs", greedy_outputs)
    monkeypatch.setattr(serving, "fetch_version", fetch_version)
    return calls


def _run(profile: Profile, prompts: ps.PromptSet) -> Any:
    assert profile.losslessness is not None and profile.acceptance is not None
    servers = GivenArms({"checkpoint": lambda: SPECULATIVE_URL, "reference": lambda: REFERENCE_URL})
    arms = Arms(servers, arm_jobs(profile, {"losslessness"}),
                lambda url: SPECULATIVE if url == SPECULATIVE_URL else REFERENCE)
    return greedy_identical(arms.results("losslessness"), prompts, profile.losslessness,
                            {"endpoint": SPECULATIVE_URL})


def test_identical_outputs_pass_and_name_both_servers(monkeypatch: pytest.MonkeyPatch, profile: Profile,
                                                      prompts: ps.PromptSet) -> None:
    same = {p.id: SimpleNamespace(token_ids=(1, 2, 3)) for p in prompts.prompts}
    calls = _serve(monkeypatch, {SPECULATIVE: (same, []), REFERENCE: (same, [])}, {"version": "0.32.0"})
    evidence = _run(profile, prompts)
    assert evidence.ok, evidence.failure_text()
    assert profile.losslessness is not None and profile.acceptance is not None
    size = {"max_tokens": profile.losslessness.max_tokens, "timeout_s": profile.acceptance.request_timeout_s}
    assert calls == [(SPECULATIVE, size), (REFERENCE, size)]
    assert evidence.measured["reference"] == {"endpoint": REFERENCE_URL, "version": {"version": "0.32.0"}}
    assert evidence.measured["server"] == {"endpoint": "http://127.0.0.1:8/v1"}
    assert evidence.measured["prompt_set"] == prompts.identity()


def test_a_diverging_prompt_and_each_sides_failures_are_findings(monkeypatch: pytest.MonkeyPatch, profile: Profile,
                                                                 prompts: ps.PromptSet) -> None:
    first, *rest = prompts.prompts
    spec = {p.id: SimpleNamespace(token_ids=(1, 2, 3)) for p in prompts.prompts}
    ref = {p.id: SimpleNamespace(token_ids=(1, 2, 3)) for p in rest[1:]}
    ref[first.id] = SimpleNamespace(token_ids=(1, 2, 4))
    _serve(monkeypatch, {SPECULATIVE: (spec, ["timed out"]), REFERENCE: (ref, ["refused"])},
           errors.ServingError("no /version"))
    evidence = _run(profile, prompts)
    text = evidence.failure_text()
    assert "speculative: timed out" in text and "reference: refused" in text
    assert f"prompt {rest[0].id}: the reference server returned no token ids" in text
    row = next(r for r in evidence.measured["per_prompt"] if r["prompt"] == first.id)
    assert row["identical"] is False and row["first_divergence"] == 2
    assert evidence.measured["reference"]["version"] == {"error": "no /version"}


def test_a_reference_arm_that_did_not_serve_fails_the_check_naming_it(profile: Profile,
                                                                      prompts: ps.PromptSet) -> None:
    def down() -> str:
        raise errors.RuntimeNotStarted("the reference server did not start: port taken")

    same = {p.id: SimpleNamespace(token_ids=(1,)) for p in prompts.prompts}
    jobs = [job for job in arm_jobs(profile, {"losslessness"})]
    arms = Arms(GivenArms({"checkpoint": lambda: SPECULATIVE_URL, "reference": down}),
                [dataclasses.replace(job, measure=lambda client, url: (same, [])) for job in jobs], lambda url: None)
    assert profile.losslessness is not None
    with pytest.raises(errors.RuntimeNotStarted, match="the reference arm did not serve: the reference server did "
                                                       "not start: port taken"):
        greedy_identical(arms.results("losslessness"), prompts, profile.losslessness, {})
    assert arms.order == ["checkpoint"]
