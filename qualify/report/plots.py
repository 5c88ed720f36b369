"""Charts for reports as SVG text (pure: numbers in, a string out; no plotting library).

The SVG is self-contained (no scripts, no external fonts or links) so a report can embed
it inline in Markdown or HTML, and deterministic (fixed number formatting) so the same
figures give the same bytes.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any
from xml.sax.saxutils import escape

WIDTH = 480
HEIGHT = 268
_LEFT, _RIGHT, _TOP, _BOTTOM = 48, 16, 44, 40


def _f(x: float) -> str:
    return f"{x:.1f}"


def position_acceptance_svg(
    rates: Sequence[tuple[float, float, float]], *, title: str = "Acceptance rate by draft position",
    threshold: float | None = None,
) -> str:
    """A bar per draft position: the estimate as the bar, the interval as a whisker; rates in [0, 1].

    ``rates`` holds ``(estimate, low, high)`` per position, position 0 first. An unknown
    (NaN) estimate is drawn as no bar with "n/a" above it, never as zero.
    """
    n = len(rates)
    plot_w = WIDTH - _LEFT - _RIGHT
    plot_h = HEIGHT - _TOP - _BOTTOM
    y0 = _TOP + plot_h  # the y of rate 0

    def y(rate: float) -> float:
        return y0 - max(0.0, min(1.0, rate)) * plot_h

    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" '
        f'viewBox="0 0 {WIDTH} {HEIGHT}" role="img" font-family="sans-serif" font-size="11">',
        f"<title>{escape(title)}</title>",
        f'<text x="{WIDTH / 2:.1f}" y="18" text-anchor="middle" font-size="13">{escape(title)}</text>',
    ]
    for tick in (0.0, 0.25, 0.5, 0.75, 1.0):
        ty = y(tick)
        out.append(f'<line x1="{_LEFT}" y1="{_f(ty)}" x2="{WIDTH - _RIGHT}" y2="{_f(ty)}" stroke="#ddd"/>')
        out.append(f'<text x="{_LEFT - 6}" y="{_f(ty + 4)}" text-anchor="end">{tick:.2f}</text>')
    if threshold is not None and math.isfinite(threshold):
        ty = y(threshold)
        out.append(f'<line x1="{_LEFT}" y1="{_f(ty)}" x2="{WIDTH - _RIGHT}" y2="{_f(ty)}" stroke="#c00" '
                   f'stroke-dasharray="4 3"/>')
    slot = plot_w / n if n else plot_w
    bar_w = slot * 0.6
    for i, (estimate, low, high) in enumerate(rates):
        cx = _LEFT + slot * (i + 0.5)
        if math.isnan(estimate):
            out.append(f'<text x="{_f(cx)}" y="{_f(y0 - 4)}" text-anchor="middle">n/a</text>')
        else:
            top = y(estimate)
            out.append(f'<rect x="{_f(cx - bar_w / 2)}" y="{_f(top)}" width="{_f(bar_w)}" '
                       f'height="{_f(y0 - top)}" fill="#4a7ab5"><title>position {i}: {estimate:.3f} '
                       f'[{low:.3f}, {high:.3f}]</title></rect>')
            label_y = top
            if math.isfinite(low) and math.isfinite(high):
                yl, yh = y(low), y(high)
                label_y = min(top, yh)  # above the whisker, where the label cannot cross it
                out.append(f'<line x1="{_f(cx)}" y1="{_f(yl)}" x2="{_f(cx)}" y2="{_f(yh)}" stroke="#222"/>')
                for yy in (yl, yh):
                    out.append(f'<line x1="{_f(cx - 5)}" y1="{_f(yy)}" x2="{_f(cx + 5)}" y2="{_f(yy)}" '
                               f'stroke="#222"/>')
            out.append(f'<text x="{_f(cx)}" y="{_f(label_y - 6)}" text-anchor="middle">{estimate:.2f}</text>')
        out.append(f'<text x="{_f(cx)}" y="{_f(y0 + 14)}" text-anchor="middle">{i}</text>')
    out.append(f'<line x1="{_LEFT}" y1="{_f(y0)}" x2="{WIDTH - _RIGHT}" y2="{_f(y0)}" stroke="#222"/>')
    out.append(f'<text x="{WIDTH / 2:.1f}" y="{HEIGHT - 8}" text-anchor="middle">draft position</text>')
    out.append("</svg>")
    return "\n".join(out) + "\n"


#: Colours of the two drafts in the paired charts, and their legend words.
SOURCE_COLOUR, CANDIDATE_COLOUR = "#8c8c8c", "#4a7ab5"


def _frame(title: str) -> list[str]:
    return [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" '
        f'viewBox="0 0 {WIDTH} {HEIGHT}" role="img" font-family="sans-serif" font-size="11">',
        f"<title>{escape(title)}</title>",
        f'<text x="{WIDTH / 2:.1f}" y="18" text-anchor="middle" font-size="13">{escape(title)}</text>',
    ]


def _whisker(out: list[str], cx: float, yl: float, yh: float) -> None:
    out.append(f'<line x1="{_f(cx)}" y1="{_f(yl)}" x2="{_f(cx)}" y2="{_f(yh)}" stroke="#222"/>')
    for yy in (yl, yh):
        out.append(f'<line x1="{_f(cx - 3)}" y1="{_f(yy)}" x2="{_f(cx + 3)}" y2="{_f(yy)}" stroke="#222"/>')


def paired_positions_svg(
    source: Sequence[tuple[float, float, float]], candidate: Sequence[tuple[float, float, float]], *,
    title: str = "Acceptance rate by draft position", labels: tuple[str, str] = ("source draft", "checkpoint"),
) -> str:
    """Two bars per draft position, the source draft's and the checkpoint's, each with its interval; rates in [0, 1].

    ``source`` and ``candidate`` hold ``(estimate, low, high)`` per position. An unknown (NaN)
    estimate is drawn as no bar with "n/a", never as zero.
    """
    n = max(len(source), len(candidate))
    plot_w, plot_h = WIDTH - _LEFT - _RIGHT, HEIGHT - _TOP - _BOTTOM
    y0 = _TOP + plot_h

    def y(rate: float) -> float:
        return y0 - max(0.0, min(1.0, rate)) * plot_h

    out = _frame(title)
    for i, (label, colour) in enumerate(zip(labels, (SOURCE_COLOUR, CANDIDATE_COLOUR), strict=True)):
        lx = _LEFT + i * 150
        out.append(f'<rect x="{lx}" y="26" width="10" height="10" fill="{colour}"/>')
        out.append(f'<text x="{lx + 14}" y="35">{escape(label)}</text>')
    for tick in (0.0, 0.25, 0.5, 0.75, 1.0):
        ty = y(tick)
        out.append(f'<line x1="{_LEFT}" y1="{_f(ty)}" x2="{WIDTH - _RIGHT}" y2="{_f(ty)}" stroke="#ddd"/>')
        out.append(f'<text x="{_LEFT - 6}" y="{_f(ty + 4)}" text-anchor="end">{tick:.2f}</text>')
    slot = plot_w / n if n else plot_w
    bar_w = slot * 0.35
    for i in range(n):
        cx = _LEFT + slot * (i + 0.5)
        for side, (rates, colour, label) in enumerate(((source, SOURCE_COLOUR, labels[0]),
                                                       (candidate, CANDIDATE_COLOUR, labels[1]))):
            bx = cx + (side - 0.5) * bar_w
            if i >= len(rates) or math.isnan(rates[i][0]):
                out.append(f'<text x="{_f(bx)}" y="{_f(y0 - 4)}" text-anchor="middle">n/a</text>')
                continue
            estimate, low, high = rates[i]
            top = y(estimate)
            out.append(f'<rect x="{_f(bx - bar_w / 2)}" y="{_f(top)}" width="{_f(bar_w)}" height="{_f(y0 - top)}" '
                       f'fill="{colour}"><title>{escape(label)}, position {i}: {estimate:.3f} '
                       f'[{low:.3f}, {high:.3f}]</title></rect>')
            if math.isfinite(low) and math.isfinite(high):
                _whisker(out, bx, y(low), y(high))
        out.append(f'<text x="{_f(cx)}" y="{_f(y0 + 14)}" text-anchor="middle">{i}</text>')
    out.append(f'<line x1="{_LEFT}" y1="{_f(y0)}" x2="{WIDTH - _RIGHT}" y2="{_f(y0)}" stroke="#222"/>')
    out.append(f'<text x="{WIDTH / 2:.1f}" y="{HEIGHT - 8}" text-anchor="middle">draft position</text>')
    out.append("</svg>")
    return "\n".join(out) + "\n"


def paired_difference_svg(
    bars: Sequence[tuple[str, float, float, float]], *, margin: float | None = None,
    title: str = "Checkpoint vs source draft: relative difference",
) -> str:
    """A bar per figure of ``(label, estimate, low, high)`` relative differences, around a zero line.

    The axis is symmetric and wide enough for every interval and for ``-margin``, drawn as a
    dashed red line: a whisker that reaches below it is a failed comparison. A NaN
    estimate is "n/a", never zero.
    """
    finite = [abs(v) for _, e, lo, hi in bars for v in (e, lo, hi) if math.isfinite(v)]
    span = max([*finite, margin * 1.5 if margin else 0.0, 0.01])
    span = math.ceil(span * 20) / 20  # whole 5% steps, so the ticks read easily
    plot_w, plot_h = WIDTH - _LEFT - _RIGHT, HEIGHT - _TOP - _BOTTOM
    mid = _TOP + plot_h / 2

    def y(v: float) -> float:
        return mid - max(-span, min(span, v)) / span * (plot_h / 2)

    out = _frame(title)
    for tick in (-span, -span / 2, 0.0, span / 2, span):
        ty = y(tick)
        out.append(f'<line x1="{_LEFT}" y1="{_f(ty)}" x2="{WIDTH - _RIGHT}" y2="{_f(ty)}" stroke="#ddd"/>')
        out.append(f'<text x="{_LEFT - 6}" y="{_f(ty + 4)}" text-anchor="end">{tick:+.0%}</text>')
    if margin is not None and math.isfinite(margin):
        ty = y(-margin)
        out.append(f'<line x1="{_LEFT}" y1="{_f(ty)}" x2="{WIDTH - _RIGHT}" y2="{_f(ty)}" stroke="#c00" '
                   f'stroke-dasharray="4 3"><title>-margin {margin:.1%}</title></line>')
        out.append(f'<text x="{WIDTH - _RIGHT}" y="{_f(ty - 3)}" text-anchor="end" fill="#c00">'
                   f"-{margin:.1%}</text>")
    n = len(bars)
    slot = plot_w / n if n else plot_w
    bar_w = slot * 0.5
    for i, (label, estimate, low, high) in enumerate(bars):
        cx = _LEFT + slot * (i + 0.5)
        if math.isnan(estimate):
            out.append(f'<text x="{_f(cx)}" y="{_f(mid - 4)}" text-anchor="middle">n/a</text>')
        else:
            top, bottom = sorted((y(estimate), mid))
            colour = CANDIDATE_COLOUR if margin is None or low > -margin else "#c00"
            out.append(f'<rect x="{_f(cx - bar_w / 2)}" y="{_f(top)}" width="{_f(bar_w)}" '
                       f'height="{_f(max(bottom - top, 0.5))}" fill="{colour}"><title>{escape(label)}: '
                       f"{estimate:+.2%} [{low:+.2%}, {high:+.2%}]</title></rect>")
            if math.isfinite(low) and math.isfinite(high):
                _whisker(out, cx, y(low), y(high))
        out.append(f'<text x="{_f(cx)}" y="{_f(HEIGHT - _BOTTOM + 14)}" text-anchor="middle">{escape(label)}</text>')
    out.append(f'<line x1="{_LEFT}" y1="{_f(mid)}" x2="{WIDTH - _RIGHT}" y2="{_f(mid)}" stroke="#222"/>')
    out.append(f'<text x="{WIDTH / 2:.1f}" y="{HEIGHT - 8}" text-anchor="middle">(checkpoint - source) / source: '
               "rate, length, rate by draft position</text>")
    out.append("</svg>")
    return "\n".join(out) + "\n"


def paired_charts(decisions: Sequence[Any], *, margin: float) -> dict[str, str]:
    """The paired level's charts, per concurrency: both drafts by position, and the relative differences.

    ``decisions`` are :class:`qualify.serving.paired.PairedDecision` objects (read by attribute:
    the report does not import the serving side). Keys name the chart file's suffix.
    """
    out = {}
    for d in decisions:
        fig = d.overall
        if fig is None:
            continue
        c = d.concurrency

        def triples(ivs: Sequence[Any]) -> list[tuple[float, float, float]]:
            return [(iv.estimate, iv.low, iv.high) for iv in ivs]

        out[f"positions-c{c}"] = paired_positions_svg(
            triples(fig.source.position_rates), triples(fig.candidate.position_rates),
            title=f"Acceptance rate by draft position, concurrency {c}")
        bars = [("rate", fig.acceptance_rate.relative), ("length", fig.mean_acceptance_length.relative)]
        bars += [(str(i), diff.relative) for i, diff in enumerate(fig.position_rates)]
        out[f"difference-c{c}"] = paired_difference_svg(
            [(label, iv.estimate, iv.low, iv.high) for label, iv in bars], margin=margin,
            title=f"Checkpoint vs source draft, concurrency {c}")
    return out
