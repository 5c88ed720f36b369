"""``qualify gate``: the release pipeline's last word before uploading a checkpoint."""

from __future__ import annotations

import argparse
from pathlib import Path

from qualify.commands import EXIT_NOT_QUALIFIED, EXIT_QUALIFIED
from qualify.errors import UsageError
from qualify.util.escape import escape_terminal

EPILOG = """\
exit codes:
  0  the release may ship: the report qualifies exactly this checkpoint at the required levels
  1  refused: one line per reason (a level not passed or missing, an interrupted run, a harness error,
     a report that fails its schema or whose verdict does not recompute, files that differ)
  2  usage error: no such report, an unknown level, no identity to compare, a profile the harness
     does not ship without --require
"""


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "gate", help="refuse a release unless the report qualifies exactly this checkpoint",
        description="Check that REPORT.json licenses releasing the checkpoint: it validates and its verdict "
        "recomputes, the run finished without harness errors, every required level passed, and the checkpoint "
        "named by --checkpoint and/or --revision is the one the report qualified.",
        epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("report", type=Path, help="report.json of the qualification run")
    p.add_argument("--require", metavar="LEVELS",
                   help="comma-separated levels that must have passed (default: the report's profile's required "
                   "levels, which needs a profile shipped with this harness)")
    p.add_argument("--checkpoint", type=Path, metavar="DIR",
                   help="the directory about to be released: every file's size and sha256 must equal the report's, "
                   "and every load-relevant file in it must be in the report")
    p.add_argument("--revision", metavar="REV",
                   help="the commit about to be released: must equal the report's checkpoint revision (40 hex)")
    p.add_argument("--allow-unpinned", action="store_true",
                   help="accept a report whose runtime ran from a moving image tag or revision (not reproducible)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from qualify.errors import CheckpointError
    from qualify.release.gate import (
        Expected,
        check_revision_argument,
        describe_checkpoint,
        parse_require,
        refusals,
        shipped_profile,
        stored_contradictions,
    )
    from qualify.report.model import Run, read_json_data

    # Usage first, before any hashing: these are the caller's mistakes, not the release's.
    if args.checkpoint is None and args.revision is None:
        raise UsageError("say what is being released: --checkpoint DIR and/or --revision REV; without an identity "
                         "the gate cannot tell that the report is about this checkpoint")
    if not args.report.is_file():
        raise UsageError(f"{args.report}: no such report file")
    required = parse_require(args.require) if args.require is not None else None
    revision = check_revision_argument(args.revision) if args.revision is not None else None
    if args.checkpoint is not None and not args.checkpoint.is_dir():
        raise UsageError(f"{args.checkpoint}: not a checkpoint directory")

    try:
        # Read once: the model and the stored-value comparison below see the same bytes.
        stored = read_json_data(args.report)
        report = Run.from_dict(stored)
    except UsageError as exc:  # the file exists, so this is the report's fault: schema, JSON, altered verdict
        return _refuse([f"the report cannot be trusted: {exc}"])
    except (ValueError, KeyError, TypeError) as exc:  # a shape the schema allows but the model cannot read
        return _refuse([f"the report cannot be read: {type(exc).__name__}: {exc}"])

    shipped = shipped_profile(report)
    if required is None:
        if shipped is None:
            raise UsageError(
                f"report {report.run_id} was made under profile {report.profile.get('name')!r}, which this harness "
                "does not ship; say which levels the release requires with --require LEVELS"
            )
        required = shipped[0]

    files = None
    if args.checkpoint is not None:
        try:
            files = describe_checkpoint(args.checkpoint)
        except CheckpointError as exc:
            return _refuse([f"the checkpoint directory cannot be verified: {exc}"])

    expected = Expected(required_levels=tuple(required), checkpoint_files=files, revision=revision,
                        profile_sha256=shipped[1] if shipped else None, allow_unpinned=args.allow_unpinned)
    reasons = stored_contradictions(stored, report)
    reasons += refusals(report, expected)
    if reasons:
        return _refuse(reasons)
    what = []
    if files is not None:
        # The files the report vouches for (all of them matched, or the gate refused above); files it
        # does not list are only the ones that never load, and they are not "matched".
        matched = len({str(f.get("path")) for f in report.checkpoint.get("files") or []})
        what.append(f"{matched} files in {args.checkpoint} match the report")
    if revision is not None:
        what.append(f"revision {revision} matches")
    print(escape_terminal(f"qualified: {', '.join(required)} passed in report {report.run_id}; {'; '.join(what)}"))
    return EXIT_QUALIFIED


def _refuse(reasons: list[str]) -> int:
    for reason in reasons:
        # One line per reason, whatever a message carries (escaped: a name from the report can
        # neither start a line of its own nor move the cursor), so a CI log greps cleanly.
        print("refused: " + escape_terminal(reason))
    return EXIT_NOT_QUALIFIED
