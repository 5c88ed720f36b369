"""qualify.run.checks.load: each load check is the runtime session's evidence of its step; the draft the runtime
loads is held to the pinned checkpoint (the session itself is tested in tests/runtime/)."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from qualify.checkpoint.pinned import pin_folder
from qualify.core import Evidence
from qualify.profile import load_profile
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
    (load.container_started, "start"), (load.ready, "ready"),
])
def test_each_step_is_the_sessions_evidence_of_it(check: Callable[[Any], Evidence], step: str) -> None:
    assert check(FakeSession()).summary == step


class LoggedSession:
    """A started session of the seed profile whose runtime printed ``log``, its load evidence ``found``."""

    def __init__(self, log: str, found: Evidence) -> None:
        self.profile = load_profile("glm53-flash-dflash2-mxfp8-tp4")
        self.plan = SimpleNamespace(env_dict=self.profile.launch_env())
        self.runtime = SimpleNamespace(logs_text=lambda: log)
        self.found = found

    def load_evidence(self) -> Evidence:
        return self.found


def test_the_load_evidence_holds_the_engine_settings_the_log_shows_to_the_launch() -> None:
    engine = ("INFO [core.py:134] Initializing a V1 LLM engine (v0.32.0) with config: model='t', speculative_config="
              "SpeculativeConfig(method='dflash', model='/d', num_spec_tokens=7), tensor_parallel_size={tp}, "
              "decode_context_parallel_size=1, kv_cache_dtype=auto, compilation_config={{'cudagraph_mode': "
              "<CUDAGraphMode.NONE: 0>}}, kernel_config=None\n")
    found = Evidence("items", measured={"items": {"x": None}}, expected={"x": {"description": "d"}})
    found.add("missing evidence 'x'")
    ev = load.load_evidence(LoggedSession(engine.format(tp=4), found))  # type: ignore[arg-type]
    assert ev.summary == "items; the server.log shows the engine settings the launch set"
    assert [f.message for f in ev.findings] == ["missing evidence 'x'"]
    assert ev.measured["items"] == {"x": None} and ev.expected == {"x": {"description": "d"}}
    assert ev.measured["engine_settings"]["tensor_parallel_size"]["status"] == "agrees"
    assert found.measured == {"items": {"x": None}}  # the session's own record is left as it found it
    wrong = load.load_evidence(LoggedSession(engine.format(tp=1), Evidence("items")))  # type: ignore[arg-type]
    [finding] = wrong.findings
    assert finding.message.startswith("the launch set TP=4 (tensor parallel size), but the runtime printed '1'")
    assert finding.file == "server.log"


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


@pytest.mark.slow  # the real CLI in a subprocess
def test_no_docker_engine_is_exit_3_naming_it_and_the_teardown_is_not_run(tmp_path: Path) -> None:
    """No engine answers: the load level's checks are errors naming it, its teardown is not run (nothing was started
    to tear down), no check fails, and the run reaches no verdict."""
    import os
    import subprocess
    import sys

    from qualify.core import Status
    from qualify.report.model import read_json
    from tests.helpers import FIXTURE, REPO, TRACEBACK

    done = subprocess.run(
        [sys.executable, "-m", "qualify.cli", "run", "--checkpoint", str(FIXTURE / "mxfp8"), "--source",
         str(FIXTURE / "source"), "--profile", "fixture", "--levels", "load", "--allow-unpinned",
         "--report-dir", str(tmp_path)],
        cwd=REPO, capture_output=True, text=True, timeout=300,
        env={**os.environ, "DOCKER_HOST": f"unix://{tmp_path}/no-engine.sock"})
    output = done.stdout + done.stderr
    assert done.returncode == 3, output
    assert "qualify: harness fault: no verdict was reached" in done.stderr
    assert "verdict: none: a harness fault kept the run from one" in done.stdout
    assert "verdict: not qualified" not in done.stdout
    assert f"no Docker engine answers at unix://{tmp_path}/no-engine.sock" in done.stderr
    assert TRACEBACK not in output
    (path,) = tmp_path.glob("*/report.json")
    checks = {c.id: c for lvl in read_json(path).levels for c in lvl.checks}
    assert [cid for cid, c in checks.items() if c.status is Status.FAILED] == []
    assert checks["load.image_pinned"].status is Status.ERROR
    assert checks["load.teardown"].status is Status.NOT_RUN
    assert "no container was started, so there was nothing to tear down" in checks["load.teardown"].message
