"""Planted bugs that are right at typical magnitudes and wrong only at small ones (issue 39): what the suites' RMSE
rule and the sweep's ``atol = 1e-5`` let through, each installed as a compiler fork installs its changes (entries of
inductor's lowering and decomposition tables replaced at run time). Load one with ``-p
tests.suites.planted.small_values`` and ``COMPILE_CI_TEST_PLANT=<name>``; the graph caches are off, so no graph
compiled under another plant (or none) stands in for this one's.

| name | entry | wrong only where |
|---|---|---|
| ``log1p_by_log`` | lowering ``aten.log1p`` | log(1 + x): 1 + x rounds away a small x's digits (it cancels) |
| ``silu_flush`` | decomposition ``aten.silu`` | results below 1e-6 come back 0 (a flush below a threshold) |
| ``tanh_offset`` | lowering ``aten.tanh`` | every result 1e-6 too large (a constant absolute error) |

Each is within 1e-5 of the true value everywhere: at magnitude 1, log(1 + x) is off by a unit in the last place,
the flush and the offset by at most 1e-6.
"""

from __future__ import annotations

import os
from typing import Any

import pytest

from . import disable_compile_caches

PLANT_ENV = "COMPILE_CI_TEST_PLANT"


def _log1p_by_log(lowerings: dict[Any, Any], aten: Any) -> None:
    def log_of_one_plus(x: Any) -> Any:
        return lowerings[aten.log.default](lowerings[aten.add.Tensor](x, 1))

    lowerings[aten.log1p.default] = log_of_one_plus


def _silu_flush(decompositions: dict[Any, Any], aten: Any) -> None:
    import torch

    stock = decompositions[aten.silu.default]

    def silu_flushing_small_results(x: Any) -> Any:
        result = stock(x)
        return torch.where(result.abs() < 1e-6, torch.zeros_like(result), result)

    decompositions[aten.silu.default] = silu_flushing_small_results


def _tanh_offset(lowerings: dict[Any, Any], aten: Any) -> None:
    stock = lowerings[aten.tanh.default]

    def tanh_plus_a_millionth(x: Any) -> Any:
        return lowerings[aten.add.Tensor](stock(x), 1e-6)

    lowerings[aten.tanh.default] = tanh_plus_a_millionth


PLANTS = ("log1p_by_log", "silu_flush", "tanh_offset")


def pytest_configure(config: pytest.Config) -> None:
    import torch
    from torch._inductor import decomposition
    from torch._inductor.lowering import lowerings

    disable_compile_caches()  # a graph cached under another plant (or none) must not stand in for this one's
    plant = os.environ.get(PLANT_ENV, "")
    aten = torch.ops.aten
    if plant == "log1p_by_log":
        _log1p_by_log(lowerings, aten)
    elif plant == "silu_flush":
        _silu_flush(decomposition.decompositions, aten)
    elif plant == "tanh_offset":
        _tanh_offset(lowerings, aten)
    else:
        raise pytest.UsageError(f"small_values: {PLANT_ENV}={plant!r} is not one of {', '.join(PLANTS)}")
