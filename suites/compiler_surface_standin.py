"""STAND-IN, to be dropped when issue 38 is merged: `compiler_surface.changes()` and `compiler_surface.restored()`.

Issue 38 rewrites suites/compiler_surface.py to snapshot every module of torch's compiler packages and provides
``changes() -> list[Change]`` (``Change``: ``place`` dotted, ``kind``, ``where`` = file:line of the repository's code,
``sources``) and ``restored()`` (torch's own objects back for its duration, the repository's re-applied on exit). The
bisection's suspect pair (suites/bisect_suspects.py) codes against exactly that. Until then this module provides a
minimal version over a fixed list of modules (their functions, their classes' attributes, their tables of
callables and sets, and inductor's and functorch's configs), attached to ``compiler_surface`` only where it has none.
suites/plugin.py installs it in a job that bisects; the lead drops both with this file when merging issue-38.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import sys
import types
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from suites import compiler_surface
from suites.code_origin import SUITES_DIR, is_stock

MODULES = (  # a table's defining module first: the same dict is named after it wherever else it is imported
    "torch._inductor.decomposition", "torch._inductor.lowering", "torch._inductor.compile_fx", "torch._inductor.graph",
    "torch._inductor.output_code", "torch._inductor.freezing", "torch._inductor.fx_passes.post_grad",
    "torch._inductor.fx_passes.joint_graph", "torch._inductor.fx_passes.pre_grad",
    "torch._inductor.fx_passes.freezing_patterns", "torch._inductor.codegen.common", "torch._inductor.codegen.cpp",
    "torch._decomp", "torch._functorch.compile_utils", "torch._functorch.partitioners",
    "torch._functorch._aot_autograd.runtime_wrappers", "torch._functorch._aot_autograd.graph_capture_wrappers",
    "torch._functorch._aot_autograd.subclass_codegen",
)
CONFIGS = ("torch._inductor.config", "torch._functorch.config")
_MISSING = object()


@dataclass(frozen=True)
class Change:
    place: str
    kind: str
    where: str
    sources: frozenset[str]


_attributes: dict[tuple[Any, str], Any] = {}  # (module or class, name) -> torch's object
_tables: dict[tuple[Any, str], Any] = {}  # (module, name) -> a copy of torch's dict or set
_configs: dict[str, dict[str, Any]] = {}


def install() -> None:
    """Snapshot before the repository's code runs (suites/plugin.py, at its import)."""
    if _configs:
        return
    tables: set[int] = set()
    for name in MODULES:
        try:
            module = importlib.import_module(name)
        except Exception:  # noqa: BLE001, S112 - a module this torch lacks is not part of its surface
            continue
        for attribute, value in vars(module).items():
            if isinstance(value, dict | set) and id(value) not in tables:
                tables.add(id(value))
                _tables[(module, attribute)] = value.copy()
            elif callable(value) and not isinstance(value, types.ModuleType):
                _attributes[(module, attribute)] = value
            if isinstance(value, type) and value.__module__ == name:
                for key, member in vars(value).items():
                    if key not in ("__dict__", "__weakref__", "__doc__", "__module__"):
                        _attributes[(value, key)] = member
    for name in CONFIGS:
        _configs[name] = importlib.import_module(name).get_config_copy()
    if not hasattr(compiler_surface, "restored"):
        compiler_surface.Change, compiler_surface.changes, compiler_surface.restored = (  # type: ignore[attr-defined]
            Change, changes, restored)


_SUITES = object()


def _ours(value: Any) -> Any:
    """The suites' own wrappers around torch's object are not a change (as compiler_surface says): what they wrap,
    or _SUITES for one that names nothing it wraps."""
    while isinstance(value, types.FunctionType) and value.__code__.co_filename.startswith(SUITES_DIR):
        if not hasattr(value, "__wrapped__"):
            return _SUITES
        value = value.__wrapped__
    return value


def _same(current: Any, stock: Any) -> bool:
    mine = _ours(current)
    return mine is _SUITES or mine is _ours(stock)


