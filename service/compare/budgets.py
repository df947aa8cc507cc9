"""`[budgets]` of .compile-ci.toml: how far a test's compile ledger may move from the base before the check fails."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from service.compare.ledger import Ledger, new_reasons, times_comparable

BUDGET_KEYS = ("new_graph_breaks", "new_recompiles", "compile_time_ratio", "compile_time_min_s")
DEFAULT_COMPILE_TIME_MIN_S = 1.0


@dataclass(frozen=True)
class Budgets:
    new_graph_breaks: int | None = None  # graph breaks a test may add (0: none); None: not budgeted
    new_recompiles: int | None = None
    compile_time_ratio: float | None = None  # head compile time at most ratio x base
    # Below this head compile time a ratio is noise (a 0.2 s compile varies by half on a busy host): not judged.
    compile_time_min_s: float = DEFAULT_COMPILE_TIME_MIN_S


@dataclass(frozen=True)
class Violation:
    nodeid: str
    figure: str  # graph_breaks | recompiles | compile_time_s
    base: float
    head: float
    limit: str
    reasons: tuple[str, ...] = ()

    def describe(self) -> str:
        said = f"{self.figure} {_num(self.base)} → {_num(self.head)} (budget: {self.limit})"
        return said + (f": {'; '.join(self.reasons)}" if self.reasons else "")


def _num(value: float) -> str:
    return f"{value:.2f}" if isinstance(value, float) and not value.is_integer() else f"{value:g}"


def parse_budgets(table: Mapping[str, object]) -> tuple[Budgets, list[tuple[str, str]]]:
    """The table's budgets, and (key, problem) for every value that cannot be one."""
    problems: list[tuple[str, str]] = []
    values: dict[str, object] = {}
    for key in ("new_graph_breaks", "new_recompiles"):
        value = table.get(key)
        if value is None:
            continue
        if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value <= 1000:
            problems.append((key, f"must be an integer from 0 to 1000, got {value!r}"))
        else:
            values[key] = value
    for key, low, high in (("compile_time_ratio", 1.0, 100.0), ("compile_time_min_s", 0.0, 3600.0)):
        value = table.get(key)
        if value is None:
            continue
        if not isinstance(value, int | float) or isinstance(value, bool) or not math.isfinite(value) \
                or not low <= value <= high:
            problems.append((key, f"must be a number from {low:g} to {high:g}, got {value!r}"))
        else:
            values[key] = float(value)
    return Budgets(**values), problems  # type: ignore[arg-type]


def violations(nodeid: str, base: Ledger, head: Ledger, budgets: Budgets) -> list[Violation]:
    found = []
    for figure, allowed, reasons in (
        ("graph_breaks", budgets.new_graph_breaks, new_reasons(base.graph_break_reasons, head.graph_break_reasons)),
        ("recompiles", budgets.new_recompiles, new_reasons(base.recompile_reasons, head.recompile_reasons)),
    ):
        before, after = getattr(base, figure), getattr(head, figure)
        if allowed is None or before is None or after is None or after - before <= allowed:
            continue
        found.append(Violation(nodeid, figure, before, after, f"at most {allowed} new", tuple(reasons)))
    ratio = budgets.compile_time_ratio
    before_s, after_s = base.compile_time_s, head.compile_time_s
    # A cold head against a warm base is no slowdown (nor the reverse a speed-up): judged like for like only.
    if ratio is not None and before_s and after_s is not None and after_s >= budgets.compile_time_min_s \
            and after_s > ratio * before_s and times_comparable(base, head):
        found.append(Violation(nodeid, "compile_time_s", round(before_s, 3), round(after_s, 3),
                               f"at most ×{ratio:g} the base", (f"×{after_s / before_s:.2f}",)))
    return found
