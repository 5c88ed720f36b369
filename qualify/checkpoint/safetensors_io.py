"""A strict, lazy safetensors reader.

The harness decides whether a checkpoint may ship, so this reader is deliberately
stricter than the loaders that will later consume the checkpoint: anything one of
them might read differently (a duplicate JSON key, bytes nobody owns, a header that
only parses because Python's ``json`` is lenient) is an error here. The rules follow
the reference reader (huggingface/safetensors, ``safetensors/src/tensor.rs``) and
add the checks it leaves to serde's defaults or skips.

Every error is a :class:`~qualify.errors.SafetensorsError` (or, for other JSON files,
a :class:`~qualify.errors.CheckpointError`) that names the file, as a path relative to
the checkpoint root, and the tensor when there is one.

Opening a file reads only its header. Tensor bytes come from a memory map created on
first use, so qualifying a 100 GB checkpoint's structure costs a few header reads.
"""

from __future__ import annotations

import contextlib
import hashlib
import mmap
import os
import stat
import sys
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from types import TracebackType
from typing import Any, Self

import torch

from qualify.errors import CheckpointError, HarnessError, JsonProblem, SafetensorsError, UsageError
from qualify.util.jsonio import json_path, load_json_file, parse_strict, type_name

MAX_HEADER_SIZE = 100_000_000
"""The reference reader's limit; a larger declared header is refused before any read."""

INDEX_NAME = "model.safetensors.index.json"
SINGLE_NAME = "model.safetensors"

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


# ------------------------------------------------------------------------- header


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


# --------------------------------------------------------------------------- files


