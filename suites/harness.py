"""The one module that touches private torch APIs, each wrapped so a missing one skips the test that needs it."""

from __future__ import annotations

import contextlib
import importlib
import math
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import pytest
import torch

# Compiled-vs-eager judgement, in the spirit of torch._dynamo.utils.same(fp64_ref=...): a compiled result may be
# at most TOLERANCE_MULTIPLIER times as far from the fp64 reference as eager is, plus an absolute RMSE floor so
# that results eager gets (nearly) exact do not demand bit-exactness from reordered reductions.
TOLERANCE_MULTIPLIER = 2.0
RMSE_FLOOR = 1e-5


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


def flatten_outputs(value: Any, prefix: str = "output") -> list[tuple[str, Any]]:
    """Flatten nested tuples, lists and dicts into (path, leaf) pairs, e.g. ``output[1]['logits']``."""
    if isinstance(value, Mapping):
        return [leaf for key, item in value.items() for leaf in flatten_outputs(item, f"{prefix}[{key!r}]")]
    if isinstance(value, list | tuple):
        return [leaf for i, item in enumerate(value) for leaf in flatten_outputs(item, f"{prefix}[{i}]")]
    return [(prefix, value)]


def map_tensors(value: Any, fn: Callable[[torch.Tensor], Any]) -> Any:
    """Apply ``fn`` to every tensor in nested tuples (named too), lists and dicts; other leaves are kept."""
    if isinstance(value, torch.Tensor):
        return fn(value)
    if isinstance(value, Mapping):
        return {key: map_tensors(item, fn) for key, item in value.items()}
    if isinstance(value, list | tuple):
        items = [map_tensors(item, fn) for item in value]
        return type(value)(*items) if hasattr(value, "_fields") else type(value)(items)
    return value


def _upcast(t: torch.Tensor) -> torch.Tensor:
    if t.is_floating_point():
        return t.detach().to(torch.float64).requires_grad_(t.requires_grad)
    return t.detach().to(torch.complex128) if t.is_complex() else t.detach().clone()


def to_fp64(value: Any) -> Any:
    """A float64 (complex128) copy of every floating (complex) tensor in ``value``, keeping requires_grad."""
    return map_tensors(value, _upcast)


def clone_inputs(inputs: tuple[Any, ...]) -> tuple[Any, ...]:
    """Fresh copies of the tensors in ``inputs`` (same requires_grad), so no call sees another call's mutation."""
    return tuple(
        x.detach().clone().requires_grad_(x.requires_grad) if isinstance(x, torch.Tensor) else x for x in inputs
    )


def _as_fp64(t: torch.Tensor) -> torch.Tensor:
    return torch.view_as_real(t.to(torch.complex128)) if t.is_complex() else t.to(torch.float64)


def _rmse(a: torch.Tensor, b: torch.Tensor, finite: torch.Tensor) -> float:
    diff = (_as_fp64(a) - _as_fp64(b))[finite]
    return math.sqrt(diff.square().mean().item()) if diff.numel() else 0.0


def _describe_worst(actual: torch.Tensor, eager: torch.Tensor) -> str:
    wide = torch.complex128 if actual.is_complex() or eager.is_complex() else torch.float64
    diff = (actual.to(wide) - eager.to(wide)).abs().nan_to_num(nan=math.inf)
    if diff.numel() == 0:
        return "empty tensors"
    flat = int(diff.argmax())
    index = tuple(int(i) for i in torch.unravel_index(torch.tensor(flat), diff.shape)) if diff.dim() else ()
    return (
        f"largest |compiled - eager| = {diff.max().item():.3g} at index {index} "
        f"(compiled {actual.reshape(-1)[flat].item():.6g}, eager {eager.reshape(-1)[flat].item():.6g})"
    )


