"""Planted bug (pytest plugin): freezing folds conv+batchnorm with a wrong scale.

Load with ``-p tests.suites.planted.conv_bn_wrong_scale``. Under freezing, inductor decomposes an eval-mode
batchnorm into per-channel subtract/multiply/add nodes and its binary-folding patterns fold each of them into the
preceding convolution's weight and bias. This plugin wraps those pattern handlers so that every multiplier folded
into a conv is 25 % too large: the kind of bug a wrong folding formula produces. Only graphs where a fold happens
change; everything else compiles as usual.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

WRONG_SCALE = 1.25


def _with_wrong_scale(handler: Callable[..., Any]) -> Callable[..., Any]:
    import torch

    mul = torch.ops.aten.mul.Tensor

    def fold_with_wrong_scale(match: Any, *args: Any, **kwargs: Any) -> Any:
        other = kwargs.get("other")
        if match.output_node().target is mul and isinstance(other, torch.fx.Node):
            with match.graph.inserting_before(match.output_node()):
                wrong = match.graph.call_function(mul, (other, WRONG_SCALE))
            wrong.meta.update(other.meta)  # same shape and dtype; the folding reads them from meta
            kwargs = {**kwargs, "other": wrong}
        elif match.output_node().target is mul and isinstance(other, int | float):
            kwargs = {**kwargs, "other": other * WRONG_SCALE}
        return handler(match, *args, **kwargs)

    return fold_with_wrong_scale


def pytest_configure(config: pytest.Config) -> None:
    from torch._inductor.fx_passes import freezing_patterns

    freezing_patterns.lazy_init()  # registers the folding patterns once; freezing reuses this registration
    wrapped = 0
    for entries in freezing_patterns.binary_folding_pass.patterns.values():
        for entry in entries:
            entry.handler = _with_wrong_scale(entry.handler)
            wrapped += 1
    if not wrapped:
        raise pytest.UsageError("conv_bn_wrong_scale: no binary-folding patterns found to plant the bug in")
