"""Which ops the repository's change touches: the sweep's scope, from the compiler surface the job sees.

On a pull request the service lists the files the change touches (COMPILE_CI_CHANGED_FILES, paths in the
checkout); a change of the repository's compiler surface is aimed at only when the code behind it comes from one of
those files (by content, as the cache key sees it: the same file imported from the checkout or from site-packages),
so a pull request that edits one lowering of many sweeps that lowering's ops, not every op the repository patches.
Without the list (a push, a base run, a change that touches the install or config files) every change counts; so
does a change whose code cannot be told (a place rebound to another of torch's functions, a removal, data).

Stock torch is the baseline: ``suites/compiler_surface.py`` snapshots all of torch's compiler before any repository
code runs, and this module snapshots inductor's config. Exact: an entry of the lowering, fallback or decomposition
tables added, replaced or removed aims at the ops whose route (``routes.py``) goes through that entry's family.
Every op: anything else the repository changed in torch's compiler (a function, method, class, module, closure,
default of a function; a codegen override; a pattern registration; a custom pass or any setting in inductor's
config; torch's own files; native code it loaded): which ops reach it cannot be proven, so none is left out.
"""

from __future__ import annotations

import json
import os
import sys
import zlib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from .. import code_origin, compiler_surface
from ..op_families import family_of
from . import internals

SCOPE_ENV = "COMPILE_CI_OPS_SCOPE"  # "aimed" (default) or "all"
SHARD_ENV = "COMPILE_CI_OPS_SHARD"  # "K/N": this job runs the K-th of N shards of its scope (default 1/1)
CHANGED_ENV = "COMPILE_CI_CHANGED_FILES"  # a JSON list of the paths the pull request changed (the service's)
SCOPES = ("aimed", "all")
# Settings the sweep itself or the runner sets; a difference there is not the repository's change.
_OWN_CONFIG = frozenset({"torch._inductor.config.fallback_random"})


@dataclass(frozen=True)
class Aim:
    everything: bool  # run every op (the scope asked for it, or a change could touch any op)
    families: frozenset[str] = frozenset()  # the changed entries' families: ops routed through one are touched
    reasons: tuple[str, ...] = ()  # what changed, one line each, for the report
    shard: tuple[int, int] = (1, 1)
    changed_everything: bool = False  # a change could touch any op (not only the scope asking for every op)

    def touches(self, families: Iterable[str], unknown: bool) -> bool:
        """Whether a case routed through ``families`` is in scope (an unknown route always is)."""
        return self.everything or unknown or not self.families.isdisjoint(families)

    def changed(self, families: Iterable[str], unknown: bool) -> bool:
        """Whether the repository changed anything a case routed through ``families`` goes through: if not, the case
        runs stock torch's path (it is in scope only because the scope is every op)."""
        return self.changed_everything or unknown or not self.families.isdisjoint(families)

    def in_shard(self, op_name: str) -> bool:
        index, count = self.shard
        return zlib.crc32(op_name.encode()) % count == index - 1


@dataclass
class Baseline:
    """Inductor's config as torch defines it, taken before the repository's code runs (the codegen overrides'
    baseline is the compiler surface's)."""

    config: dict[str, str] = field(default_factory=dict)

    @classmethod
    def take(cls) -> Baseline:
        compiler_surface.install()
        return cls(internals.config_snapshot())


def parse_shard(text: str) -> tuple[int, int]:
    index, sep, count = text.strip().partition("/")
    if not sep or not index.isdigit() or not count.isdigit() or not 1 <= int(index) <= int(count):
        raise ValueError(f"{SHARD_ENV}={text!r}: expected K/N with 1 <= K <= N")
    return int(index), int(count)


