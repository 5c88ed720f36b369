"""qualify.run.arms: each arm's jobs run while it serves, arm after arm in a fixed order, once per run."""

from __future__ import annotations

from typing import Any

import pytest

from qualify import errors
from qualify.run.arms import ArmJob, ArmResult, Arms, GivenArms, required


class _Servers:
    """Arms started on demand and stopped when done; records what happened, in order."""

    def __init__(self, refuse: set[str] | None = None) -> None:
        self.events: list[str] = []
        self.refuse = refuse or set()

    def endpoint(self, arm: str) -> str:
        self.events.append(f"start {arm}")
        if arm in self.refuse:
            raise errors.RuntimeNotStarted(f"{arm} would not start")
        return f"http://{arm}/v1"

    def done(self, arm: str) -> None:
        self.events.append(f"stop {arm}")


def _job(level: str, arm: str, seen: list[str]) -> ArmJob:
    def measure(client: Any, url: str) -> str:
        seen.append(f"{level}@{arm}")
        return f"{level} on {url} via {client}"

    return ArmJob(level, arm, measure)


def test_every_job_of_an_arm_runs_before_the_next_arm_starts() -> None:
    seen: list[str] = []
    servers = _Servers()
    servers_events = servers.events
    jobs = [_job("paired", "checkpoint", seen), _job("paired", "source", seen),
            _job("losslessness", "reference", seen), _job("losslessness", "checkpoint", seen),
            _job("speedup", "checkpoint", seen), _job("speedup", "reference", seen)]
    arms = Arms(servers, jobs, lambda url: f"client({url})")
    paired = arms.results("paired")
    assert paired["source"] == ArmResult("paired on http://source/v1 via client(http://source/v1)", None,
                                         "http://source/v1")
    # The whole run happened on the first call: checkpoint, then source, then the target alone, each stopped.
    assert servers_events == ["start checkpoint", "stop checkpoint", "start source", "stop source",
                              "start reference", "stop reference"]
    assert seen == ["paired@checkpoint", "losslessness@checkpoint", "speedup@checkpoint", "paired@source",
                    "losslessness@reference", "speedup@reference"]
    assert arms.order == ["checkpoint", "source", "reference"]
    arms.results("speedup")
    assert len(servers_events) == 6  # never measured twice


def test_an_arm_that_does_not_serve_fails_only_its_levels_with_the_reason() -> None:
    seen: list[str] = []
    servers = _Servers(refuse={"source"})
    arms = Arms(servers, [_job("paired", "checkpoint", seen), _job("paired", "source", seen),
                          _job("losslessness", "checkpoint", seen), _job("losslessness", "reference", seen)],
                lambda url: None)
    with pytest.raises(errors.RuntimeNotStarted, match="the source arm did not serve: source would not start"):
        required(arms.results("paired"), ("checkpoint", "source"))
    assert set(required(arms.results("losslessness"), ("checkpoint", "reference"))) == {"checkpoint", "reference"}
    assert "stop source" in servers.events  # whatever it left is released before the next arm


def test_a_serving_error_of_one_job_is_that_jobs_result_and_the_arm_goes_on() -> None:
    def broken(client: Any, url: str) -> Any:
        raise errors.ServingError("connection reset")

    seen: list[str] = []
    arms = Arms(_Servers(), [ArmJob("paired", "checkpoint", broken), _job("speedup", "checkpoint", seen)],
                lambda url: None)
    assert arms.results("paired")["checkpoint"].error == "on the checkpoint arm (http://checkpoint/v1): " \
                                                         "connection reset"
    assert seen == ["speedup@checkpoint"]


def test_a_level_with_no_job_on_an_arm_is_named() -> None:
    arms = Arms(_Servers(), [], lambda url: None)
    with pytest.raises(errors.RuntimeNotStarted, match="the source arm was not measured in this run"):
        required(arms.results("paired"), ("source",))


def test_an_unknown_arm_is_a_harness_error() -> None:
    with pytest.raises(errors.HarnessError, match=r"unknown arm\(s\) draft"):
        Arms(_Servers(), [ArmJob("paired", "draft", lambda c, u: None)], lambda url: None)


def test_given_arms_reach_the_callables_and_name_a_missing_one() -> None:
    stopped: list[str] = []
    given = GivenArms({"checkpoint": lambda: "http://a/v1"}, stop=stopped.append)
    assert given.endpoint("checkpoint") == "http://a/v1"
    with pytest.raises(errors.RuntimeNotStarted, match="no reference server in this run"):
        given.endpoint("reference")
    given.done("checkpoint")
    assert stopped == ["checkpoint"]
