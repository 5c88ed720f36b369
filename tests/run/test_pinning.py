"""qualify.run.pinning: a run checks, reports and signs the bytes it pinned, and a folder that changes voids it."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from qualify.checks import structure
from qualify.core import Status, Verdict
from qualify.profile import load_profile
from qualify.release.attestation import ATTESTATION_NAME, read_envelope
from qualify.report.model import Check, Run, read_json
from qualify.run.pipeline import RunOptions, run_qualification
from tests.helpers import FIXTURE, REPO, write_key

LEVELS = ["structure", "format", "reproduction"]


def _check(report: Run, check_id: str) -> Check:
    return next(c for lvl in report.levels for c in lvl.checks if c.id == check_id)


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture
def checkpoint(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    # The run's private copies go under tmp_path, where the test can see that none is left behind.
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    dest = tmp_path / "ckpt"
    shutil.copytree(FIXTURE / "mxfp8", dest)
    return dest


def _run(tmp_path: Path, checkpoint: Path, **kw: object) -> tuple[Run, Path]:
    priv, _ = write_key(tmp_path, "release")
    from qualify.release.signing import load_signing_key

    opts = RunOptions(profile=load_profile("fixture"), levels=LEVELS, report_dir=tmp_path / "reports",
                      checkpoint=checkpoint, source=FIXTURE / "source", sign_key=load_signing_key(priv), **kw)  # type: ignore[arg-type]
    run, run_dir, _ = run_qualification(opts)
    return run, run_dir


def test_an_unchanged_folder_is_qualified_and_signed_by_its_pinned_digests(tmp_path: Path, checkpoint: Path) -> None:
    _, run_dir = _run(tmp_path, checkpoint)
    report = read_json(run_dir / "report.json")
    assert report.verdict is Verdict.QUALIFIED
    assert _check(report, "structure.pinned").status is Status.PASSED
    files = {f["path"]: f["sha256"] for f in report.checkpoint["files"]}
    assert files == {p.relative_to(checkpoint).as_posix(): _sha(p) for p in checkpoint.rglob("*") if p.is_file()}
    assert report.checkpoint["pinned"]["changed"] == [] and report.checkpoint["pinned"]["not_pinned"] == []
    assert (run_dir / ATTESTATION_NAME).is_file()
    assert list((tmp_path / "tmp").iterdir()) == []  # the private copy is gone


def test_a_weight_file_swapped_during_the_run_voids_it_and_nothing_is_signed(
        tmp_path: Path, checkpoint: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    good = _sha(checkpoint / "model.safetensors")
    original = structure.check_schema

    def swap_then_check(root: Path):  # type: ignore[no-untyped-def]
        # Another process replaces the weights once the run is under way.
        weights = checkpoint / "model.safetensors"
        weights.write_bytes(bytes(weights.stat().st_size))
        return original(root)

    monkeypatch.setattr(structure, "check_schema", swap_then_check)
    _, run_dir = _run(tmp_path, checkpoint)
    report = read_json(run_dir / "report.json")
    assert report.verdict is Verdict.NOT_QUALIFIED
    # The checks read the pinned bytes (the good ones): every check passed, and still the run vouches for nothing.
    assert all(c.status is Status.PASSED for lvl in report.levels for c in lvl.checks)
    assert any("the checkpoint changed during the run" in e and "model.safetensors: changed in the checkpoint "
               "folder during the run" in e for e in report.errors)
    assert report.checkpoint["pinned"]["changed"][0].startswith("model.safetensors: changed")
    # The report names the bytes that were checked, never the ones swapped in.
    assert {f["path"]: f["sha256"] for f in report.checkpoint["files"]}["model.safetensors"] == good
    assert not (run_dir / ATTESTATION_NAME).exists()


def test_a_config_swapped_before_the_checks_read_it_does_not_reach_them(
        tmp_path: Path, checkpoint: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    original = structure.check_schema
    seen: list[Path] = []

    def swap_then_check(root: Path):  # type: ignore[no-untyped-def]
        seen.append(root)
        (checkpoint / "config.json").write_text("{not json")
        return original(root)

    monkeypatch.setattr(structure, "check_schema", swap_then_check)
    _, run_dir = _run(tmp_path, checkpoint)
    report = read_json(run_dir / "report.json")
    assert seen and seen[0] != checkpoint  # the checks read the run's copy, not the folder
    assert report.level("format").status is Status.PASSED  # the copy's config.json is the pinned one
    assert report.verdict is Verdict.NOT_QUALIFIED
    assert any("config.json: changed in the checkpoint folder during the run" in e for e in report.errors)


def test_an_entry_that_cannot_be_pinned_fails_the_structure_level(tmp_path: Path, checkpoint: Path) -> None:
    import os

    os.mkfifo(checkpoint / "notes.safetensors")
    _, run_dir = _run(tmp_path, checkpoint)
    report = read_json(run_dir / "report.json")
    check = _check(report, "structure.pinned")
    assert check.status is Status.FAILED
    assert check.evidence is not None
    assert [(f.file, f.message) for f in check.evidence.findings] == [
        ("notes.safetensors", "not pinned: is a FIFO, socket or device, not a regular file")]
    assert report.verdict is Verdict.NOT_QUALIFIED
    # Signed as not qualified (the attestation says FAILED): the gate refuses it on its result.
    assert '"result":"FAILED"' in __import__("base64").b64decode(
        read_envelope(run_dir / ATTESTATION_NAME)["payload"]).decode()


# -- the machine failing under a run: a harness fault with its cause, and no copy left behind

#: The real CLI, with a real descriptor limit set once the draft is pinned: ``SPARE_FDS`` descriptors beyond those
#: open then (what a machine whose descriptors run out while the checks read the pinned copy leaves a run).
LOW_FDS_AFTER_PIN = """
import os, resource, sys
import qualify.run.pinning as pinning
pin = pinning.pin_folder
def pin_then_limit(*args, **kwargs):
    pinned = pin(*args, **kwargs)
    open_now = len(os.listdir("/proc/self/fd")) - 1
    spare = int(os.environ["SPARE_FDS"])
    resource.setrlimit(resource.RLIMIT_NOFILE, (open_now + spare, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))
    return pinned
