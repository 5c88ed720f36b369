"""Tests for the paired level's report: its Markdown section, its chart files and the speedup callout (pure).

The charts themselves are drawn by qualify.report.plots (tests/report/test_plots.py)."""

from __future__ import annotations

import pytest

from qualify.core import Status
from qualify.report.markdown import chart_files, paired_lines, speedup_callout
from qualify.report.model import Check, LevelResult
from qualify.report.plots import paired_charts
from qualify.serving import paired as pr
from qualify.serving.acceptance_stats import Bootstrap
from qualify.serving.counters import CounterDelta
from qualify.serving.throughput import speedup_evidence
from tests.serving.test_paired import from_steps, hardness, samples, worse
from tests.serving.test_throughput import throughput

BOOT = Bootstrap(resamples=300)


def paired_check(candidate: object) -> Check:
    runs = [pr.ConcurrencyRun(c, samples(20, candidate), [], {}) for c in (1, 4)]
    ev, decisions = pr.paired_evidence(runs, margin=0.02, boot=BOOT, extra_measured={
        "prompt_sets": [{"name": "set", "format": "qualify", "prompts": 20, "sha256": "ab" * 32}],
        "chat_template": {"sha256": None, "note": "not verified: remote"}})
    ev.measured["charts_svg"] = paired_charts(decisions, margin=0.02)
    return Check("paired.non_inferiority", "paired", "t", Status.PASSED if ev.ok else Status.FAILED,
                 ev.summary, ev, 0.0)


def test_the_markdown_section_states_both_drafts_the_interval_and_the_margin() -> None:
    lines = "\n".join(paired_lines(paired_check(lambda i, s: worse(s, 3, i))))
    assert "passes only if the lower bound is above -2.0%" in lines
    assert "| 4 | acceptance rate |" in lines and "**not shown within margin**" in lines
    assert "Prompts that lost the most at concurrency 1:" in lines
    assert "sha256 `" + "ab" * 32 + "`" in lines and "not verified: remote" in lines
    ok = "\n".join(paired_lines(paired_check(lambda i, s: s)))
    assert "| within margin |" in ok and "not shown" not in ok
    assert "No prompt lost acceptance against the source draft at concurrency 4" in ok


def test_chart_files_beside_the_report() -> None:
    check = paired_check(lambda i, s: s)
    files = chart_files(check)
    assert sorted(files) == ["paired.non_inferiority.difference-c1.svg", "paired.non_inferiority.difference-c4.svg",
                             "paired.non_inferiority.positions-c1.svg", "paired.non_inferiority.positions-c4.svg"]
    check.evidence.measured["charts_svg"] = {"../x": "<svg/>", "ok": 3}  # type: ignore[union-attr]
    assert chart_files(check) == {}  # a name that could leave the folder, or no SVG text, is not written


def test_acceptance_without_speedup_is_called_out() -> None:
    ev, _ = speedup_evidence({1: throughput(10, 0.1)}, {1: throughput(20, 0.05)})
    skipped = Check("speedup.s", "speedup", "t", Status.SKIPPED, ev.summary, ev, 0.0)
    speed = LevelResult("speedup", required=False, checks=[skipped])
    paired = LevelResult("paired", required=True, checks=[paired_check(lambda i, s: s)])
    run = type("R", (), {"levels": [paired, speed]})()
    text = "\n".join(speedup_callout(run))  # type: ignore[arg-type]
    assert "**Acceptance without speedup**" in text and "0.50x at concurrency 1" in text
    assert "although paired passed" in text


def test_a_prompt_pair_records_its_differences() -> None:
    s = pr.PairedSample("p", "s", "c", from_steps(hardness(0)), CounterDelta(0, 0, 0, ()))
    assert s.to_dict()["accepted_difference"] == -sum(hardness(0))
    assert s.to_dict()["drafts_difference"] == -20


@pytest.mark.parametrize(("engine", "line"), [
    ({"verified": True, "findings": []}, "- Engine settings: both arms' logged vLLM engine configurations are "
                                         "identical but for the draft model (verified from their logs)"),
    ({"verified": True, "findings": [], "logs_given_by": ["--server-log", "--source-server-log"]},
     "- Engine settings: both arms' logged vLLM engine configurations are identical but for the draft model "
     "(verified from their logs; --server-log and --source-server-log named the log files, taken on the caller's "
     "word, not read from a server this run started)"),
    ({"verified": True, "findings": [], "logs_given_by": ["--source-server-log"]},
     "- Engine settings: both arms' logged vLLM engine configurations are identical but for the draft model "
     "(verified from their logs; --source-server-log named the log file, taken on the caller's word, not read from "
     "a server this run started)"),
    ({"verified": True, "findings": ["max_num_seqs differs"]},
     "- Engine settings: **the arms ran different engine configurations** (see the findings)"),
    ({"verified": False, "why": "the source server was not started by this run"},
     "- Engine settings: **not verified**, so the comparison is not shown to be fair and the level does not pass "
     "(the source server was not started by this run)"),
])
def test_the_markdown_section_says_whether_both_arms_ran_the_same_engine(engine, line) -> None:
    check = paired_check(lambda i, s: s)
    assert check.evidence is not None
    assert not any(x.startswith("- Engine settings") for x in paired_lines(check))
    check.evidence.measured["engine_settings"] = engine
    assert line in paired_lines(check)
