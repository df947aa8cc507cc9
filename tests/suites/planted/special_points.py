"""Planted bugs at special points (issue 30): four patches of inductor's tables, each wrong only at one special value
or sign of one op's domain and right on every typical input, so no model-shaped input meets them.

Installed the way a compiler fork installs its changes: entries of inductor's lowering and decomposition tables
replaced at run time (``-p tests.suites.planted.special_points``). The compile caches stay on: the job's compiler
surface fingerprint (suites/compiler_surface.py) sees the replaced entries and keys the caches apart.

| entry | wrong only where | eager | planted |
|---|---|---|---|
| lowering ``aten.reciprocal`` | the input is -0.0 | -inf | +inf |
| lowering ``aten.sign`` | the input is NaN | 0 | NaN |
| decomposition ``aten.nan_to_num`` | the input is -inf | -3.4e38 or ``neginf`` | its absolute value |
| lowering ``aten.remainder.Tensor`` | integers with a negative divisor | the divisor's sign | the dividend's (fmod) |
"""

from __future__ import annotations

from typing import Any

import pytest

PLANTED = {"reciprocal": "-0.0", "sign": "NaN", "nan_to_num": "-inf", "remainder": "negative integer divisor"}


def _reciprocal(stock: Any, lowering: dict[Any, Any], aten: Any) -> Any:
    def reciprocal_of_unsigned_zero(x: Any) -> Any:
        result = stock(x)
        return lowering[aten.where.self](lowering[aten.eq.Scalar](x, 0), lowering[aten.abs.default](result), result)

    return reciprocal_of_unsigned_zero


def _sign(stock: Any, lowering: dict[Any, Any], aten: Any) -> Any:
    def sign_keeping_nan(x: Any) -> Any:
        return lowering[aten.where.self](lowering[aten.isnan.default](x), x, stock(x))

    return sign_keeping_nan


def _remainder(stock: Any, lowering: dict[Any, Any], aten: Any) -> Any:
    import torch

    def remainder_as_fmod_for_negative_divisors(a: Any, b: Any) -> Any:
        result = stock(a, b)
        if not all(hasattr(v, "get_dtype") and not v.get_dtype().is_floating_point and v.get_dtype() != torch.bool
                   for v in (a, b)):
            return result
        negative = lowering[aten.lt.Scalar](b, 0)
        return lowering[aten.where.self](negative, lowering[aten.fmod.Tensor](a, b), result)

    return remainder_as_fmod_for_negative_divisors


def _nan_to_num(stock: Any) -> Any:
    import torch

    def nan_to_num_with_unsigned_neginf(x: Any, nan: Any = None, posinf: Any = None, neginf: Any = None) -> Any:
        result = stock(x, nan, posinf, neginf)
        if not x.is_floating_point():
            return result
        return torch.where(x == float("-inf"), result.abs(), result)

    return nan_to_num_with_unsigned_neginf


def pytest_configure(config: pytest.Config) -> None:
    import torch
    from torch._inductor import decomposition
    from torch._inductor.lowering import lowerings

    aten = torch.ops.aten
    lowerings[aten.reciprocal.default] = _reciprocal(lowerings[aten.reciprocal.default], lowerings, aten)
    lowerings[aten.sign.default] = _sign(lowerings[aten.sign.default], lowerings, aten)
    lowerings[aten.remainder.Tensor] = _remainder(lowerings[aten.remainder.Tensor], lowerings, aten)
    table = decomposition.decompositions
    table[aten.nan_to_num.default] = _nan_to_num(table[aten.nan_to_num.default])
