"""AOT autograd under torch.compile: gradients match eager and an fp64 copy (LSTM, parameters passed as call
arguments, data-dependent branches, aliased inputs and gradients, parameters built inside compiled code, grad-mode
changes, declared models), and double backward either matches eager or says it is unsupported."""

from __future__ import annotations

import copy
from collections.abc import Callable

import pytest
import torch
from torch import nn

from .. import explain, harness, judging, module_runs, targets
from .backends import BACKENDS

DOUBLE_BACKWARD_ERROR = "does not currently support double backward"


def _grads(*tensors: torch.Tensor) -> list[torch.Tensor | None]:
    return [None if t.grad is None else t.grad.clone() for t in tensors]


class StackedLSTM(nn.Module):
    # Two bidirectional layers exercise the packed-weight path and the reverse direction; 5 -> 6 features keep it
    # tiny while no size equals another (a transposed stride bug cannot cancel out).
    def __init__(self) -> None:
        super().__init__()
        self.lstm = nn.LSTM(5, 6, num_layers=2, bidirectional=True)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        output, (h, c) = self.lstm(x)
        return output, h, c


@pytest.mark.parametrize("backend", BACKENDS)
def test_lstm_matches_eager(backend: str, device: str) -> None:
    eager_model = StackedLSTM().to(device)
    compiled_model = copy.deepcopy(eager_model)
    # (seq 4, batch 3, features 5) laid out batch-major and permuted: the LSTM gets a non-contiguous input.
    x = torch.randn(3, 4, 5, device=device).permute(1, 0, 2)
    reference = module_runs.fp64_step(eager_model, (x,), backward=True)
    eager = module_runs.forward_and_grads(eager_model, eager_model, (x,), backward=True)
    compiled_fn = torch.compile(compiled_model, backend=backend)
    compiled = module_runs.forward_and_grads(compiled_fn, compiled_model, (x,), backward=True)
    fp64 = reference()
    judging.fail_on_differences(
        judging.differences_from_reference(compiled.outputs, eager.outputs, fp64.outputs,
                                           rerun=lambda: reference().outputs)
        + judging.differences_from_reference(compiled.grads, eager.grads, fp64.grads, what="grad",
                                             rerun=lambda: reference().grads)
    )


class ConvThroughHelper(nn.Module):
    # The parameters reach the convolution as ordinary call arguments through a helper, not as module attributes
    # read inside nn.Conv2d.forward: AOT autograd must still lift them to graph inputs and differentiate them.
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 4, kernel_size=3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv._conv_forward(x, self.conv.weight, self.conv.bias)


