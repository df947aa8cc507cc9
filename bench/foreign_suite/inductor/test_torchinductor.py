"""The three helpers of PyTorch's test/inductor/test_torchinductor.py that the freezing tests import, in our words.

PyTorch's own module is a 15k-line test file; the foreign suite needs only: run a model eagerly and compiled and
compare (check_model, check_model_cuda), and copy a template's tests onto a device class (copy_tests).
"""

from __future__ import annotations

from typing import Any

import torch


def _compare(case: Any, model: Any, inputs: tuple[Any, ...], kwargs: dict[str, Any] | None, atol: float | None,
             rtol: float | None) -> None:
    kwargs = kwargs or {}
    torch._dynamo.reset()
    expected = model(*inputs, **kwargs)
    actual = torch.compile(model)(*inputs, **kwargs)
    if atol is None and rtol is None:
        torch.testing.assert_close(actual, expected, equal_nan=True)
    else:
        torch.testing.assert_close(actual, expected, atol=atol or 0.0, rtol=rtol or 0.0, equal_nan=True)


def check_model(self: Any, model: Any, example_inputs: tuple[Any, ...], kwargs: dict[str, Any] | None = None, *,
                atol: float | None = None, rtol: float | None = None, **_options: Any) -> None:
    _compare(self, model, tuple(example_inputs), kwargs, atol, rtol)


def check_model_cuda(self: Any, model: Any, example_inputs: tuple[Any, ...], kwargs: dict[str, Any] | None = None,
                     *, atol: float | None = None, rtol: float | None = None, **_options: Any) -> None:
    if isinstance(model, torch.nn.Module):
        model = model.cuda()
    inputs = tuple(x.cuda() if isinstance(x, torch.Tensor) else x for x in example_inputs)
    _compare(self, model, inputs, kwargs, atol, rtol)


def copy_tests(template: type, target: type, suffix: str, test_failures: Any = None, xfail_prop: Any = None) -> None:
    for name, value in list(vars(template).items()):
        if name.startswith("test_") and callable(value):
            setattr(target, f"{name}_{suffix}", value)
