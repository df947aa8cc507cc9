"""The compiler surface a repository changes at run time: anything in torch's compiler packages that differs from
torch's own at compile time. It keys torch's compile caches, aims the op sweep, and is recorded for the service.

Torch's caches do not key a graph by Python that changes torch's compiler while it runs: a pull request that breaks
such a patch would be served its default branch's kernels (a false green). Here, in the job:

- `install()`, before any code of the repository runs (suites/pytest_entry.py), snapshots torch as torch defines
  it: every module of torch (the compiler packages and what they import), their classes and functions
  (surface_snapshot.py), inductor's op tables entry by entry (surface_tables.py), and every module of torch imported
  later, as soon as its code ran (surface_imports.py). It wraps inductor's entry point, `compile_fx`.
- Before every inductor compile, `refresh_tag()` diffs torch against the snapshot. Whatever differs and is not
  torch's own run-time state (surface_rules.py says how that is told) is the repository's change (`changes()`):
  hashed, with the content of the files its code comes from (code_origin.py), into
  `torch.compiler.config.cache_key_tag` (`compile-ci-surface-<hash>`, after the repository's own tag; none when
  nothing changed). Also counted: pattern registrations, pattern entries changed in place, config passes from
  outside torch (surface_registrations.py), torch files that differ, native code loaded (surface_files.py: a tag of
  its own, no hit). Interfaces: suites/README.md.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import os
import sys
import types
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from suites import code_origin, surface_files, surface_imports, surface_registrations, surface_rules, surface_watch
from suites.surface_place import KINDS, MISSING, Change, Difference
from suites.surface_snapshot import Snapshot
from suites.surface_tables import TABLES, Table, tables_of

PREFIX = "compile-ci-surface-"
TEXT_LIMIT = 300  # the longest name of native code in the job's log
_warn = functools.partial(print, "compile-ci:", file=sys.stderr)
@dataclass
class _State:
    snapshot: Snapshot
    writes: surface_rules.Writes
    files: surface_files.TorchFiles
    native: surface_files.NativeCode
    location: str  # why torch is not the runner's own, or ''
    tables: list[Table]
    memo: dict[int, tuple[Difference, Change | None, str]]
    token: str  # this process's own tag, for a job whose native code no key can describe
    broken: str = ""  # why what the surface saw cannot be trusted: every compile then misses the cache
    user_tag: str = ""
    last_set: str | None = None  # the tag this module set last: anything else there is the repository's own
    warned: bool = False


_state: _State | None = None


def install() -> None:
    """Snapshot torch as torch defines it and wrap inductor's entry point; call before the repository's code (again:
    nothing, the first snapshot stays)."""
    global _state
    import torch

    if _state is not None:
        return
    code_origin.set_stock_roots(torch)
    surface_watch.watch_functions()
    torch_dir = os.path.dirname(torch.__file__)
    snapshot = Snapshot(os.path.realpath(torch_dir) + os.sep)
    _state = _State(snapshot, surface_rules.Writes(snapshot.functions), surface_files.TorchFiles(torch_dir),
                    *_of_this_process(torch_dir), [], {}, os.urandom(8).hex())
    for module in TABLES:
        surface_imports.after_import(module, _add_tables)
    for module in surface_registrations.CONFIG_MODULES:
        surface_imports.after_import(module, surface_registrations.take_config)
    surface_imports.after_import("torch._inductor.pattern_matcher", surface_registrations.watch_registrations)
    surface_imports.after_import("torch._inductor.compile_fx", _wrap_compile_fx)
    snapshot.take(_generated)
    for name, module in snapshot.modules.items():
        _state.files.check(name, module)
        _add_entries(name)
    finder = surface_imports.Finder(_guarded(_state.snapshot.diff), _guarded(_loaded), _guarded(_absorb))
    surface_imports.install(finder)


def _of_this_process(torch_dir: str) -> tuple[surface_files.NativeCode, str]:
    """What the job's environment decides: the caches its native code may come from, where torch is imported from."""
    caches = [os.environ.get("TORCHINDUCTOR_CACHE_DIR", ""), os.environ.get("TRITON_CACHE_DIR", ""),
              os.path.join(os.environ.get("TMPDIR", "/tmp"), f"torchinductor_{os.environ.get('USER', '')}")]
    code_origin.set_installed_dirs(os.environ.get("COMPILE_CI_CHECKOUT", ""))
    return (surface_files.NativeCode(torch_dir, caches),
            surface_files.torch_location_problem(torch_dir, os.environ.get("COMPILE_CI_CHECKOUT", "")))


