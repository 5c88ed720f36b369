"""``qualify card``: the model card's "Validation status" section, from a report alone."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

from qualify.commands import EXIT_NOT_QUALIFIED, EXIT_QUALIFIED
from qualify.errors import UsageError

if TYPE_CHECKING:
    from qualify.report.card import AttestationCitation

EPILOG = """\
exit codes:
  0  the report is qualified; the section printed says for what and under which conditions
  1  the report is not qualified; the section printed says so and names what did not pass
  2  usage error: no such report, or a report that fails its schema or whose verdict does not recompute; with
     --verify-key, an attestation that does not verify or did not sign this report
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
    p.add_argument("--verify-key", type=Path, metavar="PUB.pem",
                   help="cite the run's signed attestation (its sha256 and the key's fingerprint), after verifying "
                   "it with this public key and that it signed this very report")
    p.add_argument("--attestation", type=Path, metavar="FILE",
                   help="the attestation to cite (default: attestation.intoto.jsonl beside REPORT)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from qualify.core import Verdict
    from qualify.report.card import validation_status_section
    from qualify.report.model import read_json

    report = read_json(args.report)  # validates and recomputes the verdict; UsageError -> exit 2
    citation = _citation(args) if args.verify_key is not None else None
    print(validation_status_section(report, heading=None if args.no_heading else "## Validation status",
                                    attestation=citation), end="")
    return EXIT_QUALIFIED if report.verdict is Verdict.QUALIFIED else EXIT_NOT_QUALIFIED


def _citation(args: argparse.Namespace) -> AttestationCitation:
    """The attestation, verified with the key and against this report's bytes, as the card cites it."""
    from qualify.errors import AttestationError
    from qualify.release.attestation import (
        ATTESTATION_NAME,
        REPORT,
        file_sha256,
        read_envelope,
        read_statement,
        verify_envelope,
    )
    from qualify.release.signing import key_fingerprint, load_verify_key
    from qualify.report.card import AttestationCitation

    path = args.attestation or args.report.parent / ATTESTATION_NAME
    if not path.is_file():
        raise UsageError(f"{path}: no such attestation; a card cites only an attestation it has verified")
    key = load_verify_key(args.verify_key)
    try:
        att = read_statement(verify_envelope(read_envelope(path), key))
    except AttestationError as exc:
        raise UsageError(f"{path}: the card cannot cite it: {exc}") from None
    if att.digest(REPORT) != file_sha256(args.report):
        raise UsageError(f"{path} did not sign {args.report} (another run, or the report was altered after signing); "
                         "the card cannot cite it")
    return AttestationCitation(path.name, file_sha256(path), key_fingerprint(key))
