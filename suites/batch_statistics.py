"""Derived tolerances for models that normalise with batch statistics (training-mode BatchNorm, InstanceNorm): how
far a correct float32 training step can land from the fp64 reference, derived per element rather than assumed.

Why eager's distance alone (the suites' rule, precision.py: compiled ≤ k × eager + c ULPs) does not fit them: a
BatchNorm in training mode divides by the standard deviation σ of the n values it sees per channel. Its input
gradient, γ/σ · (g − mean(g) − x̂·mean(g·x̂)), is a difference of terms as large as the incoming gradient g; with few
values per channel (a batch of 2 and a 1×1 feature map: n = 2, where the normalised output is ±1 whatever the input)
they nearly cancel, and what float32 returns is rounding noise of size u·|γ|/σ·|g| (u: float32's unit roundoff),
whatever the exact answer. Eager's distance to the fp64 reference is one draw of that noise (its fused kernel may even
cancel exactly), so twice eager's is no bound for another correct kernel that rounds in another order. Loosening the
rule for every model would hide bugs elsewhere.

The derivation, for models with such layers only: the fp64 reference step is run again (NOISE_RUNS times) with
every batch-statistics layer returning its exact result plus the error a correct float32 kernel may have — per
element, uniform within ±k·u·|γ|/σ·RMS(term) per channel, k = 3 + 2·log2(n) roundings for the input gradient (each
of the three terms once, the two means over n values by a tree of log2(n) additions) and 3 + log2(n) for the output
(x − mean(x) rounded, its mean's tree) — and the rest of the step (in fp64) carries that error wherever it goes. A
element's noise is its largest distance from the exact one over those runs; the compiled element may be
k × max(eager's distance, noise) + c ULPs away. A bug that changes the maths (a wrong variance, a lost term) is off by
far more than that. The general measurement (rounding_noise.py: every rounding of the step drawn) covers the same
layers from ATen's kernels up; this derivation stays as the bound written from the layer's own maths.

Public torch APIs only.
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from torch.overrides import TorchFunctionMode

from .module_runs import ModuleRun, flatten_outputs, forward_and_grads, to_fp64

NOISE_RUNS = 3
UNIT_ROUNDOFF = torch.finfo(torch.float32).eps / 2


def batch_statistics_layers(model: nn.Module) -> list[str]:
    """The layers that normalise with the statistics of the values they are given: ``name (Type)``."""
    found = []
    for name, layer in model.named_modules():
        batch_norm = isinstance(layer, nn.modules.batchnorm._BatchNorm) and (
            layer.training or layer.running_mean is None
        )
        instance_norm = isinstance(layer, nn.modules.instancenorm._InstanceNorm) and (
            layer.training or not layer.track_running_stats
        )
        if batch_norm or instance_norm:
            found.append(f"{name or '(model)'} ({type(layer).__name__})")
    return found


def _per_channel(t: torch.Tensor, instance: bool) -> tuple[tuple[int, ...], int]:
    """The dimensions a layer reduces over (all but channels; for instance norm, also all but the batch) and n."""
    dims = tuple(d for d in range(t.dim()) if d != 1 and not (instance and d == 0))
    return dims, math.prod(t.shape[d] for d in dims)


def _rms(t: torch.Tensor, dims: tuple[int, ...]) -> torch.Tensor:
    return t.square().mean(dims, keepdim=True).sqrt()


def _uniform(like: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    return (torch.rand(like.shape, generator=generator, dtype=like.dtype) * 2 - 1).to(like.device)


class _RoundedNormalisation(torch.autograd.Function):
    """The exact normalisation, plus a float32 kernel's possible rounding error in its output and input gradient."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, weight: Any, bias: Any, exact: Any, generator: torch.Generator,
                instance: bool, eps: float) -> torch.Tensor:
        ctx.exact, ctx.generator, ctx.instance, ctx.eps = exact, generator, instance, eps
        ctx.save_for_backward(x, weight, bias)
        y = exact(x, weight, bias, update=True)
        dims, n = _per_channel(x, instance)
        scale = _gain(x, weight, dims, eps) * (3 + math.log2(max(n, 1))) * UNIT_ROUNDOFF * _rms(x, dims)
        return y + scale * _uniform(y, generator)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[Any, ...]:
        x, weight, bias = ctx.saved_tensors
        with torch.enable_grad():
            leaves = [t.detach().requires_grad_() if t is not None else None for t in (x, weight, bias)]
            y = ctx.exact(*leaves, update=False)
            wanted = [t for t in leaves if t is not None]
            found = iter(torch.autograd.grad(y, wanted, grad))
        gx, gw, gb = (next(found) if t is not None else None for t in leaves)
        dims, n = _per_channel(x, ctx.instance)
        # x̂ = (x − mean)/σ carries a relative error u·RMS(x)/σ (the subtraction rounds at the size of x), and so do
        # the terms of the gradient that it multiplies.
        offset = (_rms(x, dims) * _gain(x, None, dims, ctx.eps)).clamp_min(1)
        scale = _gain(x, weight, dims, ctx.eps) * (3 + 2 * math.log2(max(n, 1))) * UNIT_ROUNDOFF * _rms(grad, dims)
        scale = scale * offset
        return gx + scale * _uniform(gx, ctx.generator), gw, gb, None, None, None, None


