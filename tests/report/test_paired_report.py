"""Tests for the paired level's report: its charts, its Markdown section, and the speedup callout (pure)."""

from __future__ import annotations

import math
import xml.dom.minidom

import pytest

from qualify.report.markdown import chart_files, paired_lines, speedup_callout
from qualify.report.model import Check, LevelResult, Status
from qualify.report.plots import paired_charts, paired_difference_svg, paired_positions_svg
from qualify.serving import paired as pr
from qualify.serving.specdecode import Bootstrap, CounterDelta
from qualify.serving.throughput import speedup_evidence
from tests.serving.test_paired import from_steps, hardness, samples, worse

BOOT = Bootstrap(resamples=300)


def test_side_by_side_positions_chart() -> None:
    svg = paired_positions_svg([(0.9, 0.8, 0.95), (0.5, 0.4, 0.6)], [(0.85, 0.7, 0.9), (math.nan, math.nan, math.nan)])
    xml.dom.minidom.parseString(svg)
    assert svg.count("<rect") == 2 + 3  # two legend swatches, three bars: the unknown one is not drawn as zero
    assert "n/a" in svg and "<script" not in svg and "href" not in svg
    assert "checkpoint, position 0: 0.850 [0.700, 0.900]" in svg


def test_difference_chart_marks_the_margin_and_a_whisker_below_it() -> None:
    svg = paired_difference_svg([("rate", -0.01, -0.015, -0.005), ("length", -0.05, -0.09, -0.01)], margin=0.02)
    xml.dom.minidom.parseString(svg)
    assert 'stroke="#c00" stroke-dasharray="4 3"' in svg and "-2.0%" in svg
    assert svg.count('fill="#c00"><title>') == 1  # only the interval that reaches below -margin is red
    assert "length: -5.00% [-9.00%, -1.00%]" in svg
    assert svg == paired_difference_svg([("rate", -0.01, -0.015, -0.005), ("length", -0.05, -0.09, -0.01)],
                                        margin=0.02)


def decided(candidate: object, concurrency: int = 1) -> pr.PairedDecision:
    return pr.decide(samples(20, candidate), concurrency=concurrency, margin=0.02, boot=BOOT)


def test_paired_charts_per_concurrency() -> None:
    charts = paired_charts([decided(lambda i, s: s, 1), decided(lambda i, s: worse(s, 3, i), 4),
                            pr.decide([], concurrency=8, margin=0.02, boot=BOOT)], margin=0.02)
    assert sorted(charts) == ["difference-c1", "difference-c4", "positions-c1", "positions-c4"]
    for svg in charts.values():
        xml.dom.minidom.parseString(svg)


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


def throughput(tokens_per_s: float, itl: float, failed: tuple[str, ...] = ()) -> dict[str, object]:
    return {"output_tokens_per_s": tokens_per_s, "output_tokens": 640, "itl_s": {"mean": itl},
            "failed_requests": list(failed)}


def test_speedup_measured_and_gated_only_by_a_stated_bound() -> None:
    ev, gated = speedup_evidence({1: throughput(30, 0.03), 4: throughput(50, 0.05)},
                                 {1: throughput(20, 0.05), 4: throughput(60, 0.04)})
    assert ev.ok and not gated
    assert ev.measured["no_speedup_at"] == [4]
    assert ev.measured["concurrency"]["1"]["speedup"] == 1.5
    ev, gated = speedup_evidence({1: throughput(30, 0.03)}, {1: throughput(20, 0.05)}, min_speedup=1.6)
    assert gated and [str(f) for f in ev.findings] == [
        "at concurrency 1: speedup 1.50x (30.0 / 20.0 output tokens/s) is below the required 1.60x"]
    ev, _ = speedup_evidence({1: throughput(30, 0.03, ("prompt a: timed out",))}, {})
    assert {str(f) for f in ev.findings} == {"at concurrency 1: measured only with the speculator"}
    ev, _ = speedup_evidence({1: throughput(30, 0.03, ("prompt a: timed out",))}, {1: throughput(0, 0.1)},
                             min_speedup=1.0)
    text = "\n".join(str(f) for f in ev.findings)
    assert "with the speculator: prompt a: timed out" in text and "speedup nanx" in text


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
    ({"verified": True, "findings": ["max_num_seqs differs"]},
     "- Engine settings: **the arms ran different engine configurations** (see the findings)"),
    ({"verified": False, "why": "the source server was not started by this run"},
     "- Engine settings: **not verified**, both arms' servers are assumed to run the same engine settings (the "
     "source server was not started by this run)"),
])
def test_the_markdown_section_says_whether_both_arms_ran_the_same_engine(engine, line) -> None:
    check = paired_check(lambda i, s: s)
    assert check.evidence is not None
    assert not any(x.startswith("- Engine settings") for x in paired_lines(check))
    check.evidence.measured["engine_settings"] = engine
    assert line in paired_lines(check)
