"""qualify.run.checks.losslessness: every prompt goes to the speculative arm and to the reference arm with the
same size and timeout (the run's arm jobs), the outputs are paired by prompt, and each divergence is looked up
in the reference server (the judgement itself is tested in tests/serving/test_specdecode.py; here, against the
fault-injecting server, a near-tie passes and is listed, a real divergence fails named)."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from qualify import errors
from qualify.profile import Profile, load_profile
from qualify.run.arm_jobs import arm_jobs
from qualify.run.arms import Arms, GivenArms
from qualify.run.checks.losslessness import greedy_identical
from qualify.serving import client as serving
from qualify.serving import prompt_sets as ps
from qualify.serving.divergence import GreedyRun
from tests.fault_server import MODEL, PROMPT_TOKENS, fault_server

SPECULATIVE, REFERENCE = object(), object()
SPECULATIVE_URL, REFERENCE_URL = "http://127.0.0.1:8/v1", "http://127.0.0.1:9/v1"


@pytest.fixture(scope="module")
def profile() -> Profile:
    return load_profile("fixture")


@pytest.fixture(scope="module")
def prompts(profile: Profile) -> ps.PromptSet:
    assert profile.acceptance is not None
    return ps.load_prompts(profile.acceptance.prompts)


def _out(pid: str, ids: tuple[int, ...], prompt_ids: tuple[int, ...] | None = None) -> serving.Completion:
    return serving.Completion(pid, "", ids, len(ids), "length", 0.0, prompt_token_ids=prompt_ids)


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
    same = {p.id: _out(p.id, (1, 2, 3)) for p in prompts.prompts}
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
    spec = {p.id: _out(p.id, (1, 2, 3)) for p in prompts.prompts}
    ref = {p.id: _out(p.id, (1, 2, 3)) for p in rest[1:]}
    ref[first.id] = _out(first.id, (1, 2, 4))
    _serve(monkeypatch, {SPECULATIVE: (spec, ["timed out"]), REFERENCE: (ref, ["refused"])},
           errors.ServingError("no /version"))
    evidence = _run(profile, prompts)
    text = evidence.failure_text()
    assert "speculative: timed out" in text and "reference: refused" in text
    assert f"prompt {rest[0].id}: the reference server returned no token ids" in text
    row = next(r for r in evidence.measured["per_prompt"] if r["prompt"] == first.id)
    assert row["identical"] is False and row["first_divergence"] == 2 and row["divergence"] == "unverified"
    # a reference answer without the prompt's ids cannot be looked up as tokens: unverified, never a request
    assert (f"prompt {first.id}, output token 2: the divergence could not be looked up, so it is unverified: the "
            "reference server returned no prompt token ids") in text
    assert evidence.measured["reference"]["version"] == {"error": "no /version"}


def test_a_reference_arm_that_did_not_serve_fails_the_check_naming_it(profile: Profile,
                                                                      prompts: ps.PromptSet) -> None:
    def down() -> str:
        raise errors.RuntimeNotStarted("the reference server did not start: port taken")

    same = {p.id: _out(p.id, (1,)) for p in prompts.prompts}
    jobs = [job for job in arm_jobs(profile, {"losslessness"})]
    arms = Arms(GivenArms({"checkpoint": lambda: SPECULATIVE_URL, "reference": down}),
                [dataclasses.replace(job, measure=lambda client, url: GreedyRun(same)) for job in jobs],
                lambda url: None)
    assert profile.losslessness is not None
    with pytest.raises(errors.RuntimeNotStarted, match="the reference arm did not serve: the reference server did "
                                                       "not start: port taken"):
        greedy_identical(arms.results("losslessness"), prompts, profile.losslessness, {})
    assert arms.order == ["checkpoint"]


# -- against the fault-injecting server: the speculative arm diverges from the reference at one token ------------

AT, SPEC_TOKEN, REF_TOKEN = 5, 999, 105  # the reference server's own output has 100 + i at output token i


def _live(profile: Profile, prompts: ps.PromptSet, logprobs: dict[int, float]) -> tuple[Any, list[dict[str, Any]]]:
    """The level through the run's arm jobs with a real client each, against two fault servers: the speculative
    one puts SPEC_TOKEN at output token AT, the reference answers each lookup with ``logprobs``."""
    assert profile.losslessness is not None and profile.served_model_name == MODEL
    with fault_server(diverge=(AT, SPEC_TOKEN)) as spec, fault_server(lookup_logprobs=logprobs) as ref:
        # Each arm is stopped once its jobs are done, as arms served one after another are.
        servers = {"checkpoint": spec, "reference": ref}
        arms = Arms(GivenArms({arm: (lambda s=s: s.endpoint) for arm, s in servers.items()},
                              stop=lambda arm: servers[arm].stop()),
                    arm_jobs(profile, {"losslessness"}), lambda url: serving.make_client(url, timeout_s=10))
        evidence = greedy_identical(arms.results("losslessness"), prompts, profile.losslessness,
                                    {"endpoint": spec.endpoint})
        return evidence, list(ref.lookups)


@pytest.mark.slow  # a fault server per arm, every prompt sent to both and looked up
def test_a_near_tie_divergence_passes_and_is_listed_with_both_values(profile: Profile,
                                                                     prompts: ps.PromptSet) -> None:
    evidence, lookups = _live(profile, prompts, {REF_TOKEN: -0.6931, SPEC_TOKEN: -0.7001})
    assert evidence.ok, evidence.failure_text()
    n = len(prompts.prompts)
    assert evidence.measured["divergences"] == {"near_tie": n, "real": 0, "unverified": 0}
    assert evidence.measured["near_ties"][0] == {
        "prompt": prompts.prompts[0].id, "category": prompts.prompts[0].category, "position": AT,
        "speculative_token": SPEC_TOKEN, "speculative_logprob": -0.7001, "reference_token": REF_TOKEN,
        "reference_logprob": -0.6931}
    assert f"{n} divergence(s) a near-tie in the target alone (within 0.25 nats)" in evidence.summary
    # the reference's /version was read while it served, not after it was stopped
    assert evidence.measured["reference"]["version"] == {"version": "0.32.0-fault-server"}
    # each lookup sends the prompt and the common prefix as token ids, asking for both tokens by id
    assert len(lookups) == n
    assert lookups[0]["prompt"] == [*range(1, PROMPT_TOKENS + 1), *range(100, 100 + AT)]
    assert lookups[0]["max_tokens"] == 1 and lookups[0]["temperature"] == 0.0
    assert sorted(lookups[0]["logprob_token_ids"]) == [REF_TOKEN, SPEC_TOKEN]
    assert lookups[0]["return_tokens_as_token_ids"] is True


@pytest.mark.slow  # a fault server per arm, every prompt sent to both and looked up
def test_a_real_divergence_fails_naming_prompt_position_tokens_and_logprobs(profile: Profile,
                                                                            prompts: ps.PromptSet) -> None:
    evidence, _ = _live(profile, prompts, {REF_TOKEN: -0.05, SPEC_TOKEN: -3.2})
    assert not evidence.ok
    first = prompts.prompts[0]
    assert (f"prompt {first.id}, output token {AT} (category {first.category}): the speculative output has token "
            f"{SPEC_TOKEN} (log-probability -3.2000 in the target alone) where the target alone chose {REF_TOKEN} "
            f"(-0.0500): 3.1500 nats apart, beyond the near-tie tolerance 0.25") in evidence.failure_text()
    assert evidence.measured["near_ties"] == []


@pytest.mark.slow  # a fault server per arm, every prompt sent to both and looked up
def test_a_token_the_reference_does_not_answer_leaves_the_divergence_unverified(profile: Profile,
                                                                                prompts: ps.PromptSet) -> None:
    evidence, _ = _live(profile, prompts, {REF_TOKEN: -0.05})
    assert not evidence.ok
    assert evidence.measured["divergences"]["unverified"] == len(prompts.prompts)
    assert f"has no log-probability of token {SPEC_TOKEN}" in evidence.failure_text()
