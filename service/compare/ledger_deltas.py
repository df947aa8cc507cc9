"""Which compile-ledger changes of a test, head against base, mean something, and the order a reader sees them in."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from service.compare.ledger import Ledger, new_reasons, times_comparable

GRAPH_FIGURES = ("graph_breaks", "recompiles")  # any change is a change: listed first, all of them
TIME_FIGURES = ("compile_time_s", "dynamo_time_s")
SIZE_FIGURES = ("kernels_generated", "code_bytes")  # only where the generated code changed (else: counters, paths)
# The noise floor of a compile time: a change is listed only when it is at least this many seconds AND this ratio
# (either way). Three warm runs of the same commit on a busy 2-core host differed by at most 0.27 s and ×1.40 in a
# test; three cold ones by up to 2.9 s and ×2.7, when another job's load spiked (docs/suites.md, "Signal, not noise").
TIME_FLOOR_S = 0.5
TIME_FLOOR_RATIO = 1.5
# What a change is measured against when the base is small: a relative change needs a denominator that is never
# zero (a figure going from 0 to 3 is ranked as 3 units, not as infinitely large).
UNITS = {"graph_breaks": 1.0, "recompiles": 1.0, "compile_time_s": TIME_FLOOR_S, "dynamo_time_s": TIME_FLOOR_S,
         "kernels_generated": 1.0, "code_bytes": 1024.0}


@dataclass(frozen=True)
class Delta:
    nodeid: str
    figure: str
    base: float
    head: float
    cache: str = ""  # compile_time_s: the cache state both sides shared ("cold", "warm", "none")
    reasons: tuple[str, ...] = ()  # graph breaks and recompiles: dynamo's reasons the base did not have

    @property
    def weight(self) -> float:
        """The change relative to the base, or to the figure's unit where the base is smaller (never infinite)."""
        return abs(self.head - self.base) / max(abs(self.base), UNITS[self.figure])

    @property
    def change(self) -> str:
        """"+1", "−2" for counts; "×1.52" for times and sizes (or "+0.62" from nothing)."""
        if self.figure in GRAPH_FIGURES or self.figure == "kernels_generated" or self.base == 0:
            delta = self.head - self.base
            return f"+{delta:g}" if delta > 0 else f"−{-delta:g}"
        return f"×{self.head / self.base:.2f}"


def beyond_noise(before: float, after: float) -> bool:
    """A compile-time change at least TIME_FLOOR_S and TIME_FLOOR_RATIO, either way."""
    low, high = sorted((before, after))
    return high - low >= TIME_FLOOR_S and high >= TIME_FLOOR_RATIO * low


def deltas_of(nodeid: str, base: Ledger, head: Ledger, code_changed: bool) -> list[Delta]:
    """The changes of one test worth a reader's time (see the constants above for what is left out)."""
    found = []
    for figure, reasons in (("graph_breaks", new_reasons(base.graph_break_reasons, head.graph_break_reasons)),
                            ("recompiles", new_reasons(base.recompile_reasons, head.recompile_reasons))):
        before, after = getattr(base, figure), getattr(head, figure)
        if before is not None and after is not None and before != after:
            found.append(Delta(nodeid, figure, before, after, reasons=tuple(reasons)))
    for figure in TIME_FIGURES:
        before, after = getattr(base, figure), getattr(head, figure)
        if before is None or after is None or not beyond_noise(before, after):
            continue
        if figure == "compile_time_s" and not times_comparable(base, head):
            continue
        shared = (head.cache or "") if figure == "compile_time_s" else ""
        found.append(Delta(nodeid, figure, before, after, cache=shared))
    for figure in SIZE_FIGURES if code_changed else ():
        before, after = getattr(base, figure), getattr(head, figure)
        if before is not None and after is not None and before != after:
            found.append(Delta(nodeid, figure, before, after))
    return found


def ranked(deltas: Iterable[Delta]) -> list[Delta]:
    """Graph breaks and recompiles first (the most added first, the most removed last), then the rest by relative
    change either way."""
    return sorted(deltas, key=lambda d: (d.figure not in GRAPH_FIGURES,
                                         d.base - d.head if d.figure in GRAPH_FIGURES else -d.weight,
                                         d.nodeid, d.figure))


def uncompared_times(base: Ledger, head: Ledger) -> tuple[str, str] | None:
    """(base's cache state, head's) when both have a compile time that cannot be compared, else None."""
    if base.compile_time_s is None or head.compile_time_s is None or times_comparable(base, head):
        return None
    return base.cache or "unrecorded", head.cache or "unrecorded"
