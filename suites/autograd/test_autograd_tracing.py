"""AOT autograd under torch.compile: what tracing must notice. Guards recompile when requires_grad changes or
arguments stop aliasing, and reading data_ptr() on the fake tensors of tracing fails at compile time."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch

from .. import harness

DATA_PTR_ERROR = "Cannot access data pointer"


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
