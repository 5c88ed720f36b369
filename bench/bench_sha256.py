"""sha256 of every file of the full-size fixture: qualify against sha256sum and openssl, side by side.

    python bench/bench_sha256.py [FIXTURE] [--repeats N] [--cold]

Contenders, each hashing the same files (the MXFP8 checkpoint and its BF16 source):

- ``qualify.checkpoint.checksums.sha256_files``: what ``structure.*_checksums`` runs, files on
  parallel threads (one per CPU).
- ``sha256sum`` (GNU coreutils) over all files, one process, as a person would run it;
  and ``xargs -P <nproc> sha256sum``, one process per file, in parallel like ours.
- ``openssl dgst -sha256``, serial and parallel the same way: OpenSSL is what Python's
  hashlib calls, so this is the fastest hashing this machine has, and the honest peer
  where coreutils was built without it.

Warm runs (the files in the page cache, as they are for a checkpoint just downloaded or
converted) are the ratios the targets are about. ``--cold`` adds one cold pass per
contender, evicting the files from the page cache first (posix_fadvise DONTNEED) and
timing plain reads of them too (serial, and on one thread per CPU as the hashing
threads read): the disk's own speed, the floor for a cold checkpoint.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import benchlib
from benchlib import gb, interleaved, ratio_table

from qualify.checkpoint.checksums import sha256_files


def files_of(root: Path) -> list[Path]:
    return sorted(p for d in ("mxfp8", "source") for p in (root / d).rglob("*") if p.is_file())


def read_all(paths: list[Path], chunk: int = 8 << 20) -> int:
    buf = bytearray(chunk)
    view = memoryview(buf)
    total = 0
    for p in paths:
        with open(p, "rb", buffering=0) as fh:
            while n := fh.readinto(view):
                total += n
    return total


def read_all_parallel(paths: list[Path]) -> int:
    """Plain reads, one thread per CPU over the files, the way sha256_files shares them out."""
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=len(os.sched_getaffinity(0))) as pool:
        return sum(pool.map(lambda p: read_all([p]), paths))


def evict(paths: list[Path]) -> None:
    for p in paths:
        fd = os.open(p, os.O_RDONLY)
        try:
            os.fsync(fd)  # only clean pages can be dropped
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def parse_sums(text: str) -> dict[str, str]:
    """Digests by path from sha256sum ('<hex>  <path>') or openssl ('SHA2-256(<path>)= <hex>') output."""
    out = {}
    for line in text.splitlines():
        if line.startswith(("SHA256(", "SHA2-256(")):
            path, _, digest = line.partition(")= ")
            out[path.split("(", 1)[1]] = digest.strip()
        elif line.strip():
            digest, _, path = line.partition("  ")
            out[path.strip()] = digest
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    benchlib.fixture_arg(ap)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--cold", action="store_true", help="also time one cold-cache pass per contender")
    args = ap.parse_args(argv)
    root = benchlib.ensure_fixture(args.fixture)
    paths = files_of(root)
    names = [str(p) for p in paths]
    total = sum(p.stat().st_size for p in paths)
    nproc = len(os.sched_getaffinity(0))
    benchlib.print_machine()
    print(f"sha256 of {len(paths)} files, {gb(total)} (largest {gb(max(p.stat().st_size for p in paths))})")

    ours: dict[Path, str] = {}
    peers: dict[str, str] = {}

    def qualify_threads() -> None:
        ours.update(sha256_files(paths, progress=False, reuse=False))

    def tool(argv: list[str], parallel: bool) -> None:
        if parallel:
            # One process per file, nproc at a time, the way our threads share the CPUs.
            cmd = ["xargs", "-0", "-n", "1", "-P", str(nproc), *argv]
            out = subprocess.run(cmd, input="\0".join(names).encode(), capture_output=True, check=True).stdout
        else:
            out = subprocess.run([*argv, *names], capture_output=True, check=True).stdout
        peers.update(parse_sums(out.decode()))

    contenders = [("qualify sha256_files (threads)", qualify_threads)]
    if shutil.which("sha256sum"):
        contenders += [("sha256sum (coreutils), serial", lambda: tool(["sha256sum"], False)),
                       (f"sha256sum (coreutils), xargs -P {nproc}", lambda: tool(["sha256sum"], True))]
    if shutil.which("openssl"):
        contenders += [("openssl dgst -sha256, serial", lambda: tool(["openssl", "dgst", "-sha256"], False)),
                       (f"openssl dgst -sha256, xargs -P {nproc}", lambda: tool(["openssl", "dgst", "-sha256"], True))]

    read_all(paths)  # warm the page cache once, so every contender's first run is warm too
    warm = interleaved(contenders, args.repeats)
    for p in paths:
        if peers.get(str(p), ours[p]) != ours[p]:
            print(f"DIGESTS DISAGREE for {p}: qualify {ours[p]}, peer {peers[str(p)]}", file=sys.stderr)
            return 1
    print(f"warm page cache, {args.repeats} interleaved repetitions, every digest agrees:")
    reference = "sha256sum (coreutils), serial" if "sha256sum (coreutils), serial" in warm else contenders[0][0]
    for line in ratio_table(warm, reference, total):
        print(line)
    t_ours = warm["qualify sha256_files (threads)"]
    for name in warm:
        if name.startswith(("sha256sum", "openssl")):
            print(f"  qualify / {name}: {t_ours.best / warm[name].best:.2f}x the time")
    if reference in warm and reference != contenders[0][0]:
        ok = t_ours.best <= 1.2 * warm[reference].best
        print(f"target: within 1.2x of sha256sum: {'met' if ok else 'MISSED'} "
              f"({t_ours.best / warm[reference].best:.2f}x)")

    if args.cold:
        print("cold page cache (evicted before each contender, one pass each):")
        cold = {}
        floors = [("plain read, serial", lambda: read_all(paths)),
                  ("plain read, threads (the disk's speed)", lambda: read_all_parallel(paths))]
        for name, fn in [*floors, *contenders]:
            evict(paths)
            start = time.perf_counter()
            fn()
            cold[name] = benchlib.Timings(name, [time.perf_counter() - start])
        for line in ratio_table(cold, "plain read, threads (the disk's speed)", total):
            print(line)
        read_all(paths)  # leave the cache warm for whatever runs next
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
