"""Planted bug: functorch's graph CSE forgets that random ops are not pure and merges identical-looking draws."""

from __future__ import annotations

import pytest


def pytest_configure(config: pytest.Config) -> None:
    from torch._functorch import compile_utils

    compile_utils.rand_ops.clear()
