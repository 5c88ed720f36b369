"""``qualify gate``: the release pipeline's last word before uploading a checkpoint.

For a release the gate takes a signed attestation (``--attestation`` and ``--verify-key``)
and trusts nothing it has not verified. A bare report.json is something anyone can edit:
it is refused unless ``--allow-unsigned`` says to accept that, and then the gate says so.
Either way the run must have been made under a profile this harness ships, byte for byte
(``--profile`` pins which), and the levels that profile requires are required: ``--require``
adds levels, it never drops one.
"""

from __future__ import annotations

import argparse
import os
import stat
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from qualify.commands import EXIT_NOT_QUALIFIED, EXIT_QUALIFIED
from qualify.errors import UsageError
from qualify.util.escape import escape_terminal

if TYPE_CHECKING:
    from qualify.checkpoint.files import FileEntry
    from qualify.release.gate import ShippedProfile

EPILOG = """\
exit codes:
  0  the release may ship: the attestation verifies with the key and qualifies exactly this checkpoint, under a
     profile shipped with this harness, at every level that profile requires and --require adds (with
     --allow-unsigned: the unsigned report does, and the gate says it is unsigned); the line names the profile
     and its sha256
  1  refused: one line per reason (no or a bad signature, a file changed, missing or added after signing, a
     level not passed or missing, a level run on a stand-in or resting on a server log the caller gave, a
     made-up or missing check, a profile this harness does not ship, an edited one or not the --profile one,
     an unverified revision, a revision proven by a hub the release policy does not name (a mirror, a local
     server: the line names the endpoint), a target revision the run did not enforce (without
     --accept-unpinned-target, a target snapshot whose files were not proven to be it included), an
     interrupted run, a harness error, a statement naming no harness commit or another than this gate's (a
     gate without .git: --harness-commit, confirmed by its build record) or, with --release-policy, made by
     code that was not that commit's (each file named), a shipped profile or release policy other than the
     harness commit holds, with --release-policy a runtime image the policy does not pin, an unsigned report
     without --allow-unsigned)
  2  usage error: no such file, a path that is not a regular file (a FIFO, a socket, a device), an unreadable
     key, an unknown level, no identity to compare, a --profile this harness does not ship, a --harness-commit
     that is not a commit
"""

