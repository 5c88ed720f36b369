"""Level "load": the pinned runtime launches on the profile's hardware, serves, and shows the load evidence.

The runtime session (:class:`qualify.runtime.session.RuntimeSession`) does the work; each step's
evidence is taken once per run, so a check reads what the launch itself found.
"""

from __future__ import annotations

from pathlib import Path

from qualify.checkpoint.pinned import PinnedFolder, copy_evidence
from qualify.core import Evidence
from qualify.runtime.session import RuntimeSession


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
    return started_runtime.load_evidence()


def teardown(runtime_teardown: Evidence) -> Evidence:
    # The input tears the runtime down (or arms that for the end, when a later level still needs it).
    return runtime_teardown
