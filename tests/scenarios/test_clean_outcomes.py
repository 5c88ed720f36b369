"""Inputs that used to crash end cleanly: a message naming what and where, the report written, nothing half-written."""

from __future__ import annotations

import errno
import json
import os
import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from qualify import cli
from qualify.errors import HarnessError, QuantizationError, UsageError
from qualify.release.convert import convert
from qualify.report.model import read_json
from qualify.run import pipeline
from tests.helpers import FIXTURE, run_qualify

TRACEBACK = "Traceback (most recent call last)"
REV = "f0848a23e67798281e49f39c6ad3b7a2824d1363"


def check_args(tmp_path: Path, *extra: str) -> list[str]:
    return ["check", str(FIXTURE / "mxfp8"), "--levels", "format", "--report-dir", str(tmp_path / "r"), *extra]


@pytest.mark.parametrize("shape", ["a_directory", "under_a_file", "full_disk"])
def test_junit_xml_that_cannot_be_written_keeps_the_report(tmp_path, capsys, monkeypatch, shape):
    if shape == "a_directory":
        dest = tmp_path / "junit-dir"
        dest.mkdir()
    elif shape == "under_a_file":
        (tmp_path / "afile").write_text("x")
        dest = tmp_path / "afile" / "junit.xml"
    else:
        dest = tmp_path / "ci" / "junit.xml"
        real_fsync = os.fsync

        def full(fd: int) -> None:  # the disk fills while the XML is written
            if Path(os.readlink(f"/proc/self/fd/{fd}")).parent == dest.parent:
                raise OSError(errno.ENOSPC, "No space left on device")
            real_fsync(fd)

        monkeypatch.setattr(os, "fsync", full)
    code = cli.main(check_args(tmp_path, "--junit-xml", str(dest)))
    out = capsys.readouterr()
    assert code == 3, out.out + out.err  # the harness could not deliver what was asked: its fault, its code
    assert TRACEBACK not in out.out + out.err and "internal error" not in out.err
    assert "--junit-xml" in out.err and str(dest) in out.err
    (report,) = (tmp_path / "r").glob("*/report.json")
    assert str(read_json(report).verdict) == "qualified"  # the verdict stands, in the report
    assert (report.parent / "junit.xml").stat().st_size > 0
    # No half-written or empty XML where it was asked for, nor a temporary file beside it.
    if shape == "full_disk":
        assert not dest.exists() and list(dest.parent.iterdir()) == []
    elif shape == "a_directory":
        assert dest.is_dir() and list(dest.iterdir()) == []


def test_deliver_junit_without_xml_is_a_harness_error(tmp_path):
    with pytest.raises(HarnessError, match="wrote no JUnit XML"):
        pipeline.deliver_junit(tmp_path, tmp_path / "out.xml")
    assert not (tmp_path / "out.xml").exists()


def make_source(tmp_path: Path, extra: dict[str, torch.Tensor]) -> Path:
    src = tmp_path / "src"
    shutil.copytree(FIXTURE / "source", src)
    tensors = dict(load_file(str(src / "model.safetensors")))
    tensors.update(extra)
    save_file(tensors, str(src / "model.safetensors"), metadata={"format": "pt"})
    return src


@pytest.mark.parametrize("name", ["layers.0.self_attn.q_proj.weight_scale", "layers.1.mlp.down_proj.weight_scale"])
def test_convert_of_a_source_that_already_has_a_scale_name(tmp_path, name):
    src = make_source(tmp_path, {name: torch.zeros(4, 2, dtype=torch.uint8)})
    with pytest.raises(QuantizationError) as info:
        convert(src, tmp_path / "out", source_repo="o/r", source_revision=REV)
    assert info.value.tensor == name and info.value.file == "model.safetensors"
    assert "already quantized" in str(info.value)
    assert not (tmp_path / "out").exists()
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".out")] == []  # no temporary folder left


def test_convert_cli_names_the_tensor(tmp_path):
    name = "layers.0.self_attn.q_proj.weight_scale"
    src = make_source(tmp_path, {name: torch.zeros(4, 2, dtype=torch.uint8)})
    proc = run_qualify("convert", str(src), str(tmp_path / "out"), "--source-repo", "o/r", "--source-revision", REV)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert TRACEBACK not in proc.stderr and "internal error" not in proc.stderr
    assert name in proc.stderr and "model.safetensors" in proc.stderr


