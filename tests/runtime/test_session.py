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


# -- a port taken between the choice and the bind


def _blocked_ports(n: int) -> list[Any]:
    """Sockets bound (not listening) to ports this process reserved: the launch preflight finds them free, the
    runtime's bind does not."""
    import socket

    from qualify.util.ports import free_port

    out = []
    for _ in range(n):
        s = socket.socket()
        s.bind(("127.0.0.1", free_port()))
        out.append(s)
    return out


@pytest.mark.slow
@pytest.mark.docker
def test_the_load_levels_runtime_whose_port_is_taken_is_relaunched_and_serves(
        docker_client: Any, standin: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from qualify.profile import load_profile
    from qualify.runtime import session as s
    from tests.docker_support import fixture_variant
    from tests.runtime.test_plan import CHECKPOINT

    (blocker,) = _blocked_ports(1)
    taken = blocker.getsockname()[1]
    real = s.free_port
    monkeypatch.setattr(s, "free_port", lambda host: taken)  # the session's choice lands on the taken port
    session = RuntimeSession(load_profile(fixture_variant(tmp_path)), run_id=f"test-{uuid.uuid4().hex[:10]}",
                             log_dir=tmp_path, draft_revision=CANDIDATE, checkpoint_dir=CHECKPOINT,
                             allow_unpinned=True, client_factory=lambda: docker_client)
    monkeypatch.setattr(s, "free_port", real)
    try:
        with blocker:
            assert session.start().ok
            ready = session.ready()
        assert ready.ok, ready.failure_text()
        (relaunch,) = ready.measured["relaunched"]
        assert relaunch["port_lost"] == taken and relaunch["port"] == session.plan.port != taken
        assert session.plan.endpoint == f"http://127.0.0.1:{session.plan.port}/v1" and str(taken) not in ready.summary
        assert [e["arm"] for e in session.timeline] == ["checkpoint", "checkpoint"]
        assert session.summary()["relaunched"] == [relaunch]
    finally:
        record = session.close()
    assert record is not None and record.ok
    assert docker_ps(f"{labels.LABEL_RUN}={session.run_id}") == []


TAKEN_TWICE = """
import socket, sys
from qualify.runtime import container, session
from qualify.util.ports import free_port
blockers = []
for _ in range(2):
    s = socket.socket()
    s.bind(("127.0.0.1", free_port()))
    blockers.append(s)
session.free_port = lambda host: blockers[0].getsockname()[1]
container.free_port = lambda host: blockers[1].getsockname()[1]
from qualify.cli import main
sys.exit(main(sys.argv[1:]))
"""


@pytest.mark.docker
@pytest.mark.slow  # the real CLI in a subprocess, two launches of the stand-in
def test_a_port_taken_again_after_the_relaunch_ends_the_run_with_exit_3_naming_it(
        docker_client: Any, standin: str, tmp_path: Path) -> None:
    import subprocess
    import sys

    from qualify.core import Status
    from qualify.report.model import read_json
    from tests.helpers import FIXTURE, REPO, TRACEBACK

    done = subprocess.run(
        [sys.executable, "-c", TAKEN_TWICE, "run", "--checkpoint", str(FIXTURE / "mxfp8"), "--source",
         str(FIXTURE / "source"), "--profile", "fixture", "--levels", "load", "--allow-unpinned",
         "--report-dir", str(tmp_path)], cwd=REPO, capture_output=True, text=True, timeout=300)
    output = done.stdout + done.stderr
    assert done.returncode == 3, output
    assert "could not bind 127.0.0.1:" in done.stderr and "was taken the same way" in done.stderr, output
    assert TRACEBACK not in output
    (path,) = tmp_path.glob("*/report.json")
    run = read_json(path)
    checks = {c.id: c for lvl in run.levels for c in lvl.checks}
    assert [cid for cid, c in checks.items() if c.status is Status.FAILED] == []
    assert checks["load.ready"].status is Status.ERROR and "Address already in use" in checks["load.ready"].message
    assert docker_ps(f"{labels.LABEL_RUN}={run.run_id}") == []
