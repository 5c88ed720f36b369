"""SHA-256 of checkpoint files, fast enough to run on every qualification, and the
worker threads that the other long per-tensor steps (statistics, reproduction) share
with it.

A release is tens to hundreds of GB, so hashing is I/O and hash bound, not Python
bound: each file is read in large chunks into one reused buffer (no per-chunk
allocation) and fed to hashlib through a memoryview (no copy); hashlib releases the
GIL for large updates, so files hash in parallel on threads.
"""

from __future__ import annotations

import hashlib
import os
import stat
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import FIRST_EXCEPTION, Future, ThreadPoolExecutor, wait
from pathlib import Path
from typing import TypeVar

from qualify.errors import CheckpointError, exhausted
from qualify.util.progress import StepProgress

T = TypeVar("T")
R = TypeVar("R")

DEFAULT_CHUNK = 8 << 20


def _hash(path: Path, label: str, chunk_size: int, advance: Callable[[int], None] | None) -> str:
    if chunk_size <= 0:
        raise ValueError(f"chunk_size must be positive, got {chunk_size}")
    h = hashlib.sha256()
    buf = bytearray(chunk_size)
    view = memoryview(buf)
    try:
        # Unbuffered: readinto then fills our buffer directly instead of going through
        # io.BufferedReader's own buffer (one memcpy less per chunk).
        with open(path, "rb", buffering=0) as fh:
            if hasattr(os, "posix_fadvise"):
                # Ask for aggressive readahead; a cold 10 GB shard is read once, in order.
                os.posix_fadvise(fh.fileno(), 0, 0, os.POSIX_FADV_SEQUENTIAL)
            while True:
                n = fh.readinto(view)
                if not n:
                    break
                h.update(view[:n])
                if advance is not None:
                    advance(n)
    except OSError as exc:
        reason = exc.strerror or str(exc)
        raise exhausted(exc, f"hashing {label}") or CheckpointError(f"cannot read: {reason}", file=label) from None
    return h.hexdigest()


def sha256_file(path: str | os.PathLike[str], chunk_size: int = DEFAULT_CHUNK) -> str:
    """Hex SHA-256 of one file, streamed."""
    path = Path(path)
    return _hash(path, str(path), chunk_size, None)


def content_revision(digests: Mapping[str, str]) -> str:
    """A 40-hex identity of a folder's content from each file's hex sha256, keyed by relative path.

    It stands in for a commit where a checkpoint is a local folder with no hub history
    (a generated fixture, a checkout): immutable, since any changed, added or removed
    file changes it, and the same on every machine for the same bytes.
    """
    h = hashlib.sha1()
    for rel in sorted(digests):
        # A name that is not UTF-8 on disk comes back as surrogate escapes: hash its exact bytes.
        h.update(rel.encode("utf-8", "surrogateescape") + b"\0" + bytes.fromhex(digests[rel]))
    return h.hexdigest()


def folder_digests(root: str | os.PathLike[str]) -> dict[str, str]:
    """Hex sha256 of every regular file under ``root``, keyed by relative POSIX path, in path order."""
    root = Path(root)
    files = sorted(p for p in root.rglob("*") if p.is_file())
    rels = [p.relative_to(root).as_posix() for p in files]
    digests = sha256_files(files, labels=rels, progress=False)
    return {rel: digests[p] for rel, p in zip(rels, files, strict=True)}


def folder_revision(root: str | os.PathLike[str]) -> str:
    """:func:`content_revision` of every regular file under ``root``."""
    return content_revision(folder_digests(root))


