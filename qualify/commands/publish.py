"""``qualify publish``: upload a release, the checkpoint and its qualification evidence, in one commit."""

from __future__ import annotations

import argparse
from pathlib import Path

from qualify.commands import EXIT_NOT_QUALIFIED, EXIT_QUALIFIED, existing_dir
from qualify.util.escape import escape_terminal

EPILOG = """\
exit codes:
  0  published: the line names the commit created (or the branch's commit, when nothing changed)
  1  refused, nothing uploaded: an evidence file missing from the run folder, the checkpoint holding a file where
     the evidence goes, or a checkpoint entry that is not a regular file
  2  usage error: no such folder, a repository id or branch that is not safe
  3  harness fault: offline, or the hub did not take the commit (no such repository or branch, no write access)
"""


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "publish", help="upload the checkpoint and its qualification evidence to a hub repository, in one commit",
        description="Upload every file of --checkpoint and, under qualification/, the run's evidence from --run-dir "
        "(attestation.intoto.jsonl, model.sig, report.json, report.md) to --repo, in one commit on --revision. Run "
        "it after `qualify gate` passed on the same folders. The token is HF_TOKEN's (never printed); the repository "
        "must exist.",
        epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--checkpoint", type=Path, required=True, metavar="DIR", help="the checkpoint folder to release")
    p.add_argument("--run-dir", type=Path, required=True, metavar="DIR",
                   help="the signed run's folder (attestation.intoto.jsonl, model.sig, report.json, report.md)")
    p.add_argument("--repo", required=True, metavar="OWNER/NAME", help="the hub repository to publish to")
    p.add_argument("--revision", default="main", metavar="BRANCH", help="the branch to commit to (default: main)")
    p.add_argument("--commit-message", metavar="TEXT", help="the commit's summary (default: names the run)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from qualify.errors import PublishRefused
    from qualify.release.publish import check_branch, check_repo_id, publish

    check_repo_id(args.repo)
    check_branch(args.revision)
    existing_dir(args.checkpoint, "checkpoint")
    existing_dir(args.run_dir, "run")
    try:
        done = publish(args.checkpoint, args.run_dir, args.repo, revision=args.revision,
                       commit_message=args.commit_message)
    except PublishRefused as exc:
        print(escape_terminal(f"refused: {exc}; nothing was uploaded"))
        return EXIT_NOT_QUALIFIED
    print(escape_terminal(f"published: {done.repo}@{done.revision} commit {done.commit} ({len(done.files)} files, "
                          f"the evidence under qualification/): {done.url}"))
    return EXIT_QUALIFIED
