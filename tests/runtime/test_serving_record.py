"""qualify.runtime.serving_record: what the report records of the run's own containers serving the serving levels
(the record of containers that served is checked with real ones in tests/runtime/test_companions.py)."""

from __future__ import annotations

from typing import Any

from qualify.profile import load_profile
from qualify.runtime.serving_record import serving_summary
from qualify.runtime.session import RuntimeSession
from tests.docker_support import CANDIDATE


def no_docker() -> Any:
    raise AssertionError("the record asked the Docker engine")


def test_a_session_whose_container_never_started_says_so_and_lists_no_server() -> None:
    profile = load_profile("fixture-dflash2-cpu")
    session = RuntimeSession(profile, run_id="test-record", draft_revision=CANDIDATE, client_factory=no_docker)
    record = serving_summary(session)
    assert record["error"] == "the load level's container was never started"
    assert record["kind"] == "runtime" and record["draft_is_checkpoint"] is True
    assert record["servers"] == {} and record["source_draft"] is None
    assert session.plan.name in record["note"]
    assert record["plugin"] is not None and record["plugin"]["changes"]  # the CPU image runs the plugin
    assert record["target"]["revision"] == session.plan.target_revision
