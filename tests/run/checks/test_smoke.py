"""qualify.run.checks.smoke: the smoke requests take the profile's [smoke] size (a profile without one skips
them, saying so), and the log evidence is read from what the server wrote after the request only."""

from __future__ import annotations

from typing import Any

import pytest

from qualify import errors
from qualify.core import Evidence
from qualify.profile import Profile, load_profile
from qualify.run.checks import smoke
from qualify.run.checks.result import Skipped
from qualify.run.fixtures.serving import ServerLog
from qualify.serving import client as serving
from qualify.serving import prompt_sets as ps
from tests.helpers import REPO

EVIDENCE_LINE = "SpecDecoding metrics: Mean acceptance length: 3.1, Drafted: 64 tokens\n"


@pytest.fixture(scope="module")
def profile() -> Profile:
    return load_profile("fixture")


@pytest.fixture(scope="module")
def no_smoke(tmp_path_factory: pytest.TempPathFactory) -> Profile:
    text = (REPO / "qualify" / "profiles" / "fixture.toml").read_text()
    assert "[smoke]\nmax_tokens = 32\ntemperature = 0.0\n" in text
    path = tmp_path_factory.mktemp("profile") / "no-smoke.toml"
    path.write_text(text.replace("[smoke]\nmax_tokens = 32\ntemperature = 0.0\n", ""))
    return load_profile(path)


def _log(text: list[str]) -> ServerLog:
    return ServerLog("server.log", lambda: "".join(text))


def test_a_profile_without_smoke_skips_the_requests_saying_why(no_smoke: Profile,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(serving, "check_models", lambda *a, **kw: Evidence("listed"))
    reason = f"profile {no_smoke.name} states no [smoke] table: no request size to smoke-test with"
    for result in (smoke.completion(None, "m", no_smoke), smoke.chat_completion(None, "m", no_smoke),
                   smoke.speculating(None, "http://x/v1", "m", no_smoke),
                   smoke.log_evidence(None, "m", no_smoke, _log([]))):
        assert result == Skipped(reason)
    # /v1/models needs no request size: it is checked all the same.
    assert smoke.models_listed(None, "m", {}, no_smoke) == Evidence("listed")


def test_the_requests_take_the_profiles_smoke_size(profile: Profile, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[tuple[ps.Prompt, dict[str, Any]]] = []

    def check_request(client: Any, model: str, prompt: ps.Prompt, **kw: Any) -> Evidence:
        calls.append((prompt, kw))
        return Evidence("answered")

    monkeypatch.setattr(serving, "check_request", check_request)
    assert isinstance(smoke.completion(None, "m", profile), Evidence)
    assert isinstance(smoke.chat_completion(None, "m", profile), Evidence)
    assert profile.smoke is not None
    size = {"max_tokens": 32, "temperature": 0.0, "timeout_s": profile.smoke.request_timeout_s}
    assert calls == [(serving.SMOKE_COMPLETION, size), (serving.SMOKE_CHAT, size)]


def test_only_what_the_server_logs_after_the_request_counts(profile: Profile, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(smoke, "LOG_EVIDENCE_WAIT_S", 0.2)
    written = ["an earlier run's line: " + EVIDENCE_LINE]
    monkeypatch.setattr(serving, "complete", lambda *a, **kw: None)
    stale = smoke.log_evidence(None, "m", profile, _log(written))
    assert isinstance(stale, Evidence) and not stale.ok
    assert "speculative_request_completed" in stale.failure_text()

    monkeypatch.setattr(serving, "complete", lambda *a, **kw: written.append(EVIDENCE_LINE))
    fresh = smoke.log_evidence(None, "m", profile, _log(written))
    assert isinstance(fresh, Evidence) and fresh.ok, fresh.failure_text()


def test_a_request_that_fails_is_the_finding(profile: Profile, monkeypatch: pytest.MonkeyPatch) -> None:
    def complete(*a: Any, **kw: Any) -> None:
        raise errors.ServingError("the server answered 503")

    monkeypatch.setattr(serving, "complete", complete)
    evidence = smoke.log_evidence(None, "m", profile, _log([EVIDENCE_LINE]))
    assert isinstance(evidence, Evidence) and not evidence.ok
    assert evidence.failure_text().splitlines()[1:] == ["  - the server answered 503"]



def test_evidence_read_from_a_log_the_caller_gave_says_whose_word_it_is(profile: Profile,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """--server-log is the caller's word: the evidence records it, so the gate never counts the level."""
    from qualify.release.attestation import logs_given_by

    monkeypatch.setattr(smoke, "LOG_EVIDENCE_WAIT_S", 0.2)
    written: list[str] = []
    monkeypatch.setattr(serving, "complete", lambda *a, **kw: written.append(EVIDENCE_LINE))
    given = ServerLog("server.log", lambda: "".join(written), given_by="--server-log")
    evidence = smoke.log_evidence(None, "m", profile, given)
    assert isinstance(evidence, Evidence) and evidence.ok and evidence.measured["logs_given_by"] == ["--server-log"]
    assert logs_given_by(evidence.to_dict()["measured"]) == ["--server-log"]
    started = smoke.log_evidence(None, "m", profile, _log(written))  # a log of a server this run started
    assert isinstance(started, Evidence) and "logs_given_by" not in started.measured
