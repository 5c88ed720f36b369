"""`qualify check` end to end, as a user runs it: exit codes, reports, messages."""

from __future__ import annotations

import json
import struct

import pytest

from qualify.report.model import read_json
from tests.helpers import FIXTURE, TRACEBACK, run_qualify

pytestmark = pytest.mark.slow  # runs the real CLI in subprocesses


def only_report(reports):
    runs = sorted(reports.glob("*/report.json"))
    assert len(runs) == 1, runs
    return runs[0]


def test_good_fixture_is_qualified(tmp_path):
    proc = run_qualify(
        "check", str(FIXTURE / "mxfp8"), "--source", str(FIXTURE / "source"), "--report-dir", str(tmp_path)
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    path = only_report(tmp_path)
    run = read_json(path)  # validates against the schema and recomputes the verdict
    assert str(run.verdict) == "qualified"
    assert [lvl.name for lvl in run.levels] == ["structure", "format", "reproduction"]
    assert all(c.status == "passed" for lvl in run.levels for c in lvl.checks)
    assert len([c for lvl in run.levels for c in lvl.checks]) >= 20
    files = {f["path"]: f for f in run.checkpoint["files"]}
    assert set(files) >= {"model.safetensors", "conversion_manifest.json", "hf_quant_config.json", "config.json"}
    assert run.profile["name"] == "fixture" and len(run.profile["sha256"]) == 64
    md = (path.parent / "report.md").read_text()
    assert "Status: qualified for checkpoint structure, MXFP8 format, and exact format reproduction" in md
    assert "verdict: qualified" in proc.stdout


def test_one_flipped_byte_is_not_qualified_and_named(fixture_copy, tmp_path):
    ckpt, src = fixture_copy
    weights = ckpt / "model.safetensors"
    raw = bytearray(weights.read_bytes())
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8 : 8 + n])
    name = "layers.1.mlp.down_proj.weight"
    raw[8 + n + header[name]["data_offsets"][0] + 7] ^= 0x10
    weights.write_bytes(bytes(raw))
    proc = run_qualify("check", str(ckpt), "--source", str(src), "--report-dir", str(tmp_path / "r"))
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert TRACEBACK not in proc.stdout + proc.stderr
    run = read_json(only_report(tmp_path / "r"))
    assert str(run.verdict) == "not qualified"
    failed = {c.id: c for lvl in run.levels for c in lvl.checks if c.status == "failed"}
    assert "structure.output_checksums" in failed
    assert any(f.file == "model.safetensors" for f in failed["structure.output_checksums"].evidence.findings)
    stats = failed["structure.statistics"].evidence.findings
    assert [f.tensor for f in stats] == [name, None], stats  # the tensor, then the aggregate
    assert "statistics differ" in stats[0].message
    assert "structure.statistics" in proc.stdout and name in proc.stdout


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["check", "/nonexistent/ckpt"], "not a checkpoint directory"),
        (["check", str(FIXTURE / "mxfp8"), "--profile", "no-such-profile"], "no-such-profile"),
        (["check", str(FIXTURE / "mxfp8"), "--levels", "structure,telepathy"], "unknown level(s) telepathy"),
    ],
)
def test_usage_errors_exit_2_with_a_message(args, words, tmp_path):
    proc = run_qualify(*args, "--report-dir", str(tmp_path))
    assert proc.returncode == 2
    assert words in proc.stderr
    assert TRACEBACK not in proc.stderr


def test_help_documents_exit_codes():
    proc = run_qualify("check", "--help")
    assert proc.returncode == 0
    for line in ("0  qualified", "1  not qualified", "2  usage error", "3  harness fault"):
        assert line in proc.stdout


def test_without_source_the_source_checks_are_skipped_and_not_qualified(tmp_path):
    proc = run_qualify("check", str(FIXTURE / "mxfp8"), "--report-dir", str(tmp_path))
    assert proc.returncode == 1
    run = read_json(only_report(tmp_path))
    skipped = {c.id for lvl in run.levels for c in lvl.checks if c.status == "skipped"}
    assert {"structure.source_checksums", "structure.source_coverage", "structure.statistics"} <= skipped
    assert run.level("structure").status == "skipped"
    assert str(run.verdict) == "not qualified"


