"""What the benchmarks share: the full-size fixture, its profile, the machine, timing and memory.

The benchmark machine is shared with other jobs, so no figure here is an absolute
promise: every comparison is made side by side in one run, repetitions of the
contenders are interleaved (A B C, A B C, ...) so that a burst of load elsewhere hits
all of them alike, and the ratios are what the README reports.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
DEFAULT_FIXTURE = REPO / "fixtures" / "build" / "dflash2-full"
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))  # run as `python bench/x.py` from anywhere


def fixture_arg(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("fixture", nargs="?", type=Path, default=DEFAULT_FIXTURE,
                        help="folder holding source/ and mxfp8/ (default: the full-size fixture, generated if absent)")


def ensure_fixture(root: Path) -> Path:
    """The full-size fixture at ``root``, generated first (minutes) if it is not there."""
    if not (root / "mxfp8" / "conversion_manifest.json").is_file() or not (root / "source").is_dir():
        if root.resolve() != DEFAULT_FIXTURE:
            raise SystemExit(f"{root}: no fixture there (expected source/ and mxfp8/)")
        print(f"generating the full-size fixture in {root} (a few minutes) ...", flush=True)
        from bench_fixture import generate

        generate(root)
    return root


def bench_profile(root: Path, out_dir: Path, tree: Path = REPO) -> Path:
    """The ``fixture`` profile of harness ``tree``, pinned to this fixture's source revision (so
    ``source_pinned`` can pass)."""
    from fixtures.generate import source_revision

    text = (tree / "qualify" / "profiles" / "fixture.toml").read_text(encoding="utf-8")
    text = text.replace('name = "fixture"', 'name = "fixture-full"', 1)
    text = re.sub(r'(\[source\]\s*\nrepo = )"[^"]*"', r'\1"qualify-fixtures/dflash2-full"', text, count=1)
    text = re.sub(r'(\[source\][^\[]*?\nrevision = )"[0-9a-f]{40}"', rf'\1"{source_revision(root / "source")}"',
                  text, count=1, flags=re.S)
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / "fixture-full.toml"
    path.write_text(text, encoding="utf-8")
    return path


def machine() -> dict[str, Any]:
    """nproc, CPU model and memory, as the README records them."""
    model = "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem_kb = 0
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                mem_kb = int(line.split()[1])
    except OSError:
        pass
    try:
        load = os.getloadavg()
    except OSError:
        load = (0.0, 0.0, 0.0)
    import torch

    return {"nproc": len(os.sched_getaffinity(0)), "cpu": model, "memory_gib": round(mem_kb / 2**20, 1),
            "python": platform.python_version(), "torch": torch.__version__,
            "torch_threads": torch.get_num_threads(), "load_average": [round(x, 2) for x in load]}


def print_machine() -> None:
    m = machine()
    print(f"machine: {m['nproc']} CPUs ({m['cpu']}), {m['memory_gib']} GiB, python {m['python']}, "
          f"torch {m['torch']} ({m['torch_threads']} threads); load average {m['load_average']}")


def gb(n: float) -> str:
    return f"{n / 1e9:.2f} GB"


@dataclass
class Timings:
    """Wall times of one contender over the interleaved repetitions."""

    name: str
    seconds: list[float] = field(default_factory=list)

    @property
    def best(self) -> float:
        return min(self.seconds)

    @property
    def median(self) -> float:
        return statistics.median(self.seconds)


def interleaved(contenders: Sequence[tuple[str, Callable[[], Any]]], repeats: int) -> dict[str, Timings]:
    """Run each contender ``repeats`` times, round-robin, timing each call."""
    out = {name: Timings(name) for name, _ in contenders}
    for _ in range(repeats):
        for name, fn in contenders:
            start = time.perf_counter()
            fn()
            out[name].seconds.append(time.perf_counter() - start)
    return out


def ratio_table(timings: dict[str, Timings], reference: str, nbytes: int, label: str = "GB/s") -> list[str]:
    """Lines: contender, best and median seconds, throughput, and time relative to ``reference``."""
    ref = timings[reference]
    lines = [f"  {'contender':<44} {'best s':>8} {'median s':>9} {label:>7} {'x ' + reference:>14}"]
    for t in timings.values():
        lines.append(f"  {t.name:<44} {t.best:8.2f} {t.median:9.2f} {nbytes / t.best / 1e9:7.2f} "
                     f"{t.best / ref.best:10.2f} (median {t.median / ref.median:.2f})")
    return lines


# ----------------------------------------------------------------- child processes


def _status_kb(pid: int) -> dict[str, int]:
    out = {}
    try:
        with open(f"/proc/{pid}/status", encoding="ascii", errors="replace") as fh:
            for line in fh:
                key, _, rest = line.partition(":")
                if key in ("VmRSS", "VmHWM", "RssAnon", "RssFile", "RssShmem"):
                    out[key] = int(rest.split()[0])
    except (OSError, ValueError, IndexError):
        pass
    return out


@dataclass
class ChildRun:
    """A measured child process: wall time, peak RSS (the kernel's) and sampled peaks by kind."""

    argv: list[str]
    returncode: int
    wall_s: float
    maxrss_kb: int  # ru_maxrss of this child alone (wait4): includes file-backed (page cache) pages
    peak_anon_kb: int  # sampled peak RssAnon + RssShmem: memory beyond the page cache
    peak_file_kb: int  # sampled peak RssFile: mapped checkpoint pages, reclaimable page cache
    stdout: str
    stderr: str


def run_measured(argv: Sequence[str], *, cwd: Path = REPO, env: dict[str, str] | None = None,
                 interval_s: float = 0.01) -> ChildRun:
    """Run ``argv``, sampling /proc/<pid>/status every ``interval_s`` for the peaks the kernel does not keep."""
    import tempfile

    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        start = time.perf_counter()
        proc = subprocess.Popen(list(argv), cwd=cwd, env=env, stdout=out, stderr=err)
        peaks = {"anon": 0, "file": 0}
        done = threading.Event()

        def sample() -> None:
            while not done.is_set():
                s = _status_kb(proc.pid)
                peaks["anon"] = max(peaks["anon"], s.get("RssAnon", 0) + s.get("RssShmem", 0))
                peaks["file"] = max(peaks["file"], s.get("RssFile", 0))
                done.wait(interval_s)

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        # wait4 reports this child's own rusage; RUSAGE_CHILDREN would be the max over every child so far.
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - start
        done.set()
        sampler.join()
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        return ChildRun(list(argv), proc.returncode, wall, usage.ru_maxrss, peaks["anon"], peaks["file"],
                        out.read().decode(errors="replace"), err.read().decode(errors="replace"))


def mib(kb: int) -> str:
    return f"{kb / 1024:.0f} MiB"


def dump(path: Path | None, results: dict[str, Any]) -> None:
    if path is not None:
        path.write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
