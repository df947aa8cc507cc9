"""How the suites run a module or function for eager, compiled and fp64 results: nested outputs flattened and
mapped, inputs cloned or upcast, and one call's outputs, parameter gradients and buffers collected.

Public torch APIs only; private ones live in ``harness.py``.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import torch


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


def fp64_step(module: torch.nn.Module, inputs: tuple[Any, ...], *, backward: bool) -> Callable[[], ModuleRun]:
    """The fp64 reference step of ``module`` as it is now (copied before any call changes it): each call runs it on
    a fresh copy of that state, so the judgement can run it again (rounding_noise.py) and get the same step."""
    start = copy.deepcopy(module).to(torch.float64)

    def run() -> ModuleRun:
        twin = copy.deepcopy(start)
        return forward_and_grads(twin, twin, to_fp64(inputs), backward=backward)

    return run
