"""A small inline SVG chart of a test's duration and compile time over recent runs (no JavaScript, no library).

Axes are labelled (seconds up, runs along); with fewer than two runs there is no line to draw, so the values
are said in words instead of one lonely dot.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from markupsafe import Markup, escape

WIDTH, HEIGHT, PAD = 520, 220, 44
SERIES_COLOURS = ("#0969da", "#bf3989")


@dataclass(frozen=True)
class Series:
    name: str
    values: Sequence[float | None]  # None: no value for that run (e.g. no metrics file)


def _in_words(labels: Sequence[str], series: Sequence[Series], unit: str) -> Markup:
    if not labels:
        return Markup('<p class="muted chart-words">No earlier run of this test.</p>')
    said = ", ".join(f"{escape(one.name)} {one.values[0]:.2f} {escape(unit)}" for one in series
                     if one.values and one.values[0] is not None)
    return Markup(f'<p class="muted chart-words">Only one run so far ({escape(labels[0])}): {said or "no figures"}. '
                  "A chart appears from the second run on.</p>")


def line_chart(labels: Sequence[str], series: Sequence[Series], unit: str = "s",
               x_label: str = "runs, oldest to newest") -> Markup:
    """One polyline per series over the runs in `labels` (oldest first); each point has a tooltip."""
    if len(labels) < 2:
        return _in_words(labels, series, unit)
    values = [v for s in series for v in s.values if v is not None]
    top = max(values, default=0.0) or 1.0
    count = len(labels)

    def x(i: int) -> float:
        return PAD + (WIDTH - 2 * PAD) * (i / (count - 1) if count > 1 else 0.5)

    def y(v: float) -> float:
        return HEIGHT - PAD + (-(HEIGHT - 2 * PAD) * v / top)

    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" class="chart" width="{WIDTH}" height="{HEIGHT}" '
             f'viewBox="0 0 {WIDTH} {HEIGHT}" role="img" aria-label="duration and compile time per run, in seconds">',
             f'<line x1="{PAD}" y1="{HEIGHT - PAD}" x2="{WIDTH - PAD}" y2="{HEIGHT - PAD}" stroke="#d0d7de"/>',
             f'<line x1="{PAD}" y1="{PAD}" x2="{PAD}" y2="{HEIGHT - PAD}" stroke="#d0d7de"/>',
             f'<text x="{PAD - 4}" y="{PAD + 4}" font-size="10" text-anchor="end">{top:.3g}</text>',
             f'<text x="{PAD - 4}" y="{HEIGHT - PAD}" font-size="10" text-anchor="end">0</text>',
             f'<text class="axis-y" x="12" y="{HEIGHT / 2:.0f}" font-size="11" text-anchor="middle" '
             f'transform="rotate(-90 12 {HEIGHT / 2:.0f})">seconds</text>',
             f'<text class="axis-x" x="{WIDTH / 2:.0f}" y="{HEIGHT - PAD + 14}" font-size="11" '
             f'text-anchor="middle">{escape(x_label)}</text>']
    for index, (one, colour) in enumerate(zip(series, SERIES_COLOURS, strict=False)):
        points = [(x(i), y(v), labels[i], v) for i, v in enumerate(one.values) if v is not None]
        if len(points) > 1:
            path = " ".join(f"{px:.1f},{py:.1f}" for px, py, _, _ in points)
            parts.append(f'<polyline fill="none" stroke="{colour}" stroke-width="1.5" points="{path}"/>')
        for px, py, label, v in points:
            parts.append(f'<circle cx="{px:.1f}" cy="{py:.1f}" r="3" fill="{colour}">'
                         f'<title>{escape(one.name)} {v:.3f} {escape(unit)} · {escape(label)}</title></circle>')
        parts.append(f'<text x="{PAD + 160 * index}" y="{HEIGHT - 6}" font-size="11" fill="{colour}">'
                     f'● {escape(one.name)}</text>')
    parts.append("</svg>")
    return Markup("".join(parts))