def sha256_files(
    paths: Sequence[str | os.PathLike[str]],
    *,
    workers: int | None = None,
    progress: bool | None = None,
    labels: Sequence[str] | None = None,
    chunk_size: int = DEFAULT_CHUNK,
    reuse: bool = True,
) -> dict[Path, str]:
    """Hex SHA-256 of each file, hashed on ``workers`` threads (default: one per CPU).

    ``reuse`` takes a digest this process already made of an unchanged file
    (:class:`DigestMemo`) instead of reading it again; ``reuse=False`` always reads
    (benchmarks), and does not remember what it hashed either.

    ``labels`` name the files in errors and on the progress bar (e.g. paths relative to
    the checkpoint). ``progress=None`` shows a bar when stderr is a terminal; when it is
    not, a hashing run longer than :data:`~qualify.util.progress.LINE_INTERVAL_S` prints a plain line that often
    (see :class:`StepProgress`), and a shorter one prints nothing; ``progress=False``
    never prints. The first file that cannot be read raises
    :class:`CheckpointError` naming its label; files not yet started are skipped.
    """
    path_list = [Path(p) for p in paths]
    if labels is None:
        label_list = [str(p) for p in path_list]
    else:
        label_list = list(labels)
        if len(label_list) != len(path_list):
            raise ValueError(f"{len(label_list)} labels for {len(path_list)} paths")
    # The same path twice is hashed once: the result is keyed by path anyway.
    jobs: dict[Path, str] = {}
    for p, label in zip(path_list, label_list, strict=True):
        jobs.setdefault(p, label)
    if not jobs:
        return {}

    if workers is None:
        workers = os.cpu_count() or 1
    if workers < 1:
        raise ValueError(f"workers must be at least 1, got {workers}")

    # A missing file is found before any hashing starts, so the error is the first
    # missing file in the caller's order rather than whichever thread lost the race.
    stats: dict[Path, os.stat_result] = {}
    for p, label in jobs.items():
        try:
            st = os.stat(p)
        except OSError as exc:
            raise exhausted(exc, f"hashing {label}") or CheckpointError(f"cannot read: {exc.strerror or exc}",
                                                                         file=label) from None
        if not stat.S_ISREG(st.st_mode):
            # A FIFO would block the reader forever; a directory cannot be read at all.
            raise CheckpointError("cannot read: not a regular file", file=label)
        stats[p] = st

    known = {p: d for p in jobs if reuse and (d := _MEMO.get(p, stats[p])) is not None}
    todo = {p: label for p, label in jobs.items() if p not in known}
    started = time.time()
    if todo:
        total = sum(stats[p].st_size for p in todo)
        with StepProgress("sha256", f"{len(todo)} files", total, show=progress) as bar:
            advancer: Callable[[Path], Callable[[int], None] | None] = (
                (lambda _p: bar.advance) if bar.active else (lambda _p: None)
            )
            known.update(_run(todo, min(workers, len(todo)), chunk_size, advancer))
        for p in todo if reuse else ():
            _MEMO.put(p, stats[p], known[p], started)
    return {p: known[p] for p in jobs}


class DigestMemo:
    """Digests of files this process hashed, reused while the file is provably unchanged.

    A qualification hashes the same files up to three times (a local folder's content
    revision, the checksum checks, the report's identity section); on a release that is
    seconds to minutes each. A digest is reused only if the file's device, inode, size,
    mtime and ctime are what they were when it was hashed, and the file had been left
    alone for :attr:`settle_s` before that hash began: a write changes ctime (which no
    user can set back), and once a file has been quiet that long, a later write cannot
    land in the same timestamp tick. A file written just before it was hashed is hashed
    again next time.
    """

    def __init__(self, settle_s: float = 2.0) -> None:
        self.settle_s = settle_s
        self._lock = threading.Lock()
        self._entries: dict[Path, tuple[tuple[int, ...], str]] = {}

    @staticmethod
    def _key(st: os.stat_result) -> tuple[int, ...]:
        return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)

    def get(self, path: Path, st: os.stat_result) -> str | None:
        with self._lock:
            entry = self._entries.get(path.absolute())
        return entry[1] if entry is not None and entry[0] == self._key(st) else None

    def put(self, path: Path, before: os.stat_result, digest: str, hashed_at: float) -> None:
        """Remember ``digest`` if the file was quiet before ``hashed_at`` and did not change while hashed."""
        try:
            after = os.stat(path)
        except OSError:
            return
        quiet_since = max(before.st_mtime_ns, before.st_ctime_ns) / 1e9
        if self._key(after) != self._key(before) or hashed_at - quiet_since < self.settle_s:
            return
        with self._lock:
            self._entries[path.absolute()] = (self._key(before), digest)

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()


