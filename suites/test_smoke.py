"""Level "smoke": the endpoint serves the model and speculates on a short greedy request."""

from __future__ import annotations

import pytest

from qualify import errors
from qualify.profile import DEFAULT_REQUEST_TIMEOUT_S
from qualify.report.model import Evidence
from qualify.runtime.log_evidence import wait_for_log_evidence
from qualify.serving import client as serving

pytestmark = pytest.mark.smoke


def _smoke(profile):
    if profile.smoke is None:
        pytest.skip(f"profile {profile.name} states no [smoke] table: no request size to smoke-test with")
    return profile.smoke.max_tokens, profile.smoke.temperature


def _timeout(profile):
    """Seconds each smoke request (and /v1/models) may take: ``$.smoke.request_timeout_s``, else the default."""
    return profile.smoke.request_timeout_s if profile.smoke else DEFAULT_REQUEST_TIMEOUT_S


def test_models_listed(openai_client, served_model, server_info, profile, record):
    """/v1/models lists the served model name."""
    record(serving.check_models(openai_client, served_model, server_info, timeout_s=_timeout(profile)))


def test_completion(openai_client, served_model, profile, record):
    """A completion returns max_tokens tokens with finish_reason "length"."""
    max_tokens, temperature = _smoke(profile)
    record(serving.check_request(openai_client, served_model, serving.SMOKE_COMPLETION, max_tokens=max_tokens,
                                 temperature=temperature, timeout_s=_timeout(profile)))


def test_chat_completion(openai_client, served_model, profile, record):
    """A chat completion returns max_tokens tokens with finish_reason "length"."""
    max_tokens, temperature = _smoke(profile)
    record(serving.check_request(openai_client, served_model, serving.SMOKE_CHAT, max_tokens=max_tokens,
                                 temperature=temperature, timeout_s=_timeout(profile)))


def test_speculating(openai_client, endpoint, served_model, profile, record):
    """The speculative-decoding counters on /metrics moved during a request (drafts and draft tokens > 0)."""
    max_tokens, temperature = _smoke(profile)
    record(serving.check_speculating(openai_client, endpoint, served_model, serving.SMOKE_COMPLETION,
                                     max_tokens=max_tokens, temperature=temperature,
                                     timeout_s=_timeout(profile)))


#: vLLM logs its speculative-decoding metrics every 10 s (VLLM_LOG_STATS_INTERVAL); three intervals.
LOG_EVIDENCE_WAIT_S = 30.0


def test_log_evidence(openai_client, served_model, profile, server_log, record):
    """After a speculative request, the server log shows the profile's smoke evidence (the speculator drafted)."""
    max_tokens, temperature = _smoke(profile)
    server_log.mark()  # only what the server writes from now on counts: not an earlier run's lines
    try:
        serving.complete(openai_client, served_model, serving.SMOKE_COMPLETION, max_tokens=max_tokens,
                         temperature=temperature, timeout_s=_timeout(profile))
    except errors.ServingError as exc:
        ev = Evidence("a speculative request was answered, and the log shows the smoke evidence")
        ev.add(str(exc))
        record(ev)
    record(wait_for_log_evidence(server_log.read_new, profile, "smoke", log_name=server_log.name,
                                 timeout_s=LOG_EVIDENCE_WAIT_S))