INTERRUPT = """
import os, signal, sys
import qualify.checks.structure as m
def boom(*a, **k):
    {action}
m.check_file_list = boom
from qualify.cli import main
sys.exit(main(sys.argv[1:]))
"""


@pytest.mark.parametrize(
    ("action", "recorded"),
    [("raise KeyboardInterrupt", "KeyboardInterrupt"), ("os.kill(os.getpid(), signal.SIGTERM)", "SIGTERM")],
)
def test_an_interrupted_run_still_writes_a_not_qualified_report(action, recorded, tmp_path):
    import subprocess
    import sys

    proc = subprocess.run(
        [
            sys.executable,
            "-c",
            INTERRUPT.format(action=action),
            "check",
            str(FIXTURE / "mxfp8"),
            "--source",
            str(FIXTURE / "source"),
            "--report-dir",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 1, proc.stdout + proc.stderr
    run = read_json(only_report(tmp_path))
    assert run.interrupted == recorded
    assert str(run.verdict) == "not qualified"
    assert (only_report(tmp_path).parent / "report.md").read_text().count("interrupted") >= 1


@pytest.mark.parametrize(("flag", "url", "says"), [
    ("--endpoint", "not a url", "is not an http(s) URL"),
    ("--endpoint", "http://127.0.0.1:notaport/v1", "Port could not be cast"),
    ("--endpoint", "http://127.0.0.1:99999/v1", "Port out of range"),
    ("--reference-endpoint", "http:///v1", "is not an http(s) URL"),
    ("--endpoint", "http://127.0.0.1:8000/v1?x=1", "has a query or fragment"),
])
def test_a_malformed_endpoint_is_a_usage_error_before_the_run(tmp_path, flag, url, says):
    """Exit 2 (the caller's mistake), not 1: no level ran, so there is no verdict to give."""
    proc = run_qualify("check", str(FIXTURE / "mxfp8"), "--levels", "smoke", flag, url,
                       "--report-dir", str(tmp_path / "r"))
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert f"qualify: error: {flag}: endpoint {url!r}" in proc.stderr and says in proc.stderr
    assert TRACEBACK not in proc.stdout + proc.stderr
    assert not list((tmp_path / "r").glob("*/report.json"))  # nothing was run, nothing reported


def test_conftest_files_around_the_checkpoint_are_never_loaded(tmp_path):
    """A checkpoint inside another checkout (or carrying a conftest.py) must not run that code in the harness."""
    import shutil

    outer = tmp_path / "other-checkout"
    ckpt = outer / "models" / "draft"
    shutil.copytree(FIXTURE / "mxfp8", ckpt)
    for where in (outer, outer / "models", ckpt):
        (where / "conftest.py").write_text(f"raise RuntimeError('conftest in {where.name} was loaded')\n")
    proc = run_qualify("check", str(ckpt), "--levels", "format", "--report-dir", str(tmp_path / "r"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "was loaded" not in proc.stdout + proc.stderr
    assert str(read_json(only_report(tmp_path / "r")).verdict) == "qualified"


#: A path no Linux file system takes: one name of 300 characters (NAME_MAX is 255).
LONG = "/tmp/" + "a" * 300 + "/x"


@pytest.mark.parametrize("args", [
    ("check", LONG),
    ("check", str(FIXTURE / "mxfp8"), "--source", LONG),
    ("check", str(FIXTURE / "mxfp8"), "--source", str(FIXTURE / "source"), "--report-dir", LONG),
])
def test_a_path_longer_than_the_system_allows_is_a_usage_error(args, tmp_path):
    proc = run_qualify(*args, *(() if "--report-dir" in args else ("--report-dir", str(tmp_path))))
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "longer than the system allows" in proc.stderr and "a" * 300 in proc.stderr
    assert "internal error" not in proc.stderr and "a harness bug" not in proc.stderr
    assert TRACEBACK not in proc.stdout + proc.stderr
