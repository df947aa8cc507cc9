"""Control for ``small_values``: the same three table entries (``aten.log1p``'s and ``aten.tanh``'s lowerings,
``aten.silu``'s decomposition) replaced by patches that compute exactly what torch's own do, so the sweep aims at the
same ops and the suites run the same graphs through a rewritten entry, and nothing may turn red."""

from __future__ import annotations

import functools
from typing import Any

import pytest

from . import disable_compile_caches


def _faithful(stock: Any) -> Any:
    @functools.wraps(stock)
    def patched(*args: Any, **kwargs: Any) -> Any:
        return stock(*args, **kwargs)

    return patched


def pytest_configure(config: pytest.Config) -> None:
    import torch
    from torch._inductor import decomposition
    from torch._inductor.lowering import lowerings

    disable_compile_caches()  # a graph cached under another plant (or none) must not stand in for this one's
    aten = torch.ops.aten
    for key in (aten.log1p.default, aten.tanh.default):
        lowerings[key] = _faithful(lowerings[key])
    table = decomposition.decompositions
    table[aten.silu.default] = _faithful(table[aten.silu.default])
