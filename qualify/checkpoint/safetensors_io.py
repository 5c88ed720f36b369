"""A strict, lazy safetensors reader.

The harness decides whether a checkpoint may ship, so this reader is deliberately
stricter than the loaders that will later consume the checkpoint: anything one of
them might read differently (a duplicate JSON key, bytes nobody owns, a header that
only parses because Python's ``json`` is lenient) is an error here. The rules follow
the reference reader (huggingface/safetensors, ``safetensors/src/tensor.rs``) and
add the checks it leaves to serde's defaults or skips; the header itself is checked by
:mod:`qualify.checkpoint.safetensors_header`.

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
from collections.abc import Iterator
from pathlib import Path, PurePosixPath
from types import TracebackType
from typing import Any, Self

import torch

from qualify.checkpoint.safetensors_header import DTYPES, MAX_HEADER_SIZE, TensorInfo, parse_header
from qualify.errors import CheckpointError, HarnessError, SafetensorsError, UsageError, exhausted
from qualify.util.jsonio import load_json_file, type_name

INDEX_NAME = "model.safetensors.index.json"
SINGLE_NAME = "model.safetensors"


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
            raise exhausted(exc, f"opening {display}") or SafetensorsError(f"cannot read: {exc.strerror or exc}",
                                                                            file=display) from None
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
                raise exhausted(exc, f"mapping {self.display}") or SafetensorsError(
                    f"cannot read: {exc.strerror or exc}", file=self.display) from None
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
    "INDEX_NAME",
    "SINGLE_NAME",
    "Checkpoint",
    "SafetensorsFile",
    "invalid_bools",
]
