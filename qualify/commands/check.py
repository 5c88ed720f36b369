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
    runtime = p.add_argument_group("runtime and serving levels (load, smoke, acceptance, losslessness, throughput)")
    runtime.add_argument("--draft-revision", help="the draft's immutable 40-hex commit (DFLASH_MODEL_REVISION)")
    runtime.add_argument("--allow-unpinned", action="store_true",
                         help="launch with a moving image tag or revision; the report then says not reproducible")
    runtime.add_argument("--hf-cache", type=Path, help="a Hugging Face hub cache mounted read-only into the runtime")
    runtime.add_argument("--endpoint", help="OpenAI-compatible endpoint (default: the profile's runtime.endpoint)")
    runtime.add_argument("--reference-endpoint", help="the target served without a speculator (losslessness)")
    p.set_defaults(func=run)


def suite_args(args: argparse.Namespace, run_dir: Path) -> list[str]:
    """The pytest options the runtime and serving suites read, from the CLI's arguments."""
    out = ["--runtime-log-dir", str(run_dir)]  # server.log lands beside report.json
    for flag, value in (("--draft-revision", args.draft_revision), ("--hf-cache", args.hf_cache),
                        ("--endpoint", args.endpoint), ("--reference-endpoint", args.reference_endpoint)):
        if value:
            out += [flag, str(value)]
    if args.allow_unpinned:
        out.append("--allow-unpinned")
    if args.junit_xml:
        out += ["--junitxml", str(args.junit_xml)]
    return out


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
    code = run_suites(run_, profile=profile, checkpoint=args.checkpoint, source=args.source, report_dir=run_dir,
                      extra_args=suite_args(args, run_dir))
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
