"""qualify.run.outcome: a failed check is a verdict; a check the harness could not run is no verdict at all."""

from __future__ import annotations

import pytest

from qualify.core import Evidence, Status
from qualify.errors import ExitCode
from qualify.profile import load_profile
from qualify.report.model import Check
from qualify.run.outcome import harness_faults, run_outcome
from qualify.run.runner import new_run


def _run(*statuses: Status, errors: tuple[str, ...] = ()):  # type: ignore[no-untyped-def]
    run = new_run(load_profile("fixture"), None, None, ["structure"])
    for i, status in enumerate(statuses):
        run.levels[0].checks.append(Check(id=f"structure.c{i}", level="structure", title="t", status=status,
                                          message=f"m{i}", evidence=Evidence("s")))
    run.errors.extend(errors)
    return run


@pytest.mark.parametrize(("statuses", "errors", "code"), [
    ((Status.PASSED,), (), ExitCode.QUALIFIED),
    ((Status.PASSED, Status.FAILED), (), ExitCode.NOT_QUALIFIED),
    ((Status.PASSED, Status.SKIPPED), (), ExitCode.NOT_QUALIFIED),  # skipped is not passed, and no fault
    ((Status.PASSED, Status.ERROR), (), ExitCode.HARNESS),  # a port taken, no Docker: no verdict
    ((Status.PASSED,), ("the runtime image could not be built",), ExitCode.HARNESS),
    ((Status.FAILED, Status.ERROR), (), ExitCode.NOT_QUALIFIED),  # a failed check is evidence whatever else broke
])
def test_the_exit_code_of_a_run(statuses: tuple[Status, ...], errors: tuple[str, ...], code: ExitCode) -> None:
    assert run_outcome(_run(*statuses, errors=errors)) is code


def test_a_run_the_checkpoints_own_change_voided_is_not_qualified_not_a_fault() -> None:
    message = "the checkpoint changed during the run, so the run vouches for none of its bytes and is not signed: x"
    run = _run(Status.PASSED, errors=(message,))
    run.checkpoint["pinned"] = {"voided": message, "changed": ["x"]}
    assert harness_faults(run) == []
    assert run_outcome(run) is ExitCode.NOT_QUALIFIED
    run.errors.append("teardown left containers behind")
    assert run_outcome(run) is ExitCode.HARNESS
