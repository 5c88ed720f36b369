"""``qualify check``: run the checkpoint levels of a profile and write the report."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from . import DEFAULT_REPORTS, EXIT_ERROR, EXIT_NOT_QUALIFIED, EXIT_QUALIFIED, existing_dir, parser_for

#: CI can ask for JUnit through `make qualify`, whose command line it does not own.
JUNIT_ENV = "QUALIFY_JUNIT_XML"


def _env_path(name: str) -> Path | None:
    value = os.environ.get(name, "").strip()
    return Path(value) if value else None


def register(sub: argparse._SubParsersAction) -> None:
    p = parser_for(
        sub, "check",
        help="qualify a checkpoint directory (manifest, format, reproduction) and write a report",
        description="Run the checkpoint levels of a profile against CHECKPOINT and write "
        "REPORT_DIR/<run-id>/report.json and report.md.",
    )
    p.add_argument("checkpoint", type=Path, help="the quantized checkpoint directory")
    p.add_argument("--source", type=Path, help="the source (unquantized) checkpoint directory at its pinned revision")
    p.add_argument("--profile", default="fixture", help="profile name or path to a .toml (default: fixture)")
    p.add_argument("--report-dir", type=Path, default=DEFAULT_REPORTS,
                   help="parent folder of the run folder (default: reports)")
    p.add_argument("--levels", help="comma-separated subset of levels (default: the profile's required levels)")
    p.add_argument("--junit-xml", type=Path, metavar="PATH", default=_env_path(JUNIT_ENV),
                   help=f"also write the checks as JUnit XML to PATH, for CI test reports (default: ${JUNIT_ENV}, "
                   "if set)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from ..profile import load_profile
    from ..report import parse_levels

    profile = load_profile(args.profile)
    existing_dir(args.checkpoint, "checkpoint")
    if args.source is not None:
        existing_dir(args.source, "source checkpoint")
    levels = parse_levels(args.levels, profile.required_levels)

    from ..render import summary_lines
    from ..runner import make_run_dir, new_run, run_suites

    run_ = new_run(profile, args.checkpoint, args.source, levels, command=["qualify", *sys.argv[1:]])
    run_dir = make_run_dir(args.report_dir, run_.run_id)
    extra = ["--junitxml", str(args.junit_xml)] if args.junit_xml else []
    code = run_suites(run_, profile=profile, checkpoint=args.checkpoint, source=args.source, report_dir=run_dir,
                      extra_args=extra)
    print()
    for line in summary_lines(run_):
        print(line)
    print(f"report: {run_dir / 'report.json'}")
    print(f"        {run_dir / 'report.md'}")
    if args.junit_xml:
        print(f"junit:  {args.junit_xml}")
    if code in (3, 4):  # pytest: internal error / usage error: the harness, not the checkpoint
        return EXIT_ERROR
    return EXIT_QUALIFIED if str(run_.verdict) == "qualified" else EXIT_NOT_QUALIFIED
