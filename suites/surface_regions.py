"""The namespaces of the snapshot (surface_snapshot.py): each module's and class's `__dict__` as torch defined it, and
what differs from it now. One pass reads every namespace's dict version (surface_watch.py); only those that moved are
compared, item by item, and what torch's own imports change is taken into the snapshot (`absorb`)."""

from __future__ import annotations

import ctypes
import operator
from collections.abc import Callable
from typing import Any

from suites import surface_watch
from suites.surface_place import MISSING, Difference


def same(now: list[Any], seen: list[Any]) -> bool:
    """Whether two lists hold the very same objects, at C speed (identity: no object's __eq__ is asked anything)."""
    return len(now) == len(seen) and all(map(operator.is_, now, seen))


class Region:
    """One namespace (a module's or a class's `__dict__`) as torch defined it, and what the last diff saw there."""

    __slots__ = ("place", "owner", "slot", "stock", "keys", "values", "found", "version")

    def __init__(self, place: str, owner: Any, slot: str) -> None:
        self.place, self.owner, self.slot = place, owner, slot
        self.version = surface_watch.DictVersion(owner.__dict__)
        self.stock = dict(owner.__dict__)
        self.keys, self.values = list(self.stock), list(self.stock.values())  # what the last look saw
        self.found: list[Difference] = []

    def moved(self) -> tuple[list[str], list[Any]] | None:
        """The namespace's keys and values when they moved since the last look, else None."""
        if not self.version.moved():
            return None
        namespace = self.owner.__dict__
        keys, values = list(namespace), list(namespace.values())
        return None if same(keys, self.keys) and same(values, self.values) else (keys, values)

    def check(self) -> list[Difference]:
        now = self.moved()
        if now is not None:
            self.keys, self.values = now
            self.found = self._diff(dict(zip(*now, strict=True)))
        return self.found

    def absorb(self, accept: Callable[[Any], bool]) -> None:
        """Take what changed since the last look as torch's own where `accept(new value)` (an import of torch's)."""
        now = self.moved()
        if now is None:
            return
        before, current = dict(zip(self.keys, self.values, strict=True)), dict(zip(*now, strict=True))
        for name in before.keys() | current.keys():
            value = current.get(name, MISSING)
            if value is not before.get(name, MISSING) and accept(value):
                self.stock.pop(name, None) if value is MISSING else self.stock.__setitem__(name, value)
        self.keys, self.values = now
        self.found = self._diff(current)

    def _diff(self, now: dict[str, Any]) -> list[Difference]:
        return reuse(self.found, [(name, old, now.get(name, MISSING)) for name, old in self.stock.items()
                                  if now.get(name, MISSING) is not old]
                     + [(name, MISSING, value) for name, value in now.items() if name not in self.stock],
                     lambda name, old, new: Difference(f"{self.place}.{name}", old, new, self.slot, self.owner, name))


def reuse(before: list[Difference], now: list[tuple[Any, Any, Any]],
          make: Callable[[Any, Any, Any], Difference]) -> list[Difference]:
    """The differences (name, old, new) as objects, the last look's own where nothing moved there: a difference
    already judged is not judged again (compiler_surface keeps its verdict by object)."""
    known = {(d.name, id(d.old), id(d.new)): d for d in before}
    return [known.get((name, id(old), id(new))) or make(name, old, new) for name, old, new in now]


class Regions:
    """Every namespace of the snapshot. One pass reads all their dict versions (at C speed); only the namespaces
    whose version moved are looked at, and only those with differences are listed."""

    def __init__(self) -> None:
        self.all: list[Any] = []  # Region, or surface_tables.Table: anything with version, check, absorb, found
        self.versioned: list[Any] = []
        self.unversioned: list[Any] = []  # no version to read (a set, another interpreter): looked at every time
        self.versions = surface_watch.Words()
        self.last: Any = []
        self.differing: dict[int, Any] = {}

    def __len__(self) -> int:
        return len(self.all)

    def add(self, region: Any) -> None:
        self.all.append(region)
        if region.version.cell is None:
            self.unversioned.append(region)
        else:
            self.versioned.append(region)
            self.versions.add(ctypes.addressof(region.version.cell))

    def _moved(self) -> list[Any]:
        now = self.versions.read()
        moved = list(self.unversioned)
        if not surface_watch.same_words(now, self.last):
            # A namespace added since the last look counts as moved: its own version says whether it did.
            moved += [self.versioned[i] for i in surface_watch.moved_words(now, self.last)]
            self.last = now
        return moved

    def check(self) -> list[Difference]:
        for region in self._moved():
            self._note(region, region.check())
        return [d for region in self.differing.values() for d in region.found]

    def absorb(self, accept: Callable[[Any], bool]) -> None:
        for region in self._moved():
            region.absorb(accept)
            self._note(region, region.found)

    def _note(self, region: Any, found: list[Difference]) -> None:
        if found:
            self.differing[id(region)] = region
        else:
            self.differing.pop(id(region), None)
