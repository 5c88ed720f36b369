"""``qualify publish``: upload a release, the checkpoint and its qualification evidence, in one commit.

Publishing is gated twice, by the gate's own code (:func:`qualify.commands.gate.run`, given the
arguments ``qualify gate`` would be given, so there is one copy of the release rules):

1. before anything is uploaded, on the checkpoint folder and the run folder as they are now (not as
   they were when a gate last passed): a refusal prints the gate's lines, exits with its code, and
   uploads nothing;
2. after the commit, on that commit downloaded at its hash into a fresh folder, as a user downloads
   and verifies it (docs/release.md, "Verify a release"): a refusal there is said loudly, with the
   gate's lines naming the files, and exits 1, since the branch now holds a release its users' gate
   refuses.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import tempfile
from pathlib import Path

from qualify.commands import EXIT_NOT_QUALIFIED, EXIT_QUALIFIED, existing_dir
from qualify.util.escape import escape_terminal

EPILOG = """\
exit codes:
  0  published and verified: the gate passed the folders before the upload and the commit as downloaded after
     it; the last line names the commit created and the previous release's files it deleted
  1  refused, nothing uploaded: the gate refused the release (its lines say why: a signature that does not
     verify, a file changed after signing, a verdict not qualified, an evidence file that is not the signed
     one, a profile or policy not met), an evidence file missing from the run folder, the checkpoint holding a
     file where the evidence goes, or a checkpoint entry that is not a regular file;
     or published but refused as downloaded: the gate refuses the commit created (its lines name the files)
  2  usage error: no such folder or key, a repository id or branch that is not safe, a gate option it refuses
  3  harness fault: offline, or the hub did not take the commit (no such repository or branch, no write access,
     the branch moved meanwhile) or did not serve it back
