"""The compiler surface a repository changes at run time, folded into torch's compile-cache keys.

Torch's FX-graph and AOT-autograd caches key a graph by the graph, inductor's config, custom passes' `uuid()` and
torch's own sources; not by lowerings, decompositions or passes that a repository's code installs while it runs. So a
pull request that breaks such a patch would be served the kernels its default branch compiled (a false green).

Here, in the job: inductor's tables and codegen override classes are snapshotted as torch defines them (right
after their modules are imported; install() runs before pytest imports any plugin, suites/pytest_entry.py), and
before every inductor compile the difference — entries added, replaced or removed in the lowering, fallback and
decomposition tables, methods of the override classes, callables in inductor's config, pattern-matcher
registrations made from outside torch — is hashed, with the content of every file outside torch that those entries'
code comes from (followed through wrappers, closures and the globals they call). The hash becomes
`torch.compiler.config.cache_key_tag` (the repository's own tag, if any, is kept in front): a change there misses the
cache, and a repository that changes nothing keeps the untagged key and every hit.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.abc
import importlib.machinery
import os
import sys
import types
from collections.abc import Callable
from typing import Any

from suites.code_origin import SUITES_DIR, file_digest, is_stock, origin, qualname, set_stock_roots

PREFIX = "compile-ci-surface-"
_snapshots: dict[str, dict[Any, int]] = {}
_overrides: dict[str, dict[str, Any]] = {}  # "module.Class" -> its methods as torch defines them
_registrations: set[str] = set()  # "kind file-digest" of pattern registrations made from outside torch
_installed = False
_user_tag = ""
_last_set: str | None = None  # the tag this module set last: anything else there is the repository's own
# The tables, by module: (name, attribute, is a set).
_TABLES = {
    "torch._inductor.lowering": (("lowering", "lowerings", False), ("fallback", "fallbacks", True)),
    "torch._inductor.decomposition": (("inductor-decomposition", "decompositions", False),),
    "torch._decomp": (("decomposition", "decomposition_table", False),),
}
# Where inductor turns its `ops.*` calls into code, by module: a repository that patches a method here changes codegen
# for every op that calls it, without touching the tables above.
OVERRIDE_CLASSES = {
    "torch._inductor.ops_handler": ("BasicMathOpsMixin",),
    "torch._inductor.codegen.common": ("OpDecompositions", "OpOverrides"),
    "torch._inductor.codegen.cpp": ("CppOverrides", "CppVecOverrides"),
    "torch._inductor.codegen.triton": ("TritonOverrides",),
}


def install() -> None:
    """Snapshot the tables and override classes as torch defines them and wrap inductor's entry point; call before
    the repository's code."""
    global _installed
    import torch

    if _installed:  # already installed (the entry, the plugin and the ops suite may all ask): keep the first snapshot
        return
    _installed = True
    set_stock_roots(torch)
    for module, tables in _TABLES.items():
        _after_import(module, functools.partial(_snapshot, tables))
    for module, classes in OVERRIDE_CLASSES.items():
        _after_import(module, functools.partial(_snapshot_overrides, classes))
    _after_import("torch._inductor.pattern_matcher", _watch_registrations)
    _after_import("torch._inductor.compile_fx", _wrap_compile_fx)


def installed() -> bool:
    return _installed


def changed_entries() -> list[tuple[str, Any, str]]:
    """(table, key, description) of every entry added, replaced or removed in inductor's tables since the snapshot,
    and ("pattern", None, description) per pattern registration from outside torch: what fingerprint() hashes but
    inductor's config, for a suite that aims at what the repository changed."""
    entries: list[tuple[str, Any, str]] = []
    for module, tables in _TABLES.items():
        loaded = sys.modules.get(module)
        for name, attribute, is_set in tables if loaded is not None else ():
            table = getattr(loaded, attribute, None)
            if table is not None and f"{module}.{attribute}" in _snapshots:
                entries += [(name, key, line) for key, line in
                            _table_changes(name, table, _snapshots[f"{module}.{attribute}"], is_set)]
    return entries + [("pattern", None, line) for line in sorted(_registrations)]


