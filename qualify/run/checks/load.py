"""Level "load": the pinned runtime launches on the profile's hardware, serves, and shows the load evidence.

The runtime session (:class:`qualify.runtime.session.RuntimeSession`) does the work; each step's
evidence is taken once per run, so a check reads what the launch itself found.
"""

from __future__ import annotations

from pathlib import Path

from qualify.checkpoint.pinned import PinnedFolder, copy_evidence
from qualify.core import Evidence
from qualify.run.suite_plugin import LevelNotRun
from qualify.runtime.session import SERVER_LOG, RuntimeSession
from qualify.serving.engine_config import engine_settings_evidence


def gpu_preflight(runtime: RuntimeSession) -> Evidence:
    return runtime.gpu_preflight()


def image_pinned(runtime: RuntimeSession) -> Evidence:
    return runtime.image()


def revisions_pinned(runtime: RuntimeSession) -> Evidence:
    return runtime.pinning()


def draft_identity(runtime: RuntimeSession, pinned_checkpoint: PinnedFolder) -> Evidence:
    expected = {f.path: (f.sha256, f.size) for f in pinned_checkpoint.files}

    def check_local(root: Path) -> Evidence:
        return copy_evidence(pinned_checkpoint, root)

    return runtime.draft_identity(expected, check_local)


def container_started(started_runtime: RuntimeSession) -> Evidence:
    return started_runtime.start()


def ready(started_runtime: RuntimeSession) -> Evidence:
    return started_runtime.ready()


def load_evidence(started_runtime: RuntimeSession) -> Evidence:
    """The profile's load evidence items, and the engine settings the launch set read back from the same log."""
    ev = started_runtime.load_evidence()
    runtime = started_runtime.runtime
    log = runtime.logs_text() if runtime is not None else ""
    # The draft's load starts where the profile's anchored items say (its attention backend is printed after it).
    anchor = next((e.after_pattern for e in started_runtime.profile.evidence
                   if e.level == "load" and e.after_pattern is not None), None)
    settings = engine_settings_evidence(log, started_runtime.plan.env_dict, draft_anchor=anchor, log_name=SERVER_LOG)
    # A new record: the session keeps its own step's evidence as it found it.
    out = Evidence(f"{ev.summary}; {settings.summary}", list(ev.findings), {**ev.measured, **settings.measured},
                   dict(ev.expected), ev.findings_total)
    for finding in settings.findings:
        out.add(finding.message, file=finding.file)
    return out


def teardown(runtime_teardown: Evidence) -> Evidence:
    # The input tears the runtime down (or arms that for the end, when a later level still needs it).
    if runtime_teardown.measured.get("started") is False:
        # Nothing was started (no Docker engine, a preflight that refused): nothing to judge, and no failure of the
        # checkpoint's; whatever kept the container from starting is its own check's error or failure.
        raise LevelNotRun(f"not run: no container was started, so there was nothing to tear down "
                          f"({runtime_teardown.summary})")
    return runtime_teardown
