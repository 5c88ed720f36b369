"""Tests for qualify.release.convert: what the converter quantizes, keeps and excludes, and what it
refuses before anything is written (the output folder never half-made). That its output reproduces
bit for bit is tested by the reproduction level (tests/checks/test_reproduction.py)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch

from qualify.checkpoint.safetensors_io import Checkpoint
from qualify.errors import QualifyError, QuantizationError, UsageError
from qualify.release.convert import convert, plan_tensors
from tests.checks.test_draft_model import FIXTURE, PROJ, check
from tests.checks.test_reproduction import REVISION, write_dir


def test_k_not_multiple_of_32_is_refused_by_the_converter(tmp_path):
    from qualify.errors import QuantizationError
    from qualify.release.convert import convert

    src = write_dir(tmp_path / "src", {"layers.0.mlp.up_proj.weight": torch.ones(8, 48, dtype=torch.bfloat16)})
    with pytest.raises(QuantizationError, match="K = 48 is not a multiple of 32"):
        convert(src, tmp_path / "out", source_repo="a/b", source_revision=REVISION)
    assert not (tmp_path / "out").exists()



def test_the_converter_never_quantizes_what_the_runtime_builds_unquantized(tmp_path: Path) -> None:
    out = tmp_path / "out"
    manifest = convert(FIXTURE / "source", out, source_repo="o/r", source_revision="0" * 40, exclude=["lm_head"])
    entry = next(e for e in manifest["tensors"] if e["source_name"] == PROJ + ".weight")
    assert entry["action"] == "excluded"
    assert PROJ in manifest["quantization"]["excluded_modules"]
    assert PROJ in json.loads((out / "hf_quant_config.json").read_text())["quantization"]["exclude_modules"]
    assert PROJ in json.loads((out / "config.json").read_text())["quantization_config"]["ignore"]
    assert check(out).ok


def test_the_converter_refuses_an_unreadable_source_config(tmp_path: Path) -> None:
    src = tmp_path / "src"
    shutil.copytree(FIXTURE / "source", src)
    (src / "config.json").write_text("{not json")
    with pytest.raises(QualifyError, match=r"config\.json"):
        convert(src, tmp_path / "out", source_repo="o/r", source_revision="0" * 40)
    assert not (tmp_path / "out").exists()



def test_each_tensor_is_planned_by_whether_it_is_a_quantizable_linear_weight(tmp_path: Path) -> None:
    src = write_dir(tmp_path / "src", {
        "layers.0.mlp.up_proj.weight": torch.ones(8, 32, dtype=torch.bfloat16),
        "layers.0.mlp.up_proj.bias": torch.ones(8, dtype=torch.bfloat16),
        "layers.0.mlp.down_proj.weight": torch.ones(8, 32, dtype=torch.int8),
        "lm_head.weight": torch.ones(8, 32, dtype=torch.bfloat16),
    })
    with Checkpoint.open(src) as ckpt:
        plans = {p.name: p for p in plan_tensors(ckpt, exclude=["lm_head"], linear_patterns=["*proj", "lm_head"])}
    assert plans["layers.0.mlp.up_proj.weight"].action == "quantized"
    assert plans["layers.0.mlp.up_proj.bias"].action == "kept"  # not a weight
    assert plans["layers.0.mlp.down_proj.weight"].action == "kept"  # not a float dtype
    assert plans["lm_head.weight"].action == "excluded" and "lm_head" in plans["lm_head.weight"].reason


@pytest.mark.parametrize("where", ["inside", "same", "parent"])
def test_an_output_folder_overlapping_the_source_is_refused(tmp_path: Path, where: str) -> None:
    src = tmp_path / "work" / "src"
    shutil.copytree(FIXTURE / "source", src)
    out = {"inside": src / "out", "same": src, "parent": tmp_path / "work"}[where]
    with pytest.raises(UsageError, match="contains the source" if where == "parent" else "inside the source"):
        convert(src, out, source_repo="o/r", source_revision=REVISION)
    assert sorted(p.name for p in src.iterdir()) == sorted(p.name for p in (FIXTURE / "source").iterdir())


def test_a_non_empty_output_folder_is_not_overwritten_unless_asked(tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    (out / "keep").write_text("mine")
    with pytest.raises(UsageError, match="exists and is not empty; refusing to overwrite it"):
        convert(FIXTURE / "source", out, source_repo="o/r", source_revision=REVISION)
    assert (out / "keep").read_text() == "mine"


def test_a_source_that_already_has_a_scale_name_is_refused(tmp_path: Path) -> None:
    src = write_dir(tmp_path / "src", {"layers.0.mlp.up_proj.weight": torch.ones(8, 32, dtype=torch.bfloat16),
                                       "layers.0.mlp.up_proj.weight_scale": torch.ones(8, 1, dtype=torch.uint8)})
    with pytest.raises(QuantizationError, match="is the source already quantized") as info:
        convert(src, tmp_path / "out", source_repo="a/b", source_revision=REVISION)
    assert info.value.tensor == "layers.0.mlp.up_proj.weight_scale"
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("kv", [None, "FP8"])
def test_the_converter_declares_the_kv_cache_where_vllm_reads_it(tmp_path: Path, kv: str | None) -> None:
    from qualify.checkpoint.quant_config import read_quant_config

    out = tmp_path / "out"
    convert(FIXTURE / "source", out, source_repo="o/r", source_revision="0" * 40, kv_cache_quant_algo=kv)
    block = json.loads((out / "config.json").read_text())["quantization_config"]
    assert block["kv_cache_quant_algo"] == kv  # not read by vLLM here, and never saying anything else
    assert block.get("kv_cache_scheme") == (None if kv is None else {"type": "float", "num_bits": 8,
                                                                       "dynamic": False, "strategy": "tensor"})
    schemes = read_quant_config(out).schemes
    assert all(s.conflicts == () for s in schemes)
    runtime = read_quant_config(out).runtime_scheme
    assert runtime is not None and runtime.kv_cache_quant_algo == kv


def test_the_converter_refuses_a_kv_cache_the_flat_block_cannot_declare(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="can declare FP8 only"):
        convert(FIXTURE / "source", tmp_path / "out", source_repo="o/r", source_revision="0" * 40,
                kv_cache_quant_algo="INT8")
    assert not (tmp_path / "out").exists()
