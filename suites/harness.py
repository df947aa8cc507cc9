"""The one module that touches private torch APIs, each wrapped so a missing one skips the test that needs it.

Numeric judgement lives in ``judging.py`` and running modules for eager/compiled/fp64 results in ``module_runs.py``;
both use public torch APIs only, so a new private call belongs here.
"""

from __future__ import annotations

import contextlib
import importlib
import sys
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import pytest
import torch


def _private(module: str, attr: str) -> Any:
    """Return torch's private ``module.attr``, or skip the calling test naming what this torch lacks."""
    try:
        return getattr(importlib.import_module(module), attr)
    except (ImportError, AttributeError) as exc:
        pytest.skip(f"torch {torch.__version__} lacks {module}.{attr} ({exc})")


def _optional(module: str, attr: str) -> Any:
    """torch's private ``module.attr``, or None where this torch lacks it (for best-effort figures)."""
    try:
        return getattr(importlib.import_module(module), attr)
    except (ImportError, AttributeError):
        return None


def reset_dynamo() -> None:
    """Forget every compiled frame, guard and cached backend so the next compile starts from scratch."""
    _private("torch._dynamo", "reset")()


def dynamo_counters() -> Mapping[str, Mapping[str, int]]:
    """Dynamo's global event counters (``frames``, ``stats``, ``graph_break``, ``inductor`` ...)."""
    return _private("torch._dynamo.utils", "counters")


@contextlib.contextmanager
def fresh_compile_state() -> Iterator[None]:
    """Run the body with dynamo reset and its counters cleared, and leave no compiled state behind."""
    reset_dynamo()
    _private("torch._dynamo.utils", "counters").clear()
    try:
        yield
    finally:
        reset_dynamo()


def compile_counter(backend: str = "inductor") -> Any:
    """A backend that counts frames (``.frame_count``) and FX call nodes (``.op_count``), then compiles with
    ``backend`` for real."""
    return _private("torch._dynamo.testing", "CompileCounterWithBackend")(backend)


def graph_break_count() -> int:
    """How many graph breaks dynamo recorded since the last ``fresh_compile_state``."""
    return sum(dynamo_counters().get("graph_break", {}).values())


