"""Subcommands of the ``qualify`` CLI, one module each.

Each module defines ``register(subparsers)``, which adds its parser and sets ``func``.
Modules import the library lazily, inside their functions, so that ``qualify --help``
and usage errors answer without loading torch.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from qualify.errors import UsageError

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

#: The subcommand modules, in the order ``qualify --help`` lists them.
COMMAND_MODULES: tuple[str, ...] = ("run", "check", "convert", "gate", "card", "diff", "serve")


def parser_for(sub: argparse._SubParsersAction, name: str, *, help: str, description: str) -> argparse.ArgumentParser:
    return sub.add_parser(name, help=help, description=description, epilog=EPILOG,
                          formatter_class=argparse.RawDescriptionHelpFormatter)


def existing_dir(path: Path, what: str) -> Path:
    if not path.is_dir():
        raise UsageError(f"{path}: not a {what} directory")
    return path