def decide(baseline: Baseline, environ: Mapping[str, str] = os.environ) -> Aim:
    """The aim of this job: every op, or the ops whose entries the repository changed (raises ValueError on a
    malformed scope or shard)."""
    scope = environ.get(SCOPE_ENV, "").strip().lower() or "aimed"
    if scope not in SCOPES:
        raise ValueError(f"{SCOPE_ENV}={scope!r}: expected one of {', '.join(SCOPES)}")
    shard = parse_shard(environ.get(SHARD_ENV, "") or "1/1")
    touched = _touched_by(changed_digests(environ))
    untouched: list[str] = []
    everything, reasons, families = _global_changes(baseline, environ, touched, untouched), [], set()
    for table, key, line in compiler_surface.changed_entries():
        if not touched(compiler_surface.pattern_sources() if table == "pattern" else
                       compiler_surface.entry_sources(table, key)):
            untouched.append(f"{line}: not in a file this pull request changed, so not swept")
            continue
        if table == "pattern":
            everything.append(f"{line}: a pattern can rewrite any op's graph")
            continue
        family = family_of(key)
        reasons.append(line)
        if family is None:
            everything.append(f"{line}: not an ATen operator, so no op can be aimed at")
        else:
            families.add(family)
    changed_everything = bool(everything)
    if scope == "all":
        everything.insert(0, f"{SCOPE_ENV}=all")
    return Aim(bool(everything), frozenset(families), tuple(everything + reasons + untouched), shard,
               changed_everything)


def changed_digests(environ: Mapping[str, str]) -> frozenset[str] | None:
    """The content digests of the files the pull request changed, as they are at its head (a deleted file has none);
    None without a list: every change of the compiler surface counts."""
    text, checkout = environ.get(CHANGED_ENV, ""), environ.get("COMPILE_CI_CHECKOUT", "")
    try:
        paths = json.loads(text) if text and checkout else None
    except ValueError:
        return None
    if not isinstance(paths, list) or not all(isinstance(p, str) for p in paths):
        return None
    found = (os.path.join(checkout, p) for p in paths)
    return frozenset(code_origin.path_digest(f) for f in found if os.path.isfile(f))


def _touched_by(changed: frozenset[str] | None) -> Callable[[frozenset[str] | None], bool]:
    """Whether a change whose code comes from files of these digests is the pull request's: with no list, a removed
    entry (None) or code that is all torch's (a table entry pointed at another of torch's functions: who did it
    cannot be told), yes."""
    def touched(sources: frozenset[str] | None) -> bool:
        return changed is None or not sources or not sources.isdisjoint(changed)
    return touched


def _global_changes(baseline: Baseline, environ: Mapping[str, str], touched: Callable[[frozenset[str] | None], bool],
                    untouched: list[str]) -> list[str]:
    """Changes that could touch any op, one line each (those whose code the pull request did not change go to
    `untouched`)."""
    found = []
    now = internals.config_snapshot()
    for key in sorted(set(now) | set(baseline.config)):
        if key not in _OWN_CONFIG and now.get(key) != baseline.config.get(key):
            passes = " object 0x" in str(now.get(key))
            if passes and not touched(compiler_surface.sources(_config_value(key))):
                untouched.append(f"config {key}: its pass is not in a file this pull request changed, so not swept")
                continue
            what = "a pass can rewrite any op's graph" if passes else "it applies to every op"
            found.append(f"config {key}: {baseline.config.get(key)} -> {now.get(key)}: {what}")
    overrides = {f"{module}.{name}.": name for module, names in compiler_surface.OVERRIDE_CLASSES.items()
                 for name in names}
    for change in compiler_surface.space_changes():
        prefix = next((p for p in overrides if change.place.startswith(p)), None)
        what = f"codegen override {overrides[prefix]}.{change.place[len(prefix):]} changed: every op whose code " \
               "calls it" if prefix else f"{change.place} {change.kind}: no op can be proven out of its reach"
        at = f" ({change.where})" if change.where else ""
        if touched(change.sources):
            found.append(what + at)
        else:
            untouched.append(f"{change.place}{at}: not in a file this pull request changed, so not swept")
    return found


def _config_value(qualified: str) -> object:
    module, _, key = qualified.rpartition(".")
    return getattr(sys.modules.get(module), key, None)
