"""Changes that are not a place of a namespace: pattern-matcher registrations and passes set in inductor's config.

- A pattern registration (`register_replacement`, `register_graph_pattern`, `register_lowering_pattern`) keeps
  traced graphs in a pass object, not the code that made them: who called it from outside torch is recorded.
- An entry of one of torch's pattern passes changed in place (its handler, extra check or argument normaliser
  wrapped or replaced, or the entry itself swapped for an object of a class from outside torch): every pass object
  a module of inductor holds (an attribute, or a list of them) is read at each look, its entries' code judged by
  where it comes from. torch registers many of its own lazily (after the snapshot), so an entry's presence says
  nothing; code from outside torch in it does.
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
from suites.surface_place import Change, Difference

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


def registration_changes(checkout: str) -> list[Change]:
    """Each pattern registration from outside torch, and each entry of torch's pattern passes changed in place."""
    found = [Change(registration_place(kind), "added", code_origin.where_file(path, checkout), frozenset({digest}))
             for kind, path, digest in registrations()]
    for place, where, part in pattern_entry_changes():
        sources = frozenset(digest for digest in code_origin.origin(part).split(",") if digest)
        found.append(Change(place, "rebound", code_origin.where_file(where, checkout), sources))
    return found


def registrations() -> list[tuple[str, str, str]]:
    """(kind, file, digest) of each pattern registration from outside torch, by file content."""
    return [(kind, where, key.rsplit(" ", 1)[-1]) for key, (kind, where) in sorted(_registrations.items())]


_passes: tuple[int, list[tuple[str, Any]]] = (-1, [])  # (modules loaded when read, [(place, pass object)])
_ENTRY_PARTS = ("handler", "extra_check", "normalize_args")


def pattern_entry_changes() -> list[tuple[str, str, Any]]:
    """(place, file:line, the foreign code) of each entry of torch's pattern passes holding code from outside torch."""
    matcher = sys.modules.get(PATTERN_PLACE)
    kind = getattr(matcher, "PatternMatcherPass", None)
    found: dict[str, tuple[str, Any]] = {}
    for name, patterns in _pattern_passes(kind) if isinstance(kind, type) else ():
        for key, entries in list(getattr(patterns, "patterns", {}).items()):
            target = key[-1] if isinstance(key, tuple) and key else key
            for index, entry in enumerate(list(entries)):
                # One place per entry and part: two entries of one op changed alike are two changes, two keys.
                spot = f"{name}.patterns[{target}][{index}]"
                for attr, part in (("", type(entry)), *((f".{a}", getattr(entry, a, None)) for a in _ENTRY_PARTS)):
                    where = _where(part) if part is not None else ""
                    if where:
                        found.setdefault(spot + attr, (where, part))
    return [(place, where, part) for place, (where, part) in sorted(found.items())]


_judged_parts: dict[int, tuple[Any, str]] = {}  # id -> (the part, kept so its id is not reused; its file:line or '')


def _where(part: Any) -> str:
    """`file:line` of a part's code when it is not torch's, judged once per object: an entry's class by its module's
    file (a dataclass's generated methods have none), a callable by its code."""
    known = _judged_parts.get(id(part))
    if known is None:
        if isinstance(part, type):
            path = getattr(sys.modules.get(part.__module__), "__file__", None) or ""
            where = code_origin.where(part) if path and not code_origin.is_stock(path) else ""
        else:
            where = code_origin.where(part)
        known = _judged_parts[id(part)] = (part, where)
    return known[1]


def _pattern_passes(kind: type) -> list[tuple[str, Any]]:
    """Every pattern pass object a loaded module of inductor holds, read again only when modules were loaded."""
    global _passes
    if _passes[0] != len(sys.modules):
        found: dict[int, tuple[str, Any]] = {}
        for module_name, module in list(sys.modules.items()):
            if not module_name.startswith("torch._inductor") or not isinstance(module, types.ModuleType):
                continue
            for attr, value in list(vars(module).items()):
                listed = type(value) in (list, tuple)
                for index, item in enumerate(value if listed else (value,)):
                    if isinstance(item, kind):
                        found.setdefault(id(item), (f"{module_name}.{attr}" + (f"[{index}]" if listed else ""), item))
        _passes = (len(sys.modules), list(found.values()))
    return _passes[1]


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
