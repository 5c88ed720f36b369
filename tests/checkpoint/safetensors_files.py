"""Safetensors files built byte by byte for the reader's tests: a header as the format stores it,
a whole file, and how a bad file's error is expected to read."""

from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Any

import pytest
import torch

from qualify.checkpoint.safetensors_io import SafetensorsFile
from qualify.errors import SafetensorsError

BAD = "bad.safetensors"


def header_bytes(header: dict[str, Any] | str | bytes, *, pad: bool = True) -> bytes:
    """The JSON header as the format stores it, space-padded to a multiple of 8."""
    if isinstance(header, dict):
        hb = json.dumps(header, separators=(",", ":")).encode()
    elif isinstance(header, str):
        hb = header.encode()
    else:
        hb = header
    if pad:
        hb += b" " * (-len(hb) % 8)
    return hb


def assemble(
    header: dict[str, Any] | str | bytes, data: bytes = b"", *, length: int | None = None, pad: bool = True
) -> bytes:
    """A whole file: u64 little-endian header length, header, data. ``length`` lies about N."""
    hb = header_bytes(header, pad=pad)
    n = len(hb) if length is None else length
    return struct.pack("<Q", n) + hb + data


def entry(dtype: str, shape: list[int], start: int, end: int) -> dict[str, Any]:
    return {"dtype": dtype, "shape": shape, "data_offsets": [start, end]}


def good_header() -> tuple[dict[str, Any], bytes]:
    """Two tensors, 'a' (F32 [2,2], 16 bytes) then 'b' (U8 [4], 4 bytes)."""
    return (
        {"__metadata__": {"format": "pt"}, "a": entry("F32", [2, 2], 0, 16), "b": entry("U8", [4], 16, 20)},
        bytes(range(20)),
    )


def as_bytes(t: torch.Tensor) -> bytes:
    return bytes(t.contiguous().reshape(-1).view(torch.uint8).tolist())


def write(tmp_path: Path, content: bytes, name: str = BAD) -> Path:
    p = tmp_path / name
    p.write_bytes(content)
    return p


def open_bad(tmp_path: Path, content: bytes) -> SafetensorsError:
    """Open ``content`` as a file and return the error, checking it names the file."""
    p = write(tmp_path, content)
    with pytest.raises(SafetensorsError) as info:
        SafetensorsFile.open(p, display=BAD)
    err = info.value
    assert err.file == BAD
    assert str(err).startswith(f"{BAD}: ")
    return err


def expect(err: SafetensorsError, *fragments: str, tensor: str | None) -> None:
    assert err.tensor == tensor, str(err)
    if tensor is not None:
        assert f"tensor '{tensor}'" in str(err)
    for fragment in fragments:
        assert fragment in str(err), f"{fragment!r} not in {str(err)!r}"
