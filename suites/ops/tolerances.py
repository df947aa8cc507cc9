"""The tolerance one op's compiled results are held to against eager: the OpInfo's own where it declares one.

OpInfos declare tolerances per test (``DecorateInfo(toleranceOverride(...), "TestInductorOpInfo",
"test_comprehensive")``) or for every test (a bare ``precisionOverride``). The sweep compares what PyTorch's own
inductor OpInfo test compares, so its declarations come first, then those of the decomposition test (the same
question: a rewritten op against eager), then those that apply to every test; otherwise assert_close's defaults.
A declaration only ever loosens the default, atol and rtol each (as it was written to: for PyTorch's own test).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from . import catalog

# (class, test) whose declared tolerances answer the sweep's question, in order of preference; None matches any test.
_SOURCES = (("TestInductorOpInfo", "test_comprehensive"), ("TestDecomp", "test_comprehensive"), (None, None))
# torch.testing.assert_close's defaults: what a tolerance nobody declared means.
_DEFAULTS = {
    torch.float32: (1e-5, 1.3e-6),
    torch.bfloat16: (1e-5, 1.6e-2),
    torch.float16: (1e-5, 1e-3),
    torch.float64: (1e-7, 1e-7),
}


@dataclass(frozen=True)
class Tolerance:
    atol: float
    rtol: float
    source: str  # "declared by TestInductorOpInfo.test_comprehensive" or "assert_close default"


def for_case(case: catalog.OpCase, device: str) -> Callable[[torch.dtype], Tolerance]:
    """The tolerance for each floating result dtype of ``case``: an integer op's float results (``sin`` of int64)
    are held to their own dtype's tolerance. Integers and booleans are always compared exactly."""
    return functools.cache(functools.partial(_for_dtype, case.op, device))


def _for_dtype(op: Any, device: str, dtype: torch.dtype) -> Tolerance:
    atol, rtol = _DEFAULTS.get(dtype, (0.0, 0.0))
    for cls_name, test_name in _SOURCES:
        declared = _declared(op, cls_name, test_name, device, dtype)
        if declared is not None:
            declared_atol, declared_rtol = declared
            where = f"{cls_name}.{test_name}" if cls_name else "every test"
            # A declaration loosens what PyTorch's test checks on its (small) sample inputs; `atol=1e-4, rtol=0` is
            # not meant to be stricter than the default at the reference inputs' large values (special.i1 at 389).
            return Tolerance(max(declared_atol, atol), max(rtol if declared_rtol is None else declared_rtol, rtol),
                             f"declared by the OpInfo for {where}, no tighter than assert_close's default")
    return Tolerance(atol, rtol, "assert_close default")


def _declared(op: Any, cls_name: str | None, test_name: str | None, device: str,
              dtype: torch.dtype) -> tuple[float, float | None] | None:
    for decoration in op.decorators:
        if _is_decorate_info(decoration):
            # As DecorateInfo.is_active: None matches any class or test.
            if not (decoration.active_if and decoration.cls_name in (None, cls_name)
                    and decoration.test_name in (None, test_name) and decoration.device_type in (None, device)
                    and (decoration.dtypes is None or dtype in decoration.dtypes)):
                continue
            candidates = decoration.decorators
        elif cls_name is None:
            candidates = [decoration]  # a bare decorator applies to every test of the op
        else:
            continue
        for candidate in candidates:
            found = _tolerance_of(candidate, dtype)
            if found is not None:
                return found
    return None


def _is_decorate_info(decoration: Any) -> bool:
    return type(decoration).__name__ == "DecorateInfo" and hasattr(decoration, "decorators")


def _tolerance_of(decorator: Any, dtype: torch.dtype) -> tuple[float, float | None] | None:
    table = getattr(decorator, "d", None)
    if not isinstance(table, dict) or dtype not in table:
        return None
    kind = type(decorator).__name__
    if kind == "toleranceOverride":
        return float(table[dtype].atol), float(table[dtype].rtol)
    if kind == "precisionOverride":  # an absolute precision; the relative one stays the default
        return float(table[dtype]), None
    return None
