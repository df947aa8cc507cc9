"""Changes that are not a place of a namespace: pattern-matcher registrations and passes set in inductor's config.

- A pattern registration (`register_replacement`, `register_graph_pattern`, `register_lowering_pattern`) keeps
  traced graphs in a pass object, not the code that made them: who called it from outside torch is recorded.
- Inductor's and functorch's config are objects whose values are not module attributes; a callable or a pass object
  (anything with `uuid()`) set there from outside torch is a change (plain settings are in torch's own cache key).
"""

from __future__ import annotations

import functools
import sys
import types
from collections.abc import Callable
from typing import Any

from suites import code_origin
from suites.surface_place import Difference

CONFIG_MODULES = ("torch._inductor.config", "torch._functorch.config")
PATTERN_PLACE = "torch._inductor.pattern_matcher"
_registrations: dict[str, tuple[str, str]] = {}  # "kind digest" -> (kind, where) of registrations from outside
_config_stock: dict[str, dict[str, Any]] = {}  # config module -> {key: value as torch set it} for possible passes


def watch_registrations(module: types.ModuleType) -> None:
    for name in ("register_replacement", "register_graph_pattern", "register_lowering_pattern"):
        original = getattr(module, name, None)
        if original is not None:
            setattr(module, name, _recording(name, original))


def _recording(kind: str, original: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(original)
    def register(*args: Any, **kwargs: Any) -> Any:
        caller = sys._getframe(1).f_code  # torch registering its own patterns lazily is torch's business
        if not code_origin.is_stock(caller.co_filename):
            _registrations.setdefault(f"{kind} {code_origin.file_digest(caller)}", (kind, caller.co_filename))
        return original(*args, **kwargs)
    return register


def registration_place(kind: str) -> str:
    """A registration's place: the call that made it (`torch._inductor.pattern_matcher.register_replacement()`),
    never a place of a namespace."""
    return f"{PATTERN_PLACE}.{kind}()"


def registrations() -> list[tuple[str, str, str]]:
    """(kind, file, digest) of each pattern registration from outside torch, by file content."""
    return [(kind, where, key.rsplit(" ", 1)[-1]) for key, (kind, where) in sorted(_registrations.items())]


def take_config(module: types.ModuleType) -> None:
    """The keys of a config module that hold nothing or a callable as torch sets them: where a pass can go."""
    stock = {}
    for key in sorted(getattr(module, "_config", {})):
        try:
            value = getattr(module, key)
        except Exception:  # noqa: BLE001, S112 - a hidden or deprecated key
            continue
        if value is None or callable(value) or hasattr(type(value), "uuid"):
            stock[key] = value
    _config_stock[module.__name__] = stock


def config_changes() -> list[Difference]:
    """A callable or pass object set from outside torch in those keys, as differences (put() sets it back)."""
    found = []
    for name, stock in _config_stock.items():
        module = sys.modules.get(name)
        for key, old in stock.items() if module is not None else ():
            value = getattr(module, key, None)
            if value is not old and (callable(value) or hasattr(type(value), "uuid")) and code_origin.origin(value):
                found.append(Difference(f"{name}.{key}", old, value, "attr", module, key))
    return found
