"""``qualify card``: the model card's "Validation status" section, from a report alone."""

from __future__ import annotations

import argparse
from pathlib import Path

from qualify.commands import EXIT_NOT_QUALIFIED, EXIT_QUALIFIED

EPILOG = """\
exit codes:
  0  the report is qualified; the section printed says for what and under which conditions
  1  the report is not qualified; the section printed says so and names what did not pass
  2  usage error: no such report, or a report that fails its schema or whose verdict does not recompute
"""


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "card", help="print the model card's Validation status section for a report",
        description="Print the \"Validation status\" section of a model card from REPORT.json: the levels that "
        "passed, the conditions, what the runtime detected and loaded (from the load and smoke checks' measured "
        "values), and what was not qualified. Nothing is claimed that the report does not show.",
        epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("report", type=Path, help="report.json of the qualification run")
    p.add_argument("--no-heading", action="store_true", help="leave out the '## Validation status' heading")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from qualify.report.card import validation_status_section
    from qualify.report.model import Verdict, read_json

    report = read_json(args.report)  # validates and recomputes the verdict; UsageError -> exit 2
    print(validation_status_section(report, heading=None if args.no_heading else "## Validation status"), end="")
    return EXIT_QUALIFIED if report.verdict is Verdict.QUALIFIED else EXIT_NOT_QUALIFIED
