"""Inductor freezing turns parameters into constants only where that is safe: released parameters, returned or
mutated parameters, random ops, symbolic sizes, the C++ wrapper and declared models keep eager's results (the
suite's conftest turns freezing on)."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest
import torch
from torch import nn

from .. import explain, harness, judging, module_runs, targets
from .conv_bn_modules import IMAGE_SHAPE, ConvBatchNorm


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
    judging.assert_close_to_reference((first, second), (eager, eager), lambda: (reference(x.double()),) * 2)


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
        judging.assert_close_to_reference(compiled(a), cos_and_zeros(a), lambda a=a: cos_and_zeros(a.double()),
                                          what=str(shape))
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
    judging.assert_close_to_reference((first, second), (eager, eager), lambda: (reference(x.double()),) * 2)


# After AOT torch's minifier saves the graph freeze() has already rewritten, so both sides of its check run the fold;
# after dynamo it compiles the captured graph outside dynamo's tracing context, where freeze() finds no parameters.
NO_MINIFIER = (
    "torch's minifier cannot reproduce a freezing bug (after AOT it saves the graph freezing already folded, so both "
    "sides of its check run the fold; after dynamo it recompiles the graph outside dynamo's tracing context, where "
    "freezing finds no parameters to fold): this test's repro.py reruns it, its output_code_*.py are the graphs"
)


def test_declared_model(
    declared_model: targets.DeclaredModel | targets.TargetError, device: str, request: pytest.FixtureRequest
) -> None:
    # Freezing is an inference mode: the declared model runs in eval mode without gradients whatever mode its
    # factory returns. Random ops draw eager's numbers (fallback_random) so dropout-like code compares. A red
    # explains itself (suites/explain.py): the tensor, the suites' rule, and why there is no minify.py.
    if isinstance(declared_model, targets.TargetError):
        declared_model.fail()
    module = declared_model.factory().to(device).eval()
    inputs = module_runs.map_tensors(declared_model.example_inputs, lambda t: t.to(device))
    reference = copy.deepcopy(module).to(torch.float64)
    subject = explain.Subject(request.node.nodeid, declared_model, device, eval=True, no_minifier=NO_MINIFIER)
    explain.forget(subject.nodeid)

    def run(call: Callable[..., Any], args: tuple[Any, ...]) -> Any:
        torch.manual_seed(0)
        return module_runs.map_tensors(call(*module_runs.clone_inputs(args)), torch.Tensor.detach)

    with harness.inductor_config(fallback_random=True):
        eager = run(module, inputs)
        with explain.crash_in_generated_code(subject, backward=False):
            compiled = run(torch.compile(module, backend="inductor"), inputs)
    explain.judge_outputs(compiled, eager, run(reference, module_runs.to_fp64(inputs)), subject=subject,
                          rerun=lambda: run(reference, module_runs.to_fp64(inputs)))
