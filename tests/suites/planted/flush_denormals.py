"""Planted bug: inductor's compiled graphs run with denormals flushed to zero (FTZ/DAZ), eager does not.

Load with ``-p tests.suites.planted.flush_denormals``. What a fast-math build flag or a kernel that sets the FPU's
flush-to-zero mode does: normal-range results are bit for bit unchanged, but every denormal input reads as zero and
every denormal result is written as zero. The mode is set around each call of a compiled graph and restored after
it, so eager code (and the fp64 reference) still sees denormals.
"""

from __future__ import annotations

from typing import Any

import pytest

from . import disable_compile_caches


def pytest_configure(config: pytest.Config) -> None:
    import torch
    from torch._inductor import output_code

    disable_compile_caches()
    if not torch.set_flush_denormal(False):
        raise pytest.UsageError("flush_denormals: this CPU cannot flush denormals (no SSE3)")
    original = output_code.CompiledFxGraph.__call__

    def call_with_denormals_flushed(self: Any, inputs: Any) -> Any:
        torch.set_flush_denormal(True)
        try:
            return original(self, inputs)
        finally:
            torch.set_flush_denormal(False)

    output_code.CompiledFxGraph.__call__ = call_with_denormals_flushed
