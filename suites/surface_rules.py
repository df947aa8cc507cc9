"""Which differences from the snapshot are the repository's change, and which are torch's own run-time state.

Torch changes its own modules while it runs: counters and caches (`global n; n += 1`, `cls._instance = ...`, a
memo in a closure cell), globals set on first use (`_CACHE = None` → an object), dynamo's generated globals
(`__compiled_fn_7`), submodules bound on their package when imported, `__slotnames__` and `__warningregistry__`
the standard library adds, and definitions an import of torch rebinds (dynamo wraps `torch.manual_seed`). The rule,
per place (`judge`):

- **Code** (a function, class, module, descriptor, partial or any callable; a function's `__code__`,
  `__defaults__`, `__kwdefaults__` or `__wrapped__`): torch defines its code once. So code rebound or removed is the
  repository's change, whatever the new code's origin (another of torch's functions included); a place added counts
  when its code comes from a file outside torch, or when it overrides what a base class or the builtins define
  there. What torch's own imports rebind while they run is torch's (`surface_imports.py` takes it into the
  snapshot when the import ends, unless its code comes from outside torch), and so is a function of torch's that
  wraps the very object it replaces (dynamo's `disable()` over `torch.jit.trace` and the optimizers at the first
  compile, its generation tagging of `Module.__init__`).
- **Data** (anything else: numbers, strings, containers, plain objects): a change counts only where torch's own
  code never assigns that name at run time — no `global name` store, no attribute store `x.name = ...`, no
  `nonlocal` store, no `setattr`/`globals()` with that name as a constant, in any of torch's functions. Where torch
  does, the value is torch's state (and what it holds is torch's business too, or the key would change with every
  counter). A data value set on a place torch never assigns is constant for torch: a repository that sets it is
  caught. Data added to a namespace does not count (nothing of torch reads a name it does not define).
- Code of compile-ci's own (the suites' recording and capture wrappers) is looked through to what it wraps.
- Torch's tables (lowerings, fallbacks, decompositions): an entry rebound or removed counts; an entry added counts
  when its code comes from outside torch (torch registers its own lazily, e.g. oneDNN's at the first compile).
"""

from __future__ import annotations

import builtins
import dis
import functools
import gc
import re
import sys
import types
from collections.abc import Iterable
from typing import Any

from suites import code_origin
from suites.surface_place import MISSING, Difference

_NAME_OPS = {bytes([dis.opmap[name]]) for name in ("STORE_ATTR", "DELETE_ATTR", "STORE_GLOBAL", "DELETE_GLOBAL",
                                                      "STORE_NAME", "DELETE_NAME")}
_DEREF_OPS = {bytes([dis.opmap[name]]) for name in ("STORE_DEREF", "DELETE_DEREF")}
_EXTENDED_ARG = dis.opmap["EXTENDED_ARG"]
_STORE_OPS = re.compile(b"[" + re.escape(b"".join(sorted(_NAME_OPS | _DEREF_OPS))) + b"]")
_BY_NAME = frozenset({"setattr", "delattr", "globals", "vars", "__dict__", "__setattr__"})
_DESCRIPTORS = (staticmethod, classmethod, property, functools.partial, functools.partialmethod, types.CodeType,
                types.ModuleType)


def is_code(value: Any) -> bool:
    """Whether the value is behaviour rather than state (by its type only: a lazy proxy is not asked anything)."""
    kind = type(value)
    return value is not MISSING and (callable(value) or issubclass(kind, _DESCRIPTORS) or hasattr(kind, "__get__"))