@pytest.mark.parametrize("where", ["inside", "same", "deeper", "parent"])
def test_convert_into_the_source_is_refused_saying_why(tmp_path, where):
    src = tmp_path / "work" / "src"
    shutil.copytree(FIXTURE / "source", src)
    out = {"inside": src / "mxfp8", "same": src, "deeper": src / "a" / "b", "parent": tmp_path / "work"}[where]
    before = sorted(p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*"))
    with pytest.raises(UsageError) as info:
        convert(src, out, source_repo="o/r", source_revision=REV, overwrite=True)
    text = str(info.value)
    assert str(src) in text and str(out) in text
    assert ("inside the source" in text) if where != "parent" else ("contains the source" in text)
    assert sorted(p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*")) == before


@pytest.mark.parametrize("bad", ["\x00", "\x1b[2K", "\n"])
def test_a_control_character_in_a_manifest_path_fails_structure_paths(tmp_path, capsys, bad):
    ckpt = tmp_path / "c"
    shutil.copytree(FIXTURE / "mxfp8", ckpt)
    data = json.loads((ckpt / "conversion_manifest.json").read_text())
    data["output"]["files"][1]["path"] = f"hf_quant{bad}config.json"
    (ckpt / "conversion_manifest.json").write_text(json.dumps(data))
    code = cli.main(["check", str(ckpt), "--levels", "structure", "--report-dir", str(tmp_path / "r")])
    out = capsys.readouterr()
    assert code == 1, out.out + out.err
    assert TRACEBACK not in out.out + out.err
    (report,) = (tmp_path / "r").glob("*/report.json")
    checks = {c.id: c for lvl in read_json(report).levels for c in lvl.checks}
    paths = checks["structure.paths"]
    assert str(paths.status) == "failed"
    assert any(repr(f"hf_quant{bad}config.json") in f.message and "control character" in f.message
               for f in paths.evidence.findings)
    assert not any(str(c.status) == "error" for c in checks.values()), {k: str(c.status) for k, c in checks.items()}
    assert "\x1b" not in out.out and "\x00" not in out.out


# -- minor holes ------------------------------------------------------------------------


@pytest.mark.slow
def test_a_report_with_a_repeated_level_is_refused_by_card_gate_and_reader(tmp_path, capsys):
    proc = run_qualify("check", str(FIXTURE / "mxfp8"), "--source", str(FIXTURE / "source"), "--levels",
                       "structure,format", "--report-dir", str(tmp_path / "r"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (report,) = (tmp_path / "r").glob("*/report.json")
    data = json.loads(report.read_text())
    good = data["levels"][0]
    bad = json.loads(json.dumps(good))
    bad["checks"][0]["status"] = "failed"
    bad["status"] = "failed"
    for copy_first in (True, False):
        doc = json.loads(json.dumps(data))
        doc["levels"] = [bad, good, *doc["levels"][1:]] if copy_first else [*doc["levels"], good]
        doc["verdict"] = "not qualified" if copy_first else doc["verdict"]
        doc["qualified_levels"] = [n for n in doc["qualified_levels"] if not copy_first or n != good["name"]]
        path = tmp_path / f"dup-{copy_first}.json"
        path.write_text(json.dumps(doc))
        with pytest.raises(UsageError, match="appear more than once"):
            read_json(path)
        capsys.readouterr()
        assert cli.main(["card", str(path)]) == 2
        assert "appear more than once" in capsys.readouterr().err
        code = cli.main(["gate", str(path), "--require", "structure,format", "--allow-unsigned",
                         "--checkpoint", str(FIXTURE / "mxfp8")])
        out = capsys.readouterr()
        assert code == 1 and "appear more than once" in out.out and "qualified:" not in out.out


@pytest.mark.slow
def test_the_gate_counts_only_the_files_the_report_lists(tmp_path, capsys):
    release = tmp_path / "release"
    shutil.copytree(FIXTURE / "mxfp8", release)
    # Every level the fixture profile requires: --require adds to them, it never drops one.
    proc = run_qualify("check", str(release), "--source", str(FIXTURE / "source"), "--levels",
                       "structure,format,reproduction", "--report-dir", str(tmp_path / "r"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (report,) = (tmp_path / "r").glob("*/report.json")
    listed = len(read_json(report).checkpoint["files"])
    for extra in ("README.md", "LICENSE", "docs/card.png"):
        (release / extra).parent.mkdir(parents=True, exist_ok=True)
        (release / extra).write_text("added after qualification")
    capsys.readouterr()
    code = cli.main(["gate", str(report), "--require", "structure,format", "--allow-unsigned",
                     "--checkpoint", str(release)])
    out = capsys.readouterr().out
    assert code == 0, out
    assert f"; {listed} files in {release} match the report" in out


def test_a_report_naming_a_file_that_is_not_utf8_stays_readable(tmp_path):
    from qualify.report.model import Run, write_json

    run = Run(run_id="r", harness_version="0", started_at="t",
              profile={"name": "fixture", "sha256": "0" * 64, "conditions": {}},
              checkpoint={"path": "/c", "files": [{"path": "vocab\udcff.json", "sha256": "a" * 64, "size": 2}]})
    write_json(run, tmp_path / "report.json")
    back = read_json(tmp_path / "report.json")
    assert back.checkpoint["files"][0]["path"] == "vocab\\xff.json"
