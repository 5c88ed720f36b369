"""End to end ``qualify check`` of the full-size fixture (checksums, format, reproduction): wall time and memory.

    python bench/bench_check.py [FIXTURE] [--baseline TREE] [--repeats N] [--json OUT]

Runs the CLI as a child process, exactly as a user would (``python -m qualify.cli check
CHECKPOINT --source SOURCE --profile <the fixture profile pinned to this source>``), and
reports:

- wall time, and each check's own duration from the report it writes (what is left is
  start-up, pytest's collection and writing the report; the report's identity section
  reuses the digests the checks made);
- peak RSS as the kernel counts it (``ru_maxrss`` of that child, from ``wait4``), which
  includes the checkpoint pages the strict reader maps (page cache, reclaimable), and
  the sampled peak of RssAnon + RssShmem, the memory beyond the page cache that the
  1.5 GB target is about (sampled every 10 ms from /proc/<pid>/status);
- the same ``qualify check`` of the shipped tiny fixture: the checkpoint levels of ``make
  qualify`` (``make qualify LEVELS=structure,format,reproduction``); the whole ``make qualify``
  adds the runtime and serving levels, whose time is mostly the vLLM CPU servers' start.

``--baseline TREE`` runs the same checks with the harness in TREE (another revision,
e.g. ``git archive <rev> | tar -x -C TREE``), alternating with this one, and prints
both side by side: the before/after figures.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import benchlib
from benchlib import REPO, mib, run_measured

TINY = REPO / "fixtures" / "dflash2-tiny"
ANON_TARGET_KB = int(1.5e9 / 1024)


def qualify_check(tree: Path, checkpoint: Path, source: Path, profile: str, reports: Path) -> dict[str, Any]:
    env = dict(os.environ, PYTHONPATH=str(tree))
    argv = [sys.executable, "-m", "qualify.cli", "check", str(checkpoint), "--source", str(source),
            "--profile", profile, "--report-dir", str(reports)]
    before = set(reports.glob("*")) if reports.exists() else set()
    run = run_measured(argv, env=env, cwd=tree)
    if run.returncode != 0:
        sys.stderr.write(run.stdout[-3000:] + run.stderr[-3000:])
        raise SystemExit(f"qualify check exited {run.returncode} ({' '.join(argv)})")
    (folder,) = set(reports.glob("*")) - before
    report = json.loads((folder / "report.json").read_text(encoding="utf-8"))
    checks = {c["id"]: c["duration_s"] for level in report["levels"] for c in level["checks"]}
    return {"wall_s": run.wall_s, "maxrss_kb": run.maxrss_kb, "peak_anon_kb": run.peak_anon_kb,
            "peak_file_kb": run.peak_file_kb, "checks": checks, "verdict": report["verdict"]}


def outside_checks(root: Path) -> dict[str, float]:
    """What the wall time spends outside the checks: importing the harness, and the report's identity hashing."""
    argv = [sys.executable, "-c", "import qualify.run.runner, qualify.run.suite_plugin, pytest, torch"]
    startup = min(run_measured(argv).wall_s for _ in range(3))
    from qualify.run.runner import describe_dir

    # A fresh process's first describe_dir hashes; the run's own reuses its checks' digests.
    start = time.perf_counter()
    for folder in ("mxfp8", "source"):
        describe_dir(root / folder)
    first = time.perf_counter() - start
    start = time.perf_counter()
    for folder in ("mxfp8", "source"):
        describe_dir(root / folder)
    return {"startup_s": startup, "identity_s": first, "identity_reused_s": time.perf_counter() - start}


