"""Generate the full-size fixture (``make fixtures-full``) and report its wall time and peak memory.

    python bench/bench_fixture.py [--out DIR] [--if-absent]

Runs ``python -m fixtures.generate --variant full --out DIR`` as a child process: about
1.7 GB of BF16 source and 1.2 GB of MXFP8 output, under ``fixtures/build/`` (ignored by
git). Prints the wall time, the peak RSS as the kernel counts it (which includes the
mapped source pages) and the sampled peak beyond the page cache (RssAnon + RssShmem).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import benchlib
from benchlib import DEFAULT_FIXTURE, REPO, mib, run_measured


def generate(out: Path) -> benchlib.ChildRun:
    run = run_measured([sys.executable, "-m", "fixtures.generate", "--variant", "full", "--out", str(out)], cwd=REPO)
    if run.returncode != 0:
        sys.stderr.write(run.stdout[-3000:] + run.stderr[-3000:])
        raise SystemExit(f"fixtures.generate exited {run.returncode}")
    sizes = {d: sum(p.stat().st_size for p in (out / d).rglob("*") if p.is_file()) for d in ("source", "mxfp8")}
    print(f"generated {out}: source {sizes['source'] / 1e9:.2f} GB, mxfp8 {sizes['mxfp8'] / 1e9:.2f} GB "
          f"in {run.wall_s:.0f} s; peak RSS {mib(run.maxrss_kb)} (incl. mapped files), "
          f"{mib(run.peak_anon_kb)} beyond the page cache", flush=True)
    return run


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=DEFAULT_FIXTURE)
    ap.add_argument("--if-absent", action="store_true", help="do nothing if the fixture is already there")
    args = ap.parse_args(argv)
    if args.if_absent and (args.out / "mxfp8" / "conversion_manifest.json").is_file():
        print(f"{args.out}: already there (make fixtures-full regenerates it)")
        return 0
    benchlib.print_machine()
    generate(args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
