"""Fixtures of the serving levels (smoke, acceptance, losslessness, throughput): the endpoint and its client.

The endpoint is ``--endpoint`` or the profile's ``$.runtime.endpoint``. A level whose
profile table is missing (no ``[acceptance]`` thresholds, say) is *skipped* with the
reason, and a skipped check is never a pass. The acceptance measurement is taken once
per session and shared by the checks that read it.
"""

from __future__ import annotations

from typing import Any

import pytest

from qualify import serving
from qualify import specdecode as sd
from qualify.profile import AcceptanceSpec, LosslessnessSpec, Profile, ThroughputSpec

# What suites/conftest.py star-imports: the fixtures, nothing else.
__all__ = [
    "acceptance_result",
    "acceptance_run",
    "acceptance_spec",
    "endpoint",
    "losslessness_spec",
    "openai_client",
    "prompt_set",
    "reference_endpoint",
    "served_model",
    "server_info",
    "throughput_spec",
]


@pytest.fixture(scope="session")
def endpoint(request: pytest.FixtureRequest, profile: Profile) -> str:
    url = request.config.getoption("--endpoint") or profile.endpoint
    serving.server_root(url)  # a malformed URL is a usage error before any request
    return str(url)


@pytest.fixture(scope="session")
def served_model(profile: Profile) -> str:
    return profile.served_model_name


@pytest.fixture(scope="session")
def openai_client(endpoint: str) -> Any:
    return serving.make_client(endpoint)


@pytest.fixture(scope="session")
def server_info(endpoint: str) -> dict[str, Any]:
    """What the evidence says about the server: its endpoint and ``/version``."""
    try:
        version = serving.fetch_version(endpoint)
    except serving.ServingError as exc:
        version = {"error": str(exc)}
    return {"endpoint": endpoint, "version": version}


@pytest.fixture(scope="session")
def acceptance_spec(profile: Profile) -> AcceptanceSpec:
    if profile.acceptance is None:
        pytest.skip(f"profile {profile.name} states no [acceptance] gate: draft acceptance cannot be qualified")
    return profile.acceptance


@pytest.fixture(scope="session")
def prompt_set(acceptance_spec: AcceptanceSpec) -> serving.PromptSet:
    return serving.load_prompts(acceptance_spec.prompts)


@pytest.fixture(scope="session")
def acceptance_run(
    openai_client: Any, endpoint: str, served_model: str, prompt_set: serving.PromptSet,
    acceptance_spec: AcceptanceSpec,
) -> serving.MeasuredRun:
    return serving.measure_acceptance(
        openai_client, endpoint, served_model, prompt_set.prompts, categories=prompt_set.categories,
        max_tokens=acceptance_spec.max_tokens, temperature=acceptance_spec.temperature,
        timeout_s=acceptance_spec.request_timeout_s,
    )


@pytest.fixture(scope="session")
def acceptance_result(
    acceptance_run: serving.MeasuredRun, acceptance_spec: AcceptanceSpec, prompt_set: serving.PromptSet,
    server_info: dict[str, Any],
) -> tuple[Any, sd.AcceptanceStats | None]:
    thresholds = sd.AcceptanceThresholds(
        min_acceptance_rate=acceptance_spec.min_acceptance_rate,
        min_mean_acceptance_length=acceptance_spec.min_mean_acceptance_length,
        min_category_acceptance_rate=acceptance_spec.min_category_acceptance_rate,
        min_requests=acceptance_spec.min_prompts,
    )
    boot = sd.Bootstrap(acceptance_spec.bootstrap_resamples, acceptance_spec.confidence, acceptance_spec.bootstrap_seed)
    extra = {"prompts": prompt_set.identity(), "server": server_info,
             "requests": {"max_tokens": acceptance_spec.max_tokens, "temperature": acceptance_spec.temperature,
                          "concurrency": 1, "measured": "one prompt at a time, counter deltas per request"}}
    return sd.acceptance_evidence(acceptance_run.measurement, thresholds, boot, extra_measured=extra)


@pytest.fixture(scope="session")
def losslessness_spec(profile: Profile) -> LosslessnessSpec:
    if profile.losslessness is None:
        pytest.skip(f"profile {profile.name} states no [losslessness] table: losslessness cannot be qualified")
    return profile.losslessness


@pytest.fixture(scope="session")
def reference_endpoint(request: pytest.FixtureRequest, losslessness_spec: LosslessnessSpec) -> str:
    url = request.config.getoption("--reference-endpoint") or losslessness_spec.reference_endpoint
    if not url:
        pytest.skip("no reference endpoint (--reference-endpoint or $.losslessness.reference_endpoint): "
                    "nothing to compare the speculative outputs with")
    serving.server_root(url)
    return str(url)


@pytest.fixture(scope="session")
def throughput_spec(profile: Profile) -> ThroughputSpec:
    if profile.throughput is None:
        pytest.skip(f"profile {profile.name} states no [throughput] table: throughput was not measured")
    return profile.throughput
