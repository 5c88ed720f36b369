"""Level "smoke": the endpoint serves the model and speculates on a short greedy request."""

from __future__ import annotations

from typing import Any

from qualify import errors
from qualify.core import Evidence
from qualify.profile import DEFAULT_REQUEST_TIMEOUT_S, Profile, SmokeSpec
from qualify.run.checks.result import Skipped
from qualify.run.fixtures.serving import ServerLog
from qualify.runtime.log_evidence import wait_for_log_evidence
from qualify.serving import client as serving
from qualify.serving import prompt_sets as ps

#: vLLM logs its speculative-decoding metrics every 10 s (VLLM_LOG_STATS_INTERVAL); three intervals.
LOG_EVIDENCE_WAIT_S = 30.0


def _no_smoke(profile: Profile) -> Skipped:
    return Skipped(f"profile {profile.name} states no [smoke] table: no request size to smoke-test with")


def _timeout(profile: Profile) -> float:
    """Seconds each smoke request (and /v1/models) may take: ``$.smoke.request_timeout_s``, else the default."""
    return profile.smoke.request_timeout_s if profile.smoke else DEFAULT_REQUEST_TIMEOUT_S


def _request(client: Any, model: str, prompt: ps.Prompt, smoke: SmokeSpec) -> Evidence:
    return serving.check_request(client, model, prompt, max_tokens=smoke.max_tokens, temperature=smoke.temperature,
                                 timeout_s=smoke.request_timeout_s)


def models_listed(openai_client: Any, served_model: str, server_info: dict[str, Any], profile: Profile) -> Evidence:
    return serving.check_models(openai_client, served_model, server_info, timeout_s=_timeout(profile))


def completion(openai_client: Any, served_model: str, profile: Profile) -> Evidence | Skipped:
    if profile.smoke is None:
        return _no_smoke(profile)
    return _request(openai_client, served_model, serving.SMOKE_COMPLETION, profile.smoke)


def chat_completion(openai_client: Any, served_model: str, profile: Profile) -> Evidence | Skipped:
    if profile.smoke is None:
        return _no_smoke(profile)
    return _request(openai_client, served_model, serving.SMOKE_CHAT, profile.smoke)


def speculating(openai_client: Any, endpoint: str, served_model: str, profile: Profile) -> Evidence | Skipped:
    smoke = profile.smoke
    if smoke is None:
        return _no_smoke(profile)
    return serving.check_speculating(openai_client, endpoint, served_model, serving.SMOKE_COMPLETION,
                                     max_tokens=smoke.max_tokens, temperature=smoke.temperature,
                                     timeout_s=smoke.request_timeout_s)


def log_evidence(openai_client: Any, served_model: str, profile: Profile, server_log: ServerLog) -> Evidence | Skipped:
    smoke = profile.smoke
    if smoke is None:
        return _no_smoke(profile)
    server_log.mark()  # only what the server writes from now on counts: not an earlier run's lines
    try:
        serving.complete(openai_client, served_model, serving.SMOKE_COMPLETION, max_tokens=smoke.max_tokens,
                         temperature=smoke.temperature, timeout_s=smoke.request_timeout_s)
    except errors.ServingError as exc:
        ev = Evidence("a speculative request was answered, and the log shows the smoke evidence")
        ev.add(str(exc))
        return ev
    evidence = wait_for_log_evidence(server_log.read_new, profile, "smoke", log_name=server_log.name,
                                     timeout_s=LOG_EVIDENCE_WAIT_S)
    if server_log.given_by is not None:
        # A log file handed in is what the caller says the server wrote: the report and the gate say whose word.
        evidence.measured["logs_given_by"] = [server_log.given_by]
    return evidence
