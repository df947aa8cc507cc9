"""Whether anything of the snapshot can have moved since the last diff, told cheaply (the diff's fast path).

- Namespaces: CPython gives every dict a version (PEP 509's `ma_version_tag`) that changes on every insertion,
  replacement or deletion. Read here through ctypes, for the module and class dicts of the snapshot: an unchanged
  version means an unchanged namespace, and the namespace is not read at all. Where the version cannot be read
  (another interpreter or layout: `VERSIONS` is False after the self-test), every namespace is compared as a list.
- Native code: `ctypes.dlopen` is an audit event too; the same hook notes it (surface_files.py looks again).
- Functions: the interpreter raises the audit event `object.__setattr__` for every assignment to a function's
  `__code__`, `__defaults__` or `__kwdefaults__`; a hook notes it, and those facets are read only after one. Without
  the hook (`sys.addaudithook` refused), they are read at every diff.

Neither can say *what* moved: the snapshot compares for that.
"""

from __future__ import annotations

import ctypes
import gc
import sys
import types
from typing import Any

_FACETS = frozenset({"__code__", "__defaults__", "__kwdefaults__"})
_state = {"hooked": False, "moved": True, "opened": True}
_watched: set[int] = set()  # ids of the snapshot's functions (it holds them: an id is not reused meanwhile)


def _version_offset() -> int | None:
    """Where a dict's version lives (after the object header and `ma_used`), if this interpreter keeps one there
    that moves on every change and on nothing else that this module does (checked, not assumed)."""
    if sys.implementation.name != "cpython" or sys.version_info[:2] not in ((3, 11), (3, 12)):
        return None
    offset = 2 * ctypes.sizeof(ctypes.c_void_p) + ctypes.sizeof(ctypes.c_ssize_t)
    probe: dict[str, int] = {"a": 1}
    read = ctypes.c_uint64.from_address
    first = read(id(probe) + offset).value
    probe["a"] = 2
    second = read(id(probe) + offset).value
    probe.pop("a")
    third = read(id(probe) + offset).value
    dict(probe)  # a read or a copy must not move it
    return offset if first != second != third and read(id(probe) + offset).value == third else None


OFFSET = _OFFSET = _version_offset()
VERSIONS = _OFFSET is not None
CELL_OFFSET = 2 * ctypes.sizeof(ctypes.c_void_p)  # a cell's pointer to its contents, after the object header


class Words:
    """The machine words at many addresses of this process (dict versions, cells' pointers to their contents), read
    in one gather: numpy indexes a view of the address range that holds them, so thousands cost a fraction of a
    millisecond; without numpy, one ctypes read each. Only addresses of objects something here holds are added."""

    def __init__(self) -> None:
        self.addresses: list[int] = []
        self._index: Any = None
        self._view: Any = None

    def __len__(self) -> int:
        return len(self.addresses)

    def add(self, address: int) -> int:
        self.addresses.append(address)
        self._index = None
        return len(self.addresses) - 1

    def read(self) -> Any:
        """The words now: a numpy array, or a list (compare with `same_words`)."""
        if _numpy is None or not self.addresses:
            return [ctypes.c_uint64.from_address(a).value for a in self.addresses]
        if self._index is None:
            base, top = min(self.addresses), max(self.addresses) + 8
            try:
                self._view = _numpy.frombuffer((ctypes.c_char * (top - base)).from_address(base),
                                               dtype=_numpy.uint64)
            except (OverflowError, MemoryError, ValueError):  # a range no buffer can span: one by one
                return [ctypes.c_uint64.from_address(a).value for a in self.addresses]
            self._index = (_numpy.array(self.addresses, dtype=_numpy.uint64) - base) // 8
        return self._view[self._index]


def same_words(now: Any, before: Any) -> bool:
    return bool(len(now) == len(before) and (now == before).all()) if _numpy is not None and len(now) else \
        list(now) == list(before)


def moved_words(now: Any, before: Any) -> list[int]:
    """The indices where two reads differ; those past the end of `before` (addresses added since) included."""
    common = min(len(now), len(before))
    if _numpy is not None and common and not isinstance(now, list) and not isinstance(before, list):
        moved = [int(i) for i in _numpy.flatnonzero(now[:common] != before[:common])]
    else:
        moved = [i for i in range(common) if now[i] != before[i]]
    return moved + list(range(common, len(now)))


def _gatherer() -> Any:
    """numpy, where reading a cell's pointer and a dict's version through a view gives what ctypes gives."""
    try:
        import numpy
    except ImportError:
        return None
    probe: dict[str, int] = {"a": 1}
    held = object()
    cell = (lambda: held).__closure__[0]  # type: ignore[index]
    words = [id(cell) + CELL_OFFSET] + ([id(probe) + _OFFSET] if VERSIONS else [])
    base = min(words)
    view = numpy.frombuffer((ctypes.c_char * (max(words) + 8 - base)).from_address(base), dtype=numpy.uint64)
    read = view[(numpy.array(words, dtype=numpy.uint64) - base) // 8]
    ok = int(read[0]) == id(held) and (not VERSIONS or int(read[1]) == ctypes.c_uint64.from_address(words[1]).value)
    return numpy if ok else None


_numpy = _gatherer()


class DictVersion:
    """The version of one dict (a module's `__dict__`, the dict behind a class's mappingproxy, a table)."""

    __slots__ = ("cell", "last", "keep")

    def __init__(self, namespace: Any) -> None:
        if type(namespace) is types.MappingProxyType:  # a class's: the dict it shows
            found = [r for r in gc.get_referents(namespace) if type(r) is dict]
            namespace = found[0] if len(found) == 1 else None
        elif type(namespace) is not dict:
            namespace = None
        self.keep = namespace  # held: the address read must stay this dict's
        self.cell = ctypes.c_uint64.from_address(id(namespace) + _OFFSET) if VERSIONS and namespace is not None \
            else None
        self.last = self.cell.value if self.cell is not None else None

    def moved(self) -> bool:
        """Whether the dict changed since the last call that answered True (always True without versions)."""
        if self.cell is None:
            return True
        now = self.cell.value
        if now == self.last:
            return False
        self.last = now
        return True


def _hook(event: str, args: tuple[Any, ...]) -> None:
    if event == "object.__setattr__" and len(args) > 1 and args[1] in _FACETS and id(args[0]) in _watched:
        _state["moved"] = True
    elif event == "ctypes.dlopen":  # torch.ops.load_library and cpp_extension's loads go through ctypes
        _state["opened"] = True


def watch_functions() -> None:
    """Install the audit hook (once per process: a hook cannot be removed)."""
    if _state["hooked"]:
        return
    try:
        sys.addaudithook(_hook)
    except Exception:  # noqa: BLE001 - refused by another hook: facets are then read at every diff
        return
    _state["hooked"] = True


def watch(fn: Any) -> None:
    _watched.add(id(fn))


def functions_may_have_moved() -> bool:
    return _state["moved"] or not _state["hooked"]


def functions_checked() -> None:
    _state["moved"] = False


def libraries_opened() -> bool:
    """Whether ctypes opened a library since the last call (always True without the hook)."""
    opened = _state["opened"] or not _state["hooked"]
    _state["opened"] = False
    return opened
