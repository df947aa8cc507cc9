"""Torch's compiler as torch defines it (the snapshot), and every place that differs from it now (the raw diff).

The space: every module named `torch` or `torch.*` in `sys.modules` when `take()` runs (a superset of the compiler
packages — torch._dynamo, _inductor, _functorch, _decomp, _prims, _refs, fx, _higher_order_ops, _subclasses,
export — and of what they import inside torch), and every such module imported later (`surface_imports.py` calls
`add_module` as soon as its code has run, before anything else can touch it). Per module:
- its namespace: every attribute, by identity;
- every class defined there and its bases inside torch: every attribute of the class's own `__dict__`;
- every function of torch's reachable from those (module functions, methods, the functions of staticmethods,
  classmethods, properties, partials and lru caches, the functions in their closures and `__wrapped__` chains):
  `__code__`, `__defaults__`, the contents of `__kwdefaults__`, the contents of every closure cell, `__wrapped__`;
- the module object itself under its name in `sys.modules`.

The snapshot holds strong references, so an identity it compares cannot be reused by another object. `diff()`
returns every place whose object is not the snapshot's (`Difference`), whatever changed it: telling torch's own
state from the repository's change is `surface_rules.py`'s job. While nothing changed a diff costs a few
milliseconds (`surface_watch.py`): a namespace whose dict version did not move is not read, functions' `__code__`,
`__defaults__` and `__kwdefaults__` are read only after the interpreter reported an assignment to one of them.
"""

from __future__ import annotations

import functools
import itertools
import operator
import sys
import types
from collections.abc import Callable, Iterable
from typing import Any

from suites import surface_watch
from suites.surface_place import MISSING, Difference
from suites.surface_regions import Region, Regions, reuse, same

_LRU_WRAPPER = type(functools.lru_cache(lambda: None))


def in_space(name: str) -> bool:
    return name == "torch" or name.startswith("torch.")


class _Facet:
    """One facet (`__code__`, a closure cell's contents, ...) of many functions or cells, compared as one list."""

    __slots__ = ("places", "owners", "name", "slot", "read", "fast", "stock", "seen", "found", "guarded", "copies",
                 "words", "word_of", "held", "seen_words")

    def __init__(self, name: str, slot: str, read: Callable[[Any], Any], fast: Callable[[Any], Any] | None = None,
                 guarded: bool = False, word_of: Callable[[Any], tuple[int, Any]] | None = None) -> None:
        self.name, self.slot, self.read, self.fast, self.guarded = name, slot, read, fast or read, guarded
        self.copies = name == "__kwdefaults__"  # what was seen must not change with the live dict
        # One machine word per owner that moves whenever the facet can have (a cell's pointer to its contents, the
        # version of a kwdefaults dict or of a function's __dict__), read in one gather: the facet only when one did.
        self.word_of = word_of
        self.words = surface_watch.Words() if word_of is not None else None
        self.held: list[Any] = []  # what the words are read from, kept alive
        self.seen_words: Any = []
        self.places: list[str] = []
        self.owners: list[Any] = []
        self.stock: list[Any] = []
        self.seen: list[Any] = []
        self.found: list[Difference] = []

    def add(self, place: str, owner: Any) -> None:
        value = self.read(owner)
        if self.words is not None and self.word_of is not None:
            address, held = self.word_of(owner)
            self.words.add(address)
            self.held.append(held)
        self.places.append(place)
        self.owners.append(owner)
        self.stock.append(value)
        self.seen.append(value)

    def moved(self) -> list[Any] | None:
        # Unreported, a difference found earlier may still have been undone in place (a kwdefaults dict).
        if self.guarded and not self.found and not surface_watch.functions_may_have_moved():
            return None
        if self.words is not None:
            if self.slot == "facet" and surface_watch.functions_may_have_moved():
                self._take_words()  # a function's kwdefaults or __dict__ may be another dict now: watch that one
            pointers = self.words.read()
            if surface_watch.same_words(pointers, self.seen_words):
                return None
            self.seen_words = pointers
        try:
            now = list(map(self.fast, self.owners))  # C speed; the slow reader copes with what the fast one cannot
        except (AttributeError, ValueError):
            now = list(map(self.read, self.owners))
        if self.copies:  # dicts changed in place: by content (compared with copies, so never the same object)
            try:
                return None if now == self.seen else now
            except Exception:  # noqa: BLE001 - a value whose __eq__ fails (a tensor): moved
                return now
        return None if same(now, self.seen) else now

    def _take_words(self) -> None:
        assert self.word_of is not None
        self.words, self.held, self.seen_words = surface_watch.Words(), [], []
        for owner in self.owners:
            address, held = self.word_of(owner)
            self.words.add(address)
            self.held.append(held)

    def check(self) -> list[Difference]:
        now = self.moved()
        if now is not None:
            self.found = self._diff(now)
            self.seen = list(map(self.read, self.owners)) if self.copies else now
        return self.found

    def absorb(self, accept: Callable[[Any], bool]) -> None:
        now = self.moved()
        if now is None:
            return
        for index, (before, value) in enumerate(zip(self.seen, now, strict=True)):
            if value is not before and not (self.copies and value == before) and accept(value):
                self.stock[index] = self.read(self.owners[index]) if self.copies else value
        self.found = self._diff(now)
        self.seen = list(map(self.read, self.owners)) if self.copies else now

    def _diff(self, now: list[Any]) -> list[Difference]:
        moved = itertools.compress(range(len(now)), map(operator.is_not, now, self.stock))  # at C speed
        return reuse(self.found, [(i, self.stock[i], now[i]) for i in moved
                                  if not (self.copies and now[i] == self.stock[i])],
                     lambda i, old, new: Difference(f"{self.places[i]}.{self.name}" if self.name else self.places[i],
                                                    old, new, self.slot, self.owners[i], self.name))