def forked() -> None:
    """A forked job (suites/warm_process.py): what `install()` took from the environment taken again, a token of its
    own, and what the fork rebound (its own paths, suites/warm_compiler.py; at-fork hooks) as torch's (never code)."""
    assert _state is not None
    _state.native, _state.location = _of_this_process(os.path.dirname(sys.modules["torch"].__file__ or ""))
    _state.token = os.urandom(8).hex()
    _absorb()


def installed() -> bool:
    return _state is not None


def _add_tables(module: types.ModuleType) -> None:
    assert _state is not None
    for table in tables_of(module):
        _state.tables.append(table)
        _state.snapshot.regions.add(table)


def _add_entries(name: str) -> None:
    """The functions of a module's tables: a lowering's closure is torch's too (after the module's own attributes,
    so that a function both hold is named by its module)."""
    assert _state is not None
    for table in _state.tables:
        for key, value in list(table.stock.items()) if table.module == name and not table.is_set else ():
            _state.snapshot.add_callable(f"{table.place}[{key}]", value)


def _loaded(name: str, module: types.ModuleType) -> None:
    assert _state is not None
    _state.snapshot.add_module(name, module)
    _state.files.check(name, module)
    _add_entries(name)


def _absorb() -> None:
    assert _state is not None
    _state.snapshot.absorb(_torch_own)


def _torch_own(value: Any) -> bool:
    return value is MISSING or not surface_rules.is_code(value) or not code_origin.origin(value)


def _guarded(step: Any) -> Any:
    """A step of an import's window: an error there must not break torch's import; it makes the key unknown."""
    def run(*args: Any) -> None:
        try:
            step(*args)
        except Exception as exc:  # noqa: BLE001
            assert _state is not None
            _state.broken = f"the compiler surface could not follow an import of torch's ({exc!r})"
            _warn(_state.broken + "; every compile of this job misses the cache")
    return run


def _differences() -> list[Difference]:
    assert _state is not None
    added = _state.snapshot.new_modules()
    _state.native.note(added)
    for name, module in _state.snapshot.unseen(added):
        if _generated(module):
            _state.snapshot.ignored.add(name)  # inductor's generated code, loaded under a name of torch's
        else:  # put there by a finder ahead of ours, or by hand: taken late
            _loaded(name, module)
    return _state.snapshot.diff() + surface_registrations.config_changes()


def _generated(module: types.ModuleType) -> bool:
    assert _state is not None
    path = module.__dict__.get("__file__")
    return isinstance(path, str) and surface_files.under(os.path.realpath(path), _state.native.caches())


def _judged() -> list[tuple[Difference, Change, str]]:
    """Each difference that is the repository's change, with its Change and the line the fingerprint hashes."""
    assert _state is not None
    memo = {}
    for difference in _differences():
        known = _state.memo.get(id(difference))
        memo[id(difference)] = known if known is not None and known[0] is difference else _judge(difference)
    _state.memo = memo
    return [(d, change, line) for d, change, line in memo.values() if change is not None]


def _judge(difference: Difference) -> tuple[Difference, Change | None, str]:
    assert _state is not None
    if not surface_rules.judge(difference, _state.writes):
        return difference, None, ""
    new = surface_rules.unwrap_ours(difference.new)
    where = code_origin.where(new, os.environ.get("COMPILE_CI_CHECKOUT", "")) if new is not MISSING else ""
    change = Change(difference.place, difference.kind, where, surface_rules.sources([new]))
    return difference, change, f"{change.place} {change.kind} {surface_rules.describe(new)}"


def changes() -> list[Change]:
    """Every change of the repository's to torch's compiler, now."""
    return [change for _d, change, _line in _judged()] + _other_changes()


def _other_changes() -> list[Change]:
    """Pattern registrations and entries changed in place, torch's files, native code: no place of the snapshot."""
    assert _state is not None, "install() first"
    checkout = os.environ.get("COMPILE_CI_CHECKOUT", "")
    found = surface_registrations.registration_changes(checkout)
    if _state.location:
        found.append(Change("torch", "torch files differ", _state.location, frozenset()))
    for name, problem in sorted(_state.files.problems.items()):
        digest = _state.files.digests.get(name)
        found.append(Change(name, "torch files differ", problem, frozenset({digest} if digest else ())))
    for path, digest in sorted(_state.native.check().items()):
        found.append(Change(f"native {os.path.basename(path)}", "native code", code_origin.where_file(path, checkout),
                            frozenset({digest})))
    return found