class SafetensorsFile:
    """One validated safetensors file. Opening reads only the header."""

    def __init__(
        self,
        path: Path,
        display: str,
        header_size: int,
        metadata: dict[str, str],
        tensors: dict[str, TensorInfo],
        file_size: int,
        header_digest: bytes,
    ) -> None:
        self.path = path
        self.display = display
        self.header_size = header_size
        self.metadata = metadata
        self.tensors = tensors
        self.file_size = file_size
        self._header_digest = header_digest
        self._mm: mmap.mmap | None = None
        self._view: memoryview | None = None
        self._lock = threading.Lock()

    @property
    def data_offset(self) -> int:
        return 8 + self.header_size

    @classmethod
    def open(cls, path: str | os.PathLike[str], display: str | None = None) -> SafetensorsFile:
        path = Path(path)
        display = display if display is not None else str(path)
        try:
            # Checked before open(): opening a FIFO named *.safetensors would block forever.
            if not stat.S_ISREG(os.stat(path).st_mode):
                raise SafetensorsError("not a regular file", file=display)
            with open(path, "rb", buffering=0) as fh:
                st = os.fstat(fh.fileno())
                if not stat.S_ISREG(st.st_mode):
                    raise SafetensorsError("not a regular file", file=display)
                size = st.st_size
                raw = _read_header_bytes(fh, size)
        except FileNotFoundError:
            raise UsageError(f"{display}: no such file") from None
        except IsADirectoryError:
            raise SafetensorsError("is a directory, not a safetensors file", file=display) from None
        except OSError as exc:
            raise SafetensorsError(f"cannot read: {exc.strerror or exc}", file=display) from None
        metadata, tensors, n = parse_header(raw, file_size=size, display=display)
        digest = hashlib.blake2b(raw[: 8 + n], digest_size=16).digest()
        return cls(path, display, n, metadata, tensors, size, digest)

    def _info(self, name: str) -> TensorInfo:
        info = self.tensors.get(name)
        if info is None:
            raise SafetensorsError("no such tensor in this file", file=self.display, tensor=name)
        return info

    def _map(self) -> memoryview:
        with self._lock:
            if self._view is not None:
                return self._view
            try:
                with open(self.path, "rb", buffering=0) as fh:
                    size = os.fstat(fh.fileno()).st_size
                    if size != self.file_size:
                        raise SafetensorsError(
                            f"changed on disk since it was opened: {self.file_size} bytes then, {size} now",
                            file=self.display,
                        )
                    # ACCESS_COPY gives a writable (copy-on-write) buffer, so torch.frombuffer
                    # does not warn about a read-only buffer, and no write can reach the file.
                    mm = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_COPY)
            except OSError as exc:
                raise SafetensorsError(f"cannot read: {exc.strerror or exc}", file=self.display) from None
            # The size alone would miss a file rewritten in place with the same length.
            digest = hashlib.blake2b(mm[: self.data_offset], digest_size=16).digest()
            if digest != self._header_digest:
                mm.close()
                raise SafetensorsError("header changed on disk since the file was opened", file=self.display)
            self._mm = mm
            self._view = memoryview(mm)
            return self._view

    def raw(self, name: str) -> memoryview:
        """The tensor's bytes, zero-copy from the memory map (writable, copy-on-write)."""
        info = self._info(name)
        view = self._map()
        return view[self.data_offset + info.start : self.data_offset + info.end]

    def tensor(self, name: str) -> torch.Tensor:
        """The tensor with the header's dtype and shape; zero-copy unless its bytes are misaligned."""
        info = self._info(name)
        dtype = DTYPES[info.dtype]
        if dtype.torch_dtype is None:
            raise SafetensorsError(
                f"dtype {dtype.name} has no torch element type; read its bytes with raw()",
                file=self.display,
                tensor=name,
            )
        if sys.byteorder != "little":
            # safetensors is little-endian; a byte swap per dtype is not implemented.
            raise HarnessError("reading tensors needs a little-endian host")
        if info.nbytes == 0:
            # torch.frombuffer refuses an empty buffer.
            return torch.empty(info.shape, dtype=dtype.torch_dtype)
        buf: memoryview | bytearray = self.raw(name)
        itemsize = dtype.bits // 8
        if (self.data_offset + info.start) % itemsize:
            # The map is page-aligned, so this is a header whose length is not padded to a
            # multiple of 8. Torch accepts misaligned pointers, but kernels assume alignment.
            buf = bytearray(buf)
        out = torch.frombuffer(buf, dtype=dtype.torch_dtype, count=info.numel).reshape(info.shape)
        if dtype.name == "BOOL":
            # A bool byte other than 0 or 1 is undefined behaviour in torch's kernels.
            as_bytes = out.view(torch.uint8).reshape(-1)
            bad = (as_bytes > 1).nonzero()
            if bad.numel():
                i = int(bad[0])
                raise SafetensorsError(
                    f"BOOL element {i} is byte 0x{int(as_bytes[i]):02x}; only 0 and 1 are valid",
                    file=self.display,
                    tensor=name,
                )
        return out

    def close(self) -> None:
        """Release the memory map. Tensors and views still alive keep their pages mapped."""
        with self._lock:
            view, mm = self._view, self._mm
            self._view = self._mm = None
        if view is not None:
            view.release()
        if mm is not None:
            # A tensor or raw() view may still point into the map; it is then unmapped
            # when the last of them is garbage-collected.
            with contextlib.suppress(BufferError):
                mm.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"SafetensorsFile({self.display!r}, {len(self.tensors)} tensors)"


def invalid_bools(f: SafetensorsFile) -> Iterator[tuple[str, int, int, int]]:
    """Every BOOL tensor of ``f`` holding a byte other than 0 or 1: (tensor, element, byte, file offset).

    torch, numpy and the runtimes' kernels take a bool byte as 0 or 1; any other value is
    undefined behaviour (a mask that is true and false at once). Only the first bad element
    of each tensor is reported.
    """
    for name in f.tensors:
        info = f._info(name)
        if info.dtype != "BOOL" or info.nbytes == 0:
            continue
        data = torch.frombuffer(f.raw(name), dtype=torch.uint8)
        bad = (data > 1).nonzero()
        if bad.numel():
            i = int(bad[0])
            yield name, i, int(data[i]), f.data_offset + info.start + i


def _read_header_bytes(fh: Any, size: int) -> bytes | bytearray:
    """The first 8+N bytes, reading N only once it has been checked against the file size."""
    head = _read_exact(fh, min(8, size))
    if len(head) < 8:
        return head
    n = int.from_bytes(head, "little")
    if n > MAX_HEADER_SIZE or 8 + n > size:
        return head  # parse_header reports it; nothing is allocated from n
    buf = bytearray(8 + n)
    buf[:8] = head
    view = memoryview(buf)
    got = 8
    while got < len(buf):
        k = fh.readinto(view[got:])
        if not k:
            return bytes(view[:got])  # the file shrank under us; parse_header reports it
        got += k
    return buf


