"""Command line: argument parsing and exit codes only; the work is in the library."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from . import __version__
from .errors import HarnessError, QualifyError, UsageError

EXIT_QUALIFIED = 0
EXIT_NOT_QUALIFIED = 1
EXIT_ERROR = 2

EPILOG = """\
exit codes:
  0  qualified: every requested level passed
  1  not qualified: a check failed, was skipped, or did not run (the report says which)
  2  usage or harness error: bad arguments, unreadable profile, the harness itself failed
"""

DEFAULT_REPORTS = Path("reports")


def _add_check(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "check",
        help="qualify a checkpoint directory (manifest, format, ...) and write a report",
        description="Run the checkpoint levels of a profile against CHECKPOINT and write "
        "REPORT_DIR/<run-id>/report.json and report.md.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("checkpoint", type=Path, help="the quantized checkpoint directory")
    p.add_argument("--source", type=Path, help="the source (unquantized) checkpoint directory at its pinned revision")
    p.add_argument("--profile", default="fixture", help="profile name or path to a .toml (default: fixture)")
    p.add_argument("--report-dir", type=Path, default=DEFAULT_REPORTS,
                   help="parent folder of the run folder (default: reports)")
    p.add_argument("--levels", help="comma-separated subset of levels (default: the profile's required levels)")
    p.set_defaults(func=cmd_check)


def cmd_check(args: argparse.Namespace) -> int:
    from .profile import load_profile
    from .render import summary_lines
    from .runner import make_run_dir, new_run, parse_levels, run_suites

    profile = load_profile(args.profile)
    if not args.checkpoint.is_dir():
        raise UsageError(f"{args.checkpoint}: not a checkpoint directory")
    if args.source is not None and not args.source.is_dir():
        raise UsageError(f"{args.source}: not a source checkpoint directory")
    levels = parse_levels(args.levels, profile)
    run = new_run(profile, args.checkpoint, args.source, levels, command=["qualify", *sys.argv[1:]])
    run_dir = make_run_dir(args.report_dir, run.run_id)
    code = run_suites(run, profile=profile, checkpoint=args.checkpoint, source=args.source, report_dir=run_dir)
    print()
    for line in summary_lines(run):
        print(line)
    print(f"report: {run_dir / 'report.json'}")
    print(f"        {run_dir / 'report.md'}")
    if code in (3, 4):  # pytest: internal error / usage error: the harness, not the checkpoint
        return EXIT_ERROR
    return EXIT_QUALIFIED if str(run.verdict) == "qualified" else EXIT_NOT_QUALIFIED


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="qualify",
        description="Decide, with evidence, whether a quantized checkpoint release may ship.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"qualify {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for add in SUBCOMMANDS:
        add(sub)
    return parser


SUBCOMMANDS: list[Callable[[argparse._SubParsersAction], None]] = [_add_check]


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return EXIT_ERROR
    try:
        return int(args.func(args))
    except UsageError as exc:
        print(f"qualify: error: {exc}", file=sys.stderr)
        return EXIT_ERROR
    except HarnessError as exc:
        print(f"qualify: harness error: {exc}", file=sys.stderr)
        return EXIT_ERROR
    except QualifyError as exc:
        print(f"qualify: error: {exc}", file=sys.stderr)
        return EXIT_ERROR
    except KeyboardInterrupt:
        print("qualify: interrupted", file=sys.stderr)
        return EXIT_NOT_QUALIFIED


if __name__ == "__main__":
    raise SystemExit(main())
