"""``qualify gate``: the release pipeline's last word before uploading a checkpoint.

For a release the gate takes a signed attestation (``--attestation`` and ``--verify-key``)
and trusts nothing it has not verified. A bare report.json is something anyone can edit:
it is refused unless ``--allow-unsigned`` says to accept that, and then the gate says so.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from qualify.commands import EXIT_NOT_QUALIFIED, EXIT_QUALIFIED
from qualify.errors import UsageError
from qualify.util.escape import escape_terminal

EPILOG = """\
exit codes:
  0  the release may ship: the attestation verifies with the key and qualifies exactly this checkpoint at
     the required levels (with --allow-unsigned: the unsigned report does, and the gate says it is unsigned)
  1  refused: one line per reason (no or a bad signature, a file changed, missing or added after signing, a
     level not passed or missing, a made-up or missing check, another profile, an unverified revision,
     an interrupted run, a harness error, an unsigned report without --allow-unsigned)
  2  usage error: no such file, an unreadable key, an unknown level, no identity to compare, a profile the
     harness does not ship without --require
"""

UNSIGNED = "UNSIGNED (--allow-unsigned): the report was not verified by any signature"


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "gate", help="refuse a release unless a signed attestation qualifies exactly this checkpoint",
        description="Verify the attestation's signature with --verify-key, then check that what it states licenses "
        "releasing the checkpoint: every file in --checkpoint is the one signed, the verdict is qualified, every "
        "required level passed with exactly the checks this harness defines, under the shipped profile, and "
        "--revision (if given) is the revision the run verified against the bytes.",
        epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("report", type=Path, nargs="?",
                   help="report.json of the run: with an attestation, it must be the report signed; alone, it is "
                   "refused unless --allow-unsigned")
    p.add_argument("--attestation", type=Path, metavar="FILE",
                   help="the run's attestation.intoto.jsonl (default with --verify-key: the one beside REPORT)")
    p.add_argument("--verify-key", type=Path, metavar="PUB.pem",
                   help="the EC P-256 public key (PEM) the attestation must be signed with")
    p.add_argument("--allow-unsigned", action="store_true",
                   help="accept a report without an attestation (anyone can edit one); the output says so")
    p.add_argument("--require", metavar="LEVELS",
                   help="comma-separated levels that must have passed (default: the run's profile's required "
                   "levels, which needs a profile shipped with this harness)")
    p.add_argument("--checkpoint", type=Path, metavar="DIR",
                   help="the directory about to be released: every file must be the one signed (or reported), and "
                   "every load-relevant file in it must be signed (or reported)")
    p.add_argument("--revision", metavar="REV",
                   help="the commit about to be released: must equal the draft revision the run verified (40 hex)")
    p.add_argument("--allow-unpinned", action="store_true",
                   help="accept a run whose runtime ran from a moving image tag or revision (not reproducible)")
    p.add_argument("--allow-untrusted-source", action="store_true",
                   help="accept a run whose source folder was trusted on --trust-local-source without proof of its "
                   "identity")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from qualify.release.attestation import ATTESTATION_NAME
    from qualify.release.gate import check_revision_argument, parse_require

    # Usage first, before any hashing: these are the caller's mistakes, not the release's.
    if args.report is not None and not args.report.is_file():
        raise UsageError(f"{args.report}: no such report file")
    attestation = args.attestation
    if attestation is None and args.verify_key is not None:
        if args.report is None:
            raise UsageError("--verify-key: say which attestation to verify (--attestation FILE)")
        attestation = args.report.parent / ATTESTATION_NAME
        if not attestation.is_file() and not args.allow_unsigned:
            # The report came without its attestation: a refusal of the release, not a usage mistake.
            return _refuse([f"{args.report} has no attestation beside it ({ATTESTATION_NAME}): an unsigned report "
                            "cannot license a release (the run was not given --sign-key?)"])
        if not attestation.is_file():
            attestation = None
    if attestation is not None:
        if args.verify_key is None:
            raise UsageError("--attestation needs --verify-key PUB.pem: an attestation is worth nothing unverified")
        if not attestation.is_file():
            raise UsageError(f"{attestation}: no such attestation file")
        if args.checkpoint is None:
            raise UsageError("--attestation needs --checkpoint DIR: the signed files are compared with the directory "
                             "being released")
    elif args.report is None:
        raise UsageError("give the run's attestation (--attestation FILE --verify-key PUB.pem) or, unsigned, its "
                         "report.json with --allow-unsigned")
    if args.checkpoint is None and args.revision is None:
        raise UsageError("say what is being released: --checkpoint DIR and/or --revision REV; without an identity "
                         "the gate cannot tell that the report is about this checkpoint")
    if args.checkpoint is not None and not args.checkpoint.is_dir():
        raise UsageError(f"{args.checkpoint}: not a checkpoint directory")
    if args.revision is not None:
        check_revision_argument(args.revision)
    if args.require is not None:
        parse_require(args.require)
    if attestation is not None:
        return _gate_attestation(args, attestation)
    if not args.allow_unsigned:
        return _refuse([f"{args.report} comes with no attestation: an unsigned report is a file anyone can edit, "
                        "so it cannot license a release; give --attestation FILE --verify-key PUB.pem (qualify "
                        "run/check --sign-key writes one), or --allow-unsigned to accept the report on its word"])
    return _gate_report(args)


def _required(args: argparse.Namespace, profile_name: object, run_id: str) -> tuple[tuple[str, ...], str | None]:
    """(required levels, shipped profile sha256 or None) for a run made under ``profile_name``."""
    from qualify.release.gate import parse_require, shipped_profile_named

    shipped = shipped_profile_named(profile_name)
    if args.require is not None:
        return parse_require(args.require), shipped[1] if shipped else None
    if shipped is None:
        raise UsageError(f"run {run_id} was made under profile {profile_name!r}, which this harness does not ship; "
                         "say which levels the release requires with --require LEVELS")
    return shipped


def _describe(args: argparse.Namespace) -> tuple[object, list[str]]:
    from qualify.errors import CheckpointError
    from qualify.release.gate import describe_checkpoint

    if args.checkpoint is None:
        return None, []
    try:
        return describe_checkpoint(args.checkpoint), []
    except CheckpointError as exc:
        return None, [f"the checkpoint directory cannot be verified: {exc}"]


def _gate_attestation(args: argparse.Namespace, attestation: Path) -> int:
    from qualify import __version__
    from qualify.errors import AttestationError
    from qualify.release.attestation import (
        MODEL_SIGNATURE,
        REPORT,
        file_sha256,
        key_fingerprint,
        load_verify_key,
        read_envelope,
        read_statement,
        verify_envelope,
        verify_model_signature,
    )
    from qualify.release.checklist import level_checks
    from qualify.release.gate import Expected, attestation_refusals, check_revision_argument

    revision = check_revision_argument(args.revision) if args.revision is not None else None
    key = load_verify_key(args.verify_key)
    fingerprint = key_fingerprint(key)
    try:
        statement = verify_envelope(read_envelope(attestation), key)
    except AttestationError as exc:
        return _refuse([f"the attestation cannot be trusted: {exc}"])
    att = read_statement(statement)
    required, profile_sha = _required(args, att.profile_name, str(att.annotation(REPORT, "runId")))
    files, reasons = _describe(args)
    if reasons:
        return _refuse(reasons)
    if args.report is not None:
        signed, actual = att.digest(REPORT), file_sha256(args.report)
        if signed != actual:
            reasons.append(f"{args.report} is not the report the attestation signed (sha256 {actual[:12]}..., signed "
                           f"{(signed or '(none)')[:12]}...): it was altered after signing or belongs to another run")
    expected = Expected(required_levels=required, checkpoint_files=files, revision=revision,  # type: ignore[arg-type]
                        profile_sha256=profile_sha, allow_unpinned=args.allow_unpinned,
                        allow_untrusted_source=args.allow_untrusted_source)
    reasons += attestation_refusals(att, expected, version=__version__, defined=level_checks())
    signature = att.config.get(MODEL_SIGNATURE)
    if signature is not None:
        # The model-signing bundle beside the attestation is for users downstream; it must be the one signed.
        bundle = attestation.parent / Path(str(signature.get("uri"))).name
        if not bundle.is_file():
            reasons.append(f"the attestation names a model signature, {bundle}, that is not beside it: the release "
                           "would ship without the signature its users verify")
        elif file_sha256(bundle) != att.digest(MODEL_SIGNATURE):
            reasons.append(f"{bundle} is not the model signature the attestation names (sha256 "
                           f"{att.digest(MODEL_SIGNATURE)}): it was replaced or altered after signing")
        elif args.checkpoint is not None and not reasons:  # a file already refused by name needs no second word
            try:
                verify_model_signature(Path(args.checkpoint), bundle, Path(args.verify_key))
            except AttestationError as exc:
                reasons.append(str(exc))
    if reasons:
        return _refuse(reasons)
    what = [f"{len(att.subjects)} files in {args.checkpoint} are the ones signed"]
    if revision is not None:
        what.append(f"revision {revision} verified by the run ({att.annotation('draft', 'revisionVerifiedBy')})")
    print(escape_terminal(f"qualified: {', '.join(required)} passed in run {att.annotation(REPORT, 'runId')}, "
                          f"attestation signed by {fingerprint}; {'; '.join(what)}"))
    return EXIT_QUALIFIED


def _gate_report(args: argparse.Namespace) -> int:
    from qualify import __version__
    from qualify.release.checklist import level_checks
    from qualify.release.gate import Expected, check_revision_argument, refusals, stored_contradictions
    from qualify.report.model import Run, read_json_data

    revision = check_revision_argument(args.revision) if args.revision is not None else None
    try:
        # Read once: the model and the stored-value comparison below see the same bytes.
        stored = read_json_data(args.report)
        report = Run.from_dict(stored)
    except UsageError as exc:  # the file exists, so this is the report's fault: schema, JSON, altered verdict
        return _refuse([f"the report cannot be trusted: {exc}"], unsigned=True)
    except (ValueError, KeyError, TypeError) as exc:  # a shape the schema allows but the model cannot read
        return _refuse([f"the report cannot be read: {type(exc).__name__}: {exc}"], unsigned=True)
    required, profile_sha = _required(args, report.profile.get("name"), report.run_id)
    files, reasons = _describe(args)
    if reasons:
        return _refuse(reasons, unsigned=True)
    expected = Expected(required_levels=tuple(required), checkpoint_files=files, revision=revision,  # type: ignore[arg-type]
                        profile_sha256=profile_sha, allow_unpinned=args.allow_unpinned,
                        allow_untrusted_source=args.allow_untrusted_source,
                        defined_checks=level_checks(), harness_version=__version__)
    reasons = stored_contradictions(stored, report)
    reasons += refusals(report, expected)
    if reasons:
        return _refuse(reasons, unsigned=True)
    what = []
    if files is not None:
        # The files the report vouches for (all of them matched, or the gate refused above); files it
        # does not list are only the ones that never load, and they are not "matched".
        matched = len({str(f.get("path")) for f in report.checkpoint.get("files") or []})
        what.append(f"{matched} files in {args.checkpoint} match the report")
    if revision is not None:
        what.append(f"revision {revision} matches")
    what.append(UNSIGNED)
    print(escape_terminal(f"qualified: {', '.join(required)} passed in report {report.run_id}; {'; '.join(what)}"))
    return EXIT_QUALIFIED


def _refuse(reasons: list[str], *, unsigned: bool = False) -> int:
    for reason in reasons:
        # One line per reason, whatever a message carries (escaped: a name from the report or the
        # statement can neither start a line of its own nor move the cursor), so a CI log greps cleanly.
        print("refused: " + escape_terminal(reason))
    if unsigned:
        # On stderr: the refusal lines stay one per reason, and the log still says what was (not) verified.
        print(f"qualify gate: {UNSIGNED}", file=sys.stderr)
    return EXIT_NOT_QUALIFIED
