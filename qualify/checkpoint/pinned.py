"""The draft's bytes as a run checks them: a private copy, hashed as it is written, re-verified at the end.

A folder that a release engineer names can change while a run reads it: a weight file
swapped once the runtime serves, a config swapped during the load. Hashing the folder
at the end (or at the start) and checking it in between vouches for bytes nobody
checked. So a run *pins* the checkpoint before any check reads it:

- every file of the folder is copied once into a private folder that only this process
  writes (mode 0700, files 0444), and hashed from the very bytes written; the checks
  read that copy, and the runtime mounts it read-only, so what is checked and served
  is what was hashed;
- those digests are the run's identity of the checkpoint: the report's ``checkpoint.files``,
  and so the attestation's subjects;
- at the end, the folder the user named (and the copy) are hashed again: a file that
  changed, appeared or vanished during the run voids the run, and nothing is signed.

Only regular files are pinned. An entry that is not one (a FIFO, a device, a link
that is broken or leaves the checkpoint), or that is a hard link (its bytes can change
through another path after the run), is left out of the copy and named in
:attr:`PinnedFolder.problems`; the structure level fails on it. A hub cache
snapshot's links into its own repository's blobs are followed, and each blob must be
named by its content's digest.
"""

from __future__ import annotations

import errno
import hashlib
import os
import stat
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from qualify.checkpoint.checksums import DEFAULT_CHUNK, sha256_files
from qualify.checkpoint.files import FileEntry, blob_name_problem, hub_repo_of, list_checkpoint_files, storage_roots
from qualify.core import Evidence
from qualify.errors import CheckpointError, HarnessError, exhausted


@dataclass(frozen=True)
class PinnedFolder:
    """A checkpoint folder pinned for one run.

    Attributes:
        origin: the folder the user named (what a release uploads).
        copy: the private copy the checks read and the runtime mounts.
        files: each pinned file's path (relative, '/'-separated), sha256 and size, in path order.
        problems: (path, why) of every entry that could not be pinned.
    """

    origin: Path
    copy: Path
    files: tuple[FileEntry, ...]
    problems: tuple[tuple[str, str], ...] = ()

    @property
    def digests(self) -> dict[str, str]:
        """path -> sha256 of every pinned file."""
        return {f.path: f.sha256 for f in self.files}

    def record(self) -> list[dict[str, object]]:
        """The report's ``checkpoint.files``: what the run checked, by digest."""
        return [{"path": f.path, "sha256": f.sha256, "size": f.size} for f in self.files]


def _data_regions(fd: int, size: int) -> list[tuple[int, int]]:
    """(start, end) of each stretch of ``fd`` that holds data; the rest are holes (read as zeros, stored as none).

    Where the file system cannot tell (no ``SEEK_DATA``), the whole file is one stretch of data.
    """
    if size == 0:
        return []
    if not hasattr(os, "SEEK_DATA"):
        return [(0, size)]
    regions: list[tuple[int, int]] = []
    pos = 0
    try:
        while pos < size:
            try:
                start = os.lseek(fd, pos, os.SEEK_DATA)
            except OSError as exc:
                if exc.errno == errno.ENXIO:  # nothing but a hole from pos to the end
                    break
                raise
            end = min(os.lseek(fd, start, os.SEEK_HOLE), size)
            if end <= start:
                break
            regions.append((start, end))
            pos = end
    except OSError as exc:
        if exc.errno in (errno.EINVAL, errno.EOPNOTSUPP):
            return [(0, size)]
        raise
    return regions


def _hash_zeros(h: Any, n: int, zeros: memoryview) -> None:
    while n > 0:
        k = min(n, len(zeros))
        h.update(zeros[:k])
        n -= k