def run_and_get_code(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> tuple[Any, list[str]]:
    """Call ``fn`` and return its result plus the inductor output code of every graph it compiled."""
    return _private("torch._inductor.utils", "run_and_get_code")(fn, *args, **kwargs)


@contextlib.contextmanager
def inductor_config(**changes: Any) -> Iterator[None]:
    """Patch ``torch._inductor.config`` for the body; skip when this torch lacks one of the options."""
    config = _private("torch._inductor", "config")
    missing = [name for name in changes if not hasattr(config, name)]
    if missing:
        pytest.skip(f"torch {torch.__version__} lacks torch._inductor.config.{', '.join(missing)}")
    with config.patch(changes):
        yield


def graph_break_function() -> Callable[[], None]:
    """``torch._dynamo.graph_break``; fetch it outside compiled code and call it inside to force a break."""
    return _private("torch._dynamo", "graph_break")


# The artifacts plugin's per-test capture (generated code, counter deltas, graph-break and recompile reasons) lives
# in suites/capture.py; it reaches torch's private state only through `_optional` above.


# --- freezing and layout suites ------------------------------------------------------------------------------------
# Wrappers for suites/freezing and suites/layout, kept in one block at the end of the file so that parallel additions
# by other suites merge without conflicts.


def inductor_counter(name: str) -> int:
    """How often inductor counted ``name`` (e.g. ``binary_folding``) since the last ``fresh_compile_state``."""
    return int(dynamo_counters().get("inductor", {}).get(name, 0))


def mark_dynamic(tensor: torch.Tensor, *dims: int) -> None:
    """Make dynamo compile ``dims`` of ``tensor`` as symbolic sizes, not as the example's numbers."""
    _private("torch._dynamo", "mark_dynamic")(tensor, list(dims))


# ---------------------------------------------------------------------------------------------------------------------
# passes / autograd / fusion suites: custom inductor passes, the pattern matcher, AOT autograd guards, graph CSE and
# functorch's memory-efficient fusion. Each wrapper looks its target up on every call, so a test (or a planted bug)
# that replaces the torch function is seen.
# ---------------------------------------------------------------------------------------------------------------------

# The inductor hook of each kind of declared pass ([targets]); post-grad and joint ones run after inductor's own
# pattern matching, so a user pass sees (and may rewrite) what the built-in passes produced, as in production.
DECLARED_PASS_HOOKS = {
    "pre_grad_passes": "pre_grad_custom_pass",
    "post_grad_passes": "post_grad_custom_post_pass",
    "joint_passes": "joint_custom_post_pass",
}
CUSTOM_PASS_HOOKS = (
    "pre_grad_custom_pass",
    "joint_custom_pre_pass",
    "joint_custom_post_pass",
    "post_grad_custom_pre_pass",
    "post_grad_custom_post_pass",
)


def custom_graph_pass(fn: Callable[[torch.fx.Graph], None], uuid: Any) -> Any:
    """Wrap ``fn(graph)`` as inductor's ``CustomGraphPass`` whose ``uuid()`` keys the FX graph cache (``None``
    bypasses the cache, so the pass really runs on every compile)."""
    base = _private("torch._inductor.custom_graph_pass", "CustomGraphPass")

    class _FunctionPass(base):  # type: ignore[misc, valid-type]
        def __call__(self, graph: torch.fx.Graph) -> None:
            fn(graph)

        def uuid(self) -> Any:
            return uuid

    _FunctionPass.__qualname__ = f"custom_graph_pass[{getattr(fn, '__name__', type(fn).__name__)}]"
    return _FunctionPass()


def is_custom_graph_pass(candidate: Any) -> bool:
    """Whether ``candidate`` already implements inductor's ``CustomGraphPass`` (and so names its own uuid)."""
    try:
        base = importlib.import_module("torch._inductor.custom_graph_pass").CustomGraphPass
    except (ImportError, AttributeError):
        return False
    return isinstance(candidate, base)


def pattern_matcher_pass() -> Any:
    """A fresh, empty ``torch._inductor.pattern_matcher.PatternMatcherPass``."""
    return _private("torch._inductor.pattern_matcher", "PatternMatcherPass")()


def register_forward_replacement(
    pattern: Callable[..., Any], replacement: Callable[..., Any], example_inputs: list[torch.Tensor], target: Any
) -> None:
    """Trace ``pattern`` and ``replacement`` on ``example_inputs`` and register the rewrite on ``target``
    (a PatternMatcherPass), for graphs without autograd (post-grad graphs)."""
    register = _private("torch._inductor.pattern_matcher", "register_replacement")
    trace = _private("torch._inductor.pattern_matcher", "fwd_only")
    register(pattern, replacement, example_inputs, trace, target)


def pattern_matcher_counts() -> tuple[int, int]:
    """(matches, matched nodes) the inductor pattern matcher counted since the last ``fresh_compile_state``."""
    inductor = dynamo_counters().get("inductor", {})
    return int(inductor.get("pattern_matcher_count", 0)), int(inductor.get("pattern_matcher_nodes", 0))


def recompile_reasons() -> list[str]:
    """Every guard-failure reason dynamo recorded (one per recompile), as text."""
    failures = _private("torch._dynamo.utils", "guard_failures")
    return [str(reason) for reasons in failures.values() for reason in reasons]


@contextlib.contextmanager
def scoped_operator_library(namespace: str) -> Iterator[Any]:
    """A ``torch.library`` FRAGMENT for ``namespace`` whose operators are unregistered when the body ends."""
    with _private("torch.library", "_scoped_library")(namespace, "FRAGMENT") as lib:
        yield lib


def make_fx(fn: Callable[..., Any], *args: Any) -> torch.fx.GraphModule:
    """Trace ``fn(*args)`` into an ATen-level FX GraphModule (real tensors, no autograd)."""
    return _private("torch.fx.experimental.proxy_tensor", "make_fx")(fn)(*args)


def fx_graph_cse(graph: torch.fx.Graph) -> torch.fx.Graph:
    """functorch's common-subexpression elimination: a new graph with duplicate computations merged."""
    return _private("torch._functorch.compile_utils", "fx_graph_cse")(graph)


def memory_efficient_fusion(fn: Callable[..., Any]) -> Callable[..., Any]:
    """functorch's ``memory_efficient_fusion``: AOT autograd with the min-cut recomputation partitioner and
    TorchScript-compiled forward and backward graphs."""
    return _private("functorch.compile", "memory_efficient_fusion")(fn)


# ---------------------------------------------------------------------------------------------------------------------
# issue 20 (corpus breadth): which of inductor's op families a suite run compiles. Best effort like CompileCapture:
# a torch without one of these internals records nothing rather than skipping or failing a test.
# ---------------------------------------------------------------------------------------------------------------------


def inductor_op_tables() -> tuple[list[Any], list[Any]]:
    """The keys of inductor's lowering table (fallbacks included) and of its decomposition table, or empty lists."""
    lowerings = _optional("torch._inductor.lowering", "lowerings") or {}
    select = _optional("torch._inductor.decomposition", "select_decomp_table")
    return list(lowerings), list(select() if select is not None else [])


def record_lowered_ops(record: Callable[[Any], None]) -> bool:
    """Call ``record(target)`` for every node inductor lowers from a post-grad graph, for the rest of the process.
    False where this torch has no ``GraphLowering.call_function`` to observe."""
    lowering = _optional("torch._inductor.graph", "GraphLowering")
    original = getattr(lowering, "call_function", None)
    if original is None:
        return False

    def call_function(self: Any, target: Any, args: Any, kwargs: Any) -> Any:
        record(target)
        return original(self, target, args, kwargs)

    lowering.call_function = call_function
    return True


_PATTERN_TRACERS = frozenset({"fwd_only", "joint_fwd_bwd", "gen_pattern", "gen_pattern_and_search_gm"})


def _tracing_inductor_patterns() -> bool:
    """Whether the caller runs under the pattern matcher tracing its own search/replace patterns (lazily, during the
    first compile): decompositions there belong to inductor's patterns, not to the graph being compiled."""
    frame = sys._getframe(2)
    for _ in range(80):
        if frame is None:
            return False
        code = frame.f_code
        if code.co_name in _PATTERN_TRACERS and code.co_filename.endswith("pattern_matcher.py"):
            return True
        frame = frame.f_back
    return False


def record_decompositions(record: Callable[[Any], None]) -> bool:
    """Call ``record(op)`` whenever one of inductor's decompositions rewrites ``op`` while a graph is traced, for
    the rest of the process (a decomposition that declines, returning NotImplemented, is not counted)."""
    module = _optional("torch._inductor", "decomposition")
    if module is None or not hasattr(module, "decompositions"):
        return False
    tables = [module.decompositions]
    made = getattr(module, "fast_random_decomps", None)  # a cached copy with the random decompositions added
    if made is not None and getattr(made, "cache_info", lambda: None)() is not None and made.cache_info().currsize:
        tables.append(made())  # made already: it copied the entries before they were wrapped
    # Not made here otherwise: inductor copies the table at its first compile, so a repository's decomposition
    # installed after this call (a plugin's pytest_configure) would be missing from it.

    def wrap(op: Any, fn: Callable[..., Any]) -> Callable[..., Any]:
        def decomposed(*args: Any, **kwargs: Any) -> Any:
            result = fn(*args, **kwargs)
            if result is not NotImplemented and not _tracing_inductor_patterns():
                record(op)
            return result

        decomposed.__wrapped__ = fn  # type: ignore[attr-defined]
        return decomposed

    for table in tables:
        for op, fn in list(table.items()):
            if not hasattr(fn, "__wrapped__") or getattr(fn, "__name__", "") != "decomposed":
                table[op] = wrap(op, fn)
    return True


def dynamo_counters_or_empty() -> Mapping[str, Mapping[str, int]]:
    """Dynamo's counters, or an empty mapping where this torch has none (for figures that must never skip)."""
    return _optional("torch._dynamo.utils", "counters") or {}


def dispatch_mode_class() -> type | None:
    """torch's base class for modes that see every ATen call below autograd (forward and backward kernels), or None
    where this torch has none (rounding_noise.py then measures nothing)."""
    return _optional("torch.utils._python_dispatch", "TorchDispatchMode")


def writes_or_aliases(op: Any) -> bool:
    """Whether an ATen overload returns a view of, or writes into, one of its arguments (``view``, ``add_``)."""
    schema = op._schema
    return bool(schema.is_mutable or any(ret.alias_info is not None for ret in schema.returns))


def is_zero_tensor(t: torch.Tensor) -> bool:
    """Autograd's efficient zero tensors (``_efficientzerotensor``): immutable, and arithmetic on one outside the
    dispatcher crashes the process."""
    return bool(getattr(t, "_is_zerotensor", lambda: False)())