def changed_overrides() -> list[tuple[str, str]]:
    """("Class.method", description) of every method added, replaced or removed in inductor's codegen override
    classes since the snapshot (whatever the new code's origin: torch adds none there while it compiles)."""
    changes = []
    for qualified, stock in sorted(_overrides.items()):
        module, _, name = qualified.rpartition(".")
        cls = getattr(sys.modules.get(module), name, None)
        current = _methods(cls) if cls is not None else {}
        for attribute in sorted(set(current) | set(stock)):
            value = current.get(attribute)
            if attribute in stock and value is stock[attribute]:
                continue
            what = "removed" if attribute not in current else f"-> {qualname(value)} {origin(value)}"
            changes.append((f"{name}.{attribute}", f"override {name}.{attribute} {what}"))
    return changes


def sources(value: Any) -> frozenset[str]:
    """The content digests of the files outside torch that `value`'s code comes from (code_origin.origin): a change
    touches it when it changes one of those files, wherever the job imports them from (checkout or site-packages)."""
    return frozenset(origin(value).split(",")) - {""}


def entry_sources(table_name: str, key: Any) -> frozenset[str] | None:
    """sources() of a changed table entry; None for a removed entry, whose remover cannot be told."""
    for module, tables in _TABLES.items():
        loaded = sys.modules.get(module)
        for name, attribute, is_set in tables if loaded is not None else ():
            table = getattr(loaded, attribute, None)
            if name == table_name and table is not None and key in table:
                return sources(key if is_set else _unwrap_ours(table[key]))
    return None


def override_sources(method: str) -> frozenset[str] | None:
    """The same for a changed override method ("CppOverrides.sin"); None when it was removed."""
    class_name, _, attribute = method.partition(".")
    for qualified in _overrides:
        module, _, name = qualified.rpartition(".")
        cls = getattr(sys.modules.get(module), name, None) if name == class_name else None
        if cls is not None and attribute in vars(cls):
            return sources(vars(cls)[attribute])
    return None


def pattern_sources() -> frozenset[str]:
    """The content digests of the files outside torch that registered patterns."""
    return frozenset(line.rsplit(" ", 1)[-1] for line in _registrations)


def fingerprint() -> str:
    """'' when the repository changed nothing in the compiler; else a hash of what it changed and the code behind it."""
    lines = [line for _table, _key, line in changed_entries()] + [line for _key, line in changed_overrides()]
    config = sys.modules.get("torch._inductor.config")
    if config is not None:
        # Read entry by entry: get_config_copy() deep-copies, and a repository's pass object need not be copyable.
        for key in sorted(getattr(config, "_config", {})):
            value = getattr(config, key, None)
            if value is not None and (callable(value) or hasattr(value, "uuid")):
                where = origin(value)
                if where:
                    lines.append(f"config {key} -> {where}")
    return hashlib.sha256("\n".join(sorted(lines)).encode()).hexdigest()[:32] if lines else ""


def refresh_tag() -> str:
    """Set torch's cache-key tag from the current fingerprint (the repository's own tag kept) and return ours."""
    global _user_tag, _last_set
    import torch

    try:
        ours = fingerprint()
    except Exception as exc:  # noqa: BLE001 - whatever a patched table holds, a compile must not break on it
        # Unknown is not "unchanged": this compile misses the cache rather than risk another version's kernels.
        ours = f"unknown-{os.getpid()}-{id(exc)}"
        print(f"compile-ci: the compiler surface could not be fingerprinted ({exc!r}); compiling uncached",
              file=sys.stderr)
    current = torch.compiler.config.cache_key_tag
    if current != _last_set:
        _user_tag = current  # whatever the repository (or TORCH_COMPILE_CACHE_KEY_TAG) set
    _last_set = f"{_user_tag}{PREFIX}{ours}" if ours else _user_tag
    torch.compiler.config.cache_key_tag = _last_set
    return ours


