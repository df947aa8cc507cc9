"""A pytest plugin for bench/ops_sweep.py: one lowering of inductor replaced, as a repository's change would, by a
patch that computes exactly what torch's own does, so the ops suite aims at the ops routed through it.

The lowering is named by COMPILE_CI_BENCH_LOWERING as ``aten.<op>.<overload>`` (e.g. ``aten.reciprocal.default``).
"""

from __future__ import annotations

import functools
import os
from typing import Any

import pytest


def pytest_configure(config: pytest.Config) -> None:
    import torch
    from torch._inductor.lowering import lowerings

    namespace, op, overload = os.environ["COMPILE_CI_BENCH_LOWERING"].split(".")
    key = getattr(getattr(getattr(torch.ops, namespace), op), overload)
    stock = lowerings[key]

    @functools.wraps(stock)
    def same_as_stock(*args: Any, **kwargs: Any) -> Any:
        return stock(*args, **kwargs)

    lowerings[key] = same_as_stock
