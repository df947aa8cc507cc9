"""AOT autograd under torch.compile: gradients, input mutations and the errors they must raise, recompile guards on
requires_grad and duplicated arguments, aliasing, double backward and data_ptr access during tracing."""

from __future__ import annotations

import copy
from collections.abc import Callable

import pytest
import torch
from torch import nn

from .. import harness, judging, module_runs, targets

# aot_eager runs AOT autograd's traced graphs eagerly (isolating AOT autograd itself); inductor compiles them.
BACKENDS = ["aot_eager", "inductor"]
DOUBLE_BACKWARD_ERROR = "does not currently support double backward"
LEAF_INPLACE_ERROR = "leaf Variable that requires grad is being used in an in-place operation"
DATA_PTR_ERROR = "Cannot access data pointer"


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
    reference = copy.deepcopy(eager_model).to(torch.float64)
    # (seq 4, batch 3, features 5) laid out batch-major and permuted: the LSTM gets a non-contiguous input.
    x = torch.randn(3, 4, 5, device=device).permute(1, 0, 2)
    eager = module_runs.forward_and_grads(eager_model, eager_model, (x,), backward=True)
    compiled_fn = torch.compile(compiled_model, backend=backend)
    compiled = module_runs.forward_and_grads(compiled_fn, compiled_model, (x,), backward=True)
    fp64 = module_runs.forward_and_grads(reference, reference, module_runs.to_fp64((x,)), backward=True)
    judging.fail_on_differences(
        judging.differences_from_reference(compiled.outputs, eager.outputs, fp64.outputs)
        + judging.differences_from_reference(compiled.grads, eager.grads, fp64.grads, what="grad")
    )


