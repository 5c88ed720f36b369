"""Tests for qualify.report.target: reading a run's target revision enforcement (fail closed) and saying it
where a reader looks first (report.md beside the verdict, the status paragraph, the card, the terminal)."""

from __future__ import annotations

from typing import Any

import pytest

from qualify.report.card import validation_status_section
from qualify.report.markdown import render_markdown, summary_lines
from qualify.report.target import NO_RECORD, NO_RUNTIME, target_revision_note, target_revision_record
from tests.run_builders import enforced_target, seed_run, target_proof

TARGET_REV = "520de24eabf507659eaef7c70f14fd584527facc"
REASON = "the launcher takes no target revision variable"
UNENFORCED = {"revision": TARGET_REV, "enforced": False, "method": None, "variable": None, "snapshot": None,
              "reason": REASON}


def env_with(record: Any) -> dict[str, Any]:
    return {"runtime": {"plan": {"target_revision_enforcement": record}}}


def test_an_enforced_record_is_read_as_written() -> None:
    record = enforced_target(TARGET_REV, "launcher-env")
    assert target_revision_record(env_with(record)) == record
    assert target_revision_note(env_with(record), True) is None


@pytest.mark.parametrize(("environment", "reason"), [
    ({}, NO_RUNTIME),
    ({"runtime": None}, NO_RUNTIME),
    ({"runtime": {"plan": {}}}, NO_RECORD),
    ({"runtime": {"plan": "x"}}, NO_RECORD),
    (env_with({"enforced": "yes"}), NO_RECORD),
    (env_with(UNENFORCED), REASON),
    (env_with({**UNENFORCED, "reason": None}), "no reason recorded"),
])
def test_anything_but_an_enforced_record_reads_as_not_enforced(environment: dict[str, Any], reason: str) -> None:
    record = target_revision_record(environment)
    assert record["enforced"] is False and record["reason"] == reason


def test_a_pinned_snapshot_enforces_the_revision_only_where_its_files_were_proven_to_be_it() -> None:
    snapshot = enforced_target(TARGET_REV, "pinned-snapshot")
    proven = target_proof("org/target", TARGET_REV, "hub", "https://huggingface.co")
    record = target_revision_record({**env_with(snapshot), "target_identity": proven})
    assert record["enforced"] is True
    assert record["identity"] == {"method": "hub", "hub_endpoint": "https://huggingface.co"}
    # A folder laid out as snapshots/<revision> with no proof recorded: its name proves nothing.
    record = target_revision_record(env_with(snapshot))
    assert record["enforced"] is False and record["reason"] == (
        f"the mounted target snapshot is named revision {TARGET_REV}, but the run recorded no proof that its files "
        "are that revision (a folder's name proves nothing)")
    unproven = {**target_proof("org/target", TARGET_REV, None), "findings": ["config.json: size is 33"]}
    record = target_revision_record({**env_with(snapshot), "target_identity": unproven})
    assert record["enforced"] is False
    assert record["reason"].startswith(f"the mounted target snapshot's files were not proven to be revision "
                                       f"{TARGET_REV}: only claimed: the hub was not consulted (config.json: size is "
                                       "33); pin them in the profile ([target.sha256])")
    other = target_proof("org/target", "8" * 40)
    record = target_revision_record({**env_with(snapshot), "target_identity": other})
    assert record["enforced"] is False and f"proven to be revision '{'8' * 40}', not {TARGET_REV}" in record["reason"]
    # A launcher revision variable needs no snapshot proof: the runtime fetches that revision itself.
    assert target_revision_record(env_with(enforced_target(TARGET_REV, "launcher-env")))["enforced"] is True


def test_an_enforced_record_without_a_revision_or_method_is_not_believed() -> None:
    for broken in ({**enforced_target(None)}, {**enforced_target(TARGET_REV), "method": "hope"}):
        record = target_revision_record(env_with(broken))
        assert record["enforced"] is False
        assert record["reason"].startswith("the run's record says enforced but names no revision or method")


def test_the_note_is_given_only_where_a_runtime_level_counted() -> None:
    assert target_revision_note(env_with(UNENFORCED), False) is None
    note = target_revision_note(env_with(UNENFORCED), True)
    assert note is not None and note.startswith("**Target revision not enforced**: the launcher takes no target")
    assert "qualify gate refuses such a run unless --accept-unpinned-target" in note


def test_report_md_says_it_beside_the_verdict_and_the_terminal_says_it_too() -> None:
    run = seed_run()
    run.environment["runtime"] = {"plan": {"target_revision_enforcement": UNENFORCED}}
    text = render_markdown(run)
    head = text.split("## Validation status")[0]
    assert "> **Target revision not enforced**: the launcher takes no target revision variable." in head
    assert text.count("Target revision not enforced") == 2  # beside the verdict and in the status paragraph
    assert f"target: target revision not enforced ({REASON})" in summary_lines(run)
    assert "Target revision not enforced" in validation_status_section(run)
    # Enforced: not a word of it.
    enforced = seed_run()
    assert "not enforced" not in render_markdown(enforced)
    assert not any(line.startswith("target:") for line in summary_lines(enforced))


def test_the_report_schema_holds_the_snapshot_proof_and_the_hub_endpoint_to_their_shape() -> None:
    from qualify.errors import UsageError
    from qualify.schemas import validate

    good = seed_run().to_dict()
    validate(good, "report")
    with_token = {**good, "environment": {**good["environment"], "hub_endpoint": "https://user:hf_secret@mirror"}}
    with pytest.raises(UsageError, match=r"hub_endpoint"):
        validate(with_token, "report")
    unproven = {**good["environment"]["target_identity"], "verified": "yes"}
    with pytest.raises(UsageError, match=r"target_identity"):
        validate({**good, "environment": {**good["environment"], "target_identity": unproven}}, "report")