def _gain(x: torch.Tensor, weight: torch.Tensor | None, dims: tuple[int, ...], eps: float) -> torch.Tensor:
    """|γ|/σ per channel, σ = sqrt(var + eps) over the values the layer normalises."""
    inverse_std = 1 / (x.detach().var(dims, keepdim=True, correction=0) + eps).sqrt()
    if weight is None:
        return inverse_std
    shape = [1] * x.dim()
    shape[1] = -1
    return inverse_std * weight.detach().abs().reshape(shape)


class _RoundingNoise(TorchFunctionMode):
    """Routes every batch-statistics call of F.batch_norm / F.instance_norm through _RoundedNormalisation."""

    def __init__(self, generator: torch.Generator) -> None:
        super().__init__()
        self.generator = generator

    def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        if func is F.batch_norm:
            bound = dict(zip(("input", "running_mean", "running_var", "weight", "bias", "training", "momentum",
                              "eps"), args, strict=False), **kwargs)
            if bound.get("training", False):
                return self._noisy(bound, instance=False)
        if func is F.instance_norm:
            bound = dict(zip(("input", "running_mean", "running_var", "weight", "bias", "use_input_stats",
                              "momentum", "eps"), args, strict=False), **kwargs)
            if bound.get("use_input_stats", True):
                return self._noisy(bound, instance=True)
        return func(*args, **kwargs)

    def _noisy(self, bound: dict[str, Any], instance: bool) -> torch.Tensor:
        # torch.batch_norm / torch.instance_norm (what F.* call) are not intercepted: the backward's recomputation,
        # which runs while this mode is still active, gets the exact values.
        norm = torch.instance_norm if instance else torch.batch_norm
        momentum, eps = bound.get("momentum", 0.1), bound.get("eps", 1e-5)

        def exact(x: torch.Tensor, weight: Any, bias: Any, *, update: bool) -> torch.Tensor:
            stats = (bound.get("running_mean"), bound.get("running_var")) if update else (None, None)
            return norm(x, weight, bias, *stats, True, momentum or 0.0, eps, torch.backends.cudnn.enabled)

        return _RoundedNormalisation.apply(bound["input"], bound.get("weight"), bound.get("bias"), exact,
                                           self.generator, instance, eps)


def _distance(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    a64, b64 = a.detach().cpu().to(torch.float64), b.detach().cpu().to(torch.float64)
    return (a64 - b64).abs().nan_to_num(nan=0.0, posinf=0.0)


def _leaf_errors(run: ModuleRun, reference: ModuleRun) -> dict[str, torch.Tensor]:
    errors = {}
    for what, mine, theirs in (("output", run.outputs, reference.outputs), ("grad", run.grads, reference.grads)):
        for (path, leaf), (_, ref) in zip(flatten_outputs(mine, what), flatten_outputs(theirs, what), strict=False):
            if (isinstance(leaf, torch.Tensor) and isinstance(ref, torch.Tensor) and leaf.is_floating_point()
                    and leaf.shape == ref.shape):
                errors[path] = _distance(leaf, ref)
    return errors


@dataclass(frozen=True)
class Noise:
    """Per-element float32 noise of a training step (by leaf path, e.g. ``grad['bn1.weight']``: each element's
    largest distance from the fp64 reference, in float64) and how it was got."""

    per_leaf: dict[str, torch.Tensor]
    derivation: str

    def __bool__(self) -> bool:
        return bool(self.per_leaf)


NO_NOISE = Noise({}, "")


def measure_noise(model: nn.Module, inputs: tuple[Any, ...], reference: ModuleRun, *, backward: bool) -> Noise:
    """For a model with batch-statistics layers: each tensor's largest distance from the fp64 ``reference`` over
    NOISE_RUNS fp64 runs of the same step with float32-sized rounding errors in those layers (see the module's
    docstring). ``model`` must be in the state the judged runs started from; it is not changed. Empty otherwise."""
    layers = batch_statistics_layers(model)
    if not layers:
        return NO_NOISE
    worst: dict[str, torch.Tensor] = {}
    for seed in range(NOISE_RUNS):
        twin = copy.deepcopy(model).to(torch.float64)
        with _RoundingNoise(torch.Generator().manual_seed(4321 + seed)):
            run = forward_and_grads(twin, twin, to_fp64(inputs), backward=backward)
        for path, error in _leaf_errors(run, reference).items():
            worst[path] = torch.maximum(worst[path], error) if path in worst else error
    shown = ", ".join(layers[:3]) + (f" and {len(layers) - 3} more" if len(layers) > 3 else "")
    derivation = (
        f"the model normalises with batch statistics ({shown}); a float32 kernel for those layers may be off by "
        f"k·u·|γ|/σ times the RMS of its input (output, k = 3 + log2 n) or incoming gradient (input gradient, "
        f"k = 3 + 2·log2 n), u the unit roundoff, n the values per channel, and the cancelling terms of the "
        f"gradient make that the size of the result itself. Each element's 'noise' is its largest distance from the "
        f"fp64 reference over {NOISE_RUNS} fp64 runs of the same step with such errors drawn in those layers (and "
        f"over the runs with every rounding drawn, rounding_noise.py): a compiled element within k x that + c ULPs "
        f"is as right as float32 can be"
    )
    return Noise(worst, derivation)
