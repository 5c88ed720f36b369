"""Tests for qualify.report.plots: the report's SVG charts are well-formed, deterministic, carry no
script or link, and never draw an unknown value as zero."""

from __future__ import annotations

import math
import xml.dom.minidom

from qualify.report.plots import paired_charts, paired_difference_svg, paired_positions_svg, position_acceptance_svg
from qualify.serving import paired as pr
from tests.report.test_paired_report import BOOT
from tests.serving.test_paired import samples, worse


def test_position_chart() -> None:
    svg = position_acceptance_svg([(0.9, 0.8, 0.95), (0.5, 0.4, 0.6), (math.nan, math.nan, math.nan)],
                                  threshold=0.6)
    assert svg.startswith("<svg") and svg.rstrip().endswith("</svg>")
    assert svg.count("<rect") == 2 and "n/a" in svg
    assert "<script" not in svg and "href" not in svg
    assert svg == position_acceptance_svg([(0.9, 0.8, 0.95), (0.5, 0.4, 0.6), (math.nan, math.nan, math.nan)],
                                          threshold=0.6)
    import xml.dom.minidom

    xml.dom.minidom.parseString(svg)  # well-formed



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