def _compare_leaf(path: str, actual: Any, eager: Any, reference: Any, multiplier: float, floor: float) -> str | None:
    if not isinstance(eager, torch.Tensor):
        return None if actual == eager else f"{path}: compiled {actual!r} != eager {eager!r}"
    if not isinstance(actual, torch.Tensor):
        return f"{path}: compiled returned {type(actual).__name__}, eager returned a Tensor"
    if actual.shape != eager.shape or actual.dtype != eager.dtype:
        return f"{path}: compiled {tuple(actual.shape)} {actual.dtype} != eager {tuple(eager.shape)} {eager.dtype}"
    if not eager.is_floating_point() and not eager.is_complex():
        return None if torch.equal(actual, eager) else f"{path}: {_describe_worst(actual, eager)} (exact dtype)"
    actual64, eager64, reference64 = _as_fp64(actual), _as_fp64(eager), _as_fp64(reference)
    finite = torch.isfinite(eager64)
    if not torch.equal(finite, torch.isfinite(actual64)) or not torch.equal(
        actual64[~finite].nan_to_num(), eager64[~finite].nan_to_num()
    ):
        return f"{path}: compiled and eager disagree on the non-finite (NaN/inf) elements"
    finite &= torch.isfinite(reference64)
    eager_error, compiled_error = _rmse(eager64, reference64, finite), _rmse(actual64, reference64, finite)
    allowed = multiplier * eager_error + floor
    if compiled_error <= allowed:
        return None
    return (
        f"{path}: compiled RMSE vs fp64 reference {compiled_error:.3g} > {multiplier:g} x eager RMSE "
        f"{eager_error:.3g} + {floor:g}; {_describe_worst(actual, eager)}"
    )


def differences_from_reference(
    actual: Any,
    eager: Any,
    reference_fp64: Any,
    *,
    multiplier: float = TOLERANCE_MULTIPLIER,
    floor: float = RMSE_FLOOR,
    what: str = "output",
) -> list[str]:
    """One line per leaf where compiled ``actual`` is further from the fp64 reference than ``eager`` allows.

    The three arguments are matching (nested) structures; leaves are tensors or plain values.
    """
    actual_leaves, eager_leaves = flatten_outputs(actual, what), flatten_outputs(eager, what)
    reference_leaves = flatten_outputs(reference_fp64, what)
    if [p for p, _ in actual_leaves] != [p for p, _ in eager_leaves]:
        return [f"{what}: compiled structure {[p for p, _ in actual_leaves]} != eager {[p for p, _ in eager_leaves]}"]
    if len(reference_leaves) != len(eager_leaves):
        return [f"{what}: the fp64 reference has a different structure than eager"]
    return [
        problem
        for (path, a), (_, e), (_, r) in zip(actual_leaves, eager_leaves, reference_leaves, strict=True)
        if (problem := _compare_leaf(path, a, e, r, multiplier, floor)) is not None
    ]


def fail_on_differences(problems: list[str]) -> None:
    """Fail the test with every difference listed, one per line (they become the check-run annotation)."""
    if problems:
        pytest.fail("compiled result differs from eager beyond tolerance:\n  " + "\n  ".join(problems), pytrace=False)


def assert_close_to_reference(actual: Any, eager: Any, reference_fp64: Any, **options: Any) -> None:
    """Fail unless compiled ``actual`` is as close to the fp64 reference as ``eager`` is (see above for options)."""
    fail_on_differences(differences_from_reference(actual, eager, reference_fp64, **options))


def graph_break_function() -> Callable[[], None]:
    """``torch._dynamo.graph_break``; fetch it outside compiled code and call it inside to force a break."""
    return _private("torch._dynamo", "graph_break")


@dataclass(frozen=True)
class ModuleRun:
    """What one call of a module produced: its outputs, parameter gradients and buffers afterwards."""

    outputs: Any
    grads: dict[str, torch.Tensor]
    buffers: dict[str, torch.Tensor]


def _cotangent(t: torch.Tensor) -> torch.Tensor:
    # The same numbers for eager, compiled and fp64 runs; random rather than ones so that reductions whose gradient
    # of a plain sum vanishes (softmax, normalisation) still get a meaningful backward.
    generator = torch.Generator().manual_seed(1234)
    return torch.randn(t.shape, generator=generator, dtype=torch.float64).to(dtype=t.dtype, device=t.device)


def forward_and_grads(
    call: Callable[..., Any], module: torch.nn.Module, inputs: tuple[Any, ...], *, backward: bool
) -> ModuleRun:
    """Call ``call(*inputs)`` (``module`` or its compiled form) from a fixed seed; with ``backward``, backpropagate
    fixed random cotangents through every floating output and collect ``module``'s parameter gradients."""
    module.zero_grad(set_to_none=True)
    torch.manual_seed(0)
    with torch.set_grad_enabled(backward):
        outputs = call(*clone_inputs(inputs))
    leaves = [t for _, t in flatten_outputs(outputs) if isinstance(t, torch.Tensor) and t.requires_grad]
    if backward and leaves:
        torch.autograd.backward(leaves, [_cotangent(t) for t in leaves])
    grads = {name: p.grad.detach().clone() for name, p in module.named_parameters() if p.grad is not None}
    buffers = {name: b.detach().clone() for name, b in module.named_buffers()}
    return ModuleRun(map_tensors(outputs, torch.Tensor.detach), grads, buffers)


