"""The compiler surface a repository changes at run time, folded into torch's compile-cache keys.

Torch's FX-graph and AOT-autograd caches key a graph by the graph, inductor's config, custom passes' `uuid()` and
torch's own sources; not by lowerings, decompositions or passes that a repository's code installs while it runs. So a
pull request that breaks such a patch would be served the kernels its default branch compiled (a false green).

Here, in the job: inductor's tables are snapshotted as torch defines them (right after their modules are imported,
before the repository's code runs), and before every inductor compile the difference — entries added, replaced or
removed in the lowering, fallback and decomposition tables, callables in inductor's config, pattern-matcher
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
import inspect
import os
import sys
import sysconfig
import types
from collections.abc import Callable, Iterable
from typing import Any

PREFIX = "compile-ci-surface-"
_SUITES_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep
_MAX_FUNCTIONS = 400
_snapshots: dict[str, dict[Any, int]] = {}
_registrations: set[str] = set()  # "kind file-digest" of pattern registrations made from outside torch
_stock_dirs: tuple[str, ...] = ()
_user_tag = ""
_last_set: str | None = None  # the tag this module set last: anything else there is the repository's own
# The tables, by module: (name, attribute, is a set).
_TABLES = {
    "torch._inductor.lowering": (("lowering", "lowerings", False), ("fallback", "fallbacks", True)),
    "torch._inductor.decomposition": (("inductor-decomposition", "decompositions", False),),
    "torch._decomp": (("decomposition", "decomposition_table", False),),
}


def install() -> None:
    """Snapshot the tables as torch defines them and wrap inductor's entry point; call before the repository's code."""
    global _stock_dirs
    import torch

    if _stock_dirs:  # already installed (the plugin and the ops suite may both ask): keep the first snapshot
        return
    _stock_dirs = _stock_roots(torch)
    for module, tables in _TABLES.items():
        _after_import(module, functools.partial(_snapshot, tables))
    _after_import("torch._inductor.pattern_matcher", _watch_registrations)
    _after_import("torch._inductor.compile_fx", _wrap_compile_fx)


def installed() -> bool:
    return bool(_stock_dirs)


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


def fingerprint() -> str:
    """'' when the repository changed nothing in the compiler; else a hash of what it changed and the code behind it."""
    lines = [line for _table, _key, line in changed_entries()]
    config = sys.modules.get("torch._inductor.config")
    if config is not None:
        # Read entry by entry: get_config_copy() deep-copies, and a repository's pass object need not be copyable.
        for key in sorted(getattr(config, "_config", {})):
            value = getattr(config, key, None)
            if value is not None and (callable(value) or hasattr(value, "uuid")):
                origin = _origin(value)
                if origin:
                    lines.append(f"config {key} -> {origin}")
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
            value.__code__.co_filename.startswith(_SUITES_DIR):
        value = value.__wrapped__
    return value


def _table_changes(name: str, table: Any, stock: dict[Any, int], is_set: bool) -> list[tuple[Any, str]]:
    changes = []
    current = _identities(table, is_set)
    for key, identity in current.items():
        if stock.get(key) == identity:
            continue
        value = key if is_set else _unwrap_ours(table[key])
        origin = _origin(value)
        # A torch function newly registered under a new key is torch's own lazy registration (e.g. oneDNN ops at the
        # first compile); one under an existing key, or anything from outside torch, is the repository's change.
        if origin or key in stock:
            changes.append((key, f"{name} {key} -> {_qualname(value)} {origin}"))
    changes += [(key, f"{name} {key} removed") for key in stock if key not in current]
    return changes


def _origin(value: Any) -> str:
    """Digests of the files outside torch that `value`'s code comes from, followed through wrappers, closures and
    the functions and classes its code names; '' when all of it is torch's (or the standard library's)."""
    files: set[str] = set()
    seen: set[int] = set()
    pending = [value]
    while pending and len(seen) < _MAX_FUNCTIONS:
        item = pending.pop()
        if id(item) in seen:
            continue
        seen.add(id(item))
        pending += _reachable(item, files)
    return ",".join(sorted(files))


def _reachable(item: Any, files: set[str]) -> list[Any]:
    if isinstance(item, functools.partial):
        return [item.func, *item.args, *item.keywords.values()]
    if isinstance(item, types.MethodType):
        return [item.__func__, item.__self__]
    if isinstance(item, type):
        try:
            stock = _is_stock(inspect.getfile(item))
        except (TypeError, OSError):  # a builtin or C extension type
            return []
        return [] if stock else [v for v in vars(item).values()
                                 if isinstance(v, types.FunctionType | staticmethod | classmethod)]
    if isinstance(item, staticmethod | classmethod):
        return [item.__func__]
    if isinstance(item, types.FunctionType):
        return _from_function(item, files)
    if callable(item) or hasattr(item, "uuid"):  # an object: its class says what it does
        return [type(item)]
    return []


def _from_function(fn: types.FunctionType, files: set[str]) -> list[Any]:
    more: list[Any] = [getattr(fn, "__wrapped__", None)]
    more += [cell.cell_contents for cell in fn.__closure__ or () if _has_contents(cell)]
    code = fn.__code__
    if not _is_stock(code.co_filename):
        files.add(_file_digest(code))
        scope = fn.__globals__
        more += [scope[name] for name in _names(code) if name in scope]
    return [m for m in more if m is not None and (callable(m) or isinstance(m, type))]


def _names(code: types.CodeType) -> Iterable[str]:
    yield from code.co_names
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            yield from _names(const)


def _has_contents(cell: types.CellType) -> bool:
    try:
        cell.cell_contents  # noqa: B018 - an empty cell raises
    except ValueError:
        return False
    return True


@functools.lru_cache(maxsize=4096)
def _digest_of_path(path: str, mtime_ns: int) -> str:
    with open(path, "rb") as handle:
        return hashlib.sha256(handle.read()).hexdigest()[:16]


def _file_digest(code: types.CodeType) -> str:
    """The content of the code's file (paths differ between jobs; content is what matters); its bytecode if none."""
    try:
        return _digest_of_path(code.co_filename, os.stat(code.co_filename).st_mtime_ns)
    except OSError:
        material = repr((code.co_code, code.co_consts, code.co_names)).encode()
        return hashlib.sha256(material).hexdigest()[:16]


