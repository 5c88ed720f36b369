"""Tests for qualify.checkpoint.safetensors_writer: what it writes is a safetensors file the reference
reader reads back bit for bit, its data 8-byte aligned, and a tensor that is not what its header says
leaves nothing written."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest
import torch
from safetensors import safe_open

from qualify.checkpoint.safetensors_header import DTYPES
from qualify.checkpoint.safetensors_writer import (
    ITEM_BITS,
    TORCH_TO_SAFETENSORS,
    PlannedTensor,
    build_header,
    tensor_bytes,
    write_safetensors,
)
from qualify.errors import HarnessError


def planned(name: str, t: torch.Tensor) -> PlannedTensor:
    return PlannedTensor(name, TORCH_TO_SAFETENSORS[t.dtype], tuple(t.shape), lambda: t)


def test_the_dtype_tables_agree_with_the_reader() -> None:
    for dtype, name in TORCH_TO_SAFETENSORS.items():
        assert DTYPES[name].torch_dtype == dtype and DTYPES[name].bits == ITEM_BITS[name]
        assert ITEM_BITS[name] == torch.empty(0, dtype=dtype).element_size() * 8
    for name, bits in ITEM_BITS.items():
        assert DTYPES[name].bits == bits


def test_tensor_bytes_are_the_little_endian_bytes() -> None:
    assert bytes(tensor_bytes(torch.tensor([1, 256], dtype=torch.int16))) == b"\x01\x00\x00\x01"
    assert bytes(tensor_bytes(torch.arange(6, dtype=torch.uint8).reshape(2, 3).t())) == bytes([0, 3, 1, 4, 2, 5])
    assert bytes(tensor_bytes(torch.empty(0, 4))) == b""


def test_the_header_lays_tensors_out_in_order_and_pads_to_8_bytes() -> None:
    header = build_header([PlannedTensor("a", "BF16", (2, 3), bytes), PlannedTensor("b", "U8", (5,), bytes)],
                          {"format": "pt"})
    (size,) = struct.unpack("<Q", header[:8])
    assert size == len(header) - 8 and size % 8 == 0
    doc = json.loads(header[8:].decode())
    assert doc == {"__metadata__": {"format": "pt"}, "a": {"dtype": "BF16", "shape": [2, 3], "data_offsets": [0, 12]},
                   "b": {"dtype": "U8", "shape": [5], "data_offsets": [12, 17]}}
    assert list(doc) == ["__metadata__", "a", "b"]


def test_a_written_file_reads_back_bit_for_bit(tmp_path: Path) -> None:
    tensors = {
        "w": torch.randn(4, 64, generator=torch.Generator().manual_seed(0)).to(torch.bfloat16),
        "q": torch.arange(64, dtype=torch.uint8).view(torch.float8_e4m3fn).reshape(2, 32),
        "s": torch.tensor([[127, 0]], dtype=torch.uint8),
        "empty": torch.empty(0, 3),
    }
    path = tmp_path / "model.safetensors"
    write_safetensors(path, [planned(n, t) for n, t in tensors.items()], {"format": "pt"})
    with safe_open(str(path), "pt") as f:
        assert f.metadata() == {"format": "pt"}
        assert sorted(f.keys()) == sorted(tensors)
        for name, t in tensors.items():
            got = f.get_tensor(name)
            assert got.dtype == t.dtype and got.shape == t.shape
            assert torch.equal(got.view(torch.uint8), t.view(torch.uint8))


def test_raw_bytes_may_stand_for_a_tensor(tmp_path: Path) -> None:
    path = tmp_path / "model.safetensors"
    write_safetensors(path, [PlannedTensor("b", "U8", (3,), lambda: b"\x01\x02\x03")])
    with safe_open(str(path), "pt") as f:
        assert f.get_tensor("b").tolist() == [1, 2, 3]


def test_a_tensor_of_the_wrong_size_leaves_the_old_file(tmp_path: Path) -> None:
    path = tmp_path / "model.safetensors"
    path.write_bytes(b"old")
    bad = PlannedTensor("w", "F32", (4,), lambda: torch.zeros(3))
    with pytest.raises(ValueError, match=r"tensor 'w': produced 12 bytes, header says 16"):
        write_safetensors(path, [planned("ok", torch.ones(2)), bad])
    assert path.read_bytes() == b"old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model.safetensors"]


def test_duplicate_names_are_refused_before_anything_is_written(tmp_path: Path) -> None:
    path = tmp_path / "model.safetensors"
    with pytest.raises(ValueError, match="duplicate tensor names"):
        write_safetensors(path, [planned("w", torch.ones(1)), planned("w", torch.ones(1))])
    assert not path.exists()


def test_a_file_that_cannot_be_written_is_a_harness_error(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("")
    with pytest.raises(HarnessError, match="cannot write"):
        write_safetensors(tmp_path / "file" / "model.safetensors", [planned("w", torch.ones(1))])
