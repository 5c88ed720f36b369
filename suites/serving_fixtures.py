"""Fixtures of the serving levels (smoke, acceptance, losslessness, throughput): the endpoint and its client.

The endpoint is ``--endpoint``; else the local servers of a ``[local_server]`` of kind
``vllm-cpu``; else the runtime container the load level launched (with its companion
reference and source draft servers for ``[local_server]`` kind ``runtime``); else the
profile's ``$.runtime.endpoint``. A level whose
profile table is missing (no ``[acceptance]`` thresholds, say) is *skipped* with the
reason, and a skipped check is never a pass. The acceptance measurement is taken once
per session and shared by the checks that read it.
"""

from __future__ import annotations

from functools import partial
from pathlib import Path
from typing import Any

import pytest

from qualify import errors
from qualify.profile import AcceptanceSpec, LosslessnessSpec, PairedSpec, Profile, SpeedupSpec, ThroughputSpec
from qualify.run.suite_plugin import find_plugin
from qualify.runtime.log_evidence import read_log
from qualify.serving import client as serving
from qualify.serving import paired_measure as pm
from qualify.serving import specdecode as sd
from qualify.serving.engine_config import same_engine_settings
from qualify.serving.prompt_sets import chat_template_identity
from suites.runtime_fixtures import serving_uses_runtime

# What suites/conftest.py star-imports: the fixtures, nothing else.
__all__ = [
    "acceptance_result",
    "acceptance_run",
    "acceptance_spec",
    "endpoint",
    "losslessness_spec",
    "openai_client",
    "paired_result",
    "paired_spec",
    "prompt_set",
    "reference_endpoint",
    "served_model",
    "server_info",
    "server_log",
    "source_endpoint",
    "speedup_spec",
    "throughput_spec",
]


def _local_serving(config: pytest.Config) -> Any:
    """The run's local servers, unless ``--endpoint`` names the server to talk to."""
    plugin = find_plugin(config)
    if plugin is None or config.getoption("--endpoint"):
        return None
    return plugin.local_serving


@pytest.fixture(scope="session")
def endpoint(request: pytest.FixtureRequest, profile: Profile) -> str:
    """``--endpoint``; else the run's local servers; else the runtime the load level launched; else the profile's."""
    url = request.config.getoption("--endpoint")
    if not url:
        local = _local_serving(request.config)
        if local is not None:
            url = local.endpoint()  # starts the servers, or waits for them
        else:
            if serving_uses_runtime(request.config):
                request.getfixturevalue("serving_runtime")  # the same server, started once, removed at the end
            url = profile.endpoint
    serving.server_root(url)  # a malformed URL is a usage error before any request
    return str(url)


class ServerLog:
    """The log of the server the serving levels talk to; ``mark()`` then ``read_new()`` gives what came after."""

    def __init__(self, name: str, read: Any) -> None:
        self.name = name
        self._read = read
        self._offset = 0

    def mark(self) -> None:
        self._offset = len(self._read())

    def read_new(self) -> str:
        return self._read()[self._offset:]


@pytest.fixture(scope="session")
def server_log(request: pytest.FixtureRequest, endpoint: str) -> ServerLog:
    """``--server-log``; else the log of the server this run started (local or the launched runtime)."""
    explicit = request.config.getoption("--server-log")
    if explicit is not None:
        return ServerLog(str(explicit), partial(read_log, Path(explicit)))
    local = _local_serving(request.config)
    if local is not None:
        path = local.servers["speculative"].log_path
        return ServerLog(path.name, partial(read_log, path))
    if serving_uses_runtime(request.config):
        rt = request.getfixturevalue("serving_runtime")
        return ServerLog("server.log", rt.runtime.logs_text)
    pytest.skip(f"no log of the server at {endpoint}: it was not started by this run and no --server-log was given, "
                "so the profile's log evidence cannot be read")


