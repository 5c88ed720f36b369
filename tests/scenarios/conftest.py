"""The session's shared ``qualify run``s (tests/live_runs.py), one fixture per run, handed out started."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from tests.live_runs import RUNS, QualifyRun, RunSpec, SessionRuns


def _run_fixture(spec: RunSpec) -> Callable[..., QualifyRun]:
    @pytest.fixture(scope="session", name=spec.fixture)
    def run(session_runs: SessionRuns) -> QualifyRun:
        return session_runs.get(spec.name)

    run.__doc__ = spec.doc + " (Started, not awaited: ``.wait()`` reads what it did.)"
    return run


for _spec in RUNS:
    globals()[_spec.fixture] = _run_fixture(_spec)


@pytest.fixture(scope="session")
def sign_keys(session_runs: SessionRuns) -> tuple[Path, Path]:
    """(private, public) PEM of the EC P-256 key the ``fixture`` run is signed with."""
    return session_runs.keys