def unwrap_ours(value: Any) -> Any:
    """Through compile-ci's own wrappers (functools.wraps, or a closure over `previous`/`original`) to what they
    wrap; a wrapper of ours that wraps nothing stays as it is."""
    for _ in range(16):
        if type(value) is not types.FunctionType or not code_origin.is_ours(value.__code__.co_filename):
            return value
        inner = value.__dict__.get("__wrapped__", MISSING)
        if inner is MISSING:
            cells = dict(zip(value.__code__.co_freevars, value.__closure__ or (), strict=False))
            cell = cells.get("previous") or cells.get("original")
            inner = cell.cell_contents if cell is not None else MISSING
        if inner is MISSING:
            return value
        value = inner
    return value


# Names torch's C++ assigns on its Python modules at run time, which no bytecode shows: CUDA's (and XPU's) lazy
# initialisation sets `torch.cuda.default_generators` (seen on an H100 host, torch 2.11).
NATIVE_STORES = frozenset({"default_generators"})


class Writes:
    """The names torch's own code assigns at run time: an index over the bytecode of every function of the snapshot
    and the functions nested in them, built when first asked (about a second, once per job: the first difference
    that is data asks) and extended as torch's modules are imported."""

    def __init__(self, functions: list[types.FunctionType]) -> None:
        self.functions = functions  # the snapshot's, growing as torch's modules are imported
        self.names: set[str] = set(NATIVE_STORES)
        self._indexed = 0

    def written(self, name: str) -> bool:
        if self._indexed < len(self.functions):
            pending = [fn.__code__ for fn in self.functions[self._indexed:]]
            self._indexed = len(self.functions)
            collecting = gc.isenabled()
            gc.disable()  # short-lived strings and lists, no cycles: no reason to walk torch's whole heap meanwhile
            try:
                while pending:
                    code = pending.pop()
                    self.names.update(_stored(code))
                    pending += [c for c in code.co_consts if type(c) is types.CodeType]
            finally:
                if collecting:
                    gc.enable()
        return name in self.names


def _stored(code: types.CodeType) -> list[str]:
    """The names this code object stores or deletes as a global, an attribute or a closure variable, and the
    constant strings it hands to setattr/globals()/vars() (read from the raw bytecode: 2 bytes an instruction)."""
    raw = code.co_code
    ops, args = raw[0::2], raw[1::2]
    found = []
    for match in _STORE_OPS.finditer(ops):
        at, op = match.start(), match.group()
        arg = args[at] | (args[at - 1] << 8 if at and ops[at - 1] == _EXTENDED_ARG else 0)
        try:
            found.append(code.co_names[arg] if op in _NAME_OPS else code._varname_from_oparg(arg))
        except (IndexError, AttributeError):
            pass
    if not _BY_NAME.isdisjoint(code.co_names):
        found += [c for c in code.co_consts if type(c) is str and c.isidentifier()]
    return found


def judge(difference: Difference, writes: Writes) -> bool:
    """Whether this difference is the repository's change (see the module's rule)."""
    old, new = difference.old, unwrap_ours(difference.new)
    if new is old or (new is not MISSING and type(new) is types.FunctionType
                      and code_origin.is_ours(new.__code__.co_filename)):
        return False  # compile-ci's own wrapper, put back or wrapping nothing of torch's
    if difference.slot in ("sys.modules", "facet"):
        return True
    if _own_submodule(difference):
        return False  # the import system binding torch's own submodule on its package (torch.onnx.symbolic_helper)
    if difference.slot == "table":
        return difference.kind != "added" or bool(code_origin.origin(new))
    if difference.kind == "added":
        return _added_counts(difference, new)
    if is_code(old) and _wraps(new, old):
        return False  # torch wrapping its own function (dynamo's disable(), at the first compile)
    if is_code(old) or (is_code(new) and code_origin.origin(new)):
        return True
    return not writes.written(_variable(difference))


def _own_submodule(difference: Difference) -> bool:
    """A package's attribute now the submodule of that name, as `sys.modules` holds it and from torch's files: what
    `import torch.x.y` binds, whoever imports it (torch.onnx's alias of an internal module, replaced by its shim)."""
    new, owner = difference.new, difference.owner
    if difference.slot != "module" or not isinstance(new, types.ModuleType) or not isinstance(owner, types.ModuleType):
        return False
    name = f"{owner.__name__}.{difference.name}"
    return (getattr(new, "__name__", None) == name and sys.modules.get(name) is new
            and code_origin.is_torch(getattr(new, "__file__", None) or ""))


