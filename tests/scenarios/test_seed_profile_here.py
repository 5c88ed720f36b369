"""The release profile run on a machine without its GPUs: it stops at the GPU-only parts, naming them, and nowhere else.

``qualify run --profile glm53-flash-dflash2-mxfp8-tp4`` with every runtime and serving level, here: no
NVIDIA driver, no community image (it is never pulled). What fails must be exactly the GPU preflight and
the image, and what cannot happen without them; nothing may fail for a missing file, server, endpoint or
flag -- those would fail a GPU run too. The serving levels' inputs (prompt sets, requests) are built from
the profile as a run builds them, so a set that is not shipped fails here rather than on the GPU runner.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from qualify.core import LEVELS, Status
from qualify.profile import load_profile
from qualify.report.model import read_json
from qualify.run.arm_jobs import arm_jobs
from tests.helpers import REPO, TRACEBACK

SEED = "glm53-flash-dflash2-mxfp8-tp4"
#: What a machine without the release hardware cannot do, and what follows from it.
GPU_ONLY = {"load.gpu_preflight", "load.image_pinned"}
CONSEQUENCES = {"load.container_started"}


def test_every_serving_input_of_the_release_profile_ships_with_the_harness() -> None:
    profile = load_profile(SEED)
    jobs = arm_jobs(profile, set(LEVELS))  # loads and verifies every prompt set the levels send
    assert {(j.level, j.arm) for j in jobs} >= {("paired", "checkpoint"), ("paired", "source"),
                                                ("losslessness", "reference"), ("speedup", "reference-published")}


@pytest.mark.slow
@pytest.mark.docker
def test_the_release_profile_here_fails_only_at_what_needs_its_gpus(tmp_path: Path) -> None:
    levels = "load,smoke,acceptance,paired,losslessness,throughput,speedup"
    proc = subprocess.run(
        [sys.executable, "-m", "qualify.cli", "run", "--profile", SEED, "--checkpoint",
         str(REPO / "fixtures" / "dflash2-tiny" / "mxfp8"), "--levels", levels, "--draft-revision", "a" * 40,
         "--report-dir", str(tmp_path)],
        cwd=REPO, capture_output=True, text=True, timeout=600)
    assert TRACEBACK not in proc.stderr, proc.stderr[-3000:]
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-3000:]  # not qualified; no harness fault
    (path,) = tmp_path.glob("*/report.json")
    run = read_json(path)
    checks = {c.id: c for lvl in run.levels for c in lvl.checks}
    failed = {cid for cid, c in checks.items() if c.status is Status.FAILED}
    assert failed == GPU_ONLY | CONSEQUENCES, {cid: checks[cid].message for cid in failed}
    assert "the GPUs could not be listed" in str(checks["load.gpu_preflight"].evidence)
    assert "not present in the local Docker engine" in str(checks["load.image_pinned"].evidence)
    assert "nothing is launched on unverified conditions" in str(checks["load.container_started"].evidence)
    assert checks["load.teardown"].status is Status.NOT_RUN  # nothing was started: nothing to tear down
    # Everything after is not run because the runtime never started: not for a file, a server or a flag.
    others = {cid: c for cid, c in checks.items() if cid not in failed and not cid.startswith("load.")}
    assert others and all(c.status is Status.NOT_RUN for c in others.values()), others
    text = proc.stdout + proc.stderr
    for wrong in ("no such file", "Connection refused", "--source-endpoint", "--per-request-spec-decode-metrics"):
        assert wrong not in text, wrong