def _copy_hashed(src_fd: int, dest: Path, label: str) -> tuple[str, int]:
    """Copy an open file into ``dest`` (created, never overwritten); the sha256 and size of the bytes written.

    Sparse where the source is: a hole (a never-written stretch, e.g. a card truncated to 2 GiB), and any
    chunk of zeros, is hashed as the zeros it reads as but not written, so a mostly empty 1 TB file costs no
    disk. The copy reads back byte for byte as the source.
    """
    h = hashlib.sha256()
    buf = bytearray(DEFAULT_CHUNK)
    view = memoryview(buf)
    zero_bytes = bytes(DEFAULT_CHUNK)
    zeros = memoryview(zero_bytes)
    size = 0
    try:
        out = os.open(dest, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o600)
    except OSError as exc:
        raise exhausted(exc, f"writing the run's copy of the checkpoint ({dest})") or HarnessError(
            f"{dest}: cannot write the run's copy of the checkpoint: {exc.strerror or exc}") from None
    try:
        try:
            length = os.fstat(src_fd).st_size
            regions = _data_regions(src_fd, length)
        except OSError as exc:
            raise exhausted(exc, f"reading {label} to pin it") or CheckpointError(
                f"cannot read: {exc.strerror or exc}", file=label) from None
        for start, end in regions:
            _hash_zeros(h, start - size, zeros)
            size = start
            os.lseek(src_fd, start, os.SEEK_SET)
            while size < end:
                try:
                    n = os.readv(src_fd, [view[:min(len(view), end - size)]])
                except OSError as exc:
                    raise exhausted(exc, f"reading {label} to pin it") or CheckpointError(
                        f"cannot read: {exc.strerror or exc}", file=label) from None
                if not n:
                    break  # shorter than when it was measured: the caller's size check names the change
                chunk = view[:n]
                h.update(chunk)
                # A full chunk compares as bytes (memcmp); a short last one is written whatever it holds.
                if n < len(buf) or buf != zero_bytes:
                    _write_at(out, chunk, size, dest)
                size += n
            if size < end:
                break
        else:
            # The hole after the last data reads as zeros too, as far as the length measured at the start.
            _hash_zeros(h, length - size, zeros)
            size = length
        try:
            os.ftruncate(out, size)  # the holes left unwritten, up to the end
        except OSError as exc:
            raise exhausted(exc, f"writing the run's copy of the checkpoint ({dest})") or HarnessError(
                f"{dest}: cannot write the run's copy of the checkpoint: {exc.strerror or exc}") from None
    finally:
        os.close(out)
    os.chmod(dest, 0o444)
    return h.hexdigest(), size


def _write_at(out: int, chunk: memoryview, offset: int, dest: Path) -> None:
    written = 0
    while written < len(chunk):
        try:
            written += os.pwrite(out, chunk[written:], offset + written)
        except OSError as exc:
            raise exhausted(exc, f"writing the run's copy of the checkpoint ({dest})") or HarnessError(
                f"{dest}: cannot write the run's copy of the checkpoint: {exc.strerror or exc}") from None


def _unchanged(before: os.stat_result, after: os.stat_result) -> bool:
    return (before.st_size, before.st_mtime_ns, before.st_ctime_ns, before.st_ino) == (
        after.st_size, after.st_mtime_ns, after.st_ctime_ns, after.st_ino)


