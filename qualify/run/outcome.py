"""A finished run's exit code: qualified, not qualified, or a harness fault that reached no verdict.

A verdict needs evidence. A failed check is evidence (the checkpoint, its runtime or its
served counters are wrong), so a run with one is "not qualified" whatever else happened.
A run with no failed check but a check that could not run because of the harness or the
machine (an error: no Docker, a port taken, a full disk) or a harness error of its own
reached no verdict at all: it ends with the harness's exit code, never as the checkpoint's
fault. A run the checkpoint's own change voided (:mod:`qualify.run.pinning`) is not
qualified: that is the checkpoint's doing.
"""

from __future__ import annotations

from qualify.core import Verdict
from qualify.errors import ExitCode
from qualify.report.model import Run


def run_outcome(run: Run) -> ExitCode:
    """The exit code ``qualify run`` ends with."""
    if run.verdict is Verdict.QUALIFIED:
        return ExitCode.QUALIFIED
    return ExitCode.NOT_QUALIFIED if run.reached_verdict else ExitCode.HARNESS
