"""Compiled-vs-eager judgement against a float64 reference: one line per leaf that is too far off, and the test
failure that lists them (they become the check-run annotation).

Public torch APIs only; private ones live in ``harness.py``.
"""

from __future__ import annotations

import contextlib
import inspect
import math
from collections.abc import Iterator
from typing import Any

import pytest
import torch

from .batch_statistics import NO_NOISE, Noise
from .module_runs import flatten_outputs

# Compiled-vs-eager judgement, in the spirit of torch._dynamo.utils.same(fp64_ref=...): a compiled result may be
# at most TOLERANCE_MULTIPLIER times as far from the fp64 reference as eager is, plus an absolute RMSE floor so
# that results eager gets (nearly) exact do not demand bit-exactness from reordered reductions.
TOLERANCE_MULTIPLIER = 2.0
RMSE_FLOOR = 1e-5
# bfloat16 results below bfloat16's smallest normal may come back as zero (issue 27). CPUs with AVX512-BF16 or AMX
# multiply bf16 with VDPBF16PS / TDPBF16PS, which ignore the FPU's control register and always read subnormal inputs
# and write subnormal results as zero, and a compiled graph can reach those kernels where eager does not: on stock
# torch, inductor rewrites a hand-written attention into the CPU flash-attention kernel, whose bf16 GEMMs are oneMKL's,
# while eager's small bmm runs ATen's own loops. Such an element counts as eager's value. No other dtype gets this
# allowance: float32 subnormals flush only under FTZ/DAZ (a bug), float16's (down to 6e-8) are kept where fp16 runs
# here (the CUDA fp16 variants pass without it), and no result the dtype holds as a normal number is ever excused.
FLUSHABLE_DTYPES = (torch.bfloat16,)


def _as_fp64(t: torch.Tensor) -> torch.Tensor:
    return torch.view_as_real(t.to(torch.complex128)) if t.is_complex() else t.to(torch.float64)


def _rmse(a: torch.Tensor, b: torch.Tensor, finite: torch.Tensor) -> float:
    diff = (_as_fp64(a) - _as_fp64(b))[finite]
    return math.sqrt(diff.square().mean().item()) if diff.numel() else 0.0


def _tolerate_flushes(
    actual64: torch.Tensor, eager64: torch.Tensor, reference64: torch.Tensor, dtype: torch.dtype
) -> tuple[torch.Tensor, int]:
    """``actual64`` with its tolerated flushes (see FLUSHABLE_DTYPES) replaced by eager's values, and their count."""
    if dtype not in FLUSHABLE_DTYPES:
        return actual64, 0
    flushed = (actual64 == 0) & (eager64 != 0) & (reference64.abs() < torch.finfo(dtype).tiny)
    return torch.where(flushed, eager64, actual64), int(flushed.sum())


def _describe_worst(actual: torch.Tensor, eager: torch.Tensor) -> str:
    wide = torch.complex128 if actual.is_complex() or eager.is_complex() else torch.float64
    diff = (actual.to(wide) - eager.to(wide)).abs().nan_to_num(nan=math.inf)
    if diff.numel() == 0:
        return "empty tensors"
    flat = int(diff.argmax())
    index = tuple(int(i) for i in torch.unravel_index(torch.tensor(flat), diff.shape)) if diff.dim() else ()
    return (
        f"largest |compiled - eager| = {diff.max().item():.3g} at index {index} "
        f"(compiled {actual.reshape(-1)[flat].item():.6g}, eager {eager.reshape(-1)[flat].item():.6g})"
    )


