"""qualify.run.pinning: a run checks, reports and signs the bytes it pinned, and a folder that changes voids it."""

from __future__ import annotations

import hashlib
import shutil
import tempfile
from pathlib import Path

import pytest

from qualify.checks import structure
from qualify.core import Status, Verdict
from qualify.profile import load_profile
from qualify.release.attestation import ATTESTATION_NAME, read_envelope
from qualify.report.model import Check, Run, read_json
from qualify.run.pipeline import RunOptions, run_qualification
from tests.helpers import FIXTURE, write_key

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
