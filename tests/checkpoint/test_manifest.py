"""Tests for qualify.checkpoint.manifest: the conversion manifest is read strictly, checked against its
schema before anything trusts it, and modelled; what is written reads back the same. (What the structure
checks make of a manifest is tested in tests/checks/test_structure.py.)"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from qualify.checkpoint import manifest as m
from qualify.errors import ManifestError
from tests.helpers import FIXTURE

CHECKPOINT = FIXTURE / "mxfp8"


def copy_of(tmp_path: Path) -> Path:
    root = tmp_path / "ckpt"
    root.mkdir()
    shutil.copy(CHECKPOINT / m.MANIFEST_NAME, root / m.MANIFEST_NAME)
    return root


def test_the_fixture_manifest_is_modelled() -> None:
    manifest = m.load_manifest(CHECKPOINT)
    assert manifest.path == CHECKPOINT / m.MANIFEST_NAME
    assert manifest.source_repo == "qualify-fixtures/dflash2-tiny"
    assert len(manifest.source_revision) == 40
    assert [f.path for f in manifest.output_files] == ["config.json", "hf_quant_config.json", "model.safetensors"]
    assert all(len(f.sha256) == 64 and f.size > 0 for f in manifest.output_files)
    assert manifest.scale_recipe == "modelopt"
    assert {t.action for t in manifest.tensors} <= set(m.ACTIONS)
    assert manifest.quantized and all(t.action == "quantized" for t in manifest.quantized)


def test_a_quantized_tensor_has_a_weight_and_a_scale_output_and_others_only_one() -> None:
    manifest = m.load_manifest(CHECKPOINT)
    q = manifest.quantized[0]
    assert q.weight_output.role == "weight" and q.weight_output.dtype == "F8_E4M3"
    assert q.scale_output is not None and q.scale_output.name == q.weight_output.name + m.SCALE_SUFFIX
    assert q.scale_output.dtype == "U8" and q.scale_output.shape[-1] * 32 == q.weight_output.shape[-1]
    other = next(t for t in manifest.tensors if t.action != "quantized")
    assert other.scale_output is None and len(other.outputs) == 1


def test_a_missing_manifest_is_named(tmp_path: Path) -> None:
    with pytest.raises(ManifestError) as info:
        m.load_manifest(tmp_path)
    assert info.value.file == m.MANIFEST_NAME and info.value.detail == "file is missing"


@pytest.mark.parametrize(("text", "says"), [
    ("[]", "the manifest must be a JSON object"),
    ('{"format_version": 1, "format_version": 2}', "duplicate key 'format_version'"),
    ('{"aggregate": NaN}', "'NaN' is not a JSON value"),
])
def test_a_manifest_that_is_not_a_strict_json_object_is_refused(tmp_path: Path, text: str, says: str) -> None:
    (tmp_path / m.MANIFEST_NAME).write_text(text)
    with pytest.raises(ManifestError, match=says) as info:
        m.read_manifest_json(tmp_path)
    assert info.value.file == m.MANIFEST_NAME


def test_a_manifest_that_fails_its_schema_is_refused_before_it_is_modelled(tmp_path: Path) -> None:
    root = copy_of(tmp_path)
    doc = json.loads((root / m.MANIFEST_NAME).read_text())
    del doc["source"]
    doc["format_version"] = 99
    (root / m.MANIFEST_NAME).write_text(json.dumps(doc))
    assert m.read_manifest_json(root)["format_version"] == 99  # parsed: strict JSON, not yet the schema
    with pytest.raises(ManifestError, match="fails its schema: ") as info:
        m.load_manifest(root)
    assert "source" in str(info.value)


def test_a_written_manifest_reads_back_as_written(tmp_path: Path) -> None:
    doc = m.read_manifest_json(CHECKPOINT)
    out = tmp_path / "out"
    path = m.write_manifest(out, doc)
    assert path == out / m.MANIFEST_NAME
    assert m.read_manifest_json(out) == doc
    assert m.load_manifest(out).tensors == m.load_manifest(CHECKPOINT).tensors
    with pytest.raises(ValueError):  # NaN is never written: no strict reader could read it back
        m.write_manifest(tmp_path / "nan", {**doc, "aggregate": {"x": float("nan")}})
    assert not (tmp_path / "nan" / m.MANIFEST_NAME).exists()


def test_file_entries_are_the_files_hashes_and_sizes(tmp_path: Path) -> None:
    (tmp_path / "a.json").write_bytes(b"{}")
    assert m.file_entries(tmp_path, ["a.json"]) == [
        {"path": "a.json", "sha256": "44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a", "size": 2}]