UNSIGNED = "UNSIGNED (--allow-unsigned): the report was not verified by any signature"


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "gate", help="refuse a release unless a signed attestation qualifies exactly this checkpoint",
        description="Verify the attestation's signature with --verify-key, then check that what it states licenses "
        "releasing the checkpoint: every file in --checkpoint is the one signed, the verdict is qualified, every "
        "required level passed with exactly the checks this harness defines, none on a stand-in or on a server "
        "log the caller gave, under a profile shipped with this harness (byte for byte), and --revision (if given) "
        "is the revision the run verified against the bytes.",
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
                   help="comma-separated levels that must also have passed: added to the shipped profile's required "
                   "levels, never in place of them")
    p.add_argument("--profile", metavar="NAME",
                   help="the shipped profile the release is qualified under: the run must have been made under "
                   "exactly it (name and sha256); default: the profile the run names, which must be a shipped one")
    p.add_argument("--release-policy", action="store_true",
                   help="judge under the committed release policy (qualify/release/policy.toml): its profile, as "
                   "--profile, the levels it adds, as --require, and the hub endpoints whose metadata may prove a "
                   "revision (without it: the public hub only)")
    p.add_argument("--checkpoint", type=Path, metavar="DIR",
                   help="the directory about to be released: every file must be the one signed (or reported), and "
                   "every load-relevant file in it must be signed (or reported)")
    p.add_argument("--revision", metavar="REV",
                   help="the commit about to be released: must equal the draft revision the run verified (40 hex)")
    p.add_argument("--allow-unpinned", action="store_true",
                   help="accept a run whose runtime ran from a moving image tag or revision (not reproducible)")
    p.add_argument("--accept-unpinned-target", action="store_true",
                   help="accept a run whose runtime was not held to the target's pinned revision (the profile's "
                   "launcher takes no revision variable and no --target-snapshot was mounted): the target revision "
                   "is then only claimed, and the pass line says WARNING: target revision not enforced. Never "
                   "implied, under --release-policy too: a release accepts it only by this flag")
    p.add_argument("--harness-commit", metavar="COMMIT",
                   help="the commit of this gate's own code, for a gate installed without .git: it must be the commit "
                   "its package records it was built from (without either, every attestation is refused); from a "
                   "checkout it must be the checkout's")
    p.add_argument("--allow-untrusted-source", action="store_true",
                   help="accept a run whose source folder was trusted on --trust-local-source without proof of its "
                   "identity")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from qualify.release.attestation import ATTESTATION_NAME
    from qualify.release.gate import check_revision_argument, parse_require, shipped_profile_named
    from qualify.util.identifiers import is_commit

    # Usage first, before any hashing: these are the caller's mistakes, not the release's. Nothing
    # is read before it is known to be a regular file (a FIFO would block the gate on its first read).
    if args.report is not None:
        _regular_file(args.report, "report")
    if args.verify_key is not None:
        _regular_file(args.verify_key, "verify key")
    attestation = args.attestation
    if attestation is None and args.verify_key is not None:
        if args.report is None:
            raise UsageError("--verify-key: say which attestation to verify (--attestation FILE)")
        attestation = args.report.parent / ATTESTATION_NAME
        if not attestation.exists() and not args.allow_unsigned:
            # The report came without its attestation: a refusal of the release, not a usage mistake.
            return _refuse([f"{args.report} has no attestation beside it ({ATTESTATION_NAME}): an unsigned report "
                            "cannot license a release (the run was not given --sign-key?)"])
        if not attestation.exists():
            attestation = None
    if attestation is not None:
        if args.verify_key is None:
            raise UsageError("--attestation needs --verify-key PUB.pem: an attestation is worth nothing unverified")
        _regular_file(attestation, "attestation")
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
    if args.harness_commit is not None and not is_commit(args.harness_commit):
        raise UsageError(f"--harness-commit {args.harness_commit!r} is not a commit (40 lowercase hex)")
    if args.require is not None:
        parse_require(args.require)
    if args.release_policy:
        _apply_release_policy(args)
    if args.profile is not None and shipped_profile_named(args.profile) is None:
        from qualify.profile import list_profiles

        raise UsageError(f"--profile {args.profile!r}: not a profile this harness ships "
                         f"({', '.join(list_profiles())}); a release is qualified under a shipped profile only")
    if attestation is not None:
        return _gate_attestation(args, attestation)
    if not args.allow_unsigned:
        return _refuse([f"{args.report} comes with no attestation: an unsigned report is a file anyone can edit, "
                        "so it cannot license a release; give --attestation FILE --verify-key PUB.pem (qualify "
                        "run/check --sign-key writes one), or --allow-unsigned to accept the report on its word"])
    return _gate_report(args)


def _apply_release_policy(args: argparse.Namespace) -> None:
    """--release-policy: the committed policy's profile becomes --profile and its levels are added to --require."""
    from qualify.release.gate import parse_require
    from qualify.release.policy import load_policy

    policy = load_policy()
    args.policy = policy  # its file is held to the harness's commit, its images applied, when the gate judges
    if args.profile not in (None, policy.profile):
        raise UsageError(f"--profile {args.profile} contradicts the release policy's profile {policy.profile} "
                         f"({policy.path})")
    args.profile = policy.profile
    args.hub_endpoints = policy.hub_endpoints
    added = parse_require(args.require) if args.require is not None else ()
    args.require = ",".join((*added, *policy.required_levels))


def _hub_endpoints(args: argparse.Namespace) -> tuple[str, ...]:
    """The hubs whose metadata may prove a revision: the release policy's, else the public hub alone."""
    from qualify.checkpoint.hub import DEFAULT_ENDPOINT

    named = getattr(args, "hub_endpoints", None)
    return tuple(named) if named else (DEFAULT_ENDPOINT,)