def _branch_on_value(p: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    a = p * y
    # A data-dependent branch: dynamo breaks the graph here and AOT autograd differentiates each piece.
    a = a + p if a[0, 0] < 0.5 else a * p
    return a * (p + y)


def test_non_constant_inputs(device: str) -> None:
    model = ConvThroughHelper().to(device)
    compiled_model = copy.deepcopy(model)
    x = torch.randn(2, 3, 6, 6, device=device)
    eager = module_runs.forward_and_grads(model, model, (x,), backward=True)
    compiled = module_runs.forward_and_grads(
        torch.compile(compiled_model, backend="aot_eager"), compiled_model, (x,), backward=True
    )
    reference = module_runs.fp64_step(model, (x,), backward=True)
    judging.assert_close_to_reference(compiled.grads, eager.grads, lambda: reference().grads, what="grad")
    # Both branches are taken across the two calls; each needs its own graph and the gradients must match eager.
    counter = harness.compile_counter("aot_eager")
    compiled_fn = torch.compile(_branch_on_value, backend=counter)
    for first in (0.1, 2.0):
        p = nn.Parameter(torch.tensor([[first, 1.5], [-1.0, 0.25]], device=device))
        p_eager = nn.Parameter(p.detach().clone())
        y = torch.tensor([[1.0, 2.0], [3.0, -1.0]], device=device)
        compiled_fn(p, y).sum().backward()
        _branch_on_value(p_eager, y).sum().backward()
        torch.testing.assert_close(p.grad, p_eager.grad)
    assert counter.frame_count >= 2, f"a data-dependent branch should split the graph, got {counter.frame_count}"


def _sin_exp(x: torch.Tensor) -> torch.Tensor:
    return x.sin().exp()


def _grad_of_grad_inside(x: torch.Tensor) -> torch.Tensor:
    (gx,) = torch.autograd.grad(_sin_exp(x), x, create_graph=True)
    torch.autograd.grad(gx, x)
    return gx


def _grad_with_graph(x: torch.Tensor) -> torch.Tensor:
    (gx,) = torch.autograd.grad(_sin_exp(x), x, create_graph=True)
    return gx


def _double_backward_outcome(run: Callable[[], torch.Tensor], eager: torch.Tensor) -> None:
    # AOT autograd's backward is not itself differentiable: it must say so. A torch that supports double backward
    # passes only with eager's second derivative.
    try:
        second = run()
    except RuntimeError as exc:
        assert DOUBLE_BACKWARD_ERROR in str(exc), f"unexpected error for double backward: {exc}"
        return
    torch.testing.assert_close(second, eager)


def test_double_backward_errors(device: str) -> None:
    x = torch.tensor(0.7, device=device, requires_grad=True)
    (gx,) = torch.autograd.grad(_sin_exp(x), x, create_graph=True)
    (eager_second,) = torch.autograd.grad(gx, x)

    _double_backward_outcome(lambda: torch.compile(_grad_of_grad_inside, backend="aot_eager")(x), eager_second)
    compiled_gx = torch.compile(_grad_with_graph, backend="aot_eager")(x)
    _double_backward_outcome(lambda: torch.autograd.grad(compiled_gx, x)[0], eager_second)
    y = torch.compile(_sin_exp, backend="aot_eager")(x)
    (outer_gx,) = torch.autograd.grad(y, x, create_graph=True)
    _double_backward_outcome(lambda: torch.autograd.grad(outer_gx, x)[0], eager_second)
    # A single backward through the same compiled function is supported and exact.
    (single,) = torch.autograd.grad(torch.compile(_sin_exp, backend="aot_eager")(x), x)
    torch.testing.assert_close(single, torch.autograd.grad(_sin_exp(x), x)[0])


def _alias_inside() -> torch.Tensor:
    a = torch.tensor([1])
    a = a[0:1]
    b = a.squeeze()
    a[0] = 0
    a[0] = 2
    return b


def _mutate_one_view_read_other(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    a.mul_(2)
    return b + 1


class ReturnsSavedInputAsGrad(torch.autograd.Function):
    # The backward hands out a saved input as a gradient, so the gradient aliases an input of the graph.
    @staticmethod
    def forward(ctx: torch.autograd.function.FunctionCtx, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        ctx.save_for_backward(x)
        return y * 1

    @staticmethod
    def backward(ctx: torch.autograd.function.FunctionCtx, grad: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        (x,) = ctx.saved_tensors
        return x, grad


def test_aliased_inputs_and_their_gradients(device: str) -> None:
    # A view whose base is mutated after the view was taken must see the final value (2), not the first write.
    torch.testing.assert_close(torch.compile(_alias_inside, backend="aot_eager")(), _alias_inside())
    # Two inputs overlapping in one storage: the write through a must be visible when b is read.
    results = []
    for fn in (_mutate_one_view_read_other, torch.compile(_mutate_one_view_read_other, backend="aot_eager")):
        base = torch.arange(8.0, device=device)
        results.append((fn(base[0:6], base[2:8]), base))
    (expected, eager_base), (actual, compiled_base) = results
    torch.testing.assert_close(actual, expected, rtol=0, atol=0)
    torch.testing.assert_close(compiled_base, eager_base, rtol=0, atol=0)
    # Gradients that alias inputs: x's gradient is x itself.
    grads = []
    for fn in (ReturnsSavedInputAsGrad.apply, torch.compile(ReturnsSavedInputAsGrad.apply, backend="aot_eager")):
        x = torch.tensor([1.5, -2.0], device=device, requires_grad=True)
        y = torch.tensor([0.5, 3.0], device=device, requires_grad=True)
        fn(x, y).sum().backward()
        grads.append(_grads(x, y))
    assert all(g is not None for g in grads[1]), "the compiled backward produced no gradient for x or y"
    for expected_grad, actual_grad in zip(grads[0], grads[1], strict=True):
        torch.testing.assert_close(actual_grad, expected_grad)


def _with_fresh_parameter(x: torch.Tensor) -> torch.Tensor:
    z = nn.Parameter(torch.full((1,), 0.5, device=x.device))
    return x.sin() * z + z


@pytest.mark.parametrize("backend", BACKENDS)
def test_parameter_constructed_inside_compiled_code(backend: str, device: str) -> None:
    x = torch.rand(4, 4, device=device, requires_grad=True)
    x_compiled = x.detach().clone().requires_grad_()
    expected = _with_fresh_parameter(x)
    actual = torch.compile(_with_fresh_parameter, backend=backend)(x_compiled)
    torch.testing.assert_close(actual, expected)
    expected.sum().backward()
    actual.sum().backward()
    torch.testing.assert_close(x_compiled.grad, x.grad)


def _leaves_grad_disabled(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    y = x * x
    torch.set_grad_enabled(False)
    return y.clone(), y


@pytest.mark.parametrize("backend", BACKENDS)
def test_grad_mode_change_escapes_compiled_code(backend: str, device: str) -> None:
    # Turning grad off inside the function is a global side effect that must outlive the call, while outputs
    # computed before it keep their autograd history.
    x = torch.full((3,), 3.0, device=device, requires_grad=True)
    try:
        expected = _leaves_grad_disabled(x)
        assert not torch.is_grad_enabled()
        torch.set_grad_enabled(True)
        actual = torch.compile(_leaves_grad_disabled, backend=backend, fullgraph=True)(x)
        assert not torch.is_grad_enabled(), "grad mode was restored on exit from compiled code"
    finally:
        torch.set_grad_enabled(True)
    torch.testing.assert_close(actual, expected)
    assert actual[1].grad_fn is not None, "the output computed with grad enabled lost its history"
    (expected_grad,) = torch.autograd.grad(expected[1].sum(), x)
    (actual_grad,) = torch.autograd.grad(actual[1].sum(), x)
    torch.testing.assert_close(actual_grad, expected_grad)


@pytest.mark.parametrize("backend", BACKENDS)
def test_declared_model_gradients(
    declared_model: targets.DeclaredModel | targets.TargetError, backend: str, device: str,
    request: pytest.FixtureRequest,
) -> None:
    # Every parameter's gradient from the compiled backward against eager's and an fp64 copy's (inputs that require
    # grad contribute theirs through the outputs they shape); batch statistics get a derived allowance, and a failure
    # explains itself (suites/explain.py).
    if isinstance(declared_model, targets.TargetError):
        declared_model.fail()
    model = declared_model.factory().to(device)
    if not any(p.requires_grad and p.is_floating_point() for p in model.parameters()):
        pytest.skip(f"{declared_model.name} has no floating parameter that requires grad")
    inputs = module_runs.map_tensors(declared_model.example_inputs, lambda t: t.to(device))
    compiled_model, reference = copy.deepcopy(model), copy.deepcopy(model).to(torch.float64)
    pristine = copy.deepcopy(model)
    # torch's minifier reproduces inductor graphs; under aot_eager the explanation is the message alone.
    subject = explain.Subject(request.node.nodeid, declared_model, device) if backend == "inductor" else None
    explain.forget(request.node.nodeid)
    with harness.inductor_config(fallback_random=True):
        eager = module_runs.forward_and_grads(model, model, inputs, backward=True)
        compiled_fn = torch.compile(compiled_model, backend=backend)
        with explain.crash_in_generated_code(subject, backward=True):
            compiled = module_runs.forward_and_grads(compiled_fn, compiled_model, inputs, backward=True)
    fp64 = module_runs.forward_and_grads(reference, reference, module_runs.to_fp64(inputs), backward=True)
    assert compiled.grads.keys() == eager.grads.keys(), "compiled backward left parameters without gradients"
    explain.judge_step(compiled, eager, fp64, pristine=pristine, inputs=inputs, backward=True, subject=subject)
