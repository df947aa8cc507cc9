"""AOT autograd under torch.compile: input mutations reach the caller (in the graph and in the runtime epilogue,
through parameters, non-leaf inputs and expanded views), and mutating a leaf that requires grad raises as in eager."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
from torch import nn

from .backends import BACKENDS

LEAF_INPLACE_ERROR = "leaf Variable that requires grad is being used in an in-place operation"


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
