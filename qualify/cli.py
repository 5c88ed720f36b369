"""Command line: argument parsing and exit codes only; the work is in the library.

Subcommands live in :mod:`qualify.commands`, one module each.
"""

from __future__ import annotations

import argparse
import errno
import importlib
import os
import sys
import traceback
from collections.abc import Sequence

from qualify import __version__
from qualify.commands import COMMAND_MODULES, EPILOG
from qualify.errors import ExitCode, QualifyError, exhausted, exit_code_for
from qualify.util.escape import escape_terminal
from qualify.util.redact import redact


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="qualify",
        description="Decide, with evidence, whether a quantized checkpoint release may ship.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"qualify {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMAND_MODULES:
        importlib.import_module(f"{__package__}.commands.{name}").register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return int(ExitCode.USAGE)
    try:
        return int(args.func(args))
    except QualifyError as exc:
        code = exit_code_for(exc)
        kind = {ExitCode.HARNESS: "harness error", ExitCode.NOT_QUALIFIED: "not qualified"}.get(code, "error")
        print(f"qualify: {kind}: {escape_terminal(redact(str(exc)))}", file=sys.stderr)
        return int(code)
    except KeyboardInterrupt:
        print("qualify: interrupted", file=sys.stderr)
        return int(ExitCode.NOT_QUALIFIED)
    except OSError as exc:
        known = os_error(exc)
        if known is None:
            return internal_error(exc)
        code, line = known
        print(f"qualify: {line}", file=sys.stderr)
        return int(code)
    except Exception as exc:
        return internal_error(exc)


def os_error(exc: OSError) -> tuple[ExitCode, str] | None:
    """An ``OSError`` that is no harness bug, as its exit code and line: the machine ran out of something (3),
    or a path the user named is longer than the system allows (2). None for any other."""
    fault = exhausted(exc, "running the command")
    if fault is not None:
        return ExitCode.HARNESS, f"harness error: {escape_terminal(redact(str(fault)))}"
    if exc.errno == errno.ENAMETOOLONG:
        where = f"{exc.filename}: " if exc.filename else ""
        return ExitCode.USAGE, (f"error: {escape_terminal(redact(where))}the path is longer than the system allows "
                                f"({exc.strerror or exc}); name a shorter one")
    return None


def internal_error(exc: BaseException) -> int:
    """A bug in the harness: said in one line, the traceback kept for those who ask."""
    if os.environ.get("QUALIFY_DEBUG"):
        traceback.print_exc()
    print(f"qualify: internal error: {type(exc).__name__}: {escape_terminal(redact(str(exc)))} "
          "(a harness bug; set QUALIFY_DEBUG=1 for the traceback)", file=sys.stderr)
    return int(ExitCode.HARNESS)


if __name__ == "__main__":
    raise SystemExit(main())