@pytest.fixture(scope="session")
def served_model(profile: Profile) -> str:
    return profile.served_model_name


@pytest.fixture(scope="session")
def openai_client(endpoint: str) -> Any:
    return serving.make_client(endpoint)


@pytest.fixture(scope="session")
def server_info(request: pytest.FixtureRequest, endpoint: str) -> dict[str, Any]:
    """What the evidence says about the server: its endpoint and ``/version``."""
    try:
        version = serving.fetch_version(endpoint)
    except errors.ServingError as exc:
        version = {"error": str(exc)}
    info: dict[str, Any] = {"endpoint": endpoint, "version": version}
    local = _local_serving(request.config)
    if local is not None:
        info["local_server"] = local.brief()  # what was served: on a CPU, a stand-in draft
    elif not request.config.getoption("--endpoint") and serving_uses_runtime(request.config):
        info["runtime"] = _runtime_brief(request.getfixturevalue("serving_runtime"))
    return info


def _runtime_brief(rt: Any) -> dict[str, Any]:
    """The load level's container the serving levels talk to, and the draft it mounts (its content revision)."""
    out = rt.served_by()
    if rt.checkpoint_dir is not None and rt.hf_cache is None:
        from qualify.checkpoint.checksums import folder_revision

        # Recomputed from the mounted folder's bytes now: what the container reads is this revision.
        content = folder_revision(rt.checkpoint_dir)
        out["checkpoint"]["content_revision"] = content
        out["checkpoint"]["content_revision_is_mounted_revision"] = content == out["checkpoint"]["revision"]
    return out


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
def reference_endpoint(request: pytest.FixtureRequest, profile: Profile) -> str:
    """The target without a speculator: ``--reference-endpoint``; else the local one; else the profile's."""
    url = request.config.getoption("--reference-endpoint")
    local = _local_serving(request.config)
    if not url and local is not None:
        url = local.reference_endpoint()
    if not url and _runtime_companion(request, "reference"):
        url = request.getfixturevalue("serving_runtime").companion_endpoint("reference")
    url = url or (profile.losslessness.reference_endpoint if profile.losslessness is not None else None)
    if not url:
        pytest.skip("no reference endpoint (--reference-endpoint or $.losslessness.reference_endpoint): "
                    "nothing to compare the speculative server with")
    serving.server_root(url)
    return str(url)


@pytest.fixture(scope="session")
def throughput_spec(profile: Profile) -> ThroughputSpec:
    if profile.throughput is None:
        pytest.skip(f"profile {profile.name} states no [throughput] table: throughput was not measured")
    return profile.throughput


@pytest.fixture(scope="session")
def paired_spec(profile: Profile) -> PairedSpec:
    if profile.paired is None:
        pytest.skip(f"profile {profile.name} states no [paired] table: the checkpoint was not compared with its "
                    "source draft")
    return profile.paired


@pytest.fixture(scope="session")
def source_endpoint(request: pytest.FixtureRequest, paired_spec: PairedSpec) -> str:
    """``--source-endpoint``; else the source draft's local server; else ``$.paired.source_endpoint``."""
    url = request.config.getoption("--source-endpoint")
    local = _local_serving(request.config)
    if not url and local is not None:
        url = local.source_endpoint()
    if not url and _runtime_companion(request, "source"):
        url = request.getfixturevalue("serving_runtime").companion_endpoint("source")
    url = url or paired_spec.source_endpoint
    if not url:
        pytest.skip("no server of the source draft (--source-endpoint, [local_server] source_draft or "
                    "$.paired.source_endpoint): the checkpoint cannot be compared with the draft it was made from")
    serving.server_root(url)
    return str(url)


def _runtime_companion(request: pytest.FixtureRequest, role: str) -> bool:
    """Whether this run starts ``role``'s server beside the runtime (``[local_server] kind = "runtime"``)."""
    if not serving_uses_runtime(request.config):
        return False
    return role in request.getfixturevalue("runtime").companion_roles


