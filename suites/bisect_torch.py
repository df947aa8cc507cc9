"""The gateway to torch's compiler bisector (``torch._inductor.compiler_bisector``) and the other private places a
bisection reaches: the one module of the bisection that touches torch's internals, each looked up through
``harness._optional``, so a torch without one of them gets a bisection that says so, never a failed test.

torch's bisector runs a failing compile under its backends in order (eager, aot_eager, aot_eager_decomp_partition,
..., inductor) and, in the first one that is wrong, disables its subsystems one at a time (inductor's pre-grad,
joint-graph and post-grad passes, lowerings, layout optimisation, padding, cudagraphs, ...), then binary-searches the
N-th application of the one that fixes it. Its own environment variables (TORCH_BISECT_BACKEND, _SUBSYSTEM, _MAX) set
one such point directly: what a check of the answer and `compile-ci repro --bisect` replay.
"""

from __future__ import annotations

import contextlib
import functools
import gc
import os
import re
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, TextIO

from suites import harness

MODULE = "torch._inductor.compiler_bisector"
BACKEND_ENV, SUBSYSTEM_ENV, MAX_ENV = "TORCH_BISECT_BACKEND", "TORCH_BISECT_SUBSYSTEM", "TORCH_BISECT_MAX"
INDUCTOR = "inductor"
_OP_REPR = re.compile(r"<OpOverload\(op='(?P<op>[\w.]+)', overload='(?P<overload>\w+)'\)>")


def bisector() -> Any | None:
    """torch's ``CompilerBisector`` class, or None where this torch has none."""
    return harness._optional(MODULE, "CompilerBisector")


def unavailable() -> str:
    """Why this torch cannot bisect ("" when it can)."""
    import torch

    if bisector() is None or not isinstance(harness._optional(MODULE, "BACKENDS"), dict):
        return f"torch {torch.__version__} has no {MODULE}.CompilerBisector"
    return ""


@dataclass(frozen=True)
class Subsystem:
    backend: str
    name: str
    applied: bool  # applied many times (a pass, a lowering): bisected down to the N-th; else one config setting
    config: tuple[str, str, Any] | None = None  # (config_name, field, value) of a setting


def subsystems(backend: str) -> list[Subsystem]:
    """The subsystems torch's bisector knows in ``backend``, in its order."""
    found = []
    for entry in (harness._optional(MODULE, "BACKENDS") or {}).get(backend, []):
        name = getattr(entry, "name", "")
        if hasattr(entry, "config_field"):
            config = (entry.config_name, entry.config_field, entry.config_value)
            found.append(Subsystem(backend, name, False, config))
        elif name:
            found.append(Subsystem(backend, name, type(entry).__name__ == "BisectSubsystem"))
    return found


def backends() -> list[str]:
    return list(harness._optional(MODULE, "BACKENDS") or {})


def reset() -> None:
    """Forget every compiled frame, so the next run compiles again (under whatever the bisector says)."""
    reset_dynamo = harness._optional("torch._dynamo", "reset")
    if reset_dynamo is not None:
        reset_dynamo()


def current_point() -> tuple[str, str]:
    """(backend, subsystem) the bisector is at now ("" for none), between the runs of ``do_bisect``."""
    cls = bisector()
    return (cls.get_backend() or "", cls.get_subsystem() or "") if cls is not None else ("", "")


def run_state(backend: str, subsystem: str) -> str:
    cls = bisector()
    return (cls.get_run_state(backend, subsystem) or "") if cls is not None and subsystem else ""


def do_bisect(fn: Callable[[], bool], said: TextIO) -> Any:
    """torch's own search (``fn`` True: right), in this process, what it prints going to ``said``, with nothing of
    it left behind afterwards."""
    cls, module = bisector(), sys.modules[MODULE]
    enabled, cache = cls.bisection_enabled, cls.in_process_cache
    # Its own prints only: the test's runs in between swap sys.stdout for pytest's capture and back.
    module.print = functools.partial(print, file=said)  # type: ignore[attr-defined]
    try:
        return cls.do_bisect(fn)
    except Exception as exc:
        raise exc.with_traceback(None) from None  # see below: no traceback may keep its frame
    finally:
        # do_bisect cleans up (bisection off, its state deleted) when its frame goes, and the traceback pytest keeps
        # of the last failing run (sys.last_traceback) holds that frame: it would go in the middle of a later run.
        for name in ("last_type", "last_value", "last_traceback", "last_exc"):
            if hasattr(sys, name):
                setattr(sys, name, None)
        gc.collect()
        cls.bisection_enabled, cls.in_process_cache = enabled, cache
        del module.print  # type: ignore[attr-defined]
        _clear_env_cache()


def _clear_env_cache() -> None:
    read = harness._optional(MODULE, "get_env_val")
    if hasattr(read, "cache_clear"):  # torch reads its variables once per process: a replay sets them again
        read.cache_clear()


