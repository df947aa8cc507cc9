"""The ops suite's private torch APIs (OpInfo, inductor's tables and config, make_fx), in one place.

``suites/harness.py`` is the other suites' gateway; this one holds what only the sweep needs, looked up when called,
so a torch without one of them skips the sweep with the reason instead of breaking collection.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import sys
import types
import unittest
from collections.abc import Callable, Iterator
from typing import Any

import torch

CONFIG_MODULES = ("torch._inductor.config", "torch._functorch.config")


class Unavailable(RuntimeError):
    """This torch lacks something the sweep needs; the message names it."""


def optional(module: str, attr: str) -> Any:
    try:
        return getattr(importlib.import_module(module), attr)
    except (ImportError, AttributeError):
        return None


def required(module: str, attr: str) -> Any:
    try:
        return getattr(importlib.import_module(module), attr)
    except (ImportError, AttributeError) as exc:
        raise Unavailable(f"torch {torch.__version__} lacks {module}.{attr} ({exc})") from exc


def opinfo_database() -> list[Any]:
    """``common_methods_invocations.op_db``, shipped in the torch wheel."""
    if importlib.util.find_spec("expecttest") is None:
        # torch's test utilities import expecttest only for its TestCase base class, which the sweep never uses;
        # runner images ship it, a bare GPU host may not.
        stand_in = types.ModuleType("expecttest")
        stand_in.TestCase = unittest.TestCase  # type: ignore[attr-defined]
        sys.modules["expecttest"] = stand_in
    return list(required("torch.testing._internal.common_methods_invocations", "op_db"))


def inductor_tables() -> tuple[dict[Any, Any], frozenset[Any], dict[Any, Any]]:
    """(lowerings, fallbacks, the decomposition table inductor compiles with) as they are now."""
    lowerings = required("torch._inductor.lowering", "lowerings")
    fallbacks = optional("torch._inductor.lowering", "fallbacks") or set()
    return lowerings, frozenset(fallbacks), dict(required("torch._inductor.decomposition", "select_decomp_table")())


def trace_with_decompositions(fn: Callable[..., Any], table: dict[Any, Any], *args: Any) -> torch.fx.GraphModule:
    """``fn`` traced to ATen with fake tensors, applying ``table`` as AOT autograd does for inductor."""
    make_fx = required("torch.fx.experimental.proxy_tensor", "make_fx")
    return make_fx(fn, decomposition_table=table, tracing_mode="fake")(*args)


def is_fake_tracing_refusal(exc: BaseException) -> bool:
    """Data-dependent output shapes (nonzero, unique ...) cannot be traced with fake tensors; inductor falls back."""
    names = {"DataDependentOutputException", "DynamicOutputShapeException", "GuardOnDataDependentSymNode"}
    return type(exc).__name__ in names


def config_snapshot() -> dict[str, str]:
    """Every setting of inductor's and functorch's config by qualified name: plain values by repr, callables and pass
    objects by identity (a pass set by the repository differs from torch's even when its repr would not)."""
    values: dict[str, str] = {}
    for name in CONFIG_MODULES:
        module = sys.modules.get(name) or importlib.import_module(name)
        for key in sorted(getattr(module, "_config", {})):
            value = getattr(module, key, None)
            if callable(value) or hasattr(value, "uuid"):
                values[f"{name}.{key}"] = f"{type(value).__qualname__} object {id(value):#x}"
            else:
                values[f"{name}.{key}"] = repr(value)[:200]
    return values


@contextlib.contextmanager
def sweep_config() -> Iterator[None]:
    """Random ops draw eager's numbers (so compiled and eager compare), and dynamo never falls back to eager
    silently: a recompile limit hit raises instead of running the op uncompiled."""
    inductor = required("torch._inductor", "config")
    dynamo = required("torch._dynamo", "config")
    changes = {"fallback_random": True}
    dynamo_changes = {k: v for k, v in (("fail_on_recompile_limit_hit", True), ("recompile_limit", 64))
                      if hasattr(dynamo, k)}
    with inductor.patch(changes), dynamo.patch(dynamo_changes):
        yield


def reset_dynamo() -> None:
    required("torch._dynamo", "reset")()


def graph_count() -> int:
    counters = optional("torch._dynamo.utils", "counters") or {}
    return int(counters.get("stats", {}).get("unique_graphs", 0))