def _regular_file(path: Path, what: str) -> None:
    """A usage error naming ``path`` unless it is a regular file: a FIFO, a socket or a device would block
    the gate on its first read, or feed it without end. Checked with stat before anything opens it, then
    again on a descriptor opened without blocking (a FIFO's open would wait for a writer)."""
    try:
        mode = os.stat(path).st_mode
        if stat.S_ISREG(mode):
            fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY)
            try:
                mode = os.fstat(fd).st_mode
            finally:
                os.close(fd)
    except FileNotFoundError:
        raise UsageError(f"{path}: no such {what} file") from None
    except OSError as exc:
        raise UsageError(f"{path}: cannot read the {what}: {exc.strerror or exc}") from None
    if not stat.S_ISREG(mode):
        kind = _FILE_KINDS.get(stat.S_IFMT(mode), _OTHER_KIND)
        raise UsageError(f"{path}: the {what} is not a regular file ({kind}); the gate reads regular files only")


_FILE_KINDS = {stat.S_IFIFO: "a FIFO", stat.S_IFSOCK: "a socket", stat.S_IFCHR: "a character device",
               stat.S_IFBLK: "a block device", stat.S_IFDIR: "a directory"}
_OTHER_KIND = "not a plain file"


def _release(args: argparse.Namespace, recorded_profile: object) -> tuple[ShippedProfile | None, tuple[str, ...]]:
    """(the shipped profile the release is qualified under, the levels it requires) for a run made under
    ``recorded_profile``: --profile, else the recorded one when it is shipped; its required levels and
    whatever --require adds."""
    from qualify.release.gate import parse_require, release_levels, shipped_profile_named

    profile = shipped_profile_named(args.profile if args.profile is not None else recorded_profile)
    added = parse_require(args.require) if args.require is not None else ()
    return profile, release_levels(profile, added)


def _own_commit(given: str | None) -> tuple[str | None, str]:
    """(the commit of this gate's own code, or None and why it is not known): :func:`qualify.release.origin.own_commit`
    on this gate's checkout and its package's build record."""
    from qualify.release.origin import own_commit
    from qualify.util.provenance import build_record, head_commit

    return own_commit(given, head_commit(), (build_record() or {}).get("commit"))


def _committed_files_refusals(args: argparse.Namespace, profile: ShippedProfile | None,
                              commit: str | None) -> list[str]:
    """The shipped profile and (with --release-policy) the release policy against their bytes at the harness's
    commit: the files in the folder are what the gate read, the commit is what the harness ships."""
    import hashlib

    from qualify.profile import load_profile
    from qualify.release.origin import origin_refusals
    from qualify.util.provenance import checkout_path, committed_sha256

    files: list[tuple[str, Path, str]] = []
    if profile is not None:
        files.append(("shipped profile", load_profile(profile.name).path, profile.sha256))
    policy = getattr(args, "policy", None)
    if policy is not None:
        files.append(("release policy", policy.path, hashlib.sha256(policy.path.read_bytes()).hexdigest()))
    out = []
    for what, path, here in files:
        rel = checkout_path(path)
        committed = committed_sha256(rel, commit) if rel is not None and commit is not None else None
        out += origin_refusals(what, rel, here, committed, commit)
    return out


def _profile_words(profile: ShippedProfile | None) -> str:
    # Only said on a pass, which a run under no shipped profile never gets (release.gate.profile_refusals).
    assert profile is not None
    return f"profile {profile.name} (sha256 {profile.sha256})"


