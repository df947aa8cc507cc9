"""Compile metrics as a reader wants them: named in words, seconds with their unit and one precision."""

from __future__ import annotations

from typing import Any

from markupsafe import Markup, escape

from runners.untrusted_files import MAX_NUMBER

LABELS = {
    "outcome": "outcome", "duration_s": "duration", "compile_time_s": "compile time", "graphs": "graphs",
    "graph_breaks": "graph breaks", "recompiles": "recompiles", "kernels_generated": "kernels generated",
    "output_code_files": "generated code files", "torch": "torch", "device": "device",
}
HIDDEN = ("nodeid",)


def label(key: str) -> str:
    if key in LABELS:
        return LABELS[key]
    return key.removesuffix("_s").replace("_", " ")


def value(key: str, raw: Any) -> str:
    """Seconds (keys ending in _s) as `1.23 s`; other numbers as they are, floats to three figures."""
    if isinstance(raw, bool) or raw is None:
        return "" if raw is None else str(raw).lower()
    if isinstance(raw, int | float) and not -MAX_NUMBER <= raw <= MAX_NUMBER:  # a row stored before the bound
        return "(out of range)"
    if isinstance(raw, int | float) and key.endswith("_s"):
        return f"{raw:.2f} s"
    if isinstance(raw, float):
        return f"{raw:.3g}"
    return str(raw)


def rows(metrics: dict[str, Any]) -> list[tuple[str, str]]:
    return [(label(k), value(k, v)) for k, v in metrics.items() if k not in HIDDEN]


def cell(key: str, metrics: dict[str, Any]) -> Markup:
    return escape(value(key, metrics.get(key)))