_MEMO = DigestMemo()


def _run(
    jobs: dict[Path, str],
    workers: int,
    chunk_size: int,
    advancer: Callable[[Path], Callable[[int], None] | None],
) -> dict[Path, str]:
    if workers == 1:
        return {p: _hash(p, label, chunk_size, advancer(p)) for p, label in jobs.items()}
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="sha256") as pool:
        futures = {pool.submit(_hash, p, label, chunk_size, advancer(p)): p for p, label in jobs.items()}
        done, _ = wait(futures, return_when=FIRST_EXCEPTION)
        failed = [f for f in futures if f in done and f.exception() is not None]
        if failed:
            for f in futures:
                f.cancel()
            exc = failed[0].exception()
            assert exc is not None
            raise exc
        results = {futures[f]: f.result() for f in futures}
    # Callers index by path; keep the order they asked in.
    return {p: results[p] for p in jobs}


# -------------------------------------------------------------------- worker threads


def default_workers() -> int:
    """Worker threads for the per-tensor steps: as many as torch would use for one operation.

    That is one per CPU unless the user narrowed it (``OMP_NUM_THREADS``,
    ``torch.set_num_threads``), so a machine shared with other jobs can be told to take less.
    """
    torch = sys.modules.get("torch")
    if torch is not None:
        return max(1, int(torch.get_num_threads()))
    return max(1, os.cpu_count() or 1)


def _single_threaded_torch() -> None:
    # Each worker runs its tensor's operations on one thread. torch's own intra-op
    # threads synchronise at the end of every operation, so on a busy machine one
    # descheduled thread stalls them all (measured on 2 CPUs shared with other jobs:
    # 5x slower than one thread); whole tensors per thread never wait for each other.
    # OpenMP keeps this setting per thread, so the caller's thread is unaffected.
    torch = sys.modules.get("torch")
    if torch is not None:
        torch.set_num_threads(1)


def thread_map(fn: Callable[[T], R], items: Iterable[T], *, workers: int | None = None,
               window: int | None = None) -> Iterator[R]:
    """``fn`` of each item, computed on worker threads, yielded in the items' order.

    At most ``window`` items (default: two per worker) are in flight or waiting to be
    consumed, which bounds memory to a few tensors whatever the checkpoint's size. An
    exception from ``fn`` is raised when its item's turn comes; closing the iterator
    early cancels what has not started. With one worker everything runs in the
    caller's thread, as a plain loop.
    """
    workers = default_workers() if workers is None else workers
    if workers < 1:
        raise ValueError(f"workers must be at least 1, got {workers}")
    if workers == 1:
        for item in items:
            yield fn(item)
        return
    window = max(workers, window if window is not None else 2 * workers)
    torch = sys.modules.get("torch")
    threads = torch.get_num_threads() if torch is not None else None
    pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="qualify", initializer=_single_threaded_torch)
    pending: deque[Future[R]] = deque()
    try:
        source = iter(items)
        for item in source:
            pending.append(pool.submit(fn, item))
            if len(pending) >= window:
                yield pending.popleft().result()
        while pending:
            yield pending.popleft().result()
    finally:
        for f in pending:
            f.cancel()
        pool.shutdown(wait=True, cancel_futures=True)
        if torch is not None and threads is not None and torch.get_num_threads() != threads:
            # A torch built with a process-wide thread pool (not OpenMP) took the workers'
            # setting for everyone: give the caller its own back.
            torch.set_num_threads(threads)
