"""The report model: verdicts are derived, never "passed" on missing data; reports validate and write atomically."""

from __future__ import annotations

import json
import os

import pytest

from qualify.core import Evidence, Status, Verdict
from qualify.errors import HarnessError, UsageError
from qualify.report import model as r
from qualify.report.model import Check, LevelResult, Run


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


def full_run() -> Run:
    """A run with every field set to something other than its default, so a lossy round trip shows."""
    ev = Evidence("rule", measured={"x": 1.5, "inf": float("inf"), "t": (1, 2)}, expected={"y": "z"})
    ev.add("broken", file="model.safetensors", tensor="lm_head.weight")
    ev.add("also broken")
    checks = [
        Check("structure.a", "structure", "title a", Status.FAILED, "msg a", ev, duration_s=1.25),
        Check("structure.b", "structure", "title b", Status.SKIPPED, "no source", None, duration_s=0.5),
    ]
    return Run(
        run_id="r-2", harness_version="9.9", started_at="2026-01-01T00:00:00Z", command=["qualify", "check", "x"],
        finished_at="2026-01-01T00:01:00Z", profile={"name": "fixture", "sha256": "b" * 64},
        checkpoint={"path": "/c", "files": [{"path": "model.safetensors", "sha256": "c" * 64, "size": 3}]},
        source={"path": "/s", "files": []}, environment={"python": "3.11"},
        levels=[LevelResult("structure", required=True, checks=checks, reason=""),
                LevelResult("format", required=False, checks=[], reason="not asked")],
        interrupted="SIGTERM", errors=["disk full"],
    )


def test_every_field_survives_a_round_trip(tmp_path):
    run = full_run()
    r.write_json(run, tmp_path / "report.json")
    back = r.read_json(tmp_path / "report.json")
    assert back.to_dict() == run.to_dict()
    c = back.levels[0].checks[0]
    assert (c.id, c.level, c.title, c.status, c.message, c.duration_s) == (
        "structure.a", "structure", "title a", Status.FAILED, "msg a", 1.25)
    assert [str(f) for f in c.evidence.findings] == ["model.safetensors: tensor 'lm_head.weight': broken",
                                                     "also broken"]
    assert c.evidence.findings_total == 2 and c.evidence.measured["inf"] == "inf" and c.evidence.measured["t"] == [1, 2]
    assert c.evidence.expected == {"y": "z"}
    assert back.levels[0].checks[1].evidence is None
    assert (back.levels[1].required, back.levels[1].reason) == (False, "not asked")
    assert (back.command, back.finished_at, back.interrupted, back.errors) == (
        ["qualify", "check", "x"], "2026-01-01T00:01:00Z", "SIGTERM", ["disk full"])
    assert back.checkpoint["files"][0]["size"] == 3 and back.source == {"path": "/s", "files": []}
    assert back.environment == {"python": "3.11"} and back.harness_version == "9.9"


def test_unreadable_reports_are_usage_errors(tmp_path):
    with pytest.raises(UsageError, match="no such report"):
        r.read_json(tmp_path / "missing.json")
    (tmp_path / "bad.json").write_text("{not json")
    with pytest.raises(UsageError, match="not a readable JSON report"):
        r.read_json(tmp_path / "bad.json")
    # A repeated key is refused, never resolved by letting the last one win (a forged "verdict" after the real one).
    (tmp_path / "dup.json").write_text('{"verdict": "not qualified", "verdict": "qualified"}')
    with pytest.raises(UsageError, match=r"not a readable JSON report: .*dup.json: duplicate key 'verdict'"):
        r.read_json(tmp_path / "dup.json")
    (tmp_path / "schema.json").write_text(json.dumps({"run_id": "x"}))
    with pytest.raises(UsageError, match="fails its schema"):
        r.read_json(tmp_path / "schema.json")


def test_parse_levels():
    assert r.parse_levels(None, ("structure", "format")) == ["structure", "format"]
    assert r.parse_levels("", ["format"]) == ["format"]
    assert r.parse_levels(" format , structure,", ()) == ["format", "structure"]
    with pytest.raises(UsageError, match=r"unknown level\(s\) telepathy, x; known levels: structure, format"):
        r.parse_levels("structure,telepathy,x", ())


def test_run_level_finds_or_adds_an_unrequired_level():
    run = make_run(LevelResult("structure"))
    assert run.level("structure") is run.levels[0]
    added = run.level("smoke")
    assert added.name == "smoke" and added.required is False and run.levels[-1] is added
    assert run.required_levels == [run.levels[0]]


def test_qualified_levels_lists_only_passed_levels():
    run = make_run(LevelResult("structure", checks=[check(Status.PASSED)]),
                   LevelResult("format", checks=[check(Status.FAILED, "format", 1)]))
    assert run.qualified_levels == ["structure"]
    assert run.to_dict()["qualified_levels"] == ["structure"]



def test_a_repeated_level_or_check_is_refused_by_name_and_count(tmp_path):
    run = make_run(LevelResult("structure", checks=[check(Status.PASSED)]),
                   LevelResult("format", checks=[check(Status.PASSED, level="format")]))
    r.write_json(run, tmp_path / "report.json")
    data = json.loads((tmp_path / "report.json").read_text())
    assert r.Run.from_dict(json.loads(json.dumps(data))).verdict is run.verdict  # once each: read
    twice = json.loads(json.dumps(data))
    twice["levels"].append(json.loads(json.dumps(data["levels"][0])))
    with pytest.raises(UsageError) as exc:
        r.Run.from_dict(twice)
    assert str(exc.value) == ("report t-1: level 'structure' (2 times), check 'structure.c' (2 times) appear more "
                              "than once; a report holds each level and check once: it was altered or is corrupt")
    # The same check id in two levels is a repeat too (no level repeated).
    moved = json.loads(json.dumps(data))
    moved["levels"][1]["checks"].append(json.loads(json.dumps(data["levels"][0]["checks"][0])))
    with pytest.raises(UsageError, match=r"^report t-1: check 'structure.c' \(2 times\) appear more than once"):
        r.Run.from_dict(moved)
    thrice = json.loads(json.dumps(data))
    thrice["levels"][1]["checks"] *= 3
    with pytest.raises(UsageError, match=r"^report t-1: check 'format.c' \(3 times\) appear"):
        r.Run.from_dict(thrice)


@pytest.mark.parametrize(("raw", "written"), [
    ("plain", "plain"),
    ("caf\u00e9 \u2603", "caf\u00e9 \u2603"),  # valid Unicode is kept as it is
    (os.fsdecode(b"bad-\xff-name.safetensors"), "bad-\\xff-name.safetensors"),  # a non-UTF-8 file name's byte
    ("lone \ud800 surrogate", "lone \\ud800 surrogate"),  # a surrogate standing for no byte
])
def test_strings_that_are_not_valid_unicode_are_written_as_escapes(tmp_path, raw, written):
    run = make_run(LevelResult("structure", checks=[check(Status.PASSED)]))
    run.checkpoint = {raw: [raw, {"k": raw}], "n": 3}
    r.write_json(run, tmp_path / "report.json")
    back = r.read_json(tmp_path / "report.json")
    assert back.checkpoint == {written: [written, {"k": written}], "n": 3}