def _cell_contents(cell: types.CellType) -> Any:
    try:
        return cell.cell_contents
    except ValueError:  # emptied
        return MISSING


def _kwdefaults(fn: types.FunctionType) -> Any:
    # A copy: the dict is mutable in place, and a change of its contents is a change of the function.
    kwdefaults = fn.__kwdefaults__
    return dict(kwdefaults) if kwdefaults is not None else None


def _version_of(attribute: str) -> Callable[[Any], tuple[int, Any]]:
    """Where the version of a function's dict attribute lives (its kwdefaults, its __dict__), and the dict. A new
    dict assigned there is not seen this way: the audit hook reports kwdefaults; a function's __dict__ replaced
    wholesale is not watched."""
    def word(fn: Any) -> tuple[int, Any]:
        held = getattr(fn, attribute)
        return id(held) + surface_watch.OFFSET, held  # type: ignore[operator]
    return word


def _wrapped(fn: types.FunctionType) -> Any:
    return fn.__dict__.get("__wrapped__", MISSING)


class Snapshot:
    """The space as it is when taken; `add_module` takes a module imported later."""

    def __init__(self, stock_dir: str) -> None:
        self.stock_dir = stock_dir  # torch's own directory: functions whose code is there get their facets taken
        self.modules: dict[str, types.ModuleType] = {}
        self.regions = Regions()
        read_kwdefaults = operator.attrgetter("__kwdefaults__")
        # Assignments to these three are reported by the interpreter (surface_watch): read only after one.
        self.guarded = [_Facet("__code__", "facet", operator.attrgetter("__code__"), guarded=True),
                        _Facet("__defaults__", "facet", operator.attrgetter("__defaults__"), guarded=True),
                        _Facet("__kwdefaults__", "facet", _kwdefaults, read_kwdefaults, guarded=True)]
        # Changes in place are not: read at every diff, only where the snapshot found one.
        versions = surface_watch.VERSIONS and surface_watch.OFFSET is not None
        self.kwdefaults = _Facet("__kwdefaults__", "facet", _kwdefaults, read_kwdefaults,
                                 word_of=_version_of("__kwdefaults__") if versions else None)
        self.wrapped = _Facet("__wrapped__", "facet", _wrapped, operator.attrgetter("__wrapped__"),
                              word_of=_version_of("__dict__") if versions else None)
        self.cells = _Facet("", "cell", _cell_contents, operator.attrgetter("cell_contents"),
                            word_of=lambda cell: (id(cell) + surface_watch.CELL_OFFSET, cell))
        self.functions: list[types.FunctionType] = []
        self._taken: set[int] = set()  # ids of the namespaces, functions and cells already in
        self._modules_seen = 0
        self._names: set[str] = set()
        self.ignored: set[str] = set()  # modules of the space that are not torch's (inductor's generated code)

    @property
    def facets(self) -> list[_Facet]:
        return [*self.guarded, self.kwdefaults, self.wrapped, self.cells]

    def take(self, generated: Callable[[types.ModuleType], bool] = lambda module: False) -> None:
        """`generated(module)`: inductor's kernel code loaded under a name of torch's by an earlier compile: out."""
        for name, module in list(sys.modules.items()):
            if in_space(name) and isinstance(module, types.ModuleType):
                if generated(module):
                    self.ignored.add(name)
                else:
                    self.add_module(name, module)
        self._names.update(sys.modules.keys())
        self._modules_seen = len(sys.modules)

    def add_module(self, name: str, module: types.ModuleType) -> None:
        if name in self.modules:  # imported again under a name already taken: the first one is torch's
            return
        self.modules[name] = module
        if id(module) in self._taken:
            return
        self._taken.add(id(module))
        self.regions.add(Region(name, module, "module"))
        for attribute, value in list(module.__dict__.items()):
            if _is_class(value):
                self._add_class(value)
            self.add_callable(f"{name}.{attribute}", value)

    def _add_class(self, cls: type) -> None:
        for klass in cls.__mro__:
            own = klass.__dict__
            module = own.get("__module__")
            if id(klass) in self._taken or not isinstance(module, str) or not in_space(module):
                continue
            self._taken.add(id(klass))
            place = f"{module}.{own.get('__qualname__', klass.__name__)}"
            self.regions.add(Region(place, klass, "class"))
            for attribute, value in list(own.items()):
                if _is_class(value):
                    self._add_class(value)
                self.add_callable(f"{place}.{attribute}", value, own.get("__qualname__", klass.__name__))

    def add_callable(self, place: str, value: Any, owner: str = "\0") -> None:
        """The functions `value` holds, with facets and closures: torch's code, or made for torch's class `owner`."""
        for where, fn in _functions(place, value):
            if id(fn) in self._taken:
                continue
            self._taken.add(id(fn))
            if fn.__code__.co_filename.startswith(self.stock_dir) or fn.__qualname__.startswith(owner + "."):
                self.functions.append(fn)
                surface_watch.watch(fn)
                for facet in self.guarded:
                    facet.add(where, fn)
                if fn.__kwdefaults__ is not None:
                    self.kwdefaults.add(where, fn)
            # A wrapper from elsewhere (contextlib's, functools') is followed to the function of torch's it holds.
            if "__wrapped__" in fn.__dict__:
                self.wrapped.add(where, fn)
                self.add_callable(f"{where}.__wrapped__", fn.__dict__["__wrapped__"])
            for variable, cell in zip(fn.__code__.co_freevars, fn.__closure__ or (), strict=False):
                contents = _cell_contents(cell)
                if id(cell) not in self._taken and contents is not MISSING:
                    self._taken.add(id(cell))
                    self.cells.add(f"{where}.<closure {variable}>", cell)
                    self.add_callable(f"{where}.<closure {variable}>", contents)

    def diff(self) -> list[Difference]:
        """Every place that differs from the snapshot now."""
        found = [Difference(name, module, sys.modules.get(name, MISSING), "sys.modules", None, name)
                 for name, module in self.modules.items() if sys.modules.get(name, MISSING) is not module]
        found += self.regions.check()
        places = set()
        for facet in self.facets:
            found += [d for d in facet.check() if d.place not in places]
            places.update(d.place for d in facet.found)
        surface_watch.functions_checked()
        return found

    def absorb(self, accept: Callable[[Any], bool]) -> None:
        """Take every change since the last diff (or absorb) as torch's own where `accept(new value)`."""
        self.regions.absorb(accept)
        for facet in self.facets:
            facet.absorb(accept)
        surface_watch.functions_checked()

    def new_modules(self) -> list[tuple[str, Any]]:
        """Entries of sys.modules added since the last call (any name), found by a set difference at C speed."""
        if len(sys.modules) == self._modules_seen:
            return []
        self._modules_seen = len(sys.modules)
        names = sys.modules.keys() - self._names
        self._names.update(names)
        return [(name, sys.modules[name]) for name in names if name in sys.modules]

    def unseen(self, added: list[tuple[str, Any]]) -> list[tuple[str, types.ModuleType]]:
        """Of those, the modules of the space the snapshot never took."""
        return [(name, module) for name, module in added if in_space(name) and name not in self.modules
                and name not in self.ignored and isinstance(module, types.ModuleType)]


def _is_class(value: Any) -> bool:
    return issubclass(type(value), type)  # not isinstance: it would ask a lazy proxy for its __class__


def _functions(place: str, value: Any) -> Iterable[tuple[str, types.FunctionType]]:
    """The functions a namespace's value holds: itself, or those of a descriptor, a partial or a cache wrapper."""
    kind = type(value)
    if kind is types.FunctionType:
        yield place, value
    elif kind is staticmethod or kind is classmethod:
        yield from _functions(place, value.__func__)
    elif kind is property:
        for accessor in ("fget", "fset", "fdel"):
            yield from _functions(f"{place}.{accessor}", getattr(value, accessor))
    elif kind is functools.partial or kind is functools.partialmethod:
        yield from _functions(place, value.func)
    elif kind is _LRU_WRAPPER:
        yield from _functions(place, getattr(value, "__wrapped__", None))
