"""Where a callable's code comes from: digests of the files outside torch (and the standard library) that it, its
wrappers, closures and the functions and classes its code names are defined in. The compiler surface
(suites/compiler_surface.py) hashes them, so a change to a patch's helper is a change to the patch."""

from __future__ import annotations

import functools
import hashlib
import inspect
import os
import sysconfig
import types
from collections.abc import Iterable
from typing import Any

SUITES_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep
_MAX_FUNCTIONS = 400
_stock_dirs: tuple[str, ...] = ()


def set_stock_roots(torch: Any) -> None:
    """Torch's, the suites' and the standard library's directories: code there is not the repository's."""
    global _stock_dirs
    roots = {os.path.dirname(torch.__file__), SUITES_DIR, sysconfig.get_paths()["stdlib"],
             sysconfig.get_paths()["platstdlib"]}
    _stock_dirs = tuple(os.path.realpath(r) + os.sep for r in roots)


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


def _reachable(item: Any, files: set[str]) -> list[Any]:
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