def _identities(table: Any, is_set: bool) -> dict[Any, int]:
    return {key: id(key) for key in table} if is_set else {key: id(_unwrap_ours(v)) for key, v in table.items()}


def _unwrap_ours(value: Any) -> Any:
    """The suites' own recording wrappers (suites/harness.py) around a table's entry are not a change to it."""
    while isinstance(value, types.FunctionType) and hasattr(value, "__wrapped__") and \
            value.__code__.co_filename.startswith(SUITES_DIR):
        value = value.__wrapped__
    return value


def _table_changes(name: str, table: Any, stock: dict[Any, int], is_set: bool) -> list[tuple[Any, str]]:
    changes = []
    current = _identities(table, is_set)
    for key, identity in current.items():
        if stock.get(key) == identity:
            continue
        value = key if is_set else _unwrap_ours(table[key])
        where = origin(value)
        # A torch function newly registered under a new key is torch's own lazy registration (e.g. oneDNN ops at the
        # first compile); one under an existing key, or anything from outside torch, is the repository's change.
        if where or key in stock:
            changes.append((key, f"{name} {key} -> {qualname(value)} {where}"))
    changes += [(key, f"{name} {key} removed") for key in stock if key not in current]
    return changes


def _snapshot(tables: tuple[tuple[str, str, bool], ...], module: types.ModuleType) -> None:
    for _name, attribute, is_set in tables:
        table = getattr(module, attribute, None)
        if table is not None:
            _snapshots[f"{module.__name__}.{attribute}"] = _identities(table, is_set)


def _methods(cls: type) -> dict[str, Any]:
    return {attribute: value for attribute, value in vars(cls).items() if not attribute.startswith("__")}


def _snapshot_overrides(classes: tuple[str, ...], module: types.ModuleType) -> None:
    for name in classes:
        cls = getattr(module, name, None)
        if isinstance(cls, type):
            _overrides[f"{module.__name__}.{name}"] = _methods(cls)


def _watch_registrations(module: types.ModuleType) -> None:
    """Pattern replacements keep only traced graphs, not the code that made them: record who registered them."""
    for name in ("register_replacement", "register_graph_pattern", "register_lowering_pattern"):
        original = getattr(module, name, None)
        if original is not None:
            setattr(module, name, _recording(name, original))


def _recording(kind: str, original: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(original)
    def register(*args: Any, **kwargs: Any) -> Any:
        caller = sys._getframe(1).f_code  # torch registering its own patterns lazily is torch's business
        if not is_stock(caller.co_filename):
            _registrations.add(f"pattern {kind} {file_digest(caller)}")
        return original(*args, **kwargs)
    return register


def _wrap_compile_fx(module: types.ModuleType) -> None:
    original = module.compile_fx

    @functools.wraps(original)
    def compile_fx(*args: Any, **kwargs: Any) -> Any:
        refresh_tag()
        return original(*args, **kwargs)

    module.compile_fx = compile_fx


def after_import(name: str, callback: Callable[[types.ModuleType], None]) -> None:
    """Run `callback(module)` once `name` has been imported (now, if it already is)."""
    _after_import(name, callback)


def _after_import(name: str, callback: Callable[[types.ModuleType], None]) -> None:
    if name in sys.modules:
        callback(sys.modules[name])
        return
    sys.meta_path.insert(0, _AfterImport(name, callback))


class _AfterImport(importlib.abc.MetaPathFinder):
    def __init__(self, name: str, callback: Callable[[types.ModuleType], None]) -> None:
        self.name, self.callback = name, callback

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> Any:
        if fullname != self.name:
            return None
        sys.meta_path.remove(self)
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is None or spec.loader is None:
            return spec
        execute, callback = spec.loader.exec_module, self.callback

        def exec_module(module: types.ModuleType) -> None:
            execute(module)
            callback(module)

        spec.loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec
