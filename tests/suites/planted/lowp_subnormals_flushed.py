"""Not a bug: inductor's compiled graphs return bfloat16/float16 results below the dtype's smallest normal as zero,
as a CPU with AVX512-BF16 or AMX does where a compiled graph reaches oneMKL's or oneDNN's bf16 kernels.

Load with ``-p tests.suites.planted.lowp_subnormals_flushed``. Those kernels multiply with VDPBF16PS / TDPBF16PS,
which ignore the FPU's control register and always read subnormal inputs as zero and write subnormal results as zero;
eager may take another kernel for the same maths (a small bmm runs ATen's own loops) and keep them. This emulates it
on any CPU, after the fact: every reduced-precision output of a compiled graph with magnitude below ``finfo.tiny`` is
set to zero; normal-range results, and every float32 result, are untouched. The suites must pass with it.
"""

from __future__ import annotations

from typing import Any

from . import disable_compile_caches


def _flush(value: Any) -> Any:
    import torch

    if isinstance(value, torch.Tensor) and value.dtype in (torch.bfloat16, torch.float16):
        return value.masked_fill(value.abs() < torch.finfo(value.dtype).tiny, 0)
    return value


def pytest_configure(config: Any) -> None:
    from torch._inductor import output_code

    disable_compile_caches()
    original = output_code.CompiledFxGraph.__call__

    def call_with_lowp_subnormals_flushed(self: Any, inputs: Any) -> Any:
        outputs = original(self, inputs)
        return type(outputs)(_flush(value) for value in outputs) if isinstance(outputs, list | tuple) else outputs

    output_code.CompiledFxGraph.__call__ = call_with_lowp_subnormals_flushed
