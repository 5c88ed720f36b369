"""``qualify diff``: what changed between two reports."""

from __future__ import annotations

import argparse
from pathlib import Path

EXIT_SAME = 0
EXIT_DIFFERENT = 1

EPILOG = """\
exit codes:
  0  no verdict-relevant difference (measured figures, paths or package versions may still differ)
  1  something verdict-relevant differs: the verdict, a level's or check's status, the checkpoint's or
     source's files, the profile or its conditions, the runtime image
  2  usage error: no such report, or a report that fails its schema or whose verdict does not recompute
"""


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "diff", help="show what changed between two reports",
        description="Compare report A with report B: verdicts, checkpoint and source files (added, removed, "
        "changed), profile, runtime image, each level's and check's status, and measured figures (with their "
        "relative change). Plain text in a stable order; verdict-relevant differences first.",
        epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("a", type=Path, metavar="A.json", help="the earlier report")
    p.add_argument("b", type=Path, metavar="B.json", help="the later report")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from qualify.report.diff import diff_runs, relevant, render
    from qualify.report.model import read_json

    a, b = read_json(args.a), read_json(args.b)  # UsageError -> exit 2
    changes = diff_runs(a, b)
    for line in render(changes, f"{args.a} ({a.run_id}, {a.verdict})", f"{args.b} ({b.run_id}, {b.verdict})"):
        print(line)
    return EXIT_DIFFERENT if relevant(changes) else EXIT_SAME
