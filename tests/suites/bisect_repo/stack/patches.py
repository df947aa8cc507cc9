"""A compiler stack's own change to inductor: its lowering of reciprocal, with a "fast path" that forgets the sign of
zero (1 / -0.0 comes out +inf where eager says -inf)."""

from __future__ import annotations

from typing import Any


def install() -> None:
    import torch
    from torch._inductor.lowering import lowerings

    aten = torch.ops.aten
    stock = lowerings[aten.reciprocal.default]

    def reciprocal_fast(x: Any) -> Any:
        result = stock(x)
        return lowerings[aten.where.self](lowerings[aten.eq.Scalar](x, 0), lowerings[aten.abs.default](result), result)

    lowerings[aten.reciprocal.default] = reciprocal_fast
