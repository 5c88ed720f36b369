"""The report model: verdicts are derived, never "passed" on missing data; reports validate and write atomically."""

from __future__ import annotations

import json
import os

import pytest

from qualify import report as r
from qualify.errors import HarnessError, UsageError
from qualify.report import Check, Evidence, LevelResult, Run, Status, Verdict, combine


def make_run(*levels: LevelResult) -> Run:
    return Run(
        run_id="t-1",
        harness_version="0",
        started_at="2026-01-01T00:00:00Z",
        levels=list(levels),
        profile={"name": "fixture"},
    )


def check(status: Status, level: str = "structure", findings: int = 0) -> Check:
    ev = Evidence("rule")
    for i in range(findings):
        ev.add(f"problem {i}", file="f", tensor="t")
    return Check(id=f"{level}.c", level=level, title="t", status=status, evidence=ev)


@pytest.mark.parametrize(
    ("statuses", "expected"),
    [
        ([], Status.NOT_RUN),
        ([Status.PASSED], Status.PASSED),
        ([Status.PASSED, Status.SKIPPED], Status.SKIPPED),
        ([Status.PASSED, Status.NOT_RUN], Status.NOT_RUN),
        ([Status.SKIPPED, Status.FAILED], Status.FAILED),
        ([Status.FAILED, Status.ERROR], Status.ERROR),
    ],
)
def test_level_status_is_the_worst_of_its_checks(statuses, expected):
    assert combine(statuses) is expected


def test_verdict_needs_every_required_level_passed():
    ok = LevelResult("structure", checks=[check(Status.PASSED)])
    assert make_run(ok).verdict is Verdict.QUALIFIED
    assert make_run(ok, LevelResult("format")).verdict is Verdict.NOT_QUALIFIED  # a level with no check
    skipped = LevelResult("format", checks=[check(Status.SKIPPED, "format")])
    assert make_run(ok, skipped).verdict is Verdict.NOT_QUALIFIED
    assert make_run().verdict is Verdict.NOT_QUALIFIED  # nothing asked, nothing qualified


def test_interruption_or_harness_error_is_never_qualified():
    run = make_run(LevelResult("structure", checks=[check(Status.PASSED)]))
    run.interrupted = "SIGTERM"
    assert run.verdict is Verdict.NOT_QUALIFIED
    run.interrupted, run.errors = None, ["disk full"]
    assert run.verdict is Verdict.NOT_QUALIFIED


def test_round_trip_validates(tmp_path):
    run = make_run(LevelResult("structure", checks=[check(Status.FAILED, findings=2)]))
    r.write_json(run, tmp_path / "report.json")
    back = r.read_json(tmp_path / "report.json")
    assert back.to_dict() == run.to_dict()


def test_a_verdict_edited_by_hand_is_refused(tmp_path):
    run = make_run(LevelResult("structure", checks=[check(Status.FAILED, findings=1)]))
    r.write_json(run, tmp_path / "report.json")
    data = json.loads((tmp_path / "report.json").read_text())
    data["verdict"] = "qualified"
    (tmp_path / "report.json").write_text(json.dumps(data))
    with pytest.raises(UsageError, match="contradicts its checks"):
        r.read_json(tmp_path / "report.json")


def test_a_passed_check_with_findings_fails_the_schema(tmp_path):
    run = make_run(LevelResult("structure", checks=[check(Status.PASSED, findings=1)]))
    with pytest.raises(UsageError, match="fails its schema"):
        r.write_json(run, tmp_path / "report.json")
    assert not list(tmp_path.iterdir())


def test_findings_are_capped_but_counted():
    ev = Evidence("rule")
    for i in range(r.MAX_FINDINGS + 7):
        ev.add(f"p{i}")
    assert len(ev.findings) == r.MAX_FINDINGS
    assert ev.to_dict()["findings_total"] == r.MAX_FINDINGS + 7
    assert "and 7 more" in ev.failure_text()


def test_non_finite_measurements_stay_valid_json(tmp_path):
    run = make_run(LevelResult("structure", checks=[check(Status.PASSED)]))
    run.levels[0].checks[0].evidence.measured["sqnr"] = float("inf")
    r.write_json(run, tmp_path / "report.json")
    assert json.loads((tmp_path / "report.json").read_text())["levels"][0]["checks"][0]["evidence"]["measured"] == {
        "sqnr": "inf"
    }


def test_a_full_disk_leaves_the_old_report_and_no_temporary(tmp_path, monkeypatch):
    path = tmp_path / "report.json"
    path.write_text("old")

    def full(fd: int) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fsync", full)
    with pytest.raises(HarnessError, match="No space left on device"):
        r.write_json(make_run(), path)
    assert path.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["report.json"]
