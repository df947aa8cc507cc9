"""A small inline SVG chart of a test's duration and compile time over recent runs (no JavaScript, no library)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from markupsafe import Markup, escape

WIDTH, HEIGHT, PAD = 520, 200, 36
SERIES_COLOURS = ("#0969da", "#bf3989")


@dataclass(frozen=True)
class Series:
    name: str
    values: Sequence[float | None]  # None: no value for that run (e.g. no metrics file)


def line_chart(labels: Sequence[str], series: Sequence[Series], unit: str = "s") -> Markup:
    """One polyline per series over the runs in `labels` (oldest first); each point has a tooltip."""
    values = [v for s in series for v in s.values if v is not None]
    top = max(values, default=0.0) or 1.0
    count = len(labels)

    def x(i: int) -> float:
        return PAD + (WIDTH - 2 * PAD) * (i / (count - 1) if count > 1 else 0.5)

    def y(v: float) -> float:
        return HEIGHT - PAD + (-(HEIGHT - 2 * PAD) * v / top)

    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" class="chart" width="{WIDTH}" height="{HEIGHT}" '
             f'viewBox="0 0 {WIDTH} {HEIGHT}" role="img" aria-label="history chart">',
             f'<line x1="{PAD}" y1="{HEIGHT - PAD}" x2="{WIDTH - PAD}" y2="{HEIGHT - PAD}" stroke="#d0d7de"/>',
             f'<text x="4" y="{PAD - 4}" font-size="10">{top:.3g} {escape(unit)}</text>',
             f'<text x="4" y="{HEIGHT - PAD}" font-size="10">0</text>']
    for index, (one, colour) in enumerate(zip(series, SERIES_COLOURS, strict=False)):
        points = [(x(i), y(v), labels[i], v) for i, v in enumerate(one.values) if v is not None]
        if len(points) > 1:
            path = " ".join(f"{px:.1f},{py:.1f}" for px, py, _, _ in points)
            parts.append(f'<polyline fill="none" stroke="{colour}" stroke-width="1.5" points="{path}"/>')
        for px, py, label, v in points:
            parts.append(f'<circle cx="{px:.1f}" cy="{py:.1f}" r="3" fill="{colour}">'
                         f'<title>{escape(one.name)} {v:.3f} {escape(unit)} · {escape(label)}</title></circle>')
        parts.append(f'<text x="{PAD + 160 * index}" y="{HEIGHT - 8}" font-size="11" fill="{colour}">'
                     f'{escape(one.name)}</text>')
    parts.append("</svg>")
    return Markup("".join(parts))
