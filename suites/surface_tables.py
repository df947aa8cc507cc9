"""Torch's registries of what each op compiles to: the lowering, fallback and decomposition tables, entry by entry.

The snapshot (surface_snapshot.py) compares namespaces, and these tables are values there that torch fills at run
time; so they are compared key by key here, as regions of the same snapshot (taken right after their module is
imported). A changed entry names its op, so the sweep aims at that op's family only (suites/ops/aim.py).
"""

from __future__ import annotations

import types
from collections.abc import Callable
from typing import Any

from suites import surface_watch
from suites.surface_place import MISSING, Difference
from suites.surface_regions import reuse

# The tables, by module: (name, attribute).
TABLES = {
    "torch._inductor.lowering": (("lowering", "lowerings"), ("fallback", "fallbacks")),
    "torch._inductor.decomposition": (("inductor-decomposition", "decompositions"),),
    "torch._decomp": (("decomposition", "decomposition_table"),),
}


class Table:
    """One table (a dict of op -> function, or a set of ops) as torch filled it, and what the last diff saw."""

    def __init__(self, name: str, module: str, attribute: str, table: dict[Any, Any] | set[Any]) -> None:
        self.name, self.module, self.place, self.table = name, module, f"{module}.{attribute}", table
        self.is_set = isinstance(table, set)
        self.version = surface_watch.DictVersion(table)  # a set has none: looked at every time
        self.stock = self._items()
        self.seen = dict(self.stock)
        self.found: list[Difference] = []

    def _items(self) -> dict[Any, Any]:
        return {key: key for key in self.table} if self.is_set else dict(self.table)  # type: ignore[arg-type]

    def moved(self) -> dict[Any, Any] | None:
        if not self.version.moved():
            return None
        if self.is_set and len(self.table) == len(self.seen) and self.table == self.seen.keys():
            return None
        now = self._items()
        if not self.is_set and now.keys() == self.seen.keys() and all(now[k] is v for k, v in self.seen.items()):
            return None
        return now

    def check(self) -> list[Difference]:
        now = self.moved()
        if now is not None:
            self.seen, self.found = now, self._diff(now)
        return self.found

    def absorb(self, accept: Callable[[Any], bool]) -> None:
        now = self.moved()
        if now is None:
            return
        for key in now.keys() | self.seen.keys():
            value = now.get(key, MISSING)
            if value is not self.seen.get(key, MISSING) and accept(value):
                self.stock.pop(key, None) if value is MISSING else self.stock.__setitem__(key, value)
        self.seen, self.found = now, self._diff(now)

    def _diff(self, now: dict[Any, Any]) -> list[Difference]:
        return reuse(self.found, [(key, old, now.get(key, MISSING)) for key, old in self.stock.items()
                                  if now.get(key, MISSING) is not old]
                     + [(key, MISSING, value) for key, value in now.items() if key not in self.stock],
                     lambda key, old, new: Difference(f"{self.place}[{key}]", old, new, "table", self.table, key))

    def entry(self, difference: Difference) -> tuple[str, Any] | None:
        """(table name, key) when the difference is one of this table's entries."""
        return (self.name, difference.name) if difference.owner is self.table else None


def tables_of(module: types.ModuleType) -> list[Table]:
    found = []
    for name, attribute in TABLES.get(module.__name__, ()):
        table = getattr(module, attribute, None)
        if isinstance(table, dict | set):
            found.append(Table(name, module.__name__, attribute, table))
    return found
