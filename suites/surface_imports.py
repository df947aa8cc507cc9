"""Torch's modules imported after the snapshot: taken as soon as their code has run, before anything else can
touch them; and what torch's own imports change elsewhere, taken as torch's.

One finder at the front of `sys.meta_path` asks the finders behind it for the spec of every `torch` or `torch.*`
module and wraps the loader's `exec_module`. An import of torch's is a window: when the outermost one starts, the
snapshot is brought up to date (`on_start`); when it ends, each module it executed is taken (`on_loaded`, after the
callbacks registered with `after_import` for that module) and whatever changed meanwhile elsewhere is taken as
torch's own definition (`on_end`: dynamo's import wraps `torch.manual_seed`, inductor's registers cache-artifact
properties) unless its code comes from outside torch (a plugin an import of torch's loads).
"""

from __future__ import annotations

import importlib.abc
import sys
import types
from collections.abc import Callable
from typing import Any

from suites.surface_snapshot import in_space

_callbacks: dict[str, list[Callable[[types.ModuleType], None]]] = {}


def after_import(name: str, callback: Callable[[types.ModuleType], None]) -> None:
    """Run `callback(module)` once `name` has been imported (now, if it already is), before the snapshot takes it."""
    if name in sys.modules:
        callback(sys.modules[name])
    else:
        _callbacks.setdefault(name, []).append(callback)


class Finder(importlib.abc.MetaPathFinder):
    def __init__(self, on_start: Callable[[], None], on_loaded: Callable[[str, types.ModuleType], None],
                 on_end: Callable[[], None]) -> None:
        self.on_start, self.on_loaded, self.on_end = on_start, on_loaded, on_end
        self.depth = 0

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> Any:
        if not in_space(fullname) and fullname not in _callbacks:
            return None
        spec = None
        behind = sys.meta_path[sys.meta_path.index(self) + 1:] if self in sys.meta_path else sys.meta_path
        for finder in behind:
            find = getattr(finder, "find_spec", None)
            spec = find(fullname, path, target) if find is not None else None
            if spec is not None:
                break
        loader = getattr(spec, "loader", None)
        # A loader that is a class (builtin, frozen) serves every module of its kind: never patched.
        if loader is None or isinstance(loader, type) or not hasattr(loader, "exec_module"):
            return spec
        execute = loader.exec_module

        def exec_module(module: types.ModuleType) -> None:
            outer = self.depth == 0
            if outer:
                self.on_start()
            self.depth += 1
            try:
                execute(module)
                # What the import left under its name: a module of torch's may put another object there itself
                # (torch.backends.xnnpack puts its engine), and that one is torch's.
                loaded = sys.modules.get(fullname, module)
                for callback in _callbacks.pop(fullname, []):
                    callback(loaded)
                if in_space(fullname) and isinstance(loaded, types.ModuleType):
                    self.on_loaded(fullname, loaded)
            finally:
                self.depth -= 1
                if outer:
                    self.on_end()

        loader.exec_module = exec_module
        return spec


def install(finder: Finder) -> None:
    if not any(isinstance(f, Finder) for f in sys.meta_path):
        sys.meta_path.insert(0, finder)
