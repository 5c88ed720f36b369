"""qualify.run.outcome: a failed check is a verdict; a check the harness could not run is no verdict at all."""

from __future__ import annotations

import pytest

from qualify.core import Evidence, Status
from qualify.errors import ExitCode
from qualify.profile import load_profile
from qualify.report.model import Check
from qualify.run.outcome import run_outcome
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
    assert run.harness_faults() == []
    assert run_outcome(run) is ExitCode.NOT_QUALIFIED
    run.errors.append("teardown left containers behind")
    assert run_outcome(run) is ExitCode.HARNESS


@pytest.mark.parametrize(("statuses", "errors", "shown"), [
    ((Status.PASSED, Status.ERROR), (), "none"),
    ((Status.PASSED,), ("the runtime image could not be built",), "none"),
    ((Status.FAILED, Status.ERROR), (), "not qualified"),
    ((Status.PASSED, Status.SKIPPED), (), "not qualified"),
    ((Status.PASSED,), (), "qualified"),
])
def test_what_a_person_reads_matches_the_exit_code(statuses: tuple[Status, ...], errors: tuple[str, ...],
                                                    shown: str) -> None:
    """report.md and the terminal say "none" exactly where the run ends with exit 3: a harness fault is never
    read as the checkpoint's "not qualified"; report.json keeps "not qualified", which nothing ships on."""
    from qualify.report.markdown import render_markdown, summary_lines

    run = _run(*statuses, errors=errors)
    assert (run_outcome(run) is ExitCode.HARNESS) == (shown == "none")
    assert run.to_dict()["verdict"] == ("qualified" if shown == "qualified" else "not qualified")
    assert summary_lines(run)[-1].startswith(f"verdict: {shown}")
    assert f"**Verdict: {shown}**" in render_markdown(run)