def _paired_logs(request: pytest.FixtureRequest) -> tuple[dict[str, str] | None, str]:
    """Both paired servers' logs (checkpoint, source), or None and why they are not known.

    Each side's log is its flag's file (``--server-log``, ``--source-server-log``) or, for a server this
    run started (a local server, the runtime or its companion), that server's own log; a server given
    by endpoint with no log file is not seen.
    """
    config = request.config
    local = _local_serving(config)
    started = (request.getfixturevalue("serving_runtime").server_logs()
               if local is None and serving_uses_runtime(config) else {})

    def side(log_flag: str, endpoint_flag: str, local_role: str, started_role: str) -> str | None:
        if config.getoption(log_flag):
            return read_log(Path(config.getoption(log_flag)))
        if config.getoption(endpoint_flag):
            return None  # a server given by endpoint: only its log file shows its settings
        if local is not None and local_role in local.servers:
            return read_log(local.servers[local_role].log_path)
        return started[started_role]() if started_role in started else None

    checkpoint = side("--server-log", "--endpoint", "speculative", "runtime")
    source = side("--source-server-log", "--source-endpoint", "source", "source")
    if checkpoint is not None and source is not None:
        return {"checkpoint": checkpoint, "source": source}, ""
    missing = [(who, flag) for who, flag, log in (("checkpoint's", "--server-log", checkpoint),
                                                  ("source draft's", "--source-server-log", source)) if log is None]
    if len(missing) == 2:
        return None, ("the servers were not started by this run; give --server-log and --source-server-log to "
                      "compare their engine settings")
    (who, flag), = missing
    return None, f"the {who} server was not started by this run; give {flag} to compare the engine settings"


@pytest.fixture(scope="session")
def paired_result(
    request: pytest.FixtureRequest, openai_client: Any, endpoint: str, source_endpoint: str, served_model: str,
    paired_spec: PairedSpec, profile: Profile, server_info: dict[str, Any],
) -> tuple[Any, list[Any]]:
    """Both drafts measured at every concurrency of the profile, paired, and decided (taken once per session)."""
    req = pm.Request(model=served_model, max_tokens=paired_spec.max_tokens, temperature=paired_spec.temperature,
                     timeout_s=paired_spec.request_timeout_s, proposal_length=profile.proposal_length,
                     full_block=paired_spec.full_block)
    local = _local_serving(request.config)
    spec = profile.local_server
    target = local.target if local is not None else (spec.target if spec is not None else None)
    extra = {"chat_template": chat_template_identity(target), "server": server_info}
    evidence, decisions = pm.paired_level((openai_client, endpoint),
                                          (serving.make_client(source_endpoint), source_endpoint),
                                          paired_spec, req, extra_measured=extra)
    # Read after the measurement: both engines logged their settings long before they answered.
    logs, why = _paired_logs(request)
    if logs is None:
        # A comparison is fair only between identical engines but for the draft: unseen is not shown.
        evidence.measured["engine_settings"] = {"verified": False, "why": why}
        evidence.add(f"the two servers' engine settings were not verified: {why}")
    else:
        same = same_engine_settings(logs)
        # A log file handed in is what the caller says the server wrote: the report says whose word it is.
        given = [flag for flag in ("--server-log", "--source-server-log") if request.config.getoption(flag)]
        evidence.measured["engine_settings"] = {"verified": True, "summary": same.summary, **same.measured,
                                                "findings": [f.message for f in same.findings],
                                                "logs_given_by": given}
        for finding in same.findings:
            evidence.add(finding.message)
    return evidence, decisions


@pytest.fixture(scope="session")
def speedup_spec(profile: Profile) -> SpeedupSpec:
    if profile.speedup is None:
        pytest.skip(f"profile {profile.name} states no [speedup] table: the speedup was not measured")
    return profile.speedup