def best(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The fastest run, with each check's fastest duration and the worst memory over all runs."""
    out = dict(min(runs, key=lambda x: x["wall_s"]))
    out["checks"] = {k: min(r["checks"][k] for r in runs) for k in runs[0]["checks"]}
    for key in ("maxrss_kb", "peak_anon_kb", "peak_file_kb"):
        out[key] = max(r[key] for r in runs)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    benchlib.fixture_arg(ap)
    ap.add_argument("--baseline", type=Path, help="a harness tree to compare with (before/after)")
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--json", type=Path, help="write the figures here too")
    args = ap.parse_args(argv)
    root = benchlib.ensure_fixture(args.fixture)
    benchlib.print_machine()
    # Every figure here is for a warm page cache (bench_sha256.py --cold times the disk).
    for p in (p for d in ("mxfp8", "source") for p in (root / d).rglob("*") if p.is_file()):
        with open(p, "rb", buffering=0) as fh:
            while fh.read(8 << 20):
                pass
    trees = [("this tree", REPO)] + ([("baseline", args.baseline.resolve())] if args.baseline else [])
    results: dict[str, Any] = {"machine": benchlib.machine()}
    with tempfile.TemporaryDirectory(prefix="qualify-bench-") as tmp:
        profiles = {name: str(benchlib.bench_profile(root, Path(tmp) / name, tree)) for name, tree in trees}
        # The fixture is reached through a link outside this checkout: pytest reads --checkpoint's
        # value as a path while it looks for conftest.py files, and would load this checkout's
        # conftest.py into a baseline tree's run (which defines the same options again).
        link = Path(tmp) / "fixture"
        link.symlink_to(root.resolve(), target_is_directory=True)
        root_for = {name: link if tree != REPO else root for name, tree in trees}
        runs: dict[str, list[dict[str, Any]]] = {name: [] for name, _ in trees}
        tiny: list[float] = []
        for _ in range(args.repeats):
            for name, tree in trees:
                fixture = root_for[name]
                runs[name].append(qualify_check(tree, fixture / "mxfp8", fixture / "source", profiles[name],
                                                Path(tmp) / name / "reports"))
            tiny.append(qualify_check(REPO, TINY / "mxfp8", TINY / "source", "fixture", Path(tmp) / "tiny")["wall_s"])
    figures = {name: best(r) for name, r in runs.items()}
    overhead = outside_checks(root)
    results.update(full=figures, tiny_wall_s=min(tiny), outside_checks=overhead)

    ckpt_bytes = sum(p.stat().st_size for d in ("mxfp8", "source") for p in (root / d).rglob("*") if p.is_file())
    print(f"qualify check of {root} ({ckpt_bytes / 1e9:.2f} GB in both folders), best of {args.repeats}:")
    names = list(figures)
    print(f"  {'':<40}" + "".join(f"{n:>14}" for n in names))
    ids = list(figures[names[0]]["checks"])
    for cid in ids:
        cells = [figures[n]["checks"].get(cid) for n in names]
        if max(c or 0 for c in cells) >= 0.05:
            print(f"  {cid:<40}" + "".join(f"{c:>12.2f} s" for c in cells))
    for label, key in (("sum of checks", None), ("wall time", "wall_s")):
        cells = [sum(figures[n]["checks"].values()) if key is None else figures[n][key] for n in names]
        print(f"  {label:<40}" + "".join(f"{c:>12.2f} s" for c in cells))
    print(f"  outside the checks: start-up (imports) {overhead['startup_s']:.2f} s; the report's identity section "
          f"{overhead['identity_reused_s']:.2f} s with the checks' digests reused (hashing both folders afresh: "
          f"{overhead['identity_s']:.2f} s)")
    for label, key in (("peak RSS (ru_maxrss, incl. mapped files)", "maxrss_kb"),
                       ("peak RssAnon+RssShmem (beyond page cache)", "peak_anon_kb"),
                       ("peak RssFile (mapped checkpoint pages)", "peak_file_kb")):
        print(f"  {label:<40}" + "".join(f"{mib(figures[n][key]):>14}" for n in names))
    if len(names) == 2:
        a, b = figures[names[0]], figures[names[1]]
        print(f"  speed-up: {b['wall_s'] / a['wall_s']:.2f}x wall time, "
              f"memory beyond the page cache {b['peak_anon_kb'] / max(1, a['peak_anon_kb']):.1f}x less")
    ours = figures["this tree"]
    ok = ours["peak_anon_kb"] < ANON_TARGET_KB
    print(f"target: peak RSS beyond the page cache under 1.5 GB: {'met' if ok else 'MISSED'} "
          f"({ours['peak_anon_kb'] * 1024 / 1e9:.2f} GB)")
    ok = min(tiny) < 20
    print(f"target: qualify check of the tiny fixture (make qualify's checkpoint levels) under 20 s: "
          f"{'met' if ok else 'MISSED'} "
          f"({min(tiny):.1f} s)")
    benchlib.dump(args.json, results)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