def _code_of(value: Any) -> types.CodeType | None:
    value = getattr(value, "__func__", value)
    value = getattr(value, "func", value)  # functools.partial
    return getattr(value, "__code__", None)


def where(value: Any) -> str:
    """file:line of the code that made ``value``, relative to the checkout or to the import root it came from."""
    code = _code_of(value)
    if code is None:
        return ""
    path = os.path.realpath(code.co_filename)
    roots = [os.environ.get("COMPILE_CI_CHECKOUT", ""), *sys.path]
    under = [os.path.realpath(r) for r in roots if r and path.startswith(os.path.realpath(r) + os.sep)]
    shown = os.path.relpath(path, max(under, key=len)) if under else os.path.basename(path)
    return f"{shown}:{code.co_firstlineno}"


def _repository_made(value: Any) -> bool:
    code = _code_of(value)
    return code is not None and not is_stock(code.co_filename)


def _diffs() -> list[tuple[Change, Callable[[], None], Callable[[], None]]]:
    """Every change with how to put torch's object back and the repository's again."""
    found = []

    def setter(owner: Any, key: str, value: Any) -> Callable[[], None]:
        return lambda: delattr(owner, key) if value is _MISSING else setattr(owner, key, value)

    for (owner, key), stock in _attributes.items():
        current = vars(owner).get(key, _MISSING)
        if _same(current, stock):
            continue
        name = f"{getattr(owner, '__module__', '') + '.' if isinstance(owner, type) else ''}{owner.__name__}.{key}"
        kind = "removed" if current is _MISSING else "method" if isinstance(owner, type) else "function"
        found.append((Change(name, kind, where(current), compiler_surface.sources(current)),
                      setter(owner, key, stock), setter(owner, key, current)))
    for (module, key), stock in _tables.items():
        table = getattr(module, key, None)
        place = f"{module.__name__}.{key}"
        if isinstance(table, dict):
            for entry in set(stock) | set(table):
                old, new = stock.get(entry, _MISSING), table.get(entry, _MISSING)
                # torch registers some entries lazily (at the first compile): a new key of torch's code is torch's
                if _same(new, old) or (old is _MISSING and not _repository_made(new)):
                    continue
                kind = "removed" if new is _MISSING else "table entry"
                found.append((Change(f"{place}[{entry}]", kind, where(new), compiler_surface.sources(new)),
                              _put(table, entry, old), _put(table, entry, new)))
        elif isinstance(table, set) and stock - table:
            removed, added = stock - table, {e for e in table - stock if _repository_made(e)}
            found.append((Change(place, "contents", "", frozenset()),
                          lambda t=table, r=removed, a=added: (t.update(r), t.difference_update(a)),
                          lambda t=table, r=removed, a=added: (t.difference_update(r), t.update(a))))
    for name, stock in _configs.items():
        config = sys.modules[name]
        for key, value in config.get_config_copy().items():
            if key in stock and not _equal(value, stock[key]):
                found.append((Change(f"{name}.{key}", "config", where(value), compiler_surface.sources(value)),
                              _config(config, key, stock[key]), _config(config, key, value)))
    return sorted(found, key=lambda diff: diff[0].place)


def _equal(value: Any, stock: Any) -> bool:
    try:
        return value is stock or bool(value == stock)
    except Exception:  # noqa: BLE001 - a value that cannot be compared is taken as changed
        return False


def _put(table: dict[Any, Any], key: Any, value: Any) -> Callable[[], None]:
    return lambda: table.pop(key, None) if value is _MISSING else table.__setitem__(key, value)


def _config(config: Any, key: str, value: Any) -> Callable[[], None]:
    return lambda: setattr(config, key, value)


def changes() -> list[Change]:
    return [change for change, _stock, _repository in _diffs()]


@contextlib.contextmanager
def restored() -> Iterator[None]:
    diffs = _diffs()
    for _change, stock, _repository in diffs:
        stock()
    try:
        yield
    finally:
        for _change, _stock, repository in reversed(diffs):
            repository()