def pin_folder(origin: Path, copy: Path) -> PinnedFolder:
    """Copy every regular file of ``origin`` into the new folder ``copy``, hashing the bytes as they are written.

    Args:
        origin: the checkpoint folder.
        copy: a folder that does not exist yet; it is created with mode 0700.

    A file that cannot be read is not pinned, and is named in ``problems``.

    Raises:
        HarnessError: the copy cannot be written (a full disk, ``copy`` already exists).
    """
    origin = Path(origin)
    try:
        copy.mkdir(mode=0o700, parents=False, exist_ok=False)
    except OSError as exc:
        raise HarnessError(f"{copy}: cannot create the run's copy of the checkpoint: {exc.strerror or exc}") from None
    roots = storage_roots(origin)
    blobs = roots[1] if len(roots) > 1 else None
    files: list[FileEntry] = []
    problems: list[tuple[str, str]] = []
    repo_dir = hub_repo_of(origin)
    if repo_dir is not None and blobs is None and (repo_dir / "blobs").exists():
        problems.append(("blobs", f"the hub cache's blobs folder {repo_dir / 'blobs'} is a link or lies outside its "
                                  f"repository (it resolves to {(repo_dir / 'blobs').resolve()}): no file is pinned "
                                  "through it"))
    for rel in list_checkpoint_files(origin):
        try:
            resolved = (origin / rel).resolve(strict=True)
        except FileNotFoundError:
            problems.append((rel, "is a broken link or names no file"))
            continue
        except (OSError, RuntimeError, ValueError) as exc:  # a link loop, a name too long
            fault = exhausted(exc, f"pinning {rel}")
            if fault is not None:
                raise fault from None
            problems.append((rel, f"cannot be resolved: {exc}"))
            continue
        if not any(resolved.is_relative_to(r) for r in roots):
            problems.append((rel, f"resolves outside the checkpoint (to {resolved}); it would ship another file's "
                                  "bytes"))
            continue
        try:
            # O_NONBLOCK: opening a FIFO must not wait for a writer; fstat below refuses it.
            fd = os.open(resolved, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
        except OSError as exc:
            fault = exhausted(exc, f"opening {rel} to pin it")
            if fault is not None:
                raise fault from None
            problems.append((rel, f"cannot be read: {exc.strerror or exc}"))
            continue
        try:
            before = os.fstat(fd)
            if not stat.S_ISREG(before.st_mode):
                kind = "a folder" if stat.S_ISDIR(before.st_mode) else "a FIFO, socket or device"
                problems.append((rel, f"is {kind}, not a regular file"))
                continue
            if before.st_nlink > 1:
                problems.append((rel, f"is a hard link ({before.st_nlink} names share its bytes): it can change "
                                      "through another path after qualification"))
                continue
            os.set_blocking(fd, True)
            dest = copy / rel
            dest.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            try:
                digest, size = _copy_hashed(fd, dest, rel)
            except CheckpointError as exc:
                dest.unlink(missing_ok=True)
                problems.append((rel, f"cannot be read: {exc.detail}"))
                continue
            after = os.fstat(fd)
        finally:
            os.close(fd)
        if not _unchanged(before, after) or size != before.st_size:
            problems.append((rel, "changed while it was being pinned; nothing read from it can be vouched for"))
            continue
        if blobs is not None and resolved.is_relative_to(blobs):
            why = (f"resolves into a subfolder of the hub cache's blobs ({resolved})" if resolved.parent != blobs
                   else blob_name_problem(resolved, digest))
            if why:
                problems.append((rel, f"hub cache blob is not content-addressed: {why}"))
                continue
        files.append(FileEntry(rel, digest, size))
    return PinnedFolder(origin, copy, tuple(files), tuple(problems))


def changes_since(pinned: Sequence[FileEntry], root: Path, *, what: str) -> list[tuple[str, str]]:
    """How the folder ``root`` differs now from the pinned files: (path, what happened) per changed, vanished
    or new file.

    Args:
        pinned: the files pinned at the start.
        root: the folder to compare.
        what: how the messages name the folder ("the checkpoint folder", "the run's copy").
    """
    root = Path(root)
    if not root.is_dir():
        return [(".", f"{what} {root} is gone")]
    out: list[tuple[str, str]] = []
    expected = {f.path: f for f in pinned}
    present = set(list_checkpoint_files(root))
    regular = [rel for rel in sorted(present & set(expected)) if _is_regular(root / rel)]
    try:
        digests = sha256_files([root / rel for rel in regular], labels=regular, progress=False)
    except CheckpointError as exc:
        return [(exc.file or ".", f"cannot be read again in {what}: {exc.detail}")]
    for rel, entry in sorted(expected.items()):
        if rel not in present:
            out.append((rel, f"removed from {what} during the run"))
        elif root / rel not in digests:
            out.append((rel, f"no longer a regular file in {what}"))
        elif digests[root / rel] != entry.sha256:
            out.append((rel, f"changed in {what} during the run (sha256 {entry.sha256[:12]}... when pinned, "
                             f"{digests[root / rel][:12]}... at the end)"))
    for rel in sorted(present - set(expected)):
        out.append((rel, f"appeared in {what} during the run"))
    return out


def _is_regular(path: Path) -> bool:
    try:
        return stat.S_ISREG(os.stat(path).st_mode)
    except OSError:
        return False


def verify_pinned(pinned: PinnedFolder) -> list[str]:
    """Every change since the pin, in the folder the user named and in the run's copy, one line each; empty
    when none. Entries that were never pinned and are still there are not repeated: they already fail the run."""
    unpinned = {rel for rel, _ in pinned.problems}
    changes = [c for c in changes_since(pinned.files, pinned.origin, what="the checkpoint folder")
               if c[0] not in unpinned]
    changes += changes_since(pinned.files, pinned.copy, what="the run's copy of the checkpoint")
    return [f"{rel}: {why}" for rel, why in changes]


def pin_evidence(pinned: PinnedFolder) -> Evidence:
    """The structure level's word on the pin: every entry of the folder was pinned as a regular file."""
    ev = Evidence("every file of the checkpoint folder was pinned at the start of the run: a regular file inside "
                  "the checkpoint, copied once and hashed as it was copied; the checks read that copy")
    for rel, why in pinned.problems:
        ev.add(f"not pinned: {why}", file=rel)
    ev.measured.update(files_pinned=len(pinned.files), bytes_pinned=sum(f.size for f in pinned.files))
    return ev


def copy_evidence(pinned: PinnedFolder, root: Path) -> Evidence:
    """Whether ``root`` (the folder a runtime loads) holds exactly the pinned files, byte for byte."""
    ev = Evidence(f"the draft the runtime loads ({root}) holds exactly the {len(pinned.files)} pinned files, byte for "
                  "byte")
    for rel, why in changes_since(pinned.files, root, what="the loaded folder"):
        ev.add(why, file=rel)
    ev.measured["files_compared"] = len(pinned.files)
    return ev