@contextlib.contextmanager
def at_point(backend: str, subsystem: str = "", limit: int | None = None) -> Iterator[None]:
    """Compile as the bisector would at one point: ``backend`` (torch.compile's backend replaced by it), with
    ``subsystem`` applied only ``limit + 1`` times (0..limit), or for a config setting, that setting changed."""
    cls = bisector()
    found = {s.name: s for s in subsystems(backend)}.get(subsystem)
    variables = {BACKEND_ENV: backend}
    if found is not None and found.applied:
        variables.update({SUBSYSTEM_ENV: subsystem, MAX_ENV: str(-1 if limit is None else limit)})
    saved_env = {name: os.environ.get(name) for name in (BACKEND_ENV, SUBSYSTEM_ENV, MAX_ENV)}
    enabled = cls.bisection_enabled
    os.environ.update(variables)
    _clear_env_cache()
    counts = harness._optional(MODULE, "subsystem_call_counter")
    if counts is not None:  # do_bisect resets them before each run; so must a run set here
        counts.clear()
    cls.bisection_enabled = True
    try:
        with _config(found.config if found is not None else None):
            yield
    finally:
        cls.bisection_enabled = enabled
        for name, value in saved_env.items():
            os.environ.pop(name, None) if value is None else os.environ.__setitem__(name, value)
        _clear_env_cache()


@contextlib.contextmanager
def _config(change: tuple[str, str, Any] | None) -> Iterator[None]:
    """A config setting of the bisector's, changed as its backend would change it."""
    if change is None:
        yield
        return
    name, key, value = change
    module = harness._optional("torch._inductor", "config") if name == INDUCTOR else \
        harness._optional("torch._functorch", "config")
    with module.patch({key: value}) if module is not None and hasattr(module, key) else contextlib.nullcontext():
        yield


@contextlib.contextmanager
def uncached() -> Iterator[None]:
    """The FX-graph and AOT-autograd caches off: a cached graph would not go through what the bisector disables.
    And inductor's copy of its decomposition table, made at its first compile, made again before and after: a run
    with torch's own table back (the suspect pair) must not compile with the repository's copy, nor a later one
    with torch's."""
    copied = harness._optional("torch._inductor.decomposition", "fast_random_decomps")
    forget = getattr(copied, "cache_clear", lambda: None)
    forget()
    with contextlib.ExitStack() as stack:
        stack.callback(forget)
        for module, key in (("torch._inductor", "fx_graph_cache"), ("torch._functorch", "enable_autograd_cache")):
            config = harness._optional(module, "config")
            if config is not None and hasattr(config, key):
                stack.enter_context(config.patch({key: False}))
        yield


@dataclass
class Compiles:
    """Graphs dynamo handed to a backend, and graphs inductor compiled, while a replay ran."""

    graphs: int = 0
    inductor: int = 0


@contextlib.contextmanager
def counting_compiles() -> Iterator[Compiles]:
    """Count what went through torch.compile's backends: a test whose compiled step is made elsewhere (a compiled
    function kept from an earlier run, functorch's memory_efficient_fusion) cannot be steered by the bisector."""
    seen = Compiles()
    graph = harness._optional("torch._dynamo.output_graph", "OutputGraph")
    entry = harness._optional("torch._inductor", "compile_fx")
    patched = []

    def counted(owner: Any, name: str, figure: str) -> None:
        original = getattr(owner, name, None) if owner is not None else None
        if original is None:
            return

        @functools.wraps(original)
        def count(*args: Any, **kwargs: Any) -> Any:
            setattr(seen, figure, getattr(seen, figure) + 1)
            return original(*args, **kwargs)

        setattr(owner, name, count)
        patched.append((owner, name, original))

    counted(graph, "call_user_compiler", "graphs")
    counted(entry, "compile_fx", "inductor")  # torch.compile's inductor looks it up at each compile
    try:
        yield seen
    finally:
        for owner, name, original in reversed(patched):
            setattr(owner, name, original)


@dataclass
class Application:
    """What torch's bisector names at the N-th application of a subsystem: a pass, an FX node, an op."""

    number: int
    said: list[str] = field(default_factory=list)


@contextlib.contextmanager
def naming(backend: str, subsystem: str, number: int) -> Iterator[Application]:
    """Record the name of the ``number``-th application of ``subsystem`` (0-based, as torch counts) while the
    body compiles: torch's own debug text, and for a lowering the aten op of its FX node."""
    cls = bisector()
    found = Application(number)
    original = cls.__dict__.get("disable_subsystem")
    count = [0]

    def disable_subsystem(klass: Any, on: str, name: str, debug_info: Callable[[], str] | None = None) -> Any:
        if on == backend and name == subsystem and cls.bisection_enabled:
            if count[0] == number and debug_info is not None and not found.said:
                found.said = describe(debug_info)
            count[0] += 1
        return original.__func__(klass, on, name, debug_info)

    if original is None:
        yield found
        return
    cls.disable_subsystem = classmethod(disable_subsystem)
    try:
        yield found
    finally:
        cls.disable_subsystem = original


def describe(debug_info: Callable[[], str]) -> list[str]:
    """torch's debug text for one application, an op's repr made its name; an FX node's target added."""
    try:
        text = str(debug_info())
    except Exception:  # noqa: BLE001 - only a name for the log: torch's lambda may fail outside its compile
        return []
    said = [_OP_REPR.sub(lambda m: f"{m['op']}.{m['overload']}", text)]
    for cell in getattr(debug_info, "__closure__", None) or ():
        try:
            target = getattr(cell.cell_contents, "target", None)
        except ValueError:  # an empty cell
            continue
        if target is not None and str(target) not in said:
            said.append(str(target))
    return said