def _qualname(value: Any) -> str:
    return f"{getattr(value, '__module__', '')}.{getattr(value, '__qualname__', type(value).__qualname__)}"


def _stock_roots(torch: Any) -> tuple[str, ...]:
    roots = {os.path.dirname(torch.__file__), _SUITES_DIR, sysconfig.get_paths()["stdlib"],
             sysconfig.get_paths()["platstdlib"]}
    return tuple(os.path.realpath(r) + os.sep for r in roots)


def _is_stock(filename: str) -> bool:
    if filename.startswith("<frozen ") or filename in ("", "<built-in>"):
        return True
    return os.path.realpath(filename).startswith(_stock_dirs)


def _snapshot(tables: tuple[tuple[str, str, bool], ...], module: types.ModuleType) -> None:
    for _name, attribute, is_set in tables:
        table = getattr(module, attribute, None)
        if table is not None:
            _snapshots[f"{module.__name__}.{attribute}"] = _identities(table, is_set)


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
        if not _is_stock(caller.co_filename):
            _registrations.add(f"pattern {kind} {_file_digest(caller)}")
        return original(*args, **kwargs)
    return register


def _wrap_compile_fx(module: types.ModuleType) -> None:
    original = module.compile_fx

    @functools.wraps(original)
    def compile_fx(*args: Any, **kwargs: Any) -> Any:
        refresh_tag()
        return original(*args, **kwargs)

    module.compile_fx = compile_fx


def _after_import(name: str, callback: Callable[[types.ModuleType], None]) -> None:
    """Run `callback(module)` once `name` has been imported (now, if it already is)."""
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
