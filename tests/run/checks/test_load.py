"""qualify.run.checks.load: each load check is the runtime session's evidence of its step; the draft the runtime
loads is held to the pinned checkpoint (the session itself is tested in tests/runtime/)."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from qualify.checkpoint.pinned import pin_folder
from qualify.core import Evidence
from qualify.run.checks import load


class FakeSession:
    """A runtime session whose every step returns evidence named after the step."""

    def __init__(self) -> None:
        self.expected: dict[str, tuple[str, int]] = {}
        self.check_local: Callable[[Path], Evidence] | None = None

    def __getattr__(self, step: str) -> Callable[[], Evidence]:
        return lambda: Evidence(step)

    def draft_identity(self, expected: dict[str, tuple[str, int]], check_local: Callable[[Path], Evidence]) -> Evidence:
        self.expected, self.check_local = expected, check_local
        return Evidence("draft")


@pytest.mark.parametrize(("check", "step"), [
    (load.gpu_preflight, "gpu_preflight"), (load.image_pinned, "image"), (load.revisions_pinned, "pinning"),
    (load.container_started, "start"), (load.ready, "ready"), (load.load_evidence, "load_evidence"),
])
def test_each_step_is_the_sessions_evidence_of_it(check: Callable[[Any], Evidence], step: str) -> None:
    assert check(FakeSession()).summary == step


def test_the_teardown_is_its_inputs_evidence() -> None:
    done = Evidence("no container left")
    assert load.teardown(done) is done


def test_the_draft_loaded_is_held_to_the_pinned_files(tmp_path: Path) -> None:
    origin = tmp_path / "draft"
    origin.mkdir()
    (origin / "model.safetensors").write_bytes(b"weights")
    (origin / "config.json").write_text("{}")
    pinned = pin_folder(origin, tmp_path / "copy")
    session = FakeSession()
    load.draft_identity(session, pinned)  # type: ignore[arg-type]
    assert session.expected == {f.path: (f.sha256, f.size) for f in pinned.files}
    assert set(session.expected) == {"model.safetensors", "config.json"}
    assert session.check_local is not None
    assert session.check_local(origin).ok
    changed = tmp_path / "changed"
    shutil.copytree(origin, changed)
    (changed / "model.safetensors").write_bytes(b"weightz")
    evidence = session.check_local(changed)
    assert not evidence.ok and "model.safetensors" in evidence.failure_text()
