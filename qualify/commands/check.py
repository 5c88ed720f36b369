"""``qualify check``: ``qualify run`` on a local checkpoint directory; by default the checkpoint levels
(structure, format, reproduction) the profile requires, which need nothing but the folders."""

from __future__ import annotations

import argparse
from pathlib import Path

from qualify.commands import parser_for
from qualify.commands.run import JUNIT_ENV, add_run_arguments, run

__all__ = ["JUNIT_ENV", "register", "run"]


def register(sub: argparse._SubParsersAction) -> None:
    p = parser_for(
        sub, "check",
        help="qualify a local checkpoint directory (manifest, format, reproduction) and write a report",
        description="Run the checkpoint levels a profile requires (or --levels) against CHECKPOINT and write "
        "REPORT_DIR/<run-id>/report.json and report.md (qualify run, with the checkpoint given as a folder).",
    )
    p.add_argument("checkpoint", type=Path, help="the quantized checkpoint directory")
    add_run_arguments(p, levels_default="the profile's required checkpoint levels")
    p.set_defaults(func=run, default_levels="required")