"""


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "publish", help="gate, then upload the checkpoint and its qualification evidence to a hub repository in one "
        "commit, then gate that commit as downloaded",
        description="Gate the release as `qualify gate` does (the attestation in --run-dir verified with --verify-key, "
        "every file of --checkpoint the one signed, the run's report and model signature the signed ones, under the "
        "profile and levels the gate options below name); if it passes, upload every file of --checkpoint and, under "
        "qualification/, the run's evidence (attestation.intoto.jsonl, model.sig, report.json, report.md) to --repo "
        "in one commit on --revision that also deletes the previous release's files; then download that commit "
        "into a fresh folder and gate it again. The token is HF_TOKEN's (never printed); the repository must exist.",
        epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--checkpoint", type=Path, required=True, metavar="DIR", help="the checkpoint folder to release")
    p.add_argument("--run-dir", type=Path, required=True, metavar="DIR",
                   help="the signed run's folder (attestation.intoto.jsonl, model.sig, report.json, report.md)")
    p.add_argument("--verify-key", type=Path, required=True, metavar="PUB.pem",
                   help="the EC P-256 public key (PEM) the attestation must be signed with (as qualify gate's)")
    p.add_argument("--repo", required=True, metavar="OWNER/NAME", help="the hub repository to publish to")
    p.add_argument("--revision", default="main", metavar="BRANCH", help="the branch to commit to (default: main)")
    p.add_argument("--commit-message", metavar="TEXT", help="the commit's summary (default: names the run)")
    g = p.add_argument_group("the gate", "passed to the gate before and after the upload, as qualify gate takes them")
    g.add_argument("--release-policy", action="store_true", help="judge under the committed release policy")
    g.add_argument("--profile", metavar="NAME", help="the shipped profile the release is qualified under")
    g.add_argument("--require", metavar="LEVELS", help="levels required on top of the profile's")
    g.add_argument("--draft-revision", metavar="COMMIT",
                   help="the draft commit being released: must be the revision the run verified (qualify gate "
                   "--revision)")
    g.add_argument("--allow-unpinned", action="store_true", help="as qualify gate --allow-unpinned")
    g.add_argument("--accept-unpinned-target", action="store_true", help="as qualify gate --accept-unpinned-target")
    g.add_argument("--allow-untrusted-source", action="store_true", help="as qualify gate --allow-untrusted-source")
    p.set_defaults(func=run)


def gate_argv(args: argparse.Namespace, checkpoint: Path, evidence: Path) -> list[str]:
    """``qualify gate``'s arguments for the checkpoint at ``checkpoint`` and the run's evidence in ``evidence``
    (the run folder, or ``qualification/`` of a download): the attestation, the report beside it (which must
    be the one signed) and the model signature beside it (which must be the one it names)."""
    from qualify.release.attestation import ATTESTATION_NAME, REPORT

    argv = ["--attestation", str(evidence / ATTESTATION_NAME), "--verify-key", str(args.verify_key),
            "--checkpoint", str(checkpoint)]
    for flag, value in (("--profile", args.profile), ("--require", args.require),
                        ("--revision", args.draft_revision)):
        if value is not None:
            argv += [flag, value]
    for flag, on in (("--release-policy", args.release_policy), ("--allow-unpinned", args.allow_unpinned),
                     ("--accept-unpinned-target", args.accept_unpinned_target),
                     ("--allow-untrusted-source", args.allow_untrusted_source)):
        if on:
            argv.append(flag)
    return [*argv, "--", str(evidence / REPORT)]


def gate(argv: list[str]) -> tuple[int, list[str]]:
    """(the exit code, the printed lines) of ``qualify gate`` on ``argv``, run by the gate's own parser and code.
    A usage error the gate raises propagates: the release cannot be judged as asked."""
    from qualify.commands import gate as gate_command

    parser = argparse.ArgumentParser(prog="qualify")
    gate_command.register(parser.add_subparsers())
    namespace = parser.parse_args(["gate", *argv])
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = int(namespace.func(namespace))
    return code, out.getvalue().splitlines()


def judge(args: argparse.Namespace, checkpoint: Path, evidence: Path) -> tuple[int, list[str]]:
    """The gate on ``checkpoint`` with the run's evidence in ``evidence``, then, where it passed, report.md
    against the signed report.json it was rendered from (the one evidence file the attestation does not
    name): (the exit code, the lines to print)."""
    from qualify.release.publish import rendering_refusal

    code, lines = gate(gate_argv(args, checkpoint, evidence))
    if code == EXIT_QUALIFIED:
        problem = rendering_refusal(evidence)
        if problem is not None:
            # The gate's pass line would read as a verdict on the whole release; this refusal replaces it.
            code, lines = EXIT_NOT_QUALIFIED, [escape_terminal(f"refused: {problem}")]
    return code, lines


def run(args: argparse.Namespace) -> int:
    from qualify.checkpoint.files import EVIDENCE_FOLDER
    from qualify.errors import PublishRefused, UsageError
    from qualify.release.publish import check_branch, check_repo_id, download, online_endpoint, release_files, upload

    check_repo_id(args.repo)
    check_branch(args.revision)
    existing_dir(args.checkpoint, "checkpoint")
    existing_dir(args.run_dir, "run")
    if not args.verify_key.is_file():
        raise UsageError(f"{args.verify_key}: no such verify key file")
    try:
        uploads = release_files(args.checkpoint, args.run_dir)
    except PublishRefused as exc:
        print(escape_terminal(f"refused: {exc}; nothing was uploaded"))
        return EXIT_NOT_QUALIFIED
    online_endpoint(args.repo)

    code, lines = judge(args, args.checkpoint, args.run_dir)
    print("\n".join(lines))
    if code != EXIT_QUALIFIED:
        print(escape_terminal(f"refused: the gate refused the release of {args.checkpoint} with the run {args.run_dir} "
                              "(above); nothing was uploaded"))
        return code

    done = upload(uploads, args.repo, revision=args.revision, commit_message=args.commit_message,
                  run_name=Path(args.run_dir).name)
    removed = (f"; deleted {len(done.removed)} file(s) of the previous release: {', '.join(done.removed)}"
               if done.removed else "")
    print(escape_terminal(f"published: {done.repo}@{done.revision} commit {done.commit} ({len(done.files)} files, "
                          f"the evidence under qualification/{removed}): {done.url}"))
    with tempfile.TemporaryDirectory(prefix="qualify-published-") as fresh:
        snapshot = download(done, Path(fresh))
        try:
            code, lines = judge(args, snapshot, snapshot / EVIDENCE_FOLDER)
        except UsageError as exc:  # an evidence file the commit should hold is absent or not a regular file there
            code, lines = EXIT_NOT_QUALIFIED, [escape_terminal(f"refused: the commit as downloaded: {exc}")]
        print("\n".join(lines))
    if code != EXIT_QUALIFIED:
        print(escape_terminal(f"refused: PUBLISHED BUT NOT VERIFIED: {done.repo}@{done.revision} commit {done.commit}, "
                              "downloaded at that commit into a fresh folder, is refused by the gate (above): the "
                              "branch holds a release its users' gate refuses; publish again or revert the commit"))
        return EXIT_NOT_QUALIFIED
    print(escape_terminal(f"verified: {done.repo} commit {done.commit}, downloaded at that commit into a fresh folder, "
                          "passes the gate"))
    return EXIT_QUALIFIED