def fingerprint(reuse: bool = False) -> str:
    """'' when the repository changed nothing in the compiler; else a hash of what it changed and the code behind it
    (this process's own token when it loaded native code). `reuse`: without what installed distributions changed
    (code_origin.is_installed: it depends on the tests a process ran), as reused results are checked (suites/README)."""
    assert _state is not None, "install() first"
    if _state.broken:
        raise RuntimeError(_state.broken)
    others = _other_changes()
    if any(change.kind == "native code" for change in others):
        return f"native-{_state.token}"
    lines = {line for _d, change, line in _judged() if not (reuse and code_origin.is_installed(change.where))}
    # A registration by the content of its file (not its path: the same patch imported from elsewhere hits).
    lines |= {f"{c.place} {c.kind} {'' if c.kind == 'added' else c.where} {','.join(sorted(c.sources))}"
              for c in others}
    return hashlib.sha256("\n".join(sorted(lines)).encode()).hexdigest()[:32] if lines else ""


def refresh_tag() -> str:
    """Set torch's cache-key tag from the current fingerprint (the repository's own tag kept) and return ours."""
    import torch

    assert _state is not None, "install() first"
    try:
        ours = fingerprint()
    except Exception as exc:  # noqa: BLE001 - whatever a patched torch holds, a compile must not break on it
        # Unknown is not "unchanged": this compile misses the cache rather than risk another version's kernels.
        ours = f"unknown-{_state.token}-{id(exc)}"
        print(f"compile-ci: the compiler surface could not be fingerprinted ({exc!r}); compiling uncached",
              file=sys.stderr)
    if ours.startswith("native-") and not _state.warned:
        _state.warned = True
        loaded = ", ".join(sorted(os.path.basename(p) for p in _state.native.found))[:TEXT_LIMIT]
        _warn(f"this job loaded native code of its own ({loaded}); no key can describe what it changes, so every "
              "compile of this job bypasses the compile cache (nothing read from it, nothing another job can hit)")
    current = torch.compiler.config.cache_key_tag
    if current != _state.last_set:
        _state.user_tag = current  # whatever the repository (or TORCH_COMPILE_CACHE_KEY_TAG) set
    _state.last_set = f"{_state.user_tag}{PREFIX}{ours}" if ours else _state.user_tag
    torch.compiler.config.cache_key_tag = _state.last_set
    return ours


@contextlib.contextmanager
def restored() -> Iterator[list[Change]]:
    """Torch's own object back in every changed place for the body, the repository's put back after. Yields the
    changes that cannot be undone so (pattern registrations, torch's files, native code)."""
    assert _state is not None, "install() first"
    judged = _judged()
    undone = [(difference, difference.new) for difference, _change, _line in judged]
    kept = {change.place for _d, change, _line in judged}
    for difference, _new in undone:
        # A copy of a snapshot's dict (kwdefaults): what the function holds must not be what is compared against.
        difference.put(dict(difference.old) if type(difference.old) is dict else difference.old)
    try:
        yield [change for change in changes() if change.place not in kept]
    finally:
        for difference, new in reversed(undone):
            difference.put(new)


def _wrap_compile_fx(module: types.ModuleType) -> None:
    original = module.compile_fx

    @functools.wraps(original)
    def compile_fx(*args: Any, **kwargs: Any) -> Any:
        refresh_tag()
        return original(*args, **kwargs)

    module.compile_fx = compile_fx


after_import = surface_imports.after_import  # callback(module) once imported, before the snapshot takes it

from suites.surface_record import write_record  # noqa: E402
from suites.surface_sweep import (  # noqa: E402
    OVERRIDE_CLASSES,
    changed_entries,
    changed_overrides,
    entry_sources,
    override_sources,
    pattern_sources,
    sources,
    space_changes,
)

__all__ = ["Change", "KINDS", "OVERRIDE_CLASSES", "PREFIX", "changed_entries", "changed_overrides", "changes",
           "entry_sources", "fingerprint", "forked", "install", "installed", "override_sources", "pattern_sources",
           "refresh_tag", "restored", "sources", "space_changes", "write_record"]
