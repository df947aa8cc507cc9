"""How far a correct lower-precision kernel may land from float64 at each element of a result, measured rather than
assumed (issue 39): the float64 computation run again, NOISE_RUNS times, with the roundings of a float32 (bfloat16,
float16) run drawn at random — Monte Carlo arithmetic at the level of ATen's calls.

Why the ULP rule needs it: an element that is a sum of terms much larger than itself (a matmul or reduction output
near 0, a BatchNorm gradient over two values per channel) carries the rounding of its terms, u × their size, which
is many ULPs of the element itself; eager's distance there is one draw of that noise (a lucky summation order may
land on float64), so k × eager's is no bound for another correct order. The rule allows k × max(eager, noise) + c.

The model, per ATen call in the float64 run (a dispatch mode: forward and backward kernels alike):
- each floating result is multiplied by (1 + δ), δ uniform within ±u of the judged dtype (u: its unit roundoff,
  eps / 2): every intermediate result is rounded to the dtype;
- a call that is not elementwise (no ``pointwise`` tag: sums, matmuls, convolutions, normalisations, scans,
  ``index_add``) also has each floating argument multiplied by (1 + δ), δ within ±ACCUMULATION × u: a sum rounds at
  the size of its partial sums, not of its result, and a term meets several roundings on its way (log2 n in a
  pairwise sum, n / lanes in a vectorised one, a GEMM's K-block in a register); perturbing every term gives that
  error's size where the terms cancel. A compiler may also round the arguments themselves otherwise (a pointwise
  producer fused in and kept in float32, a conv's weights folded with a BatchNorm's scale and rounded again);
- elementwise calls take their arguments as given: a function of an exact input (the op sweep's samples, a model's
  first layer) must be right to about its last place, so ``expm1`` near 0 or ``cos`` near π/2 get no allowance beyond
  their own result's rounding: exactly where cancelling rewrites and cheap approximations go wrong;
- views and in-place calls run as they are.

An element's noise is its largest distance from the float64 reference over the runs. A run that raises, or returns
other shapes, measures nothing (the rule then stands without noise).
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import torch

from . import harness
from .module_runs import ModuleRun, forward_and_grads, map_tensors, to_fp64

NOISE_RUNS = 3
# How much more than one rounding of u a term of a sum may carry, measured on stock torch over the sweep and the
# suites (bench/ulp_calibration.py; docs/suites.md has the figures): 128 is what the sample repository's EfficientNet
# and ResNet gradients needed on CPU (BatchNorm over two values per channel, whose gradient is rounding noise alone).
ACCUMULATION = 128.0
_SEED = 3917
# Calls that copy values without arithmetic: exact, so an input copied into the run (a sample's deep copy, a model's
# cloned inputs, the float64 upcast) stays the exact value it was.
_COPIES = frozenset({"clone", "_to_copy", "copy", "lift_fresh_copy", "detach_copy", "alias_copy", "_copy_from",
                     "_copy_from_and_resize"})


def unit_roundoff(dtype: torch.dtype) -> float:
    return torch.finfo(dtype.to_real() if dtype.is_complex else dtype).eps / 2


def _rounding_mode(base: type) -> type:
    class RoundingNoise(base):  # type: ignore[valid-type, misc]
        def __init__(self, dtype: torch.dtype, seed: int, accumulation: float, rounding: bool) -> None:
            super().__init__()
            self.u = unit_roundoff(dtype)
            self.seed, self.accumulation, self.rounding = seed, accumulation, rounding
            self.generators: dict[torch.device, torch.Generator] = {}

        def _draw(self, t: torch.Tensor, u: float) -> torch.Tensor:
            if (not (t.is_floating_point() or t.is_complex()) or t.numel() == 0 or t.device.type == "meta"
                    or harness.is_zero_tensor(t)):
                return t
            if t.device not in self.generators:
                self.generators[t.device] = torch.Generator(device=t.device).manual_seed(self.seed)
            real = t.dtype.to_real() if t.is_complex() else t.dtype
            draw = torch.rand(t.shape, generator=self.generators[t.device], dtype=real, device=t.device)
            return t * (1 + u * (2 * draw - 1))

        def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
            kwargs = kwargs or {}
            if harness.writes_or_aliases(func) or func.overloadpacket.__name__ in _COPIES:
                return func(*args, **kwargs)
            if torch.Tag.pointwise not in func.tags and self.accumulation:
                args, kwargs = map_tensors((args, kwargs), lambda t: self._draw(t, self.accumulation * self.u))
            out = func(*args, **kwargs)
            return map_tensors(out, lambda t: self._draw(t, self.u)) if self.rounding else out

    return RoundingNoise


def measure(rerun: Callable[[], list[Any] | None], reference: list[Any], dtype: torch.dtype,
            accumulation: float = ACCUMULATION, rounding: bool = True) -> list[Any]:
    """Per leaf of ``reference`` (what ``rerun()`` returns without noise): each element's largest distance from it
    over NOISE_RUNS runs of ``rerun`` with ``dtype``'s roundings drawn, as a float64 tensor; None for a leaf that is
    not a floating tensor, or everywhere when a run fails or the mode is missing from this torch. (``accumulation``
    and ``rounding`` take the two parts of the model apart, for bench/ulp_calibration.py.)"""
    base = harness.dispatch_mode_class()
    nothing: list[Any] = [None] * len(reference)
    if base is None:
        return nothing
    worst: list[Any] = list(nothing)
    for run in range(NOISE_RUNS):
        try:
            with _rounding_mode(base)(dtype, _SEED + run, accumulation, rounding):
                leaves = rerun()
        except Exception:  # noqa: BLE001 - a run the noise breaks (a domain error) measures nothing
            return nothing
        if leaves is None or len(leaves) != len(reference):
            return nothing
        for i, (leaf, exact) in enumerate(zip(leaves, reference, strict=True)):
            if not (isinstance(leaf, torch.Tensor) and isinstance(exact, torch.Tensor)) or leaf.shape != exact.shape:
                continue
            if not (exact.is_floating_point() or exact.is_complex()):
                continue
            distance = _distance(leaf, exact)
            worst[i] = distance if worst[i] is None else torch.maximum(worst[i], distance)
    return worst


def parts(rerun: Callable[[], list[Any] | None], reference: list[Any], dtype: torch.dtype) -> list[Any]:
    """Calibration only: per leaf, (the noise of the results' roundings alone, of the sums' with ACCUMULATION = 1)."""
    rounded, summed = measure(rerun, reference, dtype, 0.0), measure(rerun, reference, dtype, 1.0, rounding=False)
    return list(zip(rounded, summed, strict=True))


def _distance(noisy: torch.Tensor, exact: torch.Tensor) -> torch.Tensor:
    a, b = noisy.detach().cpu(), exact.detach().cpu()
    if a.is_complex() or b.is_complex():
        a, b = a.to(torch.complex128), b.to(torch.complex128)
        return torch.view_as_real(a - b).abs()
    return (a.double() - b.double()).abs()


# --- eager's own error at nearby inputs -------------------------------------------------------------------------------
# Eager's distance to float64 at one element is one draw: a kernel whose formula cancels (GELU's 1 + erf(x/√2) for
# x < -1, a sum whose terms cancel) is off by many ULPs at most inputs and, by luck, by none at some. The same kernel
# at the adjacent representable inputs draws again: the largest of those distances is eager's error there. A kernel
# that is right to its last place is right at every neighbour too (cos near π/2), so nothing is loosened for it.
Nearby = Callable[[int], "tuple[list[Any], list[Any]] | None"]  # seed -> (eager's leaves, float64's) at nudged inputs


def nudge(value: Any, seed: int) -> Any:
    """``value`` with every nonzero finite element of each floating tensor moved to an adjacent representable value
    of its dtype, up or down at random (``seed``); zeros, infinities and NaNs stay (they are special points)."""
    generator = torch.Generator().manual_seed(seed)

    def one(t: torch.Tensor) -> torch.Tensor:
        if not t.is_floating_point() or t.numel() == 0:
            return t
        up = torch.rand(t.shape, generator=generator) < 0.5
        target = torch.where(up.to(t.device), torch.full_like(t, float("inf")), torch.full_like(t, float("-inf")))
        moved = torch.nextafter(t.detach(), target)
        keep = (t == 0) | ~t.isfinite()
        return torch.where(keep, t.detach(), moved).requires_grad_(t.requires_grad)

    return map_tensors(value, one)


def eager_nearby(nearby: Nearby, count: int) -> list[Any]:
    """Per leaf: each element's largest distance between eager and float64 over NOISE_RUNS nudged inputs; None for
    every leaf where a run fails or returns other shapes (then only eager's own distance counts)."""
    nothing: list[Any] = [None] * count
    worst: list[Any] = list(nothing)
    for run in range(NOISE_RUNS):
        try:
            found = nearby(_SEED + run)
        except Exception:  # noqa: BLE001 - an input the nudge takes out of the op's domain
            return nothing
        if found is None or len(found[0]) != count or len(found[1]) != count:
            return nothing
        for i, (eager, exact) in enumerate(zip(*found, strict=True)):
            if (isinstance(eager, torch.Tensor) and isinstance(exact, torch.Tensor) and eager.shape == exact.shape
                    and (eager.is_floating_point() or eager.is_complex())):
                distance = _distance(eager, exact).nan_to_num(nan=0.0, posinf=0.0)
                worst[i] = distance if worst[i] is None else torch.maximum(worst[i], distance)
    return worst


def module_nearby(module: torch.nn.Module, inputs: tuple[Any, ...], *,
                  backward: bool) -> Callable[[int], tuple[ModuleRun, ModuleRun]]:
    """Eager's and the fp64 step of ``module`` as it is now (copied before any call changes it) on nudged inputs."""
    start, start64 = copy.deepcopy(module), copy.deepcopy(module).to(torch.float64)

    def run(seed: int) -> tuple[ModuleRun, ModuleRun]:
        given = nudge(inputs, seed)
        twin, twin64 = copy.deepcopy(start), copy.deepcopy(start64)
        return (forward_and_grads(twin, twin, given, backward=backward),
                forward_and_grads(twin64, twin64, to_fp64(given), backward=backward))

    return run