pinning.pin_folder = pin_then_limit
from qualify.cli import main
sys.exit(main(sys.argv[1:]))
"""

#: The real CLI, sent SIGTERM by itself at ``WHEN``: once the draft is pinned, or while a check runs.
SIGTERM_AT = """
import os, signal, sys
import qualify.run.pinning as pinning
from qualify.checks import structure
def term(*args, **kwargs):
    os.kill(os.getpid(), signal.SIGTERM)
    raise AssertionError("SIGTERM did not end the run")
if os.environ["WHEN"] == "pinned":
    pin = pinning.pin_folder
    pinning.pin_folder = lambda *args, **kwargs: (pin(*args, **kwargs), term())[0]
else:
    structure.check_file_list = term
from qualify.cli import main
sys.exit(main(sys.argv[1:]))
"""


def _cli(tmp_path: Path, script: str, **env: str) -> tuple[subprocess.CompletedProcess[str], Path]:
    scratch = tmp_path / "tmp"
    scratch.mkdir(exist_ok=True)
    done = subprocess.run(
        [sys.executable, "-c", script, "check", str(FIXTURE / "mxfp8"), "--source", str(FIXTURE / "source"),
         "--report-dir", str(tmp_path / "reports")],
        capture_output=True, text=True, timeout=300, cwd=REPO, env={**os.environ, "TMPDIR": str(scratch), **env})
    return done, scratch


def _left(scratch: Path) -> list[str]:
    return [p.name for p in scratch.glob("qualify-pinned-*")]


def _a_harness_fault_naming(done: subprocess.CompletedProcess[str], cause: str, tmp_path: Path) -> None:
    output = done.stdout + done.stderr
    assert done.returncode == 3, output
    assert cause in done.stderr, output
    for blame in ("Traceback", "INTERNALERROR", "probably not the revision", "internal error", "a harness bug",
                  "verdict: not qualified"):
        assert blame not in output, output
    if "verdict:" in done.stdout:  # a summary was printed: it says no verdict was reached
        assert "verdict: none: a harness fault kept the run from one" in done.stdout
    for path in (tmp_path / "reports").glob("*/report.json"):
        run = read_json(path)
        failed = [c.id for lvl in run.levels for c in lvl.checks if c.status is Status.FAILED]
        assert failed == [], f"checks failed for the machine's fault: {failed}"


@pytest.mark.slow  # real CLI runs in subprocesses
def test_descriptors_running_out_while_the_checks_read_the_copy_is_exit_3_and_the_copy_is_removed(
        tmp_path: Path) -> None:
    """Each descriptor limit from none spare to a few ends with exit 3 naming the cause; the copy is removed."""
    errored = False
    for spare in (0, 3, 6, 7, 8, 9, 10, 11, 12):
        case = tmp_path / f"spare-{spare}"
        case.mkdir()
        done, scratch = _cli(case, LOW_FDS_AFTER_PIN, SPARE_FDS=str(spare))
        assert _left(scratch) == [], f"{spare} spare descriptors: the pinned copy was left behind"
        if done.returncode == 0:
            break  # enough descriptors for the whole run: the limits below it were the faults
        _a_harness_fault_naming(done, "ran out of file descriptors", case)
        for path in (case / "reports").glob("*/report.json"):
            errored = errored or any(c.status is Status.ERROR for lvl in read_json(path).levels for c in lvl.checks)
    # Pytest starting without descriptors, and checks running out midway: both made, both exit 3.
    assert errored, "no limit let the checks start and then run out: the case the issue measured was not made"


@pytest.mark.slow
@pytest.mark.parametrize("when", ["pinned", "check"])
def test_sigterm_removes_the_pinned_copy(tmp_path: Path, when: str) -> None:
    done, scratch = _cli(tmp_path, SIGTERM_AT, WHEN=when)
    assert done.returncode == 1, done.stdout + done.stderr  # interrupted: the verdict is never "qualified"
    assert "Traceback" not in done.stdout + done.stderr
    assert _left(scratch) == [], "SIGTERM left the run's copy of the checkpoint behind"
