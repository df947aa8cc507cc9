"""The bound one op's compiled results are held to: the suites' one rule (``suites/precision.py``), compiled ≤ k ×
max(eager, rounding noise) + c ULPs of the output's dtype, with k and c measured on stock torch per device and dtype.

The OpInfos' own declared tolerances (``toleranceOverride``, ``precisionOverride``) are not used: they are absolute
and relative tolerances written for PyTorch's tests on small sample inputs, and an absolute one hides every error
below it, so a result of 1e-8 could be 0. An op whose stock compiled form is farther from float64 than the bound is
listed in ``known_failures.py`` with its evidence instead.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import torch

from .. import precision
from . import catalog


def for_case(case: catalog.OpCase, device: str) -> Callable[[torch.dtype], precision.Bound]:
    """The bound for each floating result dtype of ``case``: an integer op's float results (``sin`` of int64) are held
    to their own dtype's. Integers and booleans are always compared exactly."""
    return functools.cache(functools.partial(precision.bound_for, device=device))


def describe(bound_of: Callable[[torch.dtype], precision.Bound], dtype: torch.dtype) -> str:
    return bound_of(dtype).describe(dtype)
