"""Tests for qualify.runtime.session: the load level's runtime session refuses to launch on unverified
conditions (a wrong GPU, an unpinned revision) before any container exists, and what it mounts follows
the profile."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest

from qualify.profile import Profile
from qualify.runtime import labels
from qualify.runtime.gpu import Gpu, GpuInventory
from qualify.runtime.session import SERVER_LOG, RuntimeSession, runtime_mounts
from tests.docker_support import (  # noqa: F401  (fixtures)
    CANDIDATE,
    docker_client_fixture,
    docker_ps,
    standin_fixture,
)

H200 = GpuInventory(gpus=(Gpu(0, "NVIDIA H200", 143771, "570.133.20"),), cuda_version="12.8")


def no_docker() -> Any:
    raise AssertionError("the session asked the Docker engine")


@pytest.mark.docker
def test_wrong_gpu_refuses_to_start(docker_client: Any, standin: str, seed: Profile, tmp_path: Path) -> None:
    session = RuntimeSession(seed, run_id=f"test-{uuid.uuid4().hex[:10]}", log_dir=tmp_path,
                             draft_revision=CANDIDATE, allow_unpinned=True, client_factory=lambda: docker_client,
                             gpu_query=lambda: H200)
    started = session.start()
    assert not started.ok
    assert "not started: load.gpu_preflight" in started.failure_text()
    assert "GPU 0 is 'NVIDIA H200'" in session.gpu_preflight().failure_text()
    assert session.runtime is None and session.close() is None
    assert docker_ps(f"{labels.LABEL_RUN}={session.run_id}") == []


def test_a_wrong_gpu_is_found_before_the_engine_is_asked(seed: Profile, tmp_path: Path) -> None:
    session = RuntimeSession(seed, run_id=f"test-{uuid.uuid4().hex[:10]}", log_dir=tmp_path,
                             draft_revision=CANDIDATE, client_factory=no_docker, gpu_query=lambda: H200)
    ev = session.gpu_preflight()
    assert not ev.ok and "GPU 0 is 'NVIDIA H200'" in ev.failure_text()
    assert session.gpu_preflight() is ev  # asked once per session
    assert session.pinning().ok  # the draft is pinned by commit
    assert session.log_path == tmp_path / SERVER_LOG
    assert session.runtime is None and session.close() is None


def test_an_unpinned_draft_is_refused_without_allow_unpinned(seed: Profile, tmp_path: Path) -> None:
    session = RuntimeSession(seed, run_id="test-unpinned", log_dir=tmp_path, client_factory=no_docker,
                             gpu_query=lambda: H200)
    assert "--allow-unpinned" in session.pinning().failure_text()


def test_only_the_vllm_cpu_runtime_mounts_more_than_the_draft(seed: Profile) -> None:
    assert runtime_mounts(seed) == ()


def test_each_session_serves_on_a_port_of_its_own(seed: Profile, tmp_path: Path) -> None:
    """Two runs on one machine never share the profile's port: each launch takes a free one, PORT and endpoint alike."""
    a = RuntimeSession(seed, run_id="test-port-a", log_dir=tmp_path, draft_revision=CANDIDATE, client_factory=no_docker)
    b = RuntimeSession(seed, run_id="test-port-b", log_dir=tmp_path, draft_revision=CANDIDATE, client_factory=no_docker)
    assert a.plan.port != b.plan.port
    for session in (a, b):
        assert dict(session.plan.env)["PORT"] == str(session.plan.port)
        assert session.plan.endpoint == f"http://127.0.0.1:{session.plan.port}/v1"
    assert seed.endpoint == "http://127.0.0.1:8000/v1"  # the profile itself is unchanged
