"""Subcommands of the ``qualify`` CLI, one module each.

Each module defines ``register(subparsers)``, which adds its parser and sets ``func``.
Modules import the library lazily, inside their functions, so that ``qualify --help``
and usage errors answer without loading torch.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from qualify.errors import ExitCode, UsageError

EXIT_QUALIFIED = ExitCode.QUALIFIED
EXIT_NOT_QUALIFIED = ExitCode.NOT_QUALIFIED
EXIT_USAGE = ExitCode.USAGE
EXIT_HARNESS = ExitCode.HARNESS

EPILOG = """\
exit codes:
  0  qualified: every requested level passed
  1  not qualified: a check failed, was skipped, or did not run (the report says which)
  2  usage error: bad arguments, a missing file, an unreadable profile; nothing was judged
  3  harness fault: the harness or the machine failed (no Docker, a port taken, a full disk); no verdict
"""

DEFAULT_REPORTS = Path("reports")

#: The subcommand modules, in the order ``qualify --help`` lists them.
COMMAND_MODULES: tuple[str, ...] = ("run", "check", "convert", "gate", "publish", "card", "diff", "profile_diff",
                                     "profile_check", "serve", "preflight")


def parser_for(sub: argparse._SubParsersAction, name: str, *, help: str, description: str) -> argparse.ArgumentParser:
    return sub.add_parser(name, help=help, description=description, epilog=EPILOG,
                          formatter_class=argparse.RawDescriptionHelpFormatter)


def add_profile_option(p: argparse.ArgumentParser) -> None:
    """``--profile``: the conditions a verdict is reached under (every command that runs anything)."""
    p.add_argument("--profile", default="fixture", help="profile name or path to a .toml (default: fixture)")


def add_report_dir_option(p: argparse.ArgumentParser, *, holds: str) -> None:
    """``--report-dir``: the parent of the run folder, which is never reused."""
    p.add_argument("--report-dir", type=Path, default=DEFAULT_REPORTS,
                   help=f"parent of the run folder holding {holds} (default: reports)")


def add_pinning_options(p: argparse.ArgumentParser | argparse._ArgumentGroup) -> None:
    """``--draft-revision`` and ``--allow-unpinned``: what the runtime loads, and whether it may move."""
    p.add_argument("--draft-revision", help="the draft's immutable 40-hex commit, pinned into DFLASH_MODEL_REVISION "
                   "(default: the profile's, else a local folder's content revision)")
    p.add_argument("--allow-unpinned", action="store_true",
                   help="launch with a moving image tag or revision; the report then says not reproducible")


def existing_dir(path: Path, what: str) -> Path:
    if not path.is_dir():
        raise UsageError(f"{path}: not a {what} directory")
    return path