def _describe(args: argparse.Namespace) -> tuple[tuple[FileEntry, ...] | None, list[str]]:
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
        MODEL_SIGNATURE_NAME,
        REPORT,
        file_sha256,
        read_envelope,
        read_statement,
        verify_envelope,
    )
    from qualify.release.checklist import level_checks
    from qualify.release.gate import (
        Expected,
        attestation_refusals,
        attested_target,
        check_revision_argument,
        target_warning,
    )
    from qualify.release.signing import key_fingerprint, load_verify_key, verify_model_signature

    revision = check_revision_argument(args.revision) if args.revision is not None else None
    key = load_verify_key(args.verify_key)
    fingerprint = key_fingerprint(key)
    try:
        statement = verify_envelope(read_envelope(attestation), key)
    except AttestationError as exc:
        return _refuse([f"the attestation cannot be trusted: {exc}"])
    att = read_statement(statement)
    profile, required = _release(args, att.profile_name)
    files, reasons = _describe(args)
    if reasons:
        return _refuse(reasons)
    if args.report is not None:
        signed, actual = att.digest(REPORT), file_sha256(args.report)
        if signed != actual:
            reasons.append(f"{args.report} is not the report the attestation signed (sha256 {actual[:12]}..., signed "
                           f"{(signed or '(none)')[:12]}...): it was altered after signing or belongs to another run")
    commit, unknown = _own_commit(args.harness_commit)
    policy = getattr(args, "policy", None)
    expected = Expected(required_levels=required, checkpoint_files=files, revision=revision, profile=profile,
                        allow_unpinned=args.allow_unpinned, allow_untrusted_source=args.allow_untrusted_source,
                        harness_commit=commit, own_commit_unknown=unknown, committed_harness=args.release_policy,
                        accept_unpinned_target=args.accept_unpinned_target, hub_endpoints=_hub_endpoints(args),
                        runtime_images=policy.runtime_images if policy is not None else None)
    reasons += attestation_refusals(att, expected, version=__version__, defined=level_checks())
    if commit is not None:  # else the statement is refused already, saying why this gate knows no commit
        reasons += _committed_files_refusals(args, profile, commit)
    signature = att.config.get(MODEL_SIGNATURE)
    if signature is not None:
        # The model-signing bundle beside the attestation is for users downstream; it must be the one signed.
        bundle = attestation.parent / MODEL_SIGNATURE_NAME
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
    if att.harness_commit is not None:
        what.append(f"harness commit {att.harness_commit}")
    warning = target_warning(*attested_target(att), expected)
    if warning is not None:
        what.append(warning)
    print(escape_terminal(f"qualified: {', '.join(required)} passed in run {att.annotation(REPORT, 'runId')} under "
                          f"{_profile_words(profile)}, attestation signed by {fingerprint}; {'; '.join(what)}"))
    return EXIT_QUALIFIED


def _gate_report(args: argparse.Namespace) -> int:
    from qualify import __version__
    from qualify.release.checklist import level_checks
    from qualify.release.gate import (
        Expected,
        check_revision_argument,
        refusals,
        report_target,
        stored_contradictions,
        target_warning,
    )
    from qualify.report.model import Run, read_json_data

    revision = check_revision_argument(args.revision) if args.revision is not None else None
    commit, _ = _own_commit(args.harness_commit)
    policy = getattr(args, "policy", None)
    try:
        # Read once: the model and the stored-value comparison below see the same bytes.
        stored = read_json_data(args.report)
        report = Run.from_dict(stored)
    except UsageError as exc:  # the file exists, so this is the report's fault: schema, JSON, altered verdict
        return _refuse([f"the report cannot be trusted: {exc}"], unsigned=True)
    except (ValueError, KeyError, TypeError) as exc:  # a shape the schema allows but the model cannot read
        return _refuse([f"the report cannot be read: {type(exc).__name__}: {exc}"], unsigned=True)
    profile, required = _release(args, report.profile.get("name"))
    files, reasons = _describe(args)
    if reasons:
        return _refuse(reasons, unsigned=True)
    expected = Expected(required_levels=required, checkpoint_files=files, revision=revision, profile=profile,
                        allow_unpinned=args.allow_unpinned, allow_untrusted_source=args.allow_untrusted_source,
                        defined_checks=level_checks(), harness_version=__version__,
                        accept_unpinned_target=args.accept_unpinned_target, hub_endpoints=_hub_endpoints(args),
                        runtime_images=policy.runtime_images if policy is not None else None)
    reasons = stored_contradictions(stored, report)
    reasons += refusals(report, expected)
    reasons += _committed_files_refusals(args, profile, commit)
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
    warning = target_warning(*report_target(report), expected)
    if warning is not None:
        what.append(warning)
    what.append(UNSIGNED)
    print(escape_terminal(f"qualified: {', '.join(required)} passed in report {report.run_id} under "
                          f"{_profile_words(profile)}; {'; '.join(what)}"))
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
