"""The session's shared ``qualify run``s (tests/live_runs.py), handed out started and awaited by each reader."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.live_runs import QualifyRun, SessionRuns


@pytest.fixture(scope="session")
def session_runs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SessionRuns]:
    runs = SessionRuns(tmp_path_factory.mktemp("qualify-runs"))
    try:
        yield runs
    finally:
        runs.close()


@pytest.fixture(scope="session")
def make_qualify_run(session_runs: SessionRuns, request: pytest.FixtureRequest) -> QualifyRun:
    """make qualify's run: ``fixture-dflash2-cpu``, every level, in the vLLM CPU container (started, not awaited)."""
    return session_runs.get("make-qualify", request.session)


@pytest.fixture(scope="session")
def dflash2_scrambled_run(session_runs: SessionRuns, request: pytest.FixtureRequest) -> QualifyRun:
    """The DFlash 2 fixture with its candidate selector's codebooks scrambled: load, smoke, acceptance."""
    return session_runs.get("dflash2-scrambled", request.session)


@pytest.fixture(scope="session")
def dflash2_scale_run(session_runs: SessionRuns, request: pytest.FixtureRequest) -> QualifyRun:
    """The DFlash 2 fixture's MXFP8 conversion with scale bytes off by one: load through paired."""
    return session_runs.get("dflash2-scale", request.session)


@pytest.fixture(scope="session")
def dflash_cpu_run(session_runs: SessionRuns, request: pytest.FixtureRequest) -> QualifyRun:
    """The CPU DFlash (1) fixture through load, smoke and acceptance in the vLLM CPU container."""
    return session_runs.get("dflash-cpu", request.session)


@pytest.fixture(scope="session")
def scrambled_run(session_runs: SessionRuns, request: pytest.FixtureRequest) -> QualifyRun:
    """The scrambled variant of the CPU DFlash fixture through load, smoke and acceptance in the vLLM CPU container."""
    return session_runs.get("scrambled", request.session)


@pytest.fixture(scope="session")
def fixture_run(session_runs: SessionRuns, request: pytest.FixtureRequest) -> QualifyRun:
    """The ``fixture`` profile's run: checkpoint levels, the stand-in's load, local servers' serving levels, signed."""
    return session_runs.get("fixture", request.session)


@pytest.fixture(scope="session")
def sign_keys(session_runs: SessionRuns) -> tuple[Path, Path]:
    """(private, public) PEM of the EC P-256 key the ``fixture`` run is signed with."""
    return session_runs.keys
