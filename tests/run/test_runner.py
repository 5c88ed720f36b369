"""Tests for qualify.run.runner: a run's record (levels, redacted command, identities) and its folder,
which is never shared with another run nor overwritten."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

from qualify.errors import HarnessError, RunFolderExists
from qualify.profile import load_profile
from qualify.run import runner
from qualify.run.runner import new_run
from tests.helpers import FIXTURE


def test_measured_levels_are_recorded_but_never_required_or_qualified() -> None:
    profile = load_profile("fixture")
    assert profile.measured_levels == ("load", "smoke", "acceptance", "paired", "losslessness", "throughput",
                                       "speedup")
    assert "throughput" in profile.run_levels and "throughput" not in profile.required_levels
    run = new_run(profile, None, None, ["structure", "throughput"])
    assert [(lv.name, lv.required) for lv in run.levels] == [("structure", True), ("throughput", False)]



def test_a_secret_on_the_command_line_is_not_recorded() -> None:
    token = "hf_RunnerTestTokenDoNotLeak0123456789abc"
    run = new_run(load_profile("fixture"), None, None, ["structure"], ["qualify", "run", f"--token={token}"])
    assert token not in " ".join(run.command)
    assert run.command[:2] == ["qualify", "run"]


def test_a_run_folder_is_made_once_and_never_reused(tmp_path: Path) -> None:
    made = runner.make_run_dir(tmp_path / "reports", "run-1")
    assert made == tmp_path / "reports" / "run-1" and made.is_dir()
    (made / "report.json").write_text("{}")
    with pytest.raises(RunFolderExists, match="run folder already exists; refusing to overwrite"):
        runner.make_run_dir(tmp_path / "reports", "run-1")
    assert (made / "report.json").read_text() == "{}"


def test_a_run_folder_that_cannot_be_made_is_a_harness_error(tmp_path: Path) -> None:
    (tmp_path / "reports").write_text("a file where the folder should be")
    with pytest.raises(HarnessError, match="cannot create the run folder"):
        runner.make_run_dir(tmp_path / "reports", "run-1")


def test_a_clash_draws_a_new_id_and_the_last_clash_is_raised(tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    run = new_run(load_profile("fixture"), None, None, ["structure"])
    taken = run.run_id
    runner.make_run_dir(tmp_path, taken)
    folder = runner.claim_run_dir(tmp_path, run)
    assert run.run_id != taken and folder == tmp_path / run.run_id
    # Every id drawn is taken: after its attempts the run refuses rather than share a folder.
    monkeypatch.setattr(runner, "new_run_id", lambda name: taken)
    with pytest.raises(RunFolderExists):
        runner.claim_run_dir(tmp_path, run, attempts=3)


def test_a_checkpoint_folder_is_described_by_every_file_hash(tmp_path: Path) -> None:
    described = runner.describe_dir(FIXTURE / "mxfp8")
    files = {f["path"]: f for f in described["files"]}
    assert "conversion_manifest.json" in files and "model.safetensors" in files
    assert all(len(f["sha256"]) == 64 and f["size"] > 0 for f in files.values())
    assert described["manifest_sha256"] == files["conversion_manifest.json"]["sha256"]
    assert runner.describe_dir(None) == {"path": None, "files": []}
    assert runner.describe_dir(tmp_path / "absent") == {"path": str(tmp_path / "absent"), "files": []}


def test_sigterm_ends_the_run_through_its_normal_finish() -> None:
    run = new_run(load_profile("fixture"), None, None, ["structure"])
    before = signal.getsignal(signal.SIGTERM)
    with pytest.raises(KeyboardInterrupt), runner.sigterm_as_interrupt(run):
        os.kill(os.getpid(), signal.SIGTERM)
    assert run.interrupted == "SIGTERM"
    assert signal.getsignal(signal.SIGTERM) == before  # the previous handler is back