class CompileCapture:
    """What inductor produced while a test ran: the generated code of each graph and compile metrics."""

    def __init__(self) -> None:
        self.codes: list[str] = []
        self._start: dict[str, float] = {}
        self.metrics: dict[str, float] = {}

    def _snapshot(self) -> dict[str, float]:
        # Metrics are best effort on any torch version: a missing private API drops that figure, never the test
        # (``_private`` skips the calling test, which must not happen from inside the artifacts plugin).
        snap: dict[str, float] = {}
        counters = _optional("torch._dynamo.utils", "counters") or {}
        snap.update(
            frames=counters.get("frames", {}).get("total", 0),
            graphs=counters.get("stats", {}).get("unique_graphs", 0),
            graph_breaks=sum(counters.get("graph_break", {}).values()),
            fx_graph_cache_hits=counters.get("inductor", {}).get("fxgraph_cache_hit", 0),
            fx_graph_cache_misses=counters.get("inductor", {}).get("fxgraph_cache_miss", 0),
            autograd_cache_hits=counters.get("aot_autograd", {}).get("autograd_cache_hit", 0),
        )
        failures = _optional("torch._dynamo.utils", "guard_failures")
        if failures is not None:  # every recompile is preceded by a guard failure of an already compiled frame
            snap["recompiles"] = sum(len(reasons) for reasons in failures.values())
        times = _optional("torch._dynamo.utils", "compilation_time_metrics")
        if times is not None:
            snap["compile_time_s"] = sum(times.get("_compile.compile_inner", []))
        kernels = _optional("torch._inductor.metrics", "generated_kernel_count")
        if kernels is not None:
            snap["kernels_generated"] = kernels
        return snap

    @contextlib.contextmanager
    def active(self) -> Iterator[CompileCapture]:
        """Hook inductor's own output-code callback (also called on cache hits); no debug mode is turned on,
        so what the test exercises, caches included, is unchanged."""
        try:
            lowering = _private("torch._inductor.graph", "GraphLowering")
        except Exception:  # noqa: BLE001
            lowering = None
        previous = getattr(lowering, "save_output_code", None)

        def save(code: str) -> None:
            self.codes.append(code)
            if previous is not None:
                previous(code)

        if lowering is not None:
            lowering.save_output_code = save
        self._start = self._snapshot()
        try:
            yield self
        finally:
            end = self._snapshot()
            self.metrics = {k: round(end[k] - self._start.get(k, 0), 4) for k in end}
            if lowering is not None:
                lowering.save_output_code = previous


# --- freezing and layout suites ------------------------------------------------------------------------------------
# Wrappers for suites/freezing and suites/layout, kept in one block at the end of the file so that parallel additions
# by other suites merge without conflicts.


def inductor_counter(name: str) -> int:
    """How often inductor counted ``name`` (e.g. ``binary_folding``) since the last ``fresh_compile_state``."""
    return int(dynamo_counters().get("inductor", {}).get(name, 0))


@contextlib.contextmanager
def full_precision_on_cuda(device: str) -> Iterator[None]:
    """TF32 off for CUDA convolutions and matmuls, so eager and compiled kernels are plain fp32 and their distance to
    the fp64 reference compares (folding and channels-last kernels round TF32 differently)."""
    if device != "cuda":
        yield
        return
    saved = torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32
    torch.backends.cudnn.allow_tf32 = torch.backends.cuda.matmul.allow_tf32 = False
    try:
        yield
    finally:
        torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32 = saved


def mark_dynamic(tensor: torch.Tensor, *dims: int) -> None:
    """Make dynamo compile ``dims`` of ``tensor`` as symbolic sizes, not as the example's numbers."""
    _private("torch._dynamo", "mark_dynamic")(tensor, list(dims))


# ---------------------------------------------------------------------------------------------------------------------
# passes / autograd / fusion suites: custom inductor passes, the pattern matcher, AOT autograd guards, graph CSE and
# functorch's memory-efficient fusion. Each wrapper looks its target up on every call, so a test (or a planted bug)
# that replaces the torch function is seen.
# ---------------------------------------------------------------------------------------------------------------------

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
