"""The paired level against servers the run did not start: fair only when both engines are shown the same.

Two :mod:`tests.fault_server` servers answer like vLLM with the same acceptance, so every
figure of the comparison passes; what decides is whether their engine settings were seen.
Without their logs nothing shows that the source server runs the checkpoint's settings (another
dtype, another target, another proposal length would make the comparison meaningless), so the
level fails and says how to show it; with both logs (``--server-log``, ``--source-server-log``)
the settings are compared, and a difference other than the draft fails naming the key.
"""

from __future__ import annotations

import re
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from qualify.core import Status
from qualify.report.model import Run, read_json
from tests.fault_server import fault_server, serving_profile
from tests.helpers import FIXTURE, REPO, TRACEBACK

LINE = (REPO / "tests" / "data" / "vllm_engine_config.log").read_text(encoding="utf-8").strip()
LOGGED_DRAFT = "/fixtures/dflash-cpu/mxfp8"


def _profile(tmp_path: Path, name: str = "paired") -> Path:
    path = serving_profile(tmp_path / f"{name}.toml")
    # The copy lives elsewhere: its paired prompt set by absolute path. Under load only: what is decided here
    # does not depend on the concurrency, and one request at a time reads the counters around each request.
    text = re.sub(r'path = "\.\./\.\./', lambda _: f'path = "{REPO}/', path.read_text())
    text = re.sub(r"(?m)^concurrency = \[1, 4\]$", "concurrency = [4]", text)
    path.write_text(text)
    return path


def _log(path: Path, draft: str, line: str = LINE) -> Path:
    path.write_text(f"INFO vLLM API server version 0.32.0\n{line.replace(LOGGED_DRAFT, draft)}\nINFO ready\n",
                    encoding="utf-8")
    return path


def _paired(tmp_path: Path, name: str, *extra: str) -> tuple[subprocess.CompletedProcess[str], Run]:
    with fault_server(per_request=True) as candidate, fault_server(per_request=True) as source:
        reports, profile = tmp_path / name, _profile(tmp_path, name)
        proc = subprocess.run(
            [sys.executable, "-m", "qualify.cli", "check", str(FIXTURE / "mxfp8"), "--profile", str(profile),
             "--levels", "paired", "--endpoint", candidate.endpoint, "--source-endpoint", source.endpoint,
             "--report-dir", str(reports), *extra],
            cwd=REPO, capture_output=True, text=True, timeout=600)
    assert TRACEBACK not in proc.stdout + proc.stderr, proc.stderr[-3000:]
    (path,) = reports.glob("*/report.json")
    return proc, read_json(path)


def _engine(run: Run) -> dict:
    (check,) = run.level("paired").checks
    assert check.evidence is not None
    return check.evidence.measured["engine_settings"]


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[subprocess.CompletedProcess[str], Run, Path]]:
    """The four CLI runs (no log, one log, both logs identical but for the draft, another dtype), two at a time.

    Each has its own pair of fault servers and its own report folder, so they share nothing.
    """
    tmp = tmp_path_factory.mktemp("engine-settings")
    ckpt, src = _log(tmp / "ckpt.log", "/drafts/mxfp8"), _log(tmp / "src.log", "/drafts/source")
    other = _log(tmp / "other.log", "/drafts/source", LINE.replace("dtype=torch.float32", "dtype=torch.bfloat16"))
    cases = {"no-logs": (), "one-log": ("--server-log", str(ckpt)),
             "same": ("--server-log", str(ckpt), "--source-server-log", str(src)),
             "other": ("--server-log", str(ckpt), "--source-server-log", str(other))}
    with ThreadPoolExecutor(2) as ex:
        futures = {name: ex.submit(_paired, tmp, name, *extra) for name, extra in cases.items()}
        return {name: (*f.result(), tmp / name) for name, f in futures.items()}


@pytest.mark.slow
def test_without_both_servers_logs_the_comparison_is_not_verified_and_fails(runs) -> None:
    proc, run, reports = runs["no-logs"]
    (check,) = run.level("paired").checks
    assert check.status is Status.FAILED and proc.returncode == 1, proc.stdout[-3000:]
    assert _engine(run)["verified"] is False
    assert ("the two servers' engine settings were not verified: the servers were not started by this run; give "
            "--server-log and --source-server-log") in check.evidence.failure_text()  # type: ignore[union-attr]
    md = (next(reports.glob("*/report.md"))).read_text(encoding="utf-8")
    assert "- Engine settings: **not verified**" in md
    # One side seen is not both: the finding names the log still missing.
    proc, run, _ = runs["one-log"]
    (check,) = run.level("paired").checks
    assert check.status is Status.FAILED and proc.returncode == 1
    assert ("engine settings were not verified: the source draft's server was not started by this run; give "
            "--source-server-log") in check.evidence.failure_text()  # type: ignore[union-attr]


@pytest.mark.slow
def test_both_logs_identical_but_for_the_draft_pass_and_another_dtype_fails(runs) -> None:
    proc, run, reports = runs["same"]
    assert run.level("paired").status is Status.PASSED, proc.stdout[-3000:]
    engine = _engine(run)
    assert engine["verified"] is True and engine["differing_keys"] == [] and engine["findings"] == []
    assert engine["logs_given_by"] == ["--server-log", "--source-server-log"]  # the caller's word, and said so
    md = next(reports.glob("*/report.md")).read_text(encoding="utf-8")
    assert "--server-log and --source-server-log named the log files, taken on the caller's word" in md
    assert "dtype=torch.float32" in LINE
    proc, run, _ = runs["other"]
    assert run.level("paired").status is Status.FAILED and proc.returncode == 1
    assert _engine(run)["differing_keys"] == ["dtype"], _engine(run)


def test_a_server_log_that_is_not_there_is_refused_before_anything_runs(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "qualify.cli", "check", str(FIXTURE / "mxfp8"), "--levels", "paired", "--endpoint",
         "http://127.0.0.1:9/v1", "--source-endpoint", "http://127.0.0.1:9/v1", "--server-log",
         str(tmp_path / "missing.log"), "--report-dir", str(tmp_path)],
        cwd=REPO, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and TRACEBACK not in proc.stderr, (proc.returncode, proc.stderr)
    assert f"--server-log {tmp_path / 'missing.log'}: no such file" in proc.stderr
    assert not list(tmp_path.glob("*/report.json"))
