"""Charts for reports as SVG text (pure: numbers in, a string out; no plotting library).

The SVG is self-contained (no scripts, no external fonts or links) so a report can embed
it inline in Markdown or HTML, and deterministic (fixed number formatting) so the same
figures give the same bytes.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
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
