"""The op sweep's view of the compiler surface (suites/ops/aim.py): which changes name an op — a table entry, aimed
at that op's family — and which could touch any op; and the content digests of the code behind each, so that a
pull request's sweep aims only at the changes whose code it edited."""

from __future__ import annotations

from typing import Any

from suites import code_origin, compiler_surface, surface_registrations
from suites.surface_place import MISSING

# Where inductor turns its `ops.*` calls into code (changed_overrides() names the changes there).
OVERRIDE_CLASSES = {
    "torch._inductor.ops_handler": ("BasicMathOpsMixin",),
    "torch._inductor.codegen.common": ("OpDecompositions", "OpOverrides"),
    "torch._inductor.codegen.cpp": ("CppOverrides", "CppVecOverrides"),
    "torch._inductor.codegen.triton": ("TritonOverrides",),
}


def _tables() -> list[Any]:
    state = compiler_surface._state
    assert state is not None, "install() first"
    return state.tables


def _entries() -> list[tuple[str, Any, Any, compiler_surface.Change]]:
    """(table name, key, new value, change) of every table entry the repository changed."""
    found = []
    for difference, change, _line in compiler_surface._judged():
        for table in _tables() if difference.slot == "table" else ():
            entry = table.entry(difference)
            if entry is not None:
                found.append((*entry, difference.new, change))
    return found


def changed_entries() -> list[tuple[str, Any, str]]:
    """(table, key, description) of every entry added, replaced or removed in inductor's lowering, fallback and
    decomposition tables, and ("pattern", None, description) per pattern registration from outside torch."""
    entries = []
    for name, key, new, _change in _entries():
        what = "removed" if new is MISSING else f"-> {code_origin.qualname(new)} {code_origin.origin(new)}"
        entries.append((name, key, f"{name} {key} {what}"))
    return entries + [("pattern", None, f"pattern {kind} {digest}")
                      for kind, _where, digest in surface_registrations.registrations()]


def space_changes() -> list[compiler_surface.Change]:
    """Every change but table entries, pattern registrations and passes in the config (the sweep reads inductor's
    config itself): each could touch any op."""
    found = [change for difference, change, _line in compiler_surface._judged()
             if difference.slot not in ("table", "attr")]
    registered = {surface_registrations.registration_place(kind) for kind, *_rest in
                  surface_registrations.registrations()}
    return found + [change for change in compiler_surface._other_changes() if change.place not in registered]


def changed_overrides() -> list[tuple[str, str]]:
    """("Class.method", description) of every change in inductor's codegen override classes."""
    found = []
    for change in compiler_surface.changes():
        for module, classes in OVERRIDE_CLASSES.items():
            for name in classes:
                prefix = f"{module}.{name}."
                if change.place.startswith(prefix):
                    method = f"{name}.{change.place[len(prefix):]}"
                    found.append((method, f"override {method} {change.kind} {change.where}".rstrip()))
    return found


def sources(value: Any) -> frozenset[str]:
    """The content digests of the files outside torch that `value`'s code comes from (code_origin.origin): a change
    touches it when it changes one of those files, wherever the job imports them from (checkout or site-packages)."""
    return frozenset(code_origin.origin(value).split(",")) - {""}


def entry_sources(table_name: str, key: Any) -> frozenset[str] | None:
    """sources() of a changed table entry; None for a removed entry, whose remover cannot be told."""
    for name, entry_key, new, change in _entries():
        if name == table_name and entry_key == key:
            return None if new is MISSING else change.sources
    return None


def override_sources(method: str) -> frozenset[str] | None:
    """The same for a changed override method ("CppOverrides.sin"); None when it was removed."""
    for change in compiler_surface.changes():
        if change.place.endswith(f".{method}") and change.kind != "removed":
            return change.sources
    return None


def pattern_sources() -> frozenset[str]:
    """The content digests of the files outside torch that registered patterns."""
    return frozenset(digest for _kind, _where, digest in surface_registrations.registrations())
