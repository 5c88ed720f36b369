"""The strict safetensors header parser: what a header may say, checked against its file's size.

A header is parsed without reading anything else of the file, and nothing is allocated whose
size comes from the header. Anything a loader might read differently (a duplicate JSON key,
bytes nobody owns, a header that only parses because Python's ``json`` is lenient) is an error
here. The rules follow the reference reader (huggingface/safetensors, ``safetensors/src/tensor.rs``)
and add the checks it leaves to serde's defaults or skips. The files and checkpoints built on a
parsed header are :mod:`qualify.checkpoint.safetensors_io`'s.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from qualify.errors import JsonProblem, SafetensorsError
from qualify.util.jsonio import json_path, parse_strict, type_name

MAX_HEADER_SIZE = 100_000_000
"""The reference reader's limit; a larger declared header is refused before any read."""

# The reference does its size arithmetic in u64 and rejects overflow; capping the
# element count there also keeps Python's unbounded ints from turning a hostile shape
# (millions of huge dimensions) into a quadratic-time multiplication.
_MAX_NUMEL = 2**64

# How many dimensions of a shape an error message shows; a hostile header can carry a
# shape with millions of entries and the message must stay one readable line.
_SHAPE_SHOWN = 8

_ENTRY_FIELDS = ("dtype", "shape", "data_offsets")


@dataclass(frozen=True)
class DType:
    """A safetensors dtype: its header name, its width, and the torch dtype it reads as."""

    name: str
    bits: int
    torch_dtype: torch.dtype | None


DTYPES: dict[str, DType] = {
    d.name: d
    for d in (
        DType("BOOL", 8, torch.bool),
        DType("U8", 8, torch.uint8),
        DType("I8", 8, torch.int8),
        DType("F8_E4M3", 8, torch.float8_e4m3fn),
        DType("F8_E5M2", 8, torch.float8_e5m2),
        # MXFP8's shared block scale: a pure power-of-two exponent.
        DType("F8_E8M0", 8, torch.float8_e8m0fnu),
        DType("I16", 16, torch.int16),
        DType("U16", 16, torch.uint16),
        DType("F16", 16, torch.float16),
        DType("BF16", 16, torch.bfloat16),
        DType("I32", 32, torch.int32),
        DType("U32", 32, torch.uint32),
        DType("F32", 32, torch.float32),
        DType("F64", 64, torch.float64),
        DType("I64", 64, torch.int64),
        DType("U64", 64, torch.uint64),
        # Sub-byte dtypes are known so that their byte sizes validate, but torch has no
        # unpacked element type for them (float4_e2m1fn_x2 packs two values per byte and
        # would silently halve the last dimension), so they are read with raw() only.
        DType("F4", 4, None),
        DType("F6_E2M3", 6, None),
        DType("F6_E3M2", 6, None),
    )
}


@dataclass(frozen=True)
class TensorInfo:
    """One header entry. ``start`` and ``end`` are offsets within the data section."""

    name: str
    dtype: str
    shape: tuple[int, ...]
    start: int
    end: int

    @property
    def nbytes(self) -> int:
        return self.end - self.start

    @property
    def numel(self) -> int:
        n = 1
        for d in self.shape:
            n *= d
        return n


def _is_uint(value: Any) -> bool:
    # bool is a subclass of int in Python; JSON true must not pass as the integer 1.
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _fmt_shape(shape: list[Any] | tuple[Any, ...]) -> str:
    if len(shape) <= _SHAPE_SHOWN:
        return "[" + ", ".join(str(d) for d in shape) + "]"
    head = ", ".join(str(d) for d in shape[:_SHAPE_SHOWN])
    return f"[{head}, ... ({len(shape)} dimensions)]"