def _compare_leaf(
    path: str, actual: Any, eager: Any, reference: Any, multiplier: float, floor: float, noise: float | None = None
) -> str | None:
    if not isinstance(eager, torch.Tensor):
        return None if actual == eager else f"{path}: compiled {actual!r} != eager {eager!r}"
    if not isinstance(actual, torch.Tensor):
        return f"{path}: compiled returned {type(actual).__name__}, eager returned a Tensor"
    if actual.shape != eager.shape or actual.dtype != eager.dtype:
        return f"{path}: compiled {tuple(actual.shape)} {actual.dtype} != eager {tuple(eager.shape)} {eager.dtype}"
    if not eager.is_floating_point() and not eager.is_complex():
        return None if torch.equal(actual, eager) else f"{path}: {_describe_worst(actual, eager)} (exact dtype)"
    actual64, eager64, reference64 = _as_fp64(actual), _as_fp64(eager), _as_fp64(reference)
    finite = torch.isfinite(eager64)
    if not torch.equal(finite, torch.isfinite(actual64)) or not torch.equal(
        actual64[~finite].nan_to_num(), eager64[~finite].nan_to_num()
    ):
        return f"{path}: compiled and eager disagree on the non-finite (NaN/inf) elements"
    finite &= torch.isfinite(reference64)
    actual64, flushed = _tolerate_flushes(actual64, eager64, reference64, eager.dtype)
    eager_error, compiled_error = _rmse(eager64, reference64, finite), _rmse(actual64, reference64, finite)
    if noise is None:
        allowed, bound = multiplier * eager_error + floor, f"{multiplier:g} x eager RMSE {eager_error:.3g} + {floor:g}"
    else:  # a derived allowance (batch_statistics.py): the tensor's measured float32 noise, when eager's is smaller
        allowed = multiplier * max(eager_error, noise) + floor
        bound = (f"tolerance {allowed:.3g} = {multiplier:g} x max(eager RMSE {eager_error:.3g}, "
                 f"measured float32 noise {noise:.3g}) + {floor:g}")
    if compiled_error <= allowed:
        return None
    tolerated = f" ({flushed} results below {eager.dtype}'s smallest normal flushed to 0, tolerated)" if flushed else ""
    tensor = f" {tuple(eager.shape)} {str(eager.dtype).removeprefix('torch.')}"  # which tensor, at a glance
    return (
        f"{path}{tensor}: compiled RMSE vs fp64 reference {compiled_error:.3g} > {bound}; "
        f"{_describe_worst(actual64 if flushed else actual, eager)}{tolerated}"
    )


def differences_from_reference(
    actual: Any,
    eager: Any,
    reference_fp64: Any,
    *,
    multiplier: float = TOLERANCE_MULTIPLIER,
    floor: float = RMSE_FLOOR,
    what: str = "output",
    noise: Noise = NO_NOISE,
) -> list[str]:
    """One line per leaf where compiled ``actual`` is further from the fp64 reference than ``eager`` allows.

    The three arguments are matching (nested) structures; leaves are tensors or plain values. ``noise`` (from
    ``batch_statistics.measure_noise``) replaces eager's error by the tensor's measured noise where that is larger.
    """
    actual_leaves, eager_leaves = flatten_outputs(actual, what), flatten_outputs(eager, what)
    reference_leaves = flatten_outputs(reference_fp64, what)
    if [p for p, _ in actual_leaves] != [p for p, _ in eager_leaves]:
        return [f"{what}: compiled structure {[p for p, _ in actual_leaves]} != eager {[p for p, _ in eager_leaves]}"]
    if len(reference_leaves) != len(eager_leaves):
        return [f"{what}: the fp64 reference has a different structure than eager"]
    return [
        problem
        for (path, a), (_, e), (_, r) in zip(actual_leaves, eager_leaves, reference_leaves, strict=True)
        if (problem := _compare_leaf(path, a, e, r, multiplier, floor, noise.per_leaf.get(path) if noise else None))
        is not None
    ]


def fail_on_differences(problems: list[str], notes: tuple[str, ...] = ()) -> None:
    """Fail the test with every difference listed, one per line (they become the check-run annotation), then
    ``notes``: how the tolerance was derived, where the minimised repro is."""
    if problems:
        text = "compiled result differs from eager beyond tolerance:\n  " + "\n  ".join(problems)
        pytest.fail(text + "".join(f"\n{note}" for note in notes if note), pytrace=False)


def assert_close_to_reference(actual: Any, eager: Any, reference_fp64: Any, **options: Any) -> None:
    """Fail unless compiled ``actual`` is as close to the fp64 reference as ``eager`` is (see above for options)."""
    fail_on_differences(differences_from_reference(actual, eager, reference_fp64, **options))


@contextlib.contextmanager
def full_precision_on_cuda(device: str) -> Iterator[None]:
    """TF32 off for CUDA convolutions and matmuls, so eager and compiled kernels are plain fp32 and their distance to
    the fp64 reference compares (folding and channels-last kernels round TF32 differently).

    cuDNN's flags go through ``torch.backends.cudnn.flags``: once ``torch.testing._internal`` is imported (the ops
    suite's OpInfos) torch refuses direct assignment ("not allowed to set torch.backends.cudnn flags after
    disable_global_flags"). Every flag but TF32 is passed as it is, whatever this torch's ``flags`` accepts."""
    if device != "cuda":
        yield
        return
    cudnn = torch.backends.cudnn
    keep = {name: getattr(cudnn, name) for name in inspect.signature(cudnn.flags).parameters
            if name not in ("allow_tf32", "fp32_precision") and hasattr(cudnn, name)}
    saved = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    try:
        with cudnn.flags(**keep, allow_tf32=False):
            yield
    finally:
        torch.backends.cuda.matmul.allow_tf32 = saved
