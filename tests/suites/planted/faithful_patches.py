"""Control for ``special_points``: the same four entries of inductor's tables replaced by patches that compute
exactly what torch's own do, so the ops suite aims at the same ops and must find nothing wrong."""

from __future__ import annotations

import functools
from typing import Any

import pytest


def _faithful(stock: Any) -> Any:
    @functools.wraps(stock)
    def patched(*args: Any, **kwargs: Any) -> Any:
        return stock(*args, **kwargs)

    return patched


def pytest_configure(config: pytest.Config) -> None:
    import torch
    from torch._inductor import decomposition
    from torch._inductor.lowering import lowerings

    aten = torch.ops.aten
    for key in (aten.reciprocal.default, aten.sign.default, aten.remainder.Tensor):
        lowerings[key] = _faithful(lowerings[key])
    table = decomposition.decompositions
    table[aten.nan_to_num.default] = _faithful(table[aten.nan_to_num.default])
