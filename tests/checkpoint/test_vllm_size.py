"""Tests for qualify.checkpoint.vllm_size: the files vLLM 0.32 sizes and the figure it prints for them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from qualify.checkpoint.vllm_size import GIB, vllm_checkpoint_size
from qualify.errors import CheckpointError


def _sparse(path: Path, size: int) -> None:
    # Sparse: the size is the apparent one vLLM's os.path.getsize reads, without writing the bytes.
    with open(path, "wb") as f:
        f.truncate(size)


def test_decimal_gigabytes_print_as_vllm_s_gib(tmp_path: Path) -> None:
    _sparse(tmp_path / "model.safetensors", 1_200_000_000)
    size = vllm_checkpoint_size(tmp_path)
    assert size.printed == "1.12"  # a card's "1.20 GB" in decimal GB is what vLLM prints as 1.12 GiB
    assert size.files == (("model.safetensors", 1_200_000_000),)
    _sparse(tmp_path / "model.safetensors", round(1.2 * GIB))
    assert vllm_checkpoint_size(tmp_path).printed == "1.20"
    assert vllm_checkpoint_size(tmp_path).to_dict()["printed"] == "1.20 GiB"


def test_only_the_files_vllm_reads_are_counted(tmp_path: Path) -> None:
    for name, nbytes in (("a.safetensors", 3 * GIB // 4), ("b.safetensors", GIB // 4), ("stale.safetensors", GIB),
                         (".hidden.safetensors", GIB), ("pytorch_model.bin", GIB), ("config.json", 10)):
        _sparse(tmp_path / name, nbytes)
    (tmp_path / "sub").mkdir()
    _sparse(tmp_path / "sub" / "x.safetensors", GIB)
    # Without an index every top-level safetensors file is read (never a dot file, a subfolder or a .bin beside).
    assert [n for n, _ in vllm_checkpoint_size(tmp_path).files] == ["a.safetensors", "b.safetensors",
                                                                    "stale.safetensors"]
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps(
        {"weight_map": {"w1": "a.safetensors", "w2": "b.safetensors", "w3": "a.safetensors"}}))
    size = vllm_checkpoint_size(tmp_path)
    assert [n for n, _ in size.files] == ["a.safetensors", "b.safetensors"]
    assert size.total_bytes == GIB and size.printed == "1.00"


def test_a_mistral_layout_is_sized_by_its_consolidated_files(tmp_path: Path) -> None:
    _sparse(tmp_path / "consolidated.safetensors", GIB // 2)
    _sparse(tmp_path / "model.safetensors", GIB)
    assert vllm_checkpoint_size(tmp_path).printed == "0.50"


@pytest.mark.parametrize(("files", "index", "message"), [
    ({"pytorch_model.bin": 10}, None, "no safetensors weights for vLLM to size (its weights are pytorch_model.bin)"),
    ({"config.json": 10}, None, "no safetensors weights for vLLM to size (it has no weight file)"),
    ({"a.safetensors": 10}, {"weight_map": {"w": "b.safetensors"}}, "names weight files the folder lacks: "
     "b.safetensors"),
    ({"a.safetensors": 10}, {"weight_map": ["a.safetensors"]}, "'weight_map' is not an object of file names"),
])
def test_a_folder_vllm_cannot_size_is_named(tmp_path: Path, files: dict[str, int], index: object,
                                             message: str) -> None:
    for name, size in files.items():
        _sparse(tmp_path / name, size)
    if index is not None:
        (tmp_path / "model.safetensors.index.json").write_text(json.dumps(index))
    with pytest.raises(CheckpointError) as info:
        vllm_checkpoint_size(tmp_path)
    assert message in str(info.value)
    assert str(tmp_path) in str(info.value)


def test_a_broken_index_and_a_missing_folder_are_named(tmp_path: Path) -> None:
    _sparse(tmp_path / "a.safetensors", 10)
    (tmp_path / "model.safetensors.index.json").write_text('{"weight_map": {"w": "a.safetensors"')
    with pytest.raises(CheckpointError, match=r"model\.safetensors\.index\.json"):
        vllm_checkpoint_size(tmp_path)
    with pytest.raises(CheckpointError, match=r"cannot list the folder"):
        vllm_checkpoint_size(tmp_path / "absent")
