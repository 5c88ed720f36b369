"""Streaming safetensors writer.

``safetensors.torch.save_file`` needs every tensor in memory at once; a converter of a
1.2 GB checkpoint should hold one tensor at a time. The header is known before any data
(names, dtypes and shapes decide every offset), so it is written first and the tensors
are streamed after it, in header order, into a temporary file renamed into place.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

import torch

from qualify.util.atomic import atomic_open

TORCH_TO_SAFETENSORS: dict[torch.dtype, str] = {
    torch.bool: "BOOL",
    torch.uint8: "U8",
    torch.int8: "I8",
    torch.float8_e4m3fn: "F8_E4M3",
    torch.float8_e5m2: "F8_E5M2",
    torch.float8_e8m0fnu: "F8_E8M0",
    torch.int16: "I16",
    torch.float16: "F16",
    torch.bfloat16: "BF16",
    torch.int32: "I32",
    torch.float32: "F32",
    torch.float64: "F64",
    torch.int64: "I64",
}

ITEM_BITS: dict[str, int] = {
    "BOOL": 8, "U8": 8, "I8": 8, "F8_E4M3": 8, "F8_E5M2": 8, "F8_E8M0": 8, "I16": 16, "U16": 16,
    "F16": 16, "BF16": 16, "I32": 32, "U32": 32, "F32": 32, "F64": 64, "I64": 64, "U64": 64,
}  # fmt: skip


@dataclass(frozen=True)
class PlannedTensor:
    """A tensor to be written: its header entry, and how to produce its bytes when its turn comes."""

    name: str
    dtype: str
    shape: tuple[int, ...]
    produce: Callable[[], torch.Tensor | bytes]

    @property
    def nbytes(self) -> int:
        n = ITEM_BITS[self.dtype] // 8
        for d in self.shape:
            n *= d
        return n


def tensor_bytes(t: torch.Tensor) -> memoryview:
    """The raw little-endian bytes of a tensor, without copying a contiguous one."""
    t = t.detach().contiguous().cpu()
    # numpy arrays implement the buffer protocol; numpy's stubs do not say so to every type checker.
    return memoryview(t.view(torch.uint8).reshape(-1).numpy()) if t.numel() else memoryview(b"")  # type: ignore[arg-type]


def build_header(tensors: Iterable[PlannedTensor], metadata: dict[str, str] | None = None) -> bytes:
    header: dict[str, object] = {}
    if metadata:
        header["__metadata__"] = dict(metadata)
    offset = 0
    for t in tensors:
        header[t.name] = {"dtype": t.dtype, "shape": list(t.shape), "data_offsets": [offset, offset + t.nbytes]}
        offset += t.nbytes
    raw = json.dumps(header, separators=(",", ":")).encode("utf-8")
    # Pad with spaces so the data section starts 8-byte aligned, as the reference writer does.
    raw += b" " * (-len(raw) % 8)
    return struct.pack("<Q", len(raw)) + raw


def write_safetensors(
    path: Path, tensors: list[PlannedTensor], metadata: dict[str, str] | None = None
) -> None:
    """Write ``tensors`` (in the given order) to ``path`` atomically, one tensor in memory at a time."""
    names = [t.name for t in tensors]
    if len(set(names)) != len(names):
        raise ValueError("duplicate tensor names in a safetensors file")
    with atomic_open(Path(path)) as fh:
        fh.write(build_header(tensors, metadata))
        for t in tensors:
            produced = t.produce()
            data = produced if isinstance(produced, (bytes, bytearray, memoryview)) else tensor_bytes(produced)
            if len(data) != t.nbytes:
                raise ValueError(f"tensor {t.name!r}: produced {len(data)} bytes, header says {t.nbytes}")
            fh.write(data)
