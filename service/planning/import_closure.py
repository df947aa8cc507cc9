"""The files a module of a checkout imports, transitively, read statically with `ast` (nothing of the pull request is
run by the worker): what a change must leave untouched for a declared target's results to be its base's.

Conservative by construction: every import statement counts wherever it is (in a function, under `if`, in `try`),
`from a import b` counts both `a` and `a.b`, importing `a.b.c` counts the packages `a` and `a.b`, and a file that
imports by a computed name (importlib, `__import__`, exec) makes its closure "dynamic", which the caller treats as
reaching everything.
"""

from __future__ import annotations

import ast
import os
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

ROOTS = ("", "src")  # where the suites put a checkout on sys.path (suites/targets.py)
MAX_FILES = 20_000  # Python files indexed per checkout; a larger one is not analysed (everything runs)
MAX_SOURCE_BYTES = 2_000_000  # a larger file is read as dynamic: its imports are not parsed
DYNAMIC = re.compile(rb"\b(importlib|__import__|import_module|exec\s*\(|runpy|pkgutil|entry_points|imp\.load)")


class TooLarge(Exception):
    """The checkout has more Python files than are indexed: its targets are all treated as affected."""


@dataclass(frozen=True)
class Closure:
    files: frozenset[str]  # checkout-relative paths of the modules reached (packages' __init__.py included)
    names: frozenset[str]  # every module name imported on the way, found in the checkout or not
    dynamic: tuple[str, ...] = ()  # files that import by computed names: the closure may miss something


def module_name(path: str) -> str | None:
    """`pkg/sub/mod.py` (or under `src/`) -> `pkg.sub.mod`, `pkg/__init__.py` -> `pkg`; None for other files."""
    if not path.endswith(".py"):
        return None
    parts = path[:-3].split("/")
    if parts[0] == "src" and len(parts) > 1:
        parts = parts[1:]
    if parts[-1] == "__init__":
        parts = parts[:-1]
    if not parts or not all(p.isidentifier() for p in parts):
        return None
    return ".".join(parts)


class ModuleIndex:
    """Module name -> file of a checkout, as the suites' sys.path (the checkout, then its src/) resolves it."""

    def __init__(self, paths: Iterable[str]) -> None:
        self.by_name: dict[str, str] = {}
        for path in sorted(paths, key=lambda p: (p.startswith("src/"), p)):  # the checkout's root wins, as on sys.path
            name = module_name(path)
            if name is not None:
                self.by_name.setdefault(name, path)

    @classmethod
    def of_checkout(cls, root: Path) -> ModuleIndex:
        found: list[str] = []
        for directory, folders, files in os.walk(root):
            folders[:] = sorted(f for f in folders if not f.startswith(".") and f != "__pycache__")
            base = os.path.relpath(directory, root)
            found += [name if base == "." else f"{base}/{name}" for name in files if name.endswith(".py")]
            if len(found) > MAX_FILES:
                raise TooLarge(f"more than {MAX_FILES} Python files")
        return cls(found)


def closure(index: ModuleIndex, module: str, read: Callable[[str], bytes | None]) -> Closure:
    """Everything `module` imports, transitively; `read(path)` gives a checkout file's bytes (None: unreadable)."""
    files: set[str] = set()
    names: set[str] = set()
    dynamic: list[str] = []
    pending = [module]
    while pending:
        name = pending.pop()
        for candidate in _with_packages(name):
            if candidate in names:
                continue
            names.add(candidate)
            path = index.by_name.get(candidate)
            if path is None or path in files:
                continue
            files.add(path)
            source = read(path)
            names_in = None if source is None or len(source) > MAX_SOURCE_BYTES else imported_names(
                source, candidate, path.endswith("__init__.py"))
            if names_in is None or DYNAMIC.search(source or b""):
                dynamic.append(path)  # unreadable, too large, unparsable or computed: what it imports is unknown
            pending += names_in or []
    return Closure(frozenset(files), frozenset(names), tuple(sorted(dynamic)))


def _with_packages(name: str) -> list[str]:
    parts = name.split(".")
    return [".".join(parts[:i]) for i in range(1, len(parts) + 1)]


def imported_names(source: bytes, module: str, is_package: bool) -> list[str] | None:
    """The module names a file's import statements name (relative ones resolved); None when it does not parse."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    package = module if is_package else module.rpartition(".")[0]
    found: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = _absolute(node.module or "", node.level, package)
            if base is None:
                continue
            if base:
                found.append(base)
            found += [f"{base}.{alias.name}" if base else alias.name for alias in node.names if alias.name != "*"]
    return found


def _absolute(name: str, level: int, package: str) -> str | None:
    if level == 0:
        return name
    parts = package.split(".") if package else []
    if level - 1 > len(parts):
        return None  # beyond the top-level package: Python refuses it too
    head = parts[:len(parts) - (level - 1)]
    return ".".join([*head, name] if name else head)
