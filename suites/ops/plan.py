"""The sweep's plan for one job: which cases it runs, which it leaves out and why, computed once at collection."""

from __future__ import annotations

import functools
import os
import time
from dataclasses import dataclass, field

from .. import targets
from . import aim, catalog, routes

COMPILER_KIND = "compiler"  # [targets] compiler: callables that install the repository's changes to inductor


@dataclass
class Plan:
    device: str
    aim: aim.Aim | None = None
    run: list[catalog.OpCase] = field(default_factory=list)
    not_compiled: dict[str, list[str]] = field(default_factory=dict)  # reason -> case ids inductor does not compile
    not_aimed: int = 0  # cases in scope of inductor that the change does not touch
    # Run only because the scope is every op: the change touches nothing on their route, so a failure there is
    # stock torch's (upstream), reported as such, never this repository's red.
    stock_path: set[str] = field(default_factory=set)
    other_shards: int = 0  # cases of the ops other shards own (they route, report and run them)
    problem: str = ""  # why nothing could be planned (an unusable torch, a malformed variable)
    compiler_targets: list[targets.DeclaredCallable | targets.TargetError] = field(default_factory=list)
    seconds: float = 0.0


_baseline: aim.Baseline | None = None


def take_baseline() -> None:
    """Before the repository's code: torch's own tables, config and codegen overrides (see aim.py)."""
    global _baseline
    if _baseline is None:
        _baseline = aim.Baseline.take()
        try:
            routes.tables()  # stock copies, for routing
        except Exception:  # noqa: BLE001, S110 - a torch without the tables: plan() reports it
            pass


def install_compiler_targets() -> list[targets.DeclaredCallable | targets.TargetError]:
    """Call each ``[targets] compiler`` callable once: what it changes in inductor is what the sweep compiles with."""
    loaded = targets.declared_callables(COMPILER_KIND)
    installed: list[targets.DeclaredCallable | targets.TargetError] = []
    for entry in loaded:
        if isinstance(entry, targets.TargetError):
            installed.append(entry)
            continue
        try:
            entry.fn()
        except (Exception, SystemExit) as exc:
            installed.append(targets.TargetError(entry.spec, f"calling it failed: {type(exc).__name__}: {exc}"))
            continue
        installed.append(entry)
    return installed


@functools.cache
def plan(device: str) -> Plan:
    started = time.monotonic()
    take_baseline()
    result = Plan(device, compiler_targets=install_compiler_targets())
    try:
        assert _baseline is not None
        result.aim = aim.decide(_baseline, os.environ)
        cases = catalog.cases(device)
        if not result.aim.everything and not result.aim.families:
            result.not_aimed = len(cases)  # nothing changed: no case can be touched, so none needs routing
            cases = []
        # Only this shard's ops are routed: the shard that owns an op routes, reports and runs it, so N shards on
        # N workers route the catalog once between them, not N times (about 150 s for each on a cold CUDA host).
        mine = [case for case in cases if result.aim.in_shard(case.name)]
        result.other_shards = len(cases) - len(mine)
        routed = routes.routes_for(mine, device)
    except Exception as exc:  # noqa: BLE001 - a torch without OpInfo or a bad variable: reported by one test
        result.problem = f"{type(exc).__name__}: {exc}"
        return result
    by_op: dict[str, list[tuple[catalog.OpCase, routes.Route]]] = {}
    for case, route in routed.items():
        by_op.setdefault(case.name, []).append((case, route))
    for op_routes in by_op.values():
        compiled = [(case, route) for case, route in op_routes if routes.compiled_by_inductor(route)]
        for case, route in op_routes:
            if (case, route) not in compiled:
                reason = ("its output shape depends on its values: dynamo leaves it to eager" if route.data_dependent
                          else f"eager cannot run it on {device}" if route.eager_fails
                          else "inductor neither lowers nor decomposes it: its ops fall back to eager's kernels")
                result.not_compiled.setdefault(reason, []).append(case.test_id)
        # An op is touched in every dtype when any dtype's route meets a changed family: dtypes can take
        # different paths through the same decomposition, and one sample per dtype is what was traced.
        touched = any(result.aim.touches(route.families, bool(route.problem)) for _case, route in compiled)
        if touched and not any(result.aim.changed(route.families, bool(route.problem)) for _case, route in compiled):
            result.stock_path.update(case.test_id for case, _route in compiled)
        if not touched:
            result.not_aimed += len(compiled)
        else:
            result.run += [case for case, _route in compiled]
    result.seconds = round(time.monotonic() - started, 1)
    return result
