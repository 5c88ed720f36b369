"""The load level end to end: ``pytest suites --levels load`` against the stand-in runtime, report included."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from qualify.runtime import labels
from tests.docker_support import CANDIDATE, docker_client_fixture, docker_ps, fixture_variant, standin_fixture  # noqa: F401
from tests.helpers import FIXTURE, REPO

pytestmark = [pytest.mark.docker, pytest.mark.slow]


def run_load(tmp_path: Path, profile: Path, *extra: str) -> tuple[dict[str, Any], Path, str]:
    reports = tmp_path / "reports"
    done = subprocess.run(
        [sys.executable, "-m", "pytest", str(REPO / "suites"), "-p", "no:cacheprovider", "-q",
         "--checkpoint", str(FIXTURE / "mxfp8"), "--profile", str(profile), "--levels", "load",
         "--report-dir", str(reports), "--draft-revision", CANDIDATE, *extra],
        cwd=REPO, capture_output=True, text=True, timeout=300,
    )
    (run_dir,) = list(reports.iterdir())
    report = json.loads((run_dir / "report.json").read_text())
    assert docker_ps(f"{labels.LABEL_RUN}={report['run_id']}") == [], "the load level left its container behind"
    return report, run_dir, done.stdout + done.stderr


def checks(report: dict[str, Any]) -> dict[str, dict[str, Any]]:
    (level,) = report["levels"]
    return {ch["id"].removeprefix("load."): ch for ch in level["checks"]}


def test_the_load_level_passes_and_says_not_reproducible(tmp_path: Path, standin: str) -> None:
    report, run_dir, output = run_load(tmp_path, fixture_variant(tmp_path), "--allow-unpinned")
    got = checks(report)
    assert list(got) == ["gpu_preflight", "image_pinned", "revisions_pinned", "draft_identity", "container_started",
                         "ready", "load_evidence", "teardown"]
    assert {k: v["status"] for k, v in got.items()} == dict.fromkeys(got, "passed"), output
    # The stand-in's load evidence is plumbing: the level is recorded, never required, and qualifies nothing.
    (level,) = report["levels"]
    assert level["required"] is False and report["profile"]["conditions"]["stand_in_levels"][0] == "load"
    assert report["verdict"] == "not qualified" and report["qualified_levels"] == []
    assert "loading (stand-in plumbing)" in (run_dir / "report.md").read_text()
    assert "not reproducible" in got["image_pinned"]["message"] and "not reproducible" in \
        got["revisions_pinned"]["message"]
    runtime = report["environment"]["runtime"]
    assert runtime["reproducible"] is False and runtime["image"]["id"] == standin
    assert runtime["teardown"]["left"] == [] and runtime["readiness"]["models"] == ["dflash2-tiny-target"]
    assert got["container_started"]["evidence"]["measured"]["container"]["image"] == standin
    assert (run_dir / "server.log").read_text().count("Loading drafter model weights took 0.0026 GiB") == 1


def test_an_unpinned_launch_is_refused_and_nothing_starts(tmp_path: Path, standin: str) -> None:
    report, _, output = run_load(tmp_path, fixture_variant(tmp_path))
    got = checks(report)
    status = {k: v["status"] for k, v in got.items()}
    assert status == {"gpu_preflight": "passed", "image_pinned": "failed", "revisions_pinned": "failed",
                      "draft_identity": "passed", "container_started": "failed", "ready": "not-run",
                      "load_evidence": "not-run", "teardown": "not-run"}, output
    # Nothing was started, so there was nothing to tear down: that is no failure of anything's.
    assert got["teardown"]["message"].startswith("not run: no container was started")
    findings = [f["message"] for f in got["container_started"]["evidence"]["findings"]]
    assert findings == ["not started: load.image_pinned, load.revisions_pinned failed; nothing is launched on "
                        "unverified conditions"]
    assert report["verdict"] == "not qualified"


def test_a_crashing_runtime_fails_the_level(tmp_path: Path, docker_client: Any, standin: str) -> None:
    from qualify.runtime.standin import ensure_fault_image

    profile = fixture_variant(tmp_path, image=ensure_fault_image(docker_client, "crash"))
    report, run_dir, output = run_load(tmp_path, profile, "--allow-unpinned")
    got = checks(report)
    assert got["container_started"]["status"] == "passed", output
    ready = got["ready"]
    assert ready["status"] == "failed" and ready["evidence"]["measured"]["exit_code"] == 1
    assert "exited with code 1 before it was ready" in ready["evidence"]["findings"][0]["message"]
    assert any("CUDA error" in line for line in ready["evidence"]["measured"]["log_tail"])
    assert got["load_evidence"]["status"] == "failed" and got["teardown"]["status"] == "passed"
    assert report["verdict"] == "not qualified"
    assert "CUDA error" in (run_dir / "server.log").read_text()
