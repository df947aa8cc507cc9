"""Compiled-vs-eager judgement against a float64 reference: one line per leaf with an element too far off (the rule:
precision.py), and the test failure that lists them (they become the check-run annotation).

Public torch APIs only; private ones live in ``harness.py``.
"""

from __future__ import annotations

import contextlib
import contextvars
import inspect
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import torch

from . import precision, rounding_noise
from .batch_statistics import NO_NOISE, Noise
from .module_runs import flatten_outputs

# The rule itself (per element, in ULPs of the output's dtype) and its calibrated bounds live in precision.py, shared
# with the op sweep; this module applies it to the leaves of a suite's outputs and writes the failure.
FLUSHABLE_DTYPES = precision.FLUSHABLE_DTYPES
RULE = ("the suites' rule, per element: compiled's distance to the float64 reference ≤ k × max(eager's, measured "
        "rounding noise) + c, in ULPs of the output's dtype at that value; NaN/inf and signs of zero exactly as "
        "eager's (suites/precision.py)")


def _describe_worst(actual: torch.Tensor, eager: torch.Tensor) -> str:
    diff = (actual.long() - eager.long()).abs() if not actual.is_complex() else (actual - eager).abs()
    if diff.numel() == 0:
        return "empty tensors"
    flat = int(diff.reshape(-1).argmax())
    index = tuple(int(i) for i in torch.unravel_index(torch.tensor(flat), diff.shape)) if diff.dim() else ()
    return (f"{int((actual != eager).sum())} of {actual.numel()} elements differ; at {index}: compiled "
            f"{actual.reshape(-1)[flat].item()!r}, eager {eager.reshape(-1)[flat].item()!r}")


def _metadata(path: str, actual: Any, eager: Any) -> str | None:
    if not isinstance(eager, torch.Tensor):
        return None if actual == eager else f"{path}: compiled {actual!r} != eager {eager!r}"
    if not isinstance(actual, torch.Tensor):
        return f"{path}: compiled returned {type(actual).__name__}, eager returned a Tensor"
    if actual.shape != eager.shape or actual.dtype != eager.dtype:
        return f"{path}: compiled {tuple(actual.shape)} {actual.dtype} != eager {tuple(eager.shape)} {eager.dtype}"
    if not eager.is_floating_point() and not eager.is_complex():
        return None if torch.equal(actual.cpu(), eager.cpu()) else (
            f"{path}: {_describe_worst(actual.cpu(), eager.cpu())} (exact dtype)")
    return None


def identical(actual: torch.Tensor, eager: torch.Tensor) -> bool:
    """Bit for bit eager's, zero signs included (NaNs aside, which equal() never matches)."""
    a, e = actual.detach().cpu(), eager.detach().cpu()
    if a.is_complex():
        a, e = torch.view_as_real(a.resolve_conj()), torch.view_as_real(e.resolve_conj())
    return torch.equal(a, e) and torch.equal(a.signbit(), e.signbit())


def _leaves_of(pair: tuple[Any, Any], what: str) -> tuple[list[Any], list[Any]]:
    return ([leaf for _, leaf in flatten_outputs(pair[0], what)], [leaf for _, leaf in flatten_outputs(pair[1], what)])


def _finding(actual: torch.Tensor, eager: torch.Tensor, reference: Any, noise: torch.Tensor | None = None,
             nearby: torch.Tensor | None = None, parts: Any = (None, None)) -> precision.Finding | None:
    if identical(actual, eager):
        return None
    reference = reference if isinstance(reference, torch.Tensor) else None
    bound = precision.bound_for(eager.dtype, eager.device)
    return precision.judge(actual, eager, reference, bound, noise, nearby, parts)


def _line(path: str, finding: precision.Finding, actual: torch.Tensor, eager: torch.Tensor, reference: Any) -> str:
    tensor = f" {tuple(eager.shape)} {str(eager.dtype).removeprefix('torch.')}"  # which tensor, at a glance
    summary = precision.rmse_summary(actual, eager, reference) if isinstance(reference, torch.Tensor) else ""
    return f"{path}{tensor}: {finding.describe()}" + (f" ({summary})" if summary else "")


def _noise_dtype(eager_leaves: list[tuple[str, Any]]) -> torch.dtype:
    """The least precise floating dtype among the results: the one whose roundings the noise runs draw."""
    floating = [leaf.dtype for _, leaf in eager_leaves if isinstance(leaf, torch.Tensor) and leaf.is_floating_point()]
    return max(floating, key=lambda dtype: torch.finfo(dtype).eps, default=torch.float32)


