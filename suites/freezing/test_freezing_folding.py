"""Inductor freezing folds conv+batchnorm and scalar multipliers into the conv, and the results keep eager's dtype
and stay as close to a float64 copy of the module as eager is (the suite's conftest turns freezing on)."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest
import torch
from torch import nn

from .. import harness, judging, module_runs
from .conv_bn_modules import (
    CHANNELS,
    IMAGE_SHAPE,
    ConvBatchNorm,
    ConvFeedingTwoBatchNorms,
    ConvFeedingTwoFunctionalBatchNorms,
    ConvFunctionalBatchNorm,
)


def _call_once(module: nn.Module, x: torch.Tensor) -> torch.Tensor:
    return module(x)


def _call_twice(module: nn.Module, x: torch.Tensor) -> torch.Tensor:
    # Module sharing as models write it: the same conv+bn called twice on one input. Common-subexpression
    # elimination merges the two calls into one conv+bn chain, which must then be folded like any other.
    first = module(x)
    return module(x) - 0.5 * first


def _call_on_both_halves(module: nn.Module, x: torch.Tensor) -> torch.Tensor:
    # Module sharing across different inputs: two convolutions share one weight, so folding a batchnorm into it
    # for one use would change the other; the pair may stay unfolded but must keep eager's numbers.
    return module(x[:1]) - 0.5 * module(x[1:])


# name -> (factory, how the compiled function uses the module, whether a fold must happen)
CONV_BN_CASES: dict[str, tuple[Callable[[], nn.Module], Callable[[nn.Module, torch.Tensor], torch.Tensor], bool]] = {
    "module_bn": (ConvBatchNorm, _call_twice, True),
    "functional_bn": (ConvFunctionalBatchNorm, _call_twice, True),
    "module_bn_on_two_inputs": (ConvBatchNorm, _call_on_both_halves, False),
    # A conv shared by two different batchnorms cannot take both folds and may legitimately stay unfolded.
    "conv_feeds_two_bns": (ConvFeedingTwoBatchNorms, _call_once, False),
    "conv_feeds_two_functional_bns": (ConvFeedingTwoFunctionalBatchNorms, _call_once, False),
}


def _eager_compiled_reference(fn: Callable[..., Any], module: nn.Module, *inputs: torch.Tensor) -> tuple[Any, Any, Any]:
    """Eager and compiled results of ``fn(module, *inputs)`` and the float64 run (a callable, run again for the
    rounding noise where needed); the reference copy is taken first."""
    reference = copy.deepcopy(module).to(torch.float64)
    eager = fn(module, *module_runs.clone_inputs(inputs))
    compiled = torch.compile(fn, backend="inductor")(module, *module_runs.clone_inputs(inputs))
    return compiled, eager, lambda: fn(reference, *module_runs.to_fp64(inputs))


@pytest.mark.parametrize("case", list(CONV_BN_CASES))
def test_conv_bn_folded_matches_eager(case: str, device: str) -> None:
    factory, use, must_fold = CONV_BN_CASES[case]
    module = factory().to(device).eval()
    compiled, eager, fp64 = _eager_compiled_reference(use, module, torch.randn(IMAGE_SHAPE, device=device))
    judging.assert_close_to_reference(compiled, eager, fp64)
    if must_fold:
        # Without a fold the test above would only prove that unfolded conv+bn is right.
        assert harness.inductor_counter("binary_folding") > 0, "freezing did not fold the batchnorm into the conv"


def test_conv_bn_folded_in_low_precision(device: str) -> None:
    # Folding computes the new weights in higher precision and casts back; the result must keep the module's dtype.
    # CPU convolutions have no fast float16 path, CUDA ones have; each device gets its common inference dtype.
    dtype = torch.bfloat16 if device == "cpu" else torch.float16
    module = ConvBatchNorm().to(device).eval()
    x = torch.randn(IMAGE_SHAPE, device=device)
    reference = copy.deepcopy(module).to(torch.float64)
    low = module.to(dtype)
    eager = low(x.to(dtype))
    compiled = torch.compile(low, backend="inductor")(x.to(dtype))
    judging.assert_close_to_reference(compiled, eager, lambda: reference(x.double()))
    assert harness.inductor_counter("binary_folding") > 0, f"freezing did not fold the batchnorm in {dtype}"


def _times_float32_tensor(module: nn.Module, x: torch.Tensor) -> torch.Tensor:
    # A one-element float32 tensor promotes a low-precision product to float32 in eager; folding the multiplier into
    # the conv's low-precision weights would silently return the narrower dtype, so it must stay unfolded.
    return module(x) * torch.full([1], 2.0, device=x.device)


def _times_python_scalar(module: nn.Module, x: torch.Tensor) -> torch.Tensor:
    # A Python scalar does not promote: this multiplier can be folded and the result keeps the conv's dtype.
    return module(x) * 2.5


# name -> (function, whether the multiplier must be folded into the conv)
SCALED_CONVS: dict[str, tuple[Callable[[nn.Module, torch.Tensor], torch.Tensor], bool]] = {
    "promoting_tensor_scale": (_times_float32_tensor, False),
    "python_scalar_scale": (_times_python_scalar, True),
}


@pytest.mark.parametrize("case", list(SCALED_CONVS))
def test_folding_keeps_dtype(case: str, device: str) -> None:
    scaled_conv, must_fold = SCALED_CONVS[case]
    dtype = torch.bfloat16 if device == "cpu" else torch.float16
    conv = nn.Conv2d(3, CHANNELS, kernel_size=3, stride=2, bias=False).to(device, dtype).eval()
    x = torch.randn(IMAGE_SHAPE, device=device).to(dtype)
    compiled, eager, fp64 = _eager_compiled_reference(scaled_conv, conv, x)
    assert compiled.dtype == eager.dtype, f"folding changed the dtype: compiled {compiled.dtype}, eager {eager.dtype}"
    judging.assert_close_to_reference(compiled, eager, fp64)
    if must_fold:
        assert harness.inductor_counter("binary_folding") > 0, "freezing did not fold the scalar into the conv"


def test_autocast_weights_not_folded_in_wrong_dtype(device: str) -> None:
    # Under autocast the linear runs in low precision: the weight cast may be folded into a constant, but the
    # compiled result must keep autocast's dtype and eager's accuracy. 10 features: not a vector-width multiple.
    dtype = torch.bfloat16 if device == "cpu" else torch.float16
    module = nn.Linear(10, 10).to(device).eval()
    x = torch.rand(6, 10, device=device)
    reference = copy.deepcopy(module).to(torch.float64)
    with torch.autocast(device_type=device, dtype=dtype):
        eager = module(x)
        compiled = torch.compile(module, backend="inductor")(x)
    assert compiled.dtype == eager.dtype == dtype, f"compiled {compiled.dtype}, eager {eager.dtype}"
    judging.assert_close_to_reference(compiled, eager, lambda: reference(x.double()))