def _read_exact(fh: Any, n: int) -> bytes:
    out = b""
    while len(out) < n:
        chunk = fh.read(n - len(out))
        if not chunk:
            break
        out += chunk
    return out


# ---------------------------------------------------------------------- checkpoints


def _check_relpath(rel: Any, *, what: str) -> str | None:
    """Why ``rel`` is not a safe path inside the checkpoint, or None if it is."""
    if not isinstance(rel, str):
        return f"{what} must be a string, got {type_name(rel)}"
    if not rel:
        return f"{what} is empty"
    if "\\" in rel:
        return f"{what} '{rel}' contains a backslash; paths are '/'-separated"
    p = PurePosixPath(rel)
    if p.is_absolute():
        return f"{what} '{rel}' is absolute; it must be relative to the checkpoint directory"
    if ".." in p.parts:
        return f"{what} '{rel}' contains '..' and could point outside the checkpoint directory"
    if p.as_posix() != rel:
        return f"{what} '{rel}' is not a normalized relative path (write '{p.as_posix()}')"
    return None


class Checkpoint:
    """A checkpoint directory, validated as a whole.

    Accepted layouts: exactly one ``*.safetensors`` file (usually ``model.safetensors``);
    or shards listed by ``model.safetensors.index.json``, where the index and the files
    must agree tensor for tensor. ``files`` is keyed by path relative to ``root``.
    ``unindexed`` lists ``*.safetensors`` files beside an index that it does not name
    (loaders that follow the index ignore them; a check may still want to flag them).
    """

    def __init__(
        self,
        root: Path,
        files: dict[str, SafetensorsFile],
        index: dict[str, Any] | None,
        unindexed: list[str],
    ) -> None:
        self.root = root
        self.files = files
        self.index = index
        self.unindexed = unindexed
        self._owner: dict[str, str] = {}
        for rel, f in files.items():
            for name in f.tensors:
                other = self._owner.get(name)
                if other is not None:
                    raise SafetensorsError(f"tensor is also in '{other}'", file=rel, tensor=name)
                self._owner[name] = rel

    @classmethod
    def open(cls, root: str | os.PathLike[str]) -> Checkpoint:
        root = Path(root)
        if not root.exists():
            raise UsageError(f"{root}: no such directory")
        if not root.is_dir():
            raise UsageError(f"{root}: not a checkpoint directory (a directory of *.safetensors files)")
        # Hidden files are skipped as glob("*.safetensors") skips them: that is how
        # loaders list shards, and editors and macOS leave "._x.safetensors" droppings.
        found = sorted(
            p.name for p in root.iterdir() if p.name.endswith(".safetensors") and not p.name.startswith(".")
        )
        files: dict[str, SafetensorsFile] = {}
        try:
            if (root / INDEX_NAME).exists() or (root / INDEX_NAME).is_symlink():
                index = load_json_file(root / INDEX_NAME, display=INDEX_NAME, error=SafetensorsError,
                                       require_object=True)
                weight_map = _check_index(index)
                shards = sorted(set(weight_map.values()))
                if SINGLE_NAME in found and SINGLE_NAME not in shards:
                    # transformers would load model.safetensors, vLLM the indexed shards.
                    raise SafetensorsError(
                        f"both {SINGLE_NAME} and an index that does not name it are present; "
                        "loaders disagree on which to load",
                        file=INDEX_NAME,
                    )
                for rel in shards:
                    files[rel] = _open_member(root, rel, weight_map)
                ckpt = cls(root, files, index, [f for f in found if f not in shards])
                ckpt._check_against_index(weight_map)
                return ckpt
            if not found:
                raise UsageError(f"{root}: not a checkpoint directory: no *.safetensors file in it")
            if len(found) > 1:
                shown = ", ".join(found[:5]) + (", ..." if len(found) > 5 else "")
                raise SafetensorsError(
                    f"missing, but the directory has {len(found)} *.safetensors files ({shown}); "
                    "shards need an index to say which tensor is where",
                    file=INDEX_NAME,
                )
            files[found[0]] = _open_member(root, found[0], None)
            return cls(root, files, None, [])
        except BaseException:
            for f in files.values():
                f.close()
            raise

    def _check_against_index(self, weight_map: dict[str, str]) -> None:
        for name, rel in weight_map.items():
            actual = self._owner.get(name)
            if actual is None:
                raise SafetensorsError(
                    f"{INDEX_NAME} maps the tensor to this file, but no file has it", file=rel, tensor=name
                )
            if actual != rel:
                raise SafetensorsError(
                    f"{INDEX_NAME} maps the tensor to this file, but it is in '{actual}'",
                    file=rel,
                    tensor=name,
                )
        for name, rel in self._owner.items():
            if name not in weight_map:
                raise SafetensorsError(f"tensor is not in {INDEX_NAME}'s weight_map", file=rel, tensor=name)

    def names(self) -> list[str]:
        """Every tensor name: files in path order, tensors in offset order (sequential reads)."""
        return list(self._owner)

    def info(self, name: str) -> TensorInfo:
        return self.files[self.file_of(name)].tensors[name]

    def file_of(self, name: str) -> str:
        rel = self._owner.get(name)
        if rel is None:
            raise SafetensorsError("no such tensor in the checkpoint", file=str(self.root), tensor=name)
        return rel

    def tensor(self, name: str) -> torch.Tensor:
        return self.files[self.file_of(name)].tensor(name)

    def raw(self, name: str) -> memoryview:
        return self.files[self.file_of(name)].raw(name)

    def __contains__(self, name: object) -> bool:
        return name in self._owner

    def __iter__(self) -> Iterator[str]:
        return iter(self._owner)

    def __len__(self) -> int:
        return len(self._owner)

    def read_json(self, relpath: str) -> dict[str, Any] | None:
        """A JSON object from the checkpoint (e.g. ``config.json``), or None if the file is absent."""
        problem = _check_relpath(relpath, what="path")
        if problem:
            raise UsageError(problem)
        path = self.root / relpath
        if not path.exists():
            return None
        if not path.is_file():
            raise CheckpointError("not a regular file", file=relpath)
        return load_json_file(path, display=relpath, error=CheckpointError, require_object=True)

    def close(self) -> None:
        for f in self.files.values():
            f.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Checkpoint({str(self.root)!r}, {len(self.files)} files, {len(self._owner)} tensors)"