def parse_header(
    raw: bytes | bytearray | memoryview, *, file_size: int, display: str
) -> tuple[dict[str, str], dict[str, TensorInfo], int]:
    """Validate a safetensors header against the size of the file it came from.

    ``raw`` holds the file's first ``8 + N`` bytes (fewer if the file is shorter; more
    are ignored). Returns ``(metadata, tensors, N)`` with the tensors in offset order.
    Pure: it reads nothing and allocates nothing whose size comes from the header.
    """

    def fail(message: str, tensor: str | None = None) -> SafetensorsError:
        return SafetensorsError(message, file=display, tensor=tensor)

    if file_size < 8:
        raise fail(f"file is {file_size} bytes, shorter than the 8-byte header length")
    if len(raw) < 8:
        raise fail(f"only {len(raw)} of the file's first 8 bytes could be read")
    n = int.from_bytes(raw[:8], "little")
    if n > MAX_HEADER_SIZE:
        raise fail(f"declares a header of {n} bytes, more than the 100 MB limit")
    if 8 + n > file_size:
        raise fail(
            f"declares a header of {n} bytes, which would end at byte {8 + n}, past the end of the "
            f"{file_size}-byte file"
        )
    if len(raw) < 8 + n:
        raise fail(f"only {len(raw) - 8} of the header's {n} bytes could be read")
    header = raw[8 : 8 + n]
    if n == 0:
        raise fail("header is empty (0 bytes); it must be a JSON object")
    if header[0] != ord("{"):
        raise fail(f"header starts with byte 0x{header[0]:02x}, not '{{'")
    try:
        text = str(header, "utf-8")
    except UnicodeDecodeError as exc:
        raise fail(f"header is not valid UTF-8 at byte {8 + exc.start} of the file: {exc.reason}") from None
    try:
        obj = parse_strict(text, byte_base=8)
    except JsonProblem as exc:
        raise _header_json_error(exc, display) from None
    # The first byte is '{' and the whole text parsed, so obj is an object.
    assert isinstance(obj, dict)

    metadata: dict[str, str] = {}
    infos: list[TensorInfo] = []
    for name, entry in obj.items():
        if name == "__metadata__":
            metadata = _check_metadata(entry, fail)
        else:
            infos.append(_check_entry(name, entry, fail))

    data_size = file_size - 8 - n
    ordered = _check_layout(infos, data_size, header_size=n, file_size=file_size, fail=fail)
    return metadata, {t.name: t for t in ordered}, n


def _header_json_error(exc: JsonProblem, display: str) -> SafetensorsError:
    path = exc.path
    if not path:
        key = exc.duplicate
        if key is not None:
            # A repeated top-level key is a tensor (or __metadata__) defined twice.
            if key == "__metadata__":
                return SafetensorsError("header defines '__metadata__' twice", file=display)
            return SafetensorsError("tensor name appears twice in the header", file=display, tensor=key)
        return SafetensorsError(f"header is {exc.message}", file=display)
    head = str(path[0])
    rest = json_path(path[1:])
    where = f" at {rest}" if rest else ""
    if head == "__metadata__":
        return SafetensorsError(f"__metadata__{where}: {exc.message}", file=display)
    return SafetensorsError(f"header entry{where}: {exc.message}", file=display, tensor=head)


def _check_metadata(entry: Any, fail: Callable[..., SafetensorsError]) -> dict[str, str]:
    if not isinstance(entry, dict):
        raise fail(f"__metadata__ must be an object of string values, got {type_name(entry)}")
    for key, value in entry.items():
        if not isinstance(value, str):
            raise fail(f"__metadata__ value for '{key}' must be a string, got {type_name(value)}")
    return dict(entry)