def _scale_input_in_place(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    x.mul_(2).add_(y)
    return (x * y).sum()


# Integer-valued float inputs keep every mutation exact, so inputs are compared bit for bit.
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("other_requires_grad", [False, True], ids=["inference", "training"])
def test_input_mutation_reaches_caller(backend: str, other_requires_grad: bool, device: str) -> None:
    # Without grad AOT autograd keeps the copy-back inside the graph; with a grad-requiring argument it traces a
    # joint graph and copies the mutated input back in its runtime epilogue. Both must reach the caller's tensor.
    x_eager = torch.arange(6.0, device=device)
    y_eager = torch.arange(6.0, device=device).flip(0).requires_grad_(other_requires_grad)
    x_compiled, y_compiled = x_eager.clone(), y_eager.detach().clone().requires_grad_(other_requires_grad)
    expected = _scale_input_in_place(x_eager, y_eager)
    actual = torch.compile(_scale_input_in_place, backend=backend)(x_compiled, y_compiled)
    torch.testing.assert_close(actual, expected, rtol=0, atol=0)
    torch.testing.assert_close(x_compiled, x_eager, rtol=0, atol=0, msg=lambda m: f"input mutation lost: {m}")
    if other_requires_grad:
        expected.backward()
        actual.backward()
        torch.testing.assert_close(y_compiled.grad, y_eager.grad, rtol=0, atol=0)


def _add_to_param_without_grad(param: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    previous = torch.is_grad_enabled()
    try:
        torch.set_grad_enabled(False)
        param.add_(y)
    finally:
        torch.set_grad_enabled(previous)
    return y * param


@pytest.mark.parametrize("backend", BACKENDS)
def test_input_mutation_of_parameter_under_no_grad(backend: str, device: str) -> None:
    # An optimizer-style update of a leaf that requires grad: allowed because autograd does not see it, and the
    # caller's parameter must still change exactly as in eager.
    eager_param = nn.Parameter(torch.arange(4.0, device=device))
    compiled_param = nn.Parameter(eager_param.detach().clone())
    y = torch.tensor([1.0, -2.0, 3.0, 0.5], device=device)
    expected = _add_to_param_without_grad(eager_param, y)
    actual = torch.compile(_add_to_param_without_grad, backend=backend)(compiled_param, y)
    torch.testing.assert_close(actual, expected, rtol=0, atol=0)
    torch.testing.assert_close(compiled_param, eager_param, rtol=0, atol=0, msg=lambda m: f"update lost: {m}")
    expected.sum().backward()
    actual.sum().backward()
    torch.testing.assert_close(compiled_param.grad, eager_param.grad, rtol=0, atol=0)


def _mutate_then_use(x: torch.Tensor) -> torch.Tensor:
    x.mul_(3)
    return x.sin()


@pytest.mark.parametrize("backend", BACKENDS)
def test_input_mutation_of_non_leaf_backpropagates(backend: str, device: str) -> None:
    # The input is an intermediate of the caller's graph: the in-place multiply must show up in the caller's
    # tensor and in the gradient that flows back to the leaf (3 * cos(3 * 2w)).
    results = []
    for fn in (_mutate_then_use, torch.compile(_mutate_then_use, backend=backend)):
        leaf = torch.linspace(-1, 1, 7, device=device, requires_grad=True)
        x = leaf * 2
        out = fn(x)
        out.sum().backward()
        results.append((out.detach(), x.detach(), leaf.grad))
    (eager_out, eager_x, eager_grad), (out, x, grad) = results
    torch.testing.assert_close(x, eager_x, msg=lambda m: f"input mutation lost: {m}")
    torch.testing.assert_close(out, eager_out)
    torch.testing.assert_close(grad, eager_grad, msg=lambda m: f"gradient ignores the input mutation: {m}")


def _add_one_in_place(x: torch.Tensor) -> None:
    x.add_(1)


def _set_to_ones(x: torch.Tensor) -> None:
    x.set_(torch.ones(2))


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize(
    ("mutation", "message"),
    [(_add_one_in_place, LEAF_INPLACE_ERROR), (_set_to_ones, "is being used in an in-place operation")],
    ids=["add_", "set_"],
)
def test_input_mutation_of_leaf_requiring_grad_raises(
    backend: str, mutation: Callable[[torch.Tensor], None], message: str, device: str
) -> None:
    # Eager refuses to mutate a leaf that requires grad; compiled code must refuse the same way, not silently
    # write the leaf.
    x = torch.ones(2, device=device, requires_grad=True)
    with pytest.raises(RuntimeError, match=message):
        mutation(x)
    with pytest.raises(RuntimeError, match=message):
        torch.compile(mutation, backend=backend)(x)
    torch.testing.assert_close(x.detach(), torch.ones(2, device=device))


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
    fp64_model = copy.deepcopy(model).double()
    fp64 = module_runs.forward_and_grads(fp64_model, fp64_model, module_runs.to_fp64((x,)), backward=True)
    judging.assert_close_to_reference(compiled.grads, eager.grads, fp64.grads, what="grad")
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


def _add(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return x + y


def test_requires_grad_change_recompiles(device: str) -> None:
    counter = harness.compile_counter("aot_eager")
    compiled = torch.compile(_add, backend=counter)
    x = torch.randn(3, 3, device=device, requires_grad=True)
    y = torch.randn(3, 3, device=device, requires_grad=True)
    z = torch.randn(3, 3, device=device)
    compiled(x, y).sum().backward()
    # A graph traced with y requiring grad computes y's gradient; reusing it for z would be wrong (or wasteful).
    compiled(x, z).sum().backward()
    assert counter.frame_count == 2, f"expected a recompile when y stops requiring grad, got {counter.frame_count}"
    reasons = harness.recompile_reasons()
    assert any("requires_grad" in reason for reason in reasons), f"recompile reasons: {reasons}"
    harness.reset_dynamo()
    counter = harness.compile_counter("aot_eager")
    compiled = torch.compile(_add, backend=counter)
    compiled(x, z)
    compiled(x, z)
    assert counter.frame_count == 1, f"same requires_grad recompiled: {counter.frame_count} graphs"


def _truncate_both(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    x.trunc_()
    y.trunc_()
    return x + y


def test_duplicated_arguments_recompile(device: str) -> None:
    base = torch.randn(3, 3, device=device) * 10
    other = torch.randn(3, 3, device=device) * 10
    counter = harness.compile_counter("aot_eager")
    compiled = torch.compile(_truncate_both, backend=counter)
    compiled(base.clone(), other.clone())
    compiled(base.clone(), other.clone())
    assert counter.frame_count == 1, f"distinct arguments recompiled: {counter.frame_count} graphs"
    harness.reset_dynamo()
    counter = harness.compile_counter("aot_eager")
    compiled = torch.compile(_truncate_both, backend=counter)
    # The same tensor passed twice: AOT autograd deduplicates it, so a later call with distinct tensors must not
    # reuse that graph (it would read x for y), and the mutation must land once on the shared tensor.
    shared, shared_eager = base.clone(), base.clone()
    torch.testing.assert_close(compiled(shared, shared), _truncate_both(shared_eager, shared_eager))
    torch.testing.assert_close(shared, shared_eager, msg=lambda m: f"mutation of a duplicated input lost: {m}")
    x, y = base.clone(), other.clone()
    torch.testing.assert_close(compiled(x, y), _truncate_both(base.clone(), other.clone()))
    assert counter.frame_count == 2, f"expected a recompile once the arguments stop aliasing: {counter.frame_count}"
    reasons = harness.recompile_reasons()
    assert reasons, "dynamo recorded no guard failure for the duplicated arguments"


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


def _define_data_ptr_op(lib: object, namespace: str, reads_in_forward: bool) -> Callable[[torch.Tensor], torch.Tensor]:
    """An operator with a composite (traced-through) implementation that reads ``data_ptr()`` of its input in the
    forward, or of the incoming gradient in the backward."""

    class ReadsGradPointer(torch.autograd.Function):
        called = False

        @staticmethod
        def forward(ctx: torch.autograd.function.FunctionCtx, x: torch.Tensor) -> torch.Tensor:
            return x.clone()

        @staticmethod
        def backward(ctx: torch.autograd.function.FunctionCtx, grad: torch.Tensor) -> torch.Tensor:
            ReadsGradPointer.called = True
            grad.data_ptr()
            return grad.clone()

    def forward_reads(x: torch.Tensor) -> torch.Tensor:
        x.data_ptr()
        return x.clone()

    lib.define("touch(Tensor x) -> Tensor")  # type: ignore[attr-defined]
    impl = forward_reads if reads_in_forward else ReadsGradPointer.apply
    lib.impl("touch", impl, "CompositeImplicitAutograd")  # type: ignore[attr-defined]
    op = getattr(torch.ops, namespace).touch
    op.backward_called = lambda: ReadsGradPointer.called  # type: ignore[attr-defined]
    return op


@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
def test_data_ptr_access_in_forward_raises(backend: str, device: str) -> None:
    # Tracing runs on fake tensors, which have no memory: reading a pointer must fail loudly at compile time
    # instead of baking a meaningless address into the graph.
    namespace = f"compileci_fwd_{backend}"
    with harness.scoped_operator_library(namespace) as lib:
        op = _define_data_ptr_op(lib, namespace, reads_in_forward=True)
        x = torch.randn(3, device=device)
        op(x)  # eager is fine: real tensors have real pointers
        for fn in (lambda t: op(t), lambda t: op(t.clone())):  # a graph input, then an intermediate
            with pytest.raises(RuntimeError, match=DATA_PTR_ERROR):
                torch.compile(fn, backend=backend, fullgraph=True)(x)


def test_data_ptr_access_in_backward_raises(device: str) -> None:
    # AOT autograd traces the backward ahead of time, so the pointer read in backward fails during compilation.
    namespace = "compileci_bwd"
    with harness.scoped_operator_library(namespace) as lib:
        op = _define_data_ptr_op(lib, namespace, reads_in_forward=False)
        x = torch.randn(3, device=device, requires_grad=True)
        with pytest.raises(RuntimeError, match=DATA_PTR_ERROR):
            torch.compile(lambda t: op(t), backend="aot_eager", fullgraph=True)(x)
        assert op.backward_called(), "the backward was never traced, so the error came from elsewhere"


def _expand_then_add(x: torch.Tensor) -> torch.Tensor:
    y = x.expand(3, *x.shape)
    y[0, 0].add_(5)
    return y


def _expand_then_mul(x: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
    y = x.expand(3, *x.shape)
    y[1, 1].mul_(5)
    return y * z


@pytest.mark.parametrize("backend", BACKENDS)
def test_input_mutation_through_expand(backend: str, device: str) -> None:
    # All three expanded rows share x's memory: one in-place write lands in x and shows in every row.
    x, x_compiled = torch.arange(6, device=device), torch.arange(6, device=device)
    torch.testing.assert_close(torch.compile(_expand_then_add, backend=backend)(x_compiled), _expand_then_add(x))
    torch.testing.assert_close(x_compiled, x, msg=lambda m: f"mutation through expand lost: {m}")
    # The same with a gradient flowing to z, which multiplies the mutated (expanded) x.
    xf, xf_compiled = torch.arange(6.0, device=device), torch.arange(6.0, device=device)
    z = torch.arange(6.0, device=device).requires_grad_()
    z_compiled = z.detach().clone().requires_grad_()
    expected = _expand_then_mul(xf, z)
    actual = torch.compile(_expand_then_mul, backend=backend)(xf_compiled, z_compiled)
    torch.testing.assert_close(actual, expected)
    expected.sum().backward()
    actual.sum().backward()
    torch.testing.assert_close(xf_compiled, xf, msg=lambda m: f"mutation through expand lost: {m}")
    torch.testing.assert_close(z_compiled.grad, z.grad)


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
    declared_model: targets.DeclaredModel | targets.TargetError, backend: str, device: str
) -> None:
    # Every parameter's gradient from the compiled backward against eager's and an fp64 copy's (inputs that require
    # grad contribute theirs through the outputs they shape).
    if isinstance(declared_model, targets.TargetError):
        declared_model.fail()
    model = declared_model.factory().to(device)
    if not any(p.requires_grad and p.is_floating_point() for p in model.parameters()):
        pytest.skip(f"{declared_model.name} has no floating parameter that requires grad")
    inputs = module_runs.map_tensors(declared_model.example_inputs, lambda t: t.to(device))
    compiled_model, reference = copy.deepcopy(model), copy.deepcopy(model).to(torch.float64)
    with harness.inductor_config(fallback_random=True):
        eager = module_runs.forward_and_grads(model, model, inputs, backward=True)
        compiled_fn = torch.compile(compiled_model, backend=backend)
        compiled = module_runs.forward_and_grads(compiled_fn, compiled_model, inputs, backward=True)
    fp64 = module_runs.forward_and_grads(reference, reference, module_runs.to_fp64(inputs), backward=True)
    assert compiled.grads.keys() == eager.grads.keys(), "compiled backward left parameters without gradients"
    judging.fail_on_differences(
        judging.differences_from_reference(compiled.outputs, eager.outputs, fp64.outputs)
        + judging.differences_from_reference(compiled.grads, eager.grads, fp64.grads, what="grad")
    )