def _check_index(index: dict[str, Any]) -> dict[str, str]:
    weight_map = index.get("weight_map")
    if not isinstance(weight_map, dict):
        got = "no weight_map" if weight_map is None else f"weight_map is {type_name(weight_map)}"
        raise SafetensorsError(f"{got}; it must be an object mapping tensor names to files", file=INDEX_NAME)
    if not weight_map:
        raise SafetensorsError("weight_map is empty", file=INDEX_NAME)
    for name, rel in weight_map.items():
        problem = _check_relpath(rel, what="weight_map path")
        if problem is None and not rel.endswith(".safetensors"):
            problem = f"weight_map path '{rel}' is not a .safetensors file"
        if problem:
            raise SafetensorsError(problem, file=INDEX_NAME, tensor=name)
    return weight_map


def _open_member(root: Path, rel: str, weight_map: dict[str, str] | None) -> SafetensorsFile:
    path = root / rel
    if not path.exists():
        if weight_map is not None:
            mapped = [name for name, r in weight_map.items() if r == rel]
            raise SafetensorsError(
                f"missing, but {INDEX_NAME} maps {len(mapped)} tensor(s) to it", file=rel, tensor=mapped[0]
            )
        raise SafetensorsError("missing (a broken symbolic link?)", file=rel)
    try:
        return SafetensorsFile.open(path, display=rel)
    except UsageError as exc:
        # It existed a moment ago; within a checkpoint a vanished file is the checkpoint's fault.
        raise SafetensorsError("missing", file=rel) from exc


__all__ = [
    "DTYPES",
    "INDEX_NAME",
    "MAX_HEADER_SIZE",
    "Checkpoint",
    "DType",
    "SafetensorsFile",
    "TensorInfo",
    "parse_header",
]
