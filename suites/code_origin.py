"""Where a callable's code comes from: digests of the files outside torch (and the standard library) that it, its
wrappers, closures and the functions and classes its code names are defined in. The compiler surface
(suites/compiler_surface.py) hashes them, so a change to a patch's helper is a change to the patch."""

from __future__ import annotations

import functools
import hashlib
import inspect
import os
import site
import sys
import sysconfig
import time
import types
from collections.abc import Iterable
from typing import Any

SUITES_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep
_MAX_FUNCTIONS = 400
_stock_dirs: tuple[str, ...] = ()
_torch_dir = "<torch not located yet>"
_installed_dirs: tuple[str, ...] = ()
_started = 0.0


def set_stock_roots(torch: Any) -> None:
    """Torch's, the suites' and the standard library's directories: code there is not the repository's."""
    global _stock_dirs, _torch_dir
    _torch_dir = os.path.realpath(os.path.dirname(torch.__file__)) + os.sep
    roots = {os.path.dirname(torch.__file__), SUITES_DIR, sysconfig.get_paths()["stdlib"],
             sysconfig.get_paths()["platstdlib"]}
    _stock_dirs = tuple(os.path.realpath(r) + os.sep for r in roots)


def set_installed_dirs(checkout: str) -> None:
    """The site directories on the path when the job starts (before any of the repository's code): those holding
    installed distributions (`*.dist-info`), outside the checkout. Code there is a requirement's, pinned by the
    repository's config and the runner's build, not the repository's own."""
    global _installed_dirs, _started
    inside = os.path.realpath(checkout) + os.sep if checkout else None
    found = []
    for entry in {*sys.path, *site.getsitepackages()}:
        real = os.path.realpath(entry or ".") + os.sep
        if inside is not None and (real.startswith(inside) or inside.startswith(real)):
            continue
        try:
            if any(name.endswith(".dist-info") for name in os.listdir(real)):
                found.append(real)
        except OSError:
            continue
    _installed_dirs, _started = tuple(found), time.time()


def is_installed(where: str) -> bool:
    """Whether a change's `file:line` is code of an installed distribution (a file that existed at the job's start
    in one of its site directories): a requirement's patch of torch, which runs or not with the tests that use it."""
    path = where.rsplit(":", 1)[0]
    if not os.path.isabs(path) or not path.startswith(_installed_dirs) or is_torch(path):
        return False
    try:
        return os.stat(path).st_mtime < _started
    except OSError:
        return False


def is_ours(filename: str) -> bool:
    """Code of compile-ci's suites (their recording and capture wrappers)."""
    return filename.startswith(SUITES_DIR)


def is_torch(filename: str) -> bool:
    return filename.startswith(_torch_dir) or os.path.realpath(filename).startswith(_torch_dir)


def is_stock(filename: str) -> bool:
    if filename.startswith("<frozen ") or filename in ("", "<built-in>"):
        return True
    return os.path.realpath(filename).startswith(_stock_dirs)


def origin(value: Any) -> str:
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


def qualname(value: Any) -> str:
    return f"{getattr(value, '__module__', '')}.{getattr(value, '__qualname__', type(value).__qualname__)}"


def file_digest(code: types.CodeType) -> str:
    """The content of the code's file (paths differ between jobs; content is what matters); its bytecode if none."""
    try:
        return _digest_of_path(code.co_filename, os.stat(code.co_filename).st_mtime_ns)
    except OSError:
        material = repr((code.co_code, code.co_consts, code.co_names)).encode()
        return hashlib.sha256(material).hexdigest()[:16]


def where(value: Any, checkout: str = "") -> str:
    """`file:line` of the code outside torch that `value` is (or its class, for an object), relative to `checkout`
    when inside it; '' for torch's own code and for data."""
    code = _code_of(value)
    if code is None or is_stock(code.co_filename):
        return ""
    return f"{where_file(code.co_filename, checkout)}:{code.co_firstlineno}"


def where_file(path: str, checkout: str = "") -> str:
    """`path`, relative to `checkout` when inside it."""
    real = os.path.realpath(path) if os.path.isabs(path) else path
    root = os.path.realpath(checkout) + os.sep if checkout else ""
    return real[len(root):] if root and real.startswith(root) else real


def _code_of(value: Any, depth: int = 0) -> types.CodeType | None:
    kind = type(value)
    if kind is types.CodeType:
        return value
    if kind is types.FunctionType:
        return value.__code__
    inner = getattr(value, "__func__", None) if kind in (staticmethod, classmethod, types.MethodType) else \
        value.fget if kind is property else getattr(value, "func", None) if isinstance(value, functools.partial) \
        else None
    if inner is not None and depth < 8:
        return _code_of(inner, depth + 1)
    if issubclass(kind, type) and depth < 8:
        functions = [v for v in vars(value).values() if type(v) in (types.FunctionType, staticmethod, classmethod)]
        codes = [c for c in (_code_of(f, depth + 1) for f in functions) if c is not None]
        return min(codes, key=lambda c: c.co_firstlineno) if codes else None
    if kind is types.ModuleType:
        return None
    return _code_of(kind, depth + 1) if callable(value) and depth < 8 else None


def _reachable(item: Any, files: set[str]) -> list[Any]:
    if isinstance(item, types.CodeType):
        if not is_stock(item.co_filename):
            files.add(file_digest(item))
        return []
    if isinstance(item, types.ModuleType):
        path = item.__dict__.get("__file__")
        if isinstance(path, str) and not is_stock(path) and os.path.isfile(path):
            files.add(path_digest(path))
        return []
    if isinstance(item, functools.partial):
        return [item.func, *item.args, *item.keywords.values()]
    if isinstance(item, types.MethodType):
        return [item.__func__, item.__self__]
    if isinstance(item, type):
        try:
            stock = is_stock(inspect.getfile(item))
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
    if not is_stock(code.co_filename):
        files.add(file_digest(code))
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


def path_digest(path: str) -> str:
    """The digest origin() gives a file of this content."""
    return _digest_of_path(path, os.stat(path).st_mtime_ns)


@functools.lru_cache(maxsize=4096)
def _digest_of_path(path: str, mtime_ns: int) -> str:
    with open(path, "rb") as handle:
        return hashlib.sha256(handle.read()).hexdigest()[:16]
