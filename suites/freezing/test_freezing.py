"""Inference with inductor freezing: parameters become constants, conv+batchnorm folds, and results stay eager's.

Freezing (``torch._inductor.config.freezing``) only applies to inference graphs, so every compile here runs under
``torch.no_grad()`` on modules in eval mode. Numerics are judged against a float64 copy of the module.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import torch
from torch import nn
from torch.nn import functional as F

from .. import harness, judging, module_runs, targets

# Batch 2 and 9x9 images with a stride-2 3x3 conv give a 4x4 output: big enough for per-channel statistics to
# matter, small enough that each compile is dominated by codegen, not by running the convolution.
IMAGE_SHAPE = (2, 3, 9, 9)
CHANNELS = 8


@pytest.fixture(autouse=True)
def freezing_on() -> Iterator[None]:
    with harness.inductor_config(freezing=True), torch.no_grad():
        yield


@pytest.fixture(autouse=True)
def full_precision_cuda_convolutions(device: str) -> Iterator[None]:
    # Folding changes which numbers TF32 rounds (scaled weights instead of conv outputs).
    with judging.full_precision_on_cuda(device):
        yield


def _randomise_statistics(running_mean: torch.Tensor, running_var: torch.Tensor, *affine: torch.Tensor) -> None:
    # Default statistics (mean 0, var 1, weight 1, bias 0) fold to an identity: a fold that drops or misapplies
    # the scale would still match eager. Random ones make every channel's scale and shift distinct.
    with torch.no_grad():
        running_mean.uniform_(-1, 1)
        running_var.uniform_(0.5, 2.0)
        for tensor in affine:
            tensor.normal_()


class ConvBatchNorm(nn.Module):
    # eps=1e-3 (not the default) so a fold that ignores the module's eps is visible.
    def __init__(self, bias: bool = True) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, CHANNELS, kernel_size=3, stride=2, bias=bias)
        self.bn = nn.BatchNorm2d(CHANNELS, eps=1e-3)
        _randomise_statistics(self.bn.running_mean, self.bn.running_var, self.bn.weight, self.bn.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.bn(self.conv(x))


class ConvFunctionalBatchNorm(nn.Module):
    """``F.batch_norm`` on buffers instead of an ``nn.BatchNorm2d`` module: the fold must find them by value."""

    def __init__(self, bias: bool = False) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, CHANNELS, kernel_size=3, stride=2, bias=bias)
        for name in ("running_mean", "running_var", "weight", "bias"):
            self.register_buffer(f"bn_{name}", torch.empty(CHANNELS))
        _randomise_statistics(self.bn_running_mean, self.bn_running_var, self.bn_weight, self.bn_bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.batch_norm(
            self.conv(x), self.bn_running_mean, self.bn_running_var, self.bn_weight, self.bn_bias, False, 0.1, 1e-5
        )


class ConvFeedingTwoBatchNorms(nn.Module):
    """One conv normalised by two batchnorms with different statistics: it cannot be folded into both."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, CHANNELS, kernel_size=3, stride=2, bias=True)
        self.bn = nn.BatchNorm2d(CHANNELS, eps=1e-3)
        self.bn2 = nn.BatchNorm2d(CHANNELS, eps=0.1)
        for bn in (self.bn, self.bn2):
            _randomise_statistics(bn.running_mean, bn.running_var, bn.weight, bn.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.bn(self.conv(x)) + self.bn2(self.conv(x))


class ConvFeedingTwoFunctionalBatchNorms(ConvFunctionalBatchNorm):
    """Functional variant: the two batch norms share variance and affine terms but not the mean."""

    def __init__(self) -> None:
        super().__init__(bias=True)
        self.register_buffer("bn_running_mean2", torch.empty(CHANNELS).uniform_(-1, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        stats = (self.bn_running_var, self.bn_weight, self.bn_bias, False, 0.1, 1e-5)
        return F.batch_norm(self.conv(x), self.bn_running_mean, *stats) + F.batch_norm(
            self.conv(x), self.bn_running_mean2, *stats
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
    """Eager, compiled and float64 results of ``fn(module, *inputs)``; the reference copy is taken first."""
    reference = copy.deepcopy(module).to(torch.float64)
    eager = fn(module, *module_runs.clone_inputs(inputs))
    compiled = torch.compile(fn, backend="inductor")(module, *module_runs.clone_inputs(inputs))
    fp64 = fn(reference, *module_runs.to_fp64(inputs))
    return compiled, eager, fp64


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
    judging.assert_close_to_reference(compiled, eager, reference(x.double()))
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


def test_folded_parameters_released(device: str) -> None:
    # With freezing_discard_parameters the module's own tensors are dropped once their values live in the compiled
    # graph: memory is released and running the stale eager module is an error instead of silently working.
    module = ConvBatchNorm().to(device).eval()
    x = torch.randn(IMAGE_SHAPE, device=device)
    reference = copy.deepcopy(module).to(torch.float64)
    eager = module(x)
    with harness.inductor_config(freezing_discard_parameters=True):
        compiled_module = torch.compile(module, backend="inductor")
        first = compiled_module(x)
        kept = [name for name, t in [*module.named_parameters(), *module.named_buffers()] if not t.is_meta]
        assert not kept, f"frozen module still holds real tensors: {kept}"
        with pytest.raises(RuntimeError):
            module(x)
        second = compiled_module(x)  # the compiled graph owns the constants now
    judging.assert_close_to_reference((first, second), (eager, eager), (reference(x.double()),) * 2)


def test_aliased_parameter_return_not_folded(device: str) -> None:
    # Returning a parameter (and a view of it) hands the caller the module's own tensor: freezing must not swap
    # it for a constant copy, or writes through the result would stop reaching the module.
    class ReturnsParameter(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.weight = nn.Parameter(torch.arange(20.0).reshape(4, 5))

        def forward(self) -> tuple[torch.Tensor, torch.Tensor]:
            return self.weight[1:], self.weight

    module = ReturnsParameter().to(device).eval()
    eager = module()
    compiled = torch.compile(module, backend="inductor")()
    for got, want in zip(compiled, eager, strict=True):
        torch.testing.assert_close(got, want, rtol=0, atol=0)
    assert compiled[1].data_ptr() == module.weight.data_ptr(), "returned parameter is a frozen copy"
    assert compiled[0].untyped_storage().data_ptr() == compiled[1].untyped_storage().data_ptr(), (
        "the returned slice no longer aliases the returned parameter"
    )


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
    judging.assert_close_to_reference(compiled, eager, reference(x.double()))


def test_random_op_not_folded(device: str) -> None:
    # torch.rand has no inputs, so it looks like a constant; folding it would return the same numbers every call.
    @torch.compile(backend="inductor")
    def noise() -> torch.Tensor:
        return torch.rand(4, 4, device=device) + 1

    first, second = noise(), noise()
    assert not torch.equal(first, second), "two calls returned the same random numbers: torch.rand was folded"
    assert bool(((first >= 1) & (first < 2)).all()), "random values outside torch.rand's range [0, 1) + 1"


def test_symbolic_sizes_not_folded(device: str) -> None:
    # torch.zeros sized by symbolic dims must be rebuilt per call, not folded into a constant of the first size.
    def cos_and_zeros(a: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return a.cos(), torch.zeros(a.shape[0], a.shape[1], device=a.device)

    counter = harness.compile_counter("inductor")
    compiled = torch.compile(cos_and_zeros, backend=counter, dynamic=True)
    # Sizes 2x4 then 3x5 share no factor, so no divisibility guard specialises on the first.
    for shape in ((2, 4, 6), (3, 5, 6)):
        a = torch.randn(shape, device=device)
        harness.mark_dynamic(a, 0, 1)
        judging.assert_close_to_reference(compiled(a), cos_and_zeros(a), cos_and_zeros(a.double()), what=str(shape))
    assert counter.frame_count == 1, f"symbolic sizes recompiled: {counter.frame_count} graphs"


def test_parameter_mutation(device: str) -> None:
    # A parameter mutated in forward cannot be frozen; each call must see (and leave) the updated value.
    class AccumulatesIntoParameter(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.total = nn.Parameter(torch.zeros(4, 5))

        def forward(self) -> torch.Tensor:
            self.total.add_(10)
            return self.total

    eager_module = AccumulatesIntoParameter().to(device)
    compiled_module = AccumulatesIntoParameter().to(device)
    compiled = torch.compile(compiled_module, backend="inductor")
    for call in (1, 2):
        # Integer-valued floats: the updates are exact, so compiled must match bit for bit.
        want, got = eager_module().clone(), compiled().clone()
        torch.testing.assert_close(got, want, rtol=0, atol=0, msg=lambda m, call=call: f"call {call}: {m}")
    torch.testing.assert_close(compiled_module.total, eager_module.total, rtol=0, atol=0)
    assert float(compiled_module.total[0, 0]) == 20.0, "the mutation did not reach the module's parameter"


def test_cpp_wrapper(device: str) -> None:
    # The C++ wrapper (instead of Python) calls the kernels and must load the frozen constants the same way.
    module = ConvBatchNorm().to(device).eval()
    x = torch.randn(IMAGE_SHAPE, device=device)
    reference = copy.deepcopy(module).to(torch.float64)
    eager = module(x)
    with harness.inductor_config(cpp_wrapper=True):
        compiled_module = torch.compile(module, backend="inductor")
        (first, second), code = harness.run_and_get_code(lambda: (compiled_module(x), compiled_module(x)))
    assert code, "inductor produced no output code"
    # The C++ wrapper's entry point; the Python wrapper has `def call(` instead (C++ kernels alone do not count).
    assert any("inductor_entry" in source for source in code), "the generated wrapper is not C++"
    judging.assert_close_to_reference((first, second), (eager, eager), (reference(x.double()),) * 2)


def test_declared_model(declared_model: targets.DeclaredModel | targets.TargetError, device: str) -> None:
    # Freezing is an inference mode: the declared model runs in eval mode without gradients whatever mode its
    # factory returns. Random ops draw eager's numbers (fallback_random) so dropout-like code compares.
    if isinstance(declared_model, targets.TargetError):
        declared_model.fail()
    module = declared_model.factory().to(device).eval()
    inputs = module_runs.map_tensors(declared_model.example_inputs, lambda t: t.to(device))
    reference = copy.deepcopy(module).to(torch.float64)

    def run(call: Callable[..., Any], args: tuple[Any, ...]) -> Any:
        torch.manual_seed(0)
        return module_runs.map_tensors(call(*module_runs.clone_inputs(args)), torch.Tensor.detach)

    with harness.inductor_config(fallback_random=True):
        eager = run(module, inputs)
        compiled = run(torch.compile(module, backend="inductor"), inputs)
    judging.assert_close_to_reference(compiled, eager, run(reference, module_runs.to_fp64(inputs)))