def _check_entry(name: str, entry: Any, fail: Callable[..., SafetensorsError]) -> TensorInfo:
    if not isinstance(entry, dict):
        raise fail(f"header entry must be an object, got {type_name(entry)}", name)
    for key in entry:
        if key not in _ENTRY_FIELDS:
            raise fail(f"unknown field '{key}' in header entry (allowed: dtype, shape, data_offsets)", name)
    for key in _ENTRY_FIELDS:
        if key not in entry:
            raise fail(f"header entry has no '{key}' field", name)

    dtype_name = entry["dtype"]
    if not isinstance(dtype_name, str):
        raise fail(f"dtype must be a string, got {type_name(dtype_name)}", name)
    dtype = DTYPES.get(dtype_name)
    if dtype is None:
        raise fail(f"unknown dtype '{dtype_name}'", name)

    shape = entry["shape"]
    if not isinstance(shape, list):
        raise fail(f"shape must be a list of non-negative integers, got {type_name(shape)}", name)
    for i, dim in enumerate(shape):
        if not _is_uint(dim):
            shown = dim if isinstance(dim, int | float) and not isinstance(dim, bool) else type_name(dim)
            raise fail(f"shape[{i}] is {shown}; dimensions must be non-negative integers", name)

    offsets = entry["data_offsets"]
    if not isinstance(offsets, list) or len(offsets) != 2:
        got = f"a list of {len(offsets)}" if isinstance(offsets, list) else type_name(offsets)
        raise fail(f"data_offsets must be a list [start, end] of two integers, got {got}", name)
    start, end = offsets
    if not (_is_uint(start) and _is_uint(end)):
        raise fail("data_offsets must be non-negative integers", name)
    if end < start:
        raise fail(f"data_offsets [{start}, {end}] end before they start", name)

    numel = 0 if 0 in shape else 1
    if numel:
        for dim in shape:
            numel *= dim
            if numel > _MAX_NUMEL:
                raise fail(f"shape {_fmt_shape(shape)} has more than 2**64 elements", name)
    bits = numel * dtype.bits
    if bits % 8:
        raise fail(
            f"shape {_fmt_shape(shape)} x {dtype.name} is {bits} bits, not a whole number of bytes", name
        )
    if bits // 8 != end - start:
        raise fail(
            f"shape {_fmt_shape(shape)} x {dtype.name} is {bits // 8} bytes but data_offsets "
            f"[{start}, {end}] span {end - start}",
            name,
        )
    return TensorInfo(name=name, dtype=dtype.name, shape=tuple(shape), start=start, end=end)


def _check_layout(
    infos: list[TensorInfo],
    data_size: int,
    *,
    header_size: int,
    file_size: int,
    fail: Callable[..., SafetensorsError],
) -> list[TensorInfo]:
    """Tensors, sorted by offset, must tile the data section exactly."""
    # Sorted as the reference sorts (by offsets); the name breaks ties between
    # zero-size tensors so that the order, and so every message, is deterministic.
    ordered = sorted(infos, key=lambda t: (t.start, t.end, t.name))
    pos = 0
    last: TensorInfo | None = None
    for t in ordered:
        if t.start < pos:
            assert last is not None
            raise fail(
                f"data_offsets [{t.start}, {t.end}] overlap tensor '{last.name}' "
                f"at [{last.start}, {last.end}]",
                t.name,
            )
        if t.start > pos:
            if last is None:
                raise fail(f"first tensor starts at data offset {t.start}, not 0", t.name)
            raise fail(
                f"{t.start - pos} bytes of the data section between tensor '{last.name}' (ends at {pos}) "
                f"and this one (starts at {t.start}) belong to no tensor",
                t.name,
            )
        pos = t.end
        if t.end > t.start or last is None:
            last = t
    data_offset = 8 + header_size
    if pos < data_size:
        after = f"the last tensor, '{ordered[-1].name}', ends" if ordered else "the header ends"
        raise fail(
            f"{data_size - pos} trailing bytes after the data: {after} at byte {data_offset + pos} "
            f"but the file is {file_size} bytes"
        )
    if pos > data_size:
        first_cut = next(t for t in ordered if t.end > data_size)
        raise fail(
            f"data section is truncated: the tensor's data_offsets [{first_cut.start}, {first_cut.end}] need "
            f"the file to be {data_offset + first_cut.end} bytes, but it is {file_size} "
            f"({data_offset + pos - file_size} bytes missing in all)",
            first_cut.name,
        )
    return ordered
