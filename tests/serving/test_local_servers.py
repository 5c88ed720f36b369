"""Tests for qualify.serving.local_servers: which draft a local server serves, and why it cannot."""

from __future__ import annotations

from pathlib import Path

import pytest

from qualify.errors import HarnessError
from qualify.profile import load_profile


def test_local_serving_serves_the_checkpoint_under_test(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import dataclasses

    from qualify.serving.local_servers import LocalServing

    profile = load_profile("fixture")
    assert profile.local_server is not None
    spec = dataclasses.replace(profile.local_server, serve_checkpoint=True, draft=None, method="dflash",
                               exercised="DFlash proposer on CPU")
    monkeypatch.setattr(type(profile), "local_server", property(lambda self: spec))
    checkpoint = tmp_path / "ckpt"
    local = LocalServing(profile, tmp_path / "logs", checkpoint=checkpoint)
    assert local.draft == checkpoint.resolve()
    summary = local.summary()
    assert summary["draft_is_checkpoint"] is True and summary["method"] == "dflash"
    assert "the checkpoint under test itself" in summary["note"]
    assert summary["exercised"] == "DFlash proposer on CPU"
    # Without a checkpoint folder there is nothing to serve: every serving check is told why.
    none = LocalServing(profile, tmp_path / "logs")
    with pytest.raises(HarnessError, match="serve_checkpoint is set but the run has no checkpoint"):
        none.endpoint()
    none.stop()



class _Server:
    """A local server that records when it starts and stops."""

    def __init__(self, name: str, events: list[str]) -> None:
        self.name, self.events, self.process = name, events, None
        self.endpoint = f"http://{name}/v1"
        self.log_path = Path("/nonexistent")

    def start(self) -> None:
        self.events.append(f"start {self.name}")
        self.process = object()

    def stop(self) -> None:
        if self.process is not None:
            self.events.append(f"stop {self.name}")
            self.process = None


def _local(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, events: list[str]) -> object:
    from qualify.serving import local_servers as ls

    local = ls.LocalServing(load_profile("fixture"), tmp_path / "logs", checkpoint=tmp_path / "ckpt")

    def prepare(self: ls.LocalServing) -> list[_Server]:
        self.servers = {name: _Server(name, events) for name in ("speculative", "reference", "source")}  # type: ignore
        return list(self.servers.values())  # type: ignore[arg-type]

    monkeypatch.setattr(ls.LocalServing, "_prepare", prepare)
    monkeypatch.setattr(ls, "wait_all_ready", lambda servers: None)
    monkeypatch.setattr(ls, "_check_plugin", lambda name, server: None)
    return local


def test_local_arms_run_one_after_another(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    events: list[str] = []
    local = _local(monkeypatch, tmp_path, events)
    assert not local.side_by_side  # type: ignore[attr-defined]
    assert local.endpoint() == "http://speculative/v1"  # type: ignore[attr-defined]
    assert events == ["start speculative"]  # alone: the other arms wait their turn
    assert local.arm_endpoint("source") == "http://source/v1"  # type: ignore[attr-defined]
    assert events == ["start speculative", "stop speculative", "start source"]
    local.stop_arm("source")  # type: ignore[attr-defined]
    assert local.arm_endpoint("reference") == "http://reference/v1"  # type: ignore[attr-defined]
    assert events[-2:] == ["stop source", "start reference"]
    with pytest.raises(HarnessError, match="include no draft server"):
        local.arm_endpoint("draft")  # type: ignore[attr-defined]
    local.stop()  # type: ignore[attr-defined]
    assert events[-1] == "stop reference"


def test_local_arms_side_by_side_start_together(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    events: list[str] = []
    local = _local(monkeypatch, tmp_path, events)
    local.side_by_side = True  # type: ignore[attr-defined]
    local.endpoint()  # type: ignore[attr-defined]
    assert sorted(events) == ["start reference", "start source", "start speculative"]
    assert local.arm_endpoint("source") == "http://source/v1"  # type: ignore[attr-defined]
    assert len(events) == 3  # nothing stopped or started again
    local.stop()  # type: ignore[attr-defined]
