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


_OFFSET = _version_offset()
VERSIONS = _OFFSET is not None


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
    if event == "object.__setattr__" and len(args) > 1 and args[1] in _FACETS:
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


def functions_may_have_moved() -> bool:
    return _state["moved"] or not _state["hooked"]


def functions_checked() -> None:
    _state["moved"] = False


def libraries_opened() -> bool:
    """Whether ctypes opened a library since the last call (always True without the hook)."""
    opened = _state["opened"] or not _state["hooked"]
    _state["opened"] = False
    return opened
