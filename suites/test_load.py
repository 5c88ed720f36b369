"""Level "load": the pinned runtime launches on the profile's hardware, serves, and shows the load evidence."""

from __future__ import annotations

import pytest

from qualify.checkpoint.pinned import copy_evidence

pytestmark = pytest.mark.load


def test_gpu_preflight(runtime, record):
    """The devices the profile launches on exist and are the profile's GPU model (nvidia-smi)."""
    record(runtime.gpu_preflight())


def test_image_pinned(runtime, record):
    """The runtime image is present locally (never pulled) and is the profile's pinned digest."""
    record(runtime.image())


def test_revisions_pinned(runtime, record):
    """The draft and the target are named at immutable commits."""
    record(runtime.pinning())


def test_draft_identity(runtime, pinned_checkpoint, record):
    """The draft the runtime loads is, file for file and byte for byte, the one the run pinned and checked."""
    expected = {f.path: (f.sha256, f.size) for f in pinned_checkpoint.files}
    record(runtime.draft_identity(expected, lambda root: copy_evidence(pinned_checkpoint, root)))


def test_container_started(started_runtime, record):
    """The container runs the inspected image with the planned GPUs, network, IPC, shm, env and mounts."""
    record(started_runtime.start())


def test_ready(started_runtime, record):
    """/health answers and /v1/models lists the served name before the deadline, and the container stays up."""
    record(started_runtime.ready())


def test_load_evidence(started_runtime, record):
    """The server log shows every load evidence item of the profile (kernel, format, weight size)."""
    record(started_runtime.load_evidence())


def test_teardown(runtime_teardown, record):
    """Every container of the run is removed and none is left (docker ps, label filter)."""
    record(runtime_teardown)
