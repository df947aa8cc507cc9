"""A test's compile ledger at base and at head: figures side by side with their change, and the captured reasons
for graph breaks and recompiles (new ones at head marked).

metrics.json is written by the pull request's job, so every value is checked for its type and cut to size here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from service.compare.ledger import Ledger, ledger_of, times_comparable
from service.compare.ledger_deltas import beyond_noise
from service.web.browser import metrics_view

FIGURES = ("duration_s", "compile_time_s", "dynamo_time_s", "graphs", "graph_breaks", "recompiles",
           "kernels_generated", "code_bytes", "output_code_files")
CACHE_WORDS = {"cold": "cold: {misses} compiled", "warm": "warm: {hits} from the cache",
               "mixed": "mixed: {hits} from the cache, {misses} compiled", "none": "nothing compiled by inductor"}
REASON_LISTS = {"graph_break_reasons": "Graph-break reasons", "recompile_reasons": "Recompile reasons"}
MAX_REASONS = 50
MAX_REASON_CHARS = 2000


@dataclass(frozen=True)
class FigureRow:
    label: str
    base: str
    head: str
    change: str  # "+2", "−1", "×1.32"; "" when equal or not comparable
    worse: bool  # the head's figure went up (more breaks, more time)


@dataclass(frozen=True)
class Reason:
    text: str
    new: bool  # at head and not at base (or gone at head, in the base column)


@dataclass(frozen=True)
class ReasonList:
    label: str
    base: list[Reason]
    head: list[Reason]
    base_more: int  # reasons beyond MAX_REASONS, not shown
    head_more: int


def _number(raw: Any) -> float | None:
    return float(raw) if isinstance(raw, int | float) and not isinstance(raw, bool) and raw == raw else None


def _change(key: str, base: float | None, head: float | None) -> tuple[str, bool]:
    if base is None or head is None or base == head:
        return "", False
    if key.endswith("_s"):  # a time is worse only beyond the noise floor the check run states
        said = f"×{head / base:.2f}" if base > 0 else f"+{head - base:.2f} s"
        return said, head > base and beyond_noise(base, head)
    delta = head - base
    return (f"+{delta:g}" if delta > 0 else f"−{-delta:g}"), delta > 0


def _cache(ledger: Ledger) -> str:
    words = CACHE_WORDS.get(ledger.cache or "")
    return words.format(hits=ledger.fx_graph_cache_hits, misses=ledger.fx_graph_cache_misses) if words else ""


def figures(base: dict[str, Any] | None, head: dict[str, Any]) -> list[FigureRow]:
    """One row per figure either side has, and how each side's graphs came about (compiled or from the cache):
    compile times of a cold side and a warm one are not compared. The base column is empty without a base."""
    base_ledger, head_ledger = ledger_of(base) if base is not None else None, ledger_of(head)
    rows = [FigureRow("compile cache", _cache(base_ledger) if base_ledger else "", _cache(head_ledger), "", False)]
    rows = rows if rows[0].base or rows[0].head else []
    for key in FIGURES:
        if key not in head and (base is None or key not in base):
            continue
        base_value = _number(base.get(key)) if base is not None else None
        head_value = _number(head.get(key))
        change, worse = _change(key, base_value, head_value)
        if key == "compile_time_s" and change and base_ledger and not times_comparable(base_ledger, head_ledger):
            change, worse = "not compared: cached differently", False
        rows.append(FigureRow(metrics_view.label(key),
                              metrics_view.value(key, base_value) if base_value is not None else "",
                              metrics_view.value(key, head_value) if head_value is not None else "", change, worse))
    return rows


def _reasons(raw: Any) -> tuple[list[str], int]:
    if not isinstance(raw, list):
        return [], 0
    texts = [str(item)[:MAX_REASON_CHARS] for item in raw if isinstance(item, str | int | float)]
    return texts[:MAX_REASONS], max(0, len(texts) - MAX_REASONS)


def reasons(base: dict[str, Any] | None, head: dict[str, Any]) -> list[ReasonList]:
    """Graph-break and recompile reasons, base next to head; lists neither side recorded are left out (older
    artifacts have none)."""
    found = []
    for key, label in REASON_LISTS.items():
        if key not in head and (base is None or key not in base):
            continue
        base_texts, base_more = _reasons(base.get(key) if base is not None else None)
        head_texts, head_more = _reasons(head.get(key))
        found.append(ReasonList(label, [Reason(t, base is not None and t not in head_texts) for t in base_texts],
                                [Reason(t, base is not None and t not in base_texts) for t in head_texts],
                                base_more, head_more))
    return found
