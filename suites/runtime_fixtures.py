"""Fixtures of the runtime levels: one launch of the profile's pinned runtime per session.

``runtime`` is the :class:`~qualify.runtime.session.RuntimeSession` (nothing started yet);
``started_runtime`` starts it once every preflight step passed. If it cannot start, the
first check that needs it fails with the reason and the others are not run. The
container is removed at the end of the session whatever ends it; a teardown that leaves
a container behind is a harness error of the run (its verdict is then "not qualified").

A profile whose ``[local_server]`` kind is ``runtime`` serves its serving levels from that
same container; its reference server and its source draft's server are started once it serves,
from the same image and plan (:mod:`qualify.runtime.companions`).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from qualify.errors import RuntimeNotStarted
from qualify.profile import Profile
from qualify.report.model import LEVELS, Evidence
from qualify.run.suite_plugin import checkpoint_path, find_plugin, level_of
from qualify.runtime import companions as comp
from qualify.runtime.companions import usable_cores
from qualify.runtime.session import RuntimeSession, build_image, serving_summary


def _run_id(config: pytest.Config) -> str:
    plugin = find_plugin(config)
    if plugin is not None:
        return plugin.run.run_id
    from qualify.util.identifiers import new_run_id

    return new_run_id(config.getoption("--profile") or "fixture")


def _log_dir(config: pytest.Config, run_id: str) -> Path | None:
    explicit = config.getoption("--runtime-log-dir")
    if explicit is not None:
        return Path(explicit)
    # A plain `pytest suites --report-dir D` run writes its report to D/<run-id>/ (the root conftest).
    report_root = config.getoption("--report-dir")
    if report_root is not None and (Path(report_root) / run_id).is_dir():
        return Path(report_root) / run_id
    return None  # a fresh temporary folder; its path is in the evidence


def serving_uses_runtime(config: pytest.Config) -> bool:
    """Whether the serving levels talk to the runtime this run launches (no other endpoint was given).

    So they do when the run has the load level, or when the profile serves them from its
    runtime (``[local_server] kind = "runtime"``) even without it.
    """
    plugin = find_plugin(config)
    if plugin is None or config.getoption("--endpoint") or plugin.local_serving is not None:
        return False
    profile = plugin.profile
    return (any(lvl.name == "load" for lvl in plugin.run.levels)
            or (profile is not None and profile.serves_from_runtime))


def companion_roles(config: pytest.Config, profile: Profile) -> dict[str, comp.SourceDraft | None]:
    """The servers to start beside the runtime: the reference and the source draft's, where this run needs them.

    None where another endpoint was given for it, or where the profile does not serve its
    serving levels from its runtime.
    """
    spec = profile.local_server
    if not serving_uses_runtime(config) or not profile.serves_from_runtime or spec is None:
        return {}
    plugin = find_plugin(config)
    levels = {lvl.name for lvl in plugin.run.levels} if plugin is not None else set(LEVELS)
    roles: dict[str, comp.SourceDraft | None] = {}
    if spec.reference and not config.getoption("--reference-endpoint") and levels & {"losslessness", "speedup"}:
        roles[comp.REFERENCE] = None
    source = config.getoption("--source") or spec.source_draft
    if ("paired" in levels and profile.paired is not None and not config.getoption("--source-endpoint")
            and source is not None and Path(source).is_dir()):
        from qualify.checkpoint.checksums import folder_revision

        # Mounted at its content revision: the snapshot the source server loads is named by its bytes.
        roles[comp.SOURCE] = comp.SourceDraft(Path(source).resolve(), profile.source_repo or "qualify/source-draft",
                                              folder_revision(source))
    return roles


def later_levels_need_runtime(session: pytest.Session) -> bool:
    """Whether a check of a level after ``load`` uses the running server (then teardown waits for it)."""
    after = LEVELS[LEVELS.index("load") + 1:]
    later = [item for item in session.items if level_of(item) in after]
    if later and serving_uses_runtime(session.config):
        return True
    return any({"runtime", "started_runtime"} & set(getattr(item, "fixturenames", ())) for item in later)


@pytest.fixture(scope="session")
def runtime(request: pytest.FixtureRequest, profile: Profile) -> Iterator[RuntimeSession]:
    config = request.config
    run_id = _run_id(config)
    checkpoint = checkpoint_path(config)  # the run's pinned copy, which the container mounts read-only
    plugin = find_plugin(config)
    image_digest = config.getoption("--image-digest")
    if config.getoption("--build-image") and image_digest is None:
        image_digest, build = build_image(profile)
        if plugin is not None:
            plugin.run.environment["runtime_image_build"] = build
            if image_digest is None:
                plugin.run.errors.append(f"the runtime image could not be built: {build['error']}")
    session = RuntimeSession(
        profile,
        run_id=run_id,
        log_dir=_log_dir(config, run_id),
        draft_revision=config.getoption("--draft-revision"),
        checkpoint_dir=Path(checkpoint) if checkpoint else None,
        hf_cache=config.getoption("--hf-cache"),
        allow_unpinned=config.getoption("--allow-unpinned"),
        pass_hf_token=config.getoption("--pass-hf-token"),
        startup_timeout_s=config.getoption("--startup-timeout"),
        image_digest=image_digest,
        companions=companion_roles(config, profile),
        # vLLM CPU engines spread over the cores (by default each binds the same ones).
        cores=usable_cores() if profile.image_build == "vllm-cpu" else (),
    )
    try:
        yield session
    finally:
        record = session.close()
        if plugin is not None:
            plugin.run.environment["runtime"] = session.summary()
            if session.runtime is not None and serving_uses_runtime(config) and profile.serves_from_runtime:
                plugin.run.environment["local_server"] = serving_summary(session)
            if record is not None and not record.ok:
                plugin.run.errors.append(
                    f"runtime teardown left containers behind or failed: {', '.join(record.left + record.errors)}")


@pytest.fixture(scope="session")
def started_runtime(runtime: RuntimeSession) -> RuntimeSession:
    evidence = runtime.start()
    if not evidence.ok:
        raise RuntimeNotStarted("; ".join(f.message for f in evidence.findings))
    return runtime


@pytest.fixture(scope="session")
def serving_runtime(started_runtime: RuntimeSession) -> RuntimeSession:
    """The runtime the serving levels talk to, once it serves; else they fail with the reason it does not."""
    ready = started_runtime.ready()
    if not ready.ok:
        raise RuntimeNotStarted("the runtime did not become ready: " + "; ".join(f.message for f in ready.findings))
    return started_runtime


@pytest.fixture
def runtime_teardown(request: pytest.FixtureRequest, runtime: RuntimeSession) -> Evidence:
    """The teardown's evidence: done now, or -- when a later level still needs the server -- armed for the end."""
    if later_levels_need_runtime(request.session):
        return runtime.teardown_armed()
    return runtime.teardown()
