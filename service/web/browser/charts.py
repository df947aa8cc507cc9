"""A small inline SVG chart of a test's duration and compile time over recent runs (no JavaScript, no library):
the default branch's runs as the baseline (solid lines), this pull request's runs (dashed) on the same axes, each
point filled with its outcome's colour.

Axes are labelled (seconds up, runs along); with fewer than two runs there is no line to draw, so the values
are said in words instead of one lonely dot.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from markupsafe import Markup, escape

WIDTH, HEIGHT, PAD, LEGEND = 520, 250, 44, 34
SERIES_COLOURS = ("#0969da", "#bf3989")
OUTCOME_COLOURS = {"passed": "#1a7f37", "failed": "#cf222e", "error": "#82071e", "skipped": "#8c959f"}
OTHER_OUTCOME = "#d4a72c"  # xfailed, xpassed, flaky, anything else a job wrote


@dataclass(frozen=True)
class Point:
    label: str  # the tooltip's words for the run (sha, time)
    outcome: str
    baseline: bool  # a default-branch run; else a run of this pull request
    values: Sequence[float | None]  # one per series; None: no figure for that run


def _in_words(points: Sequence[Point], names: Sequence[str], unit: str) -> Markup:
    if not points:
        return Markup('<p class="muted chart-words">No earlier run of this test.</p>')
    said = ", ".join(f"{escape(name)} {value:.2f} {escape(unit)}" for name, value in zip(names, points[0].values,
                                                                                         strict=False)
                     if value is not None)
    return Markup(f'<p class="muted chart-words">Only one run so far ({escape(points[0].label)}, '
                  f'{escape(points[0].outcome)}): {said or "no figures"}. A chart appears from the second run on.</p>')


def _legend(names: Sequence[str], own_label: str) -> list[str]:
    top = HEIGHT - LEGEND + 4
    parts = [f'<text x="{PAD + 150 * i}" y="{top}" font-size="11" fill="{colour}">● {escape(name)}</text>'
             for i, (name, colour) in enumerate(zip(names, SERIES_COLOURS, strict=False))]
    parts.append(f'<line x1="{PAD + 300}" y1="{top - 4}" x2="{PAD + 318}" y2="{top - 4}" stroke="#57606a"/>'
                 f'<text class="legend-baseline" x="{PAD + 322}" y="{top}" font-size="11">default branch</text>')
    parts.append(f'<line x1="{PAD + 300}" y1="{top + 10}" x2="{PAD + 318}" y2="{top + 10}" stroke="#57606a" '
                 f'stroke-dasharray="4 3"/><text class="legend-own" x="{PAD + 322}" y="{top + 14}" '
                 f'font-size="11">{escape(own_label)}</text>')
    for i, (outcome, colour) in enumerate([*OUTCOME_COLOURS.items(), ("other", OTHER_OUTCOME)]):
        parts.append(f'<rect x="{PAD + 58 * i}" y="{top + 6}" width="7" height="7" fill="{colour}"/>'
                     f'<text x="{PAD + 10 + 58 * i}" y="{top + 14}" font-size="10">{outcome}</text>')
    return parts


def history_chart(points: Sequence[Point], names: Sequence[str], unit: str = "s",
                  x_label: str = "runs, oldest to newest", own_label: str = "this pull request") -> Markup:
    """One polyline per series and kind of run (baseline solid, own dashed) over `points` (oldest first)."""
    if len(points) < 2:
        return _in_words(points, names, unit)
    values = [v for p in points for v in p.values if v is not None]
    top = max(values, default=0.0) or 1.0
    bottom = HEIGHT - PAD - LEGEND + 10

    def x(i: int) -> float:
        return PAD + (WIDTH - 2 * PAD) * i / (len(points) - 1)

    def y(v: float) -> float:
        return bottom - (bottom - PAD) * v / top

    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" class="chart" width="{WIDTH}" height="{HEIGHT}" '
             f'viewBox="0 0 {WIDTH} {HEIGHT}" role="img" aria-label="duration and compile time per run, in seconds,'
             f' default branch and {escape(own_label)}">',
             f'<line x1="{PAD}" y1="{bottom}" x2="{WIDTH - PAD}" y2="{bottom}" stroke="#d0d7de"/>',
             f'<line x1="{PAD}" y1="{PAD}" x2="{PAD}" y2="{bottom}" stroke="#d0d7de"/>',
             f'<text x="{PAD - 4}" y="{PAD + 4}" font-size="10" text-anchor="end">{top:.3g}</text>',
             f'<text x="{PAD - 4}" y="{bottom}" font-size="10" text-anchor="end">0</text>',
             f'<text class="axis-y" x="12" y="{(bottom + PAD) / 2:.0f}" font-size="11" text-anchor="middle" '
             f'transform="rotate(-90 12 {(bottom + PAD) / 2:.0f})">seconds</text>',
             f'<text class="axis-x" x="{WIDTH / 2:.0f}" y="{bottom + 14}" font-size="11" '
             f'text-anchor="middle">{escape(x_label)}</text>']
    for index, (name, colour) in enumerate(zip(names, SERIES_COLOURS, strict=False)):
        for baseline in (True, False):
            line = [(x(i), y(p.values[index])) for i, p in enumerate(points)
                    if p.baseline == baseline and index < len(p.values) and p.values[index] is not None]
            if len(line) > 1:
                dash = "" if baseline else ' stroke-dasharray="4 3"'
                path = " ".join(f"{px:.1f},{py:.1f}" for px, py in line)
                parts.append(f'<polyline class="{"baseline" if baseline else "own"}" fill="none" stroke="{colour}" '
                             f'stroke-width="1.5"{dash} points="{path}"/>')
        for i, p in enumerate(points):
            value = p.values[index] if index < len(p.values) else None
            if value is None:
                continue
            fill = OUTCOME_COLOURS.get(p.outcome, OTHER_OUTCOME)
            kind = "default branch" if p.baseline else own_label
            parts.append(f'<circle class="point {escape(p.outcome)}" cx="{x(i):.1f}" cy="{y(value):.1f}" '
                         f'r="{3 if p.baseline else 4}" fill="{fill}" stroke="{colour}" stroke-width="1.5">'
                         f'<title>{escape(name)} {value:.3f} {escape(unit)} · {escape(p.label)} · '
                         f'{escape(p.outcome)} · {escape(kind)}</title></circle>')
    parts += _legend(names, own_label)
    parts.append("</svg>")
    return Markup("".join(parts))
