"""qualify.run.context: what a run was asked to do reaches the suites typed, never as pytest options."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from qualify.profile import load_profile
from qualify.run.context import GivenServers, LaunchOptions, RunContext, context_from_pytest
from qualify.run.pipeline import RunOptions, run_qualification
from tests.helpers import FIXTURE


class _Options:
    def __init__(self, **values: Any) -> None:
        self.values = {f"--{k.replace('_', '-')}": v for k, v in values.items()}

    def getoption(self, name: str) -> Any:
        return self.values.get(name, False if name in ("--trust-local-source", "--build-image", "--allow-unpinned",
                                                       "--pass-hf-token") else None)


def test_pytest_options_are_read_once_into_typed_fields(tmp_path: Path) -> None:
    profile = load_profile("fixture")
    ctx = context_from_pytest(_Options(checkpoint=str(tmp_path / "ck"), server_log=str(tmp_path / "s.log"),
                                       endpoint="http://127.0.0.1:9/v1", startup_timeout=12.5, allow_unpinned=True),
                              profile, tmp_path / "run")
    assert ctx.checkpoint == tmp_path / "ck" and isinstance(ctx.checkpoint, Path)
    assert ctx.source is None and ctx.trust_local_source is False
    assert ctx.servers == GivenServers(endpoint="http://127.0.0.1:9/v1", server_log=tmp_path / "s.log")
    assert ctx.servers.logs_given == ("--server-log",)
    assert ctx.launch == LaunchOptions(allow_unpinned=True, startup_timeout_s=12.5, log_dir=tmp_path / "run")
    # --runtime-log-dir, when given, is where the runtime's log goes.
    again = context_from_pytest(_Options(runtime_log_dir=str(tmp_path / "logs")), profile, tmp_path / "run")
    assert again.launch.log_dir == tmp_path / "logs"


def test_a_run_hands_the_suites_its_context_and_no_option_string(tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    import pytest as pt

    seen: dict[str, Any] = {}

    def fake_main(args: list[str], plugins: list[Any]) -> int:
        seen["args"], seen["plugin"] = args, plugins[0]
        return 0

    monkeypatch.setattr(pt, "main", fake_main)
    opts = RunOptions(profile=load_profile("fixture"), levels=["structure"], report_dir=tmp_path / "reports",
                      checkpoint=FIXTURE / "mxfp8", source=FIXTURE / "source", trust_local_source=True,
                      endpoint="http://127.0.0.1:9/v1", allow_unpinned=True)
    run, run_dir, _ = run_qualification(opts)
    # pytest's own options only: where conftests stop, strict markers, plain asserts (no rewritten bytecode).
    suite_options = [a for a in seen["args"] if a.startswith("--") and not a.startswith(("--confcutdir",
                                                                                         "--strict-markers",
                                                                                         "--assert=plain"))]
    assert suite_options == []
    ctx: RunContext = seen["plugin"].context
    assert ctx.profile is opts.profile
    assert (ctx.checkpoint, ctx.source) == (FIXTURE / "mxfp8", FIXTURE / "source")
    assert ctx.trust_local_source and ctx.launch.allow_unpinned
    assert ctx.servers.endpoint == "http://127.0.0.1:9/v1"
    assert ctx.launch.draft_revision == run.checkpoint["revision"] and ctx.launch.log_dir == run_dir
