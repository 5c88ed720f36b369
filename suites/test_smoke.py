"""Level "smoke": the endpoint serves the model and speculates on a short greedy request."""

from __future__ import annotations

import pytest

from qualify import serving

pytestmark = pytest.mark.smoke


def _smoke(profile):
    smoke = profile.data.get("smoke")
    if smoke is None:
        pytest.skip(f"profile {profile.name} states no [smoke] table: no request size to smoke-test with")
    return int(smoke["max_tokens"]), float(smoke["temperature"])


def test_models_listed(openai_client, served_model, server_info, record):
    """/v1/models lists the served model name."""
    record(serving.check_models(openai_client, served_model, server_info))


def test_completion(openai_client, served_model, profile, record):
    """A completion returns max_tokens tokens with finish_reason "length"."""
    max_tokens, temperature = _smoke(profile)
    record(serving.check_request(openai_client, served_model, serving.SMOKE_COMPLETION, max_tokens=max_tokens,
                                 temperature=temperature, timeout_s=serving.DEFAULT_TIMEOUT_S))


def test_chat_completion(openai_client, served_model, profile, record):
    """A chat completion returns max_tokens tokens with finish_reason "length"."""
    max_tokens, temperature = _smoke(profile)
    record(serving.check_request(openai_client, served_model, serving.SMOKE_CHAT, max_tokens=max_tokens,
                                 temperature=temperature, timeout_s=serving.DEFAULT_TIMEOUT_S))


def test_speculating(openai_client, endpoint, served_model, profile, record):
    """The speculative-decoding counters on /metrics moved during a request (drafts and draft tokens > 0)."""
    max_tokens, temperature = _smoke(profile)
    record(serving.check_speculating(openai_client, endpoint, served_model, serving.SMOKE_COMPLETION,
                                     max_tokens=max_tokens, temperature=temperature,
                                     timeout_s=serving.DEFAULT_TIMEOUT_S))