def differences_from_reference(
    actual: Any,
    eager: Any,
    reference_fp64: Any,
    *,
    what: str = "output",
    noise: Noise = NO_NOISE,
    rerun: Callable[[], Any] | None = None,
    nearby: Callable[[int], tuple[Any, Any]] | None = None,
) -> list[str]:
    """One line per leaf where compiled ``actual`` breaks the rule (precision.py) against ``eager`` and the fp64
    reference. The three arguments are matching (nested) structures; leaves are tensors or plain values.

    ``reference_fp64`` may be a zero-argument callable that computes the reference; it is then also the ``rerun``.
    ``rerun``: computes the reference again; only where the rule fails without it, it is run with float32's
    roundings drawn (rounding_noise.py) and the leaves judged again with each element's measured noise. ``nearby``:
    given a seed, eager's and the fp64 results again on inputs nudged to adjacent values (``rounding_noise.nudge``),
    for eager's own error there. ``noise`` (batch_statistics.measure_noise) adds a derived noise per leaf path."""
    if callable(reference_fp64):
        rerun = rerun or reference_fp64
        reference_fp64 = reference_fp64()
    actual_leaves, eager_leaves = flatten_outputs(actual, what), flatten_outputs(eager, what)
    reference_leaves = flatten_outputs(reference_fp64, what)
    if [p for p, _ in actual_leaves] != [p for p, _ in eager_leaves]:
        return [f"{what}: compiled structure {[p for p, _ in actual_leaves]} != eager {[p for p, _ in eager_leaves]}"]
    if len(reference_leaves) != len(eager_leaves):
        return [f"{what}: the fp64 reference has a different structure than eager"]
    references = [leaf for _, leaf in reference_leaves]
    problems: dict[int, str] = {}
    failing: list[int] = []
    for i, ((path, a), (_, e), r) in enumerate(zip(actual_leaves, eager_leaves, references, strict=True)):
        if (problem := _metadata(path, a, e)) is not None:
            problems[i] = problem
        elif isinstance(e, torch.Tensor) and (e.is_floating_point() or e.is_complex()):
            if (finding := _finding(a, e, r)) is not None:
                problems[i] = _line(path, finding, a, e, r)
                failing.append(i)
            elif precision.recording() and not torch.equal(a.cpu(), e.cpu()):
                failing.append(i)  # calibration: every differing tensor gets its noise measured too
    if failing and (rerun is not None or nearby is not None or noise):
        count = len(references)
        again = (lambda: [leaf for _, leaf in flatten_outputs(rerun(), what)]) if rerun is not None else None
        dtype = _noise_dtype(eager_leaves)
        measured = rounding_noise.measure(again, references, dtype) if again else [None] * count
        own = rounding_noise.eager_nearby(lambda seed: _leaves_of(nearby(seed), what), count) if nearby else (
            [None] * count)
        parts = rounding_noise.parts(again, references, dtype) if again and precision.recording() else (
            [(None, None)] * count)
        for i in failing:
            path, a = actual_leaves[i]
            e, r = eager_leaves[i][1], references[i]
            finding = _finding(a, e, r, _larger(measured[i], noise.per_leaf.get(path)), own[i], parts[i])
            if finding is None:
                problems.pop(i, None)
            else:
                problems[i] = _line(path, finding, a, e, r)
    return [problems[i] for i in sorted(problems)]


def _larger(a: torch.Tensor | None, b: torch.Tensor | None) -> torch.Tensor | None:
    return b if a is None else a if b is None else torch.maximum(a, b.to(a.dtype))


_preliminary = contextvars.ContextVar("compile_ci_preliminary_judgement", default=False)


@contextlib.contextmanager
def preliminary() -> Iterator[None]:
    """Judgements made only to decide whether to measure more (the rounding noise): what they find is no verdict
    (a bisection's question, bisect_probe.py, ignores them; the judgement made after measuring decides)."""
    token = _preliminary.set(True)
    try:
        yield
    finally:
        _preliminary.reset(token)


def is_preliminary() -> bool:
    return _preliminary.get()


def fail_on_differences(problems: list[str], notes: tuple[str, ...] = ()) -> None:
    """Fail the test with every difference listed, one per line (they become the check-run annotation), then
    ``notes``: how the tolerance was derived, where the minimised repro is."""
    if problems:
        text = "compiled result differs from eager beyond tolerance:\n  " + "\n  ".join(problems)
        pytest.fail(text + "".join(f"\n{note}" for note in notes if note), pytrace=False)


def assert_close_to_reference(actual: Any, eager: Any, reference_fp64: Any, **options: Any) -> None:
    """Fail unless compiled ``actual`` keeps the rule against eager and the fp64 reference (see above for options)."""
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