def _wraps(new: Any, old: Any) -> bool:
    """Whether `new` is a function of torch's whose `__wrapped__` or closure holds `old`, or a partial of such a
    function given `old` (inductor's libdevice routing over TritonOverrides' methods, at the first CUDA kernel)."""
    olds = {id(old)}
    if isinstance(old, staticmethod | classmethod):
        olds.add(id(old.__func__))
    if isinstance(new, staticmethod | classmethod):
        new = new.__func__
    if isinstance(new, functools.partial):
        func = new.func
        return (type(func) is types.FunctionType and code_origin.is_torch(func.__code__.co_filename)
                and any(id(value) in olds for value in (*new.args, *new.keywords.values())))
    for _ in range(4):
        if type(new) is not types.FunctionType or not code_origin.is_torch(new.__code__.co_filename):
            return False
        held = [new.__dict__.get("__wrapped__", MISSING)]
        held += [c.cell_contents for c in new.__closure__ or () if _filled(c)]
        if any(id(h) in olds for h in held):
            return True
        inner = [h for h in held if type(h) is types.FunctionType]
        if len(inner) != 1:
            return False
        new = inner[0]
    return False


def _filled(cell: types.CellType) -> bool:
    try:
        cell.cell_contents  # noqa: B018 - an empty cell raises
    except ValueError:
        return False
    return True


def _added_counts(difference: Difference, new: Any) -> bool:
    if not is_code(new):
        return False
    if difference.slot == "module" and isinstance(new, types.ModuleType) and \
            new.__name__ == f"{difference.owner.__name__}.{difference.name}":
        return False  # a submodule bound on its package by its import
    if code_origin.origin(new):
        return True
    if difference.slot == "class":  # overriding what a base class defines: a rebinding in effect
        inherited = next((vars(base)[difference.name] for base in difference.owner.__mro__[1:]
                          if difference.name in vars(base)), MISSING)
        originals = [inherited]  # a base's own entry may be wrapped already (dynamo wraps every optimizer's)
        while type(originals[-1]) is types.FunctionType and "__wrapped__" in originals[-1].__dict__ and \
                len(originals) < 8:
            originals.append(originals[-1].__dict__["__wrapped__"])
        return inherited is not MISSING and not any(_wraps(new, original) for original in originals)
    return difference.slot == "module" and hasattr(builtins, difference.name)


def _variable(difference: Difference) -> str:
    if difference.slot == "cell":
        return difference.place.rpartition("<closure ")[2].rstrip(">")
    return str(difference.name)


def describe(value: Any) -> str:
    """A stable description of a place's new value for the fingerprint: code by name, plain data by value, other
    objects by their type (an address would make a new key in every job)."""
    if value is MISSING:
        return "removed"
    if is_code(value) or not _plain(value):
        target = value if is_code(value) else type(value)
        return f"{code_origin.qualname(target)} {code_origin.origin(target)}"
    return repr(value)[:500]


def _plain(value: Any, depth: int = 0) -> bool:
    if value is None or type(value) in (bool, int, float, complex, str, bytes):
        return True
    if depth < 3 and type(value) in (tuple, list, frozenset, set):
        return len(value) <= 64 and all(_plain(v, depth + 1) for v in value)
    if depth < 3 and type(value) is dict:
        return len(value) <= 64 and all(_plain(k, depth + 1) and _plain(v, depth + 1) for k, v in value.items())
    return False


def sources(values: Iterable[Any]) -> frozenset[str]:
    return frozenset(digest for value in values for digest in code_origin.origin(value).split(",") if digest)
