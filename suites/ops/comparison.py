"""One sample's compiled result against eager's, element by element, and where they differ: the special point.

Integers, booleans, shapes, dtypes and NaN/inf positions must match exactly. Floating elements must be within the
case's tolerance of eager's; where one is not, a float64 run of the same op arbitrates: the element passes when the
compiled value is within the tolerance of float64's, rounded to the output's dtype. So compiled code that is more
accurate than eager (a fused bf16 chain that rounds once) is not a failure, and a wrong value at one input is. (Not
"no farther from float64 than eager": where the result depends on the dtype, as ``nan_to_num``'s replacement for
-inf does, float64's is far from both, and a wrong sign would pass.)
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from ..module_runs import flatten_outputs
from .tolerances import Tolerance

Reference = Callable[[], list[Any] | None]  # the float64 run's output leaves, or None where there is none


def difference(eager: Any, compiled: Any, tolerance_of: Callable[[torch.dtype], Tolerance], sample: Any,
               reference: Reference, values_matter: bool = True) -> str | None:
    """None when ``compiled`` matches ``eager``; else what differs and where, with the inputs at that point."""
    eager_leaves = flatten_outputs(eager)
    compiled_leaves = [leaf for _path, leaf in flatten_outputs(compiled)]
    if len(eager_leaves) != len(compiled_leaves):
        return f"eager returned {len(eager_leaves)} values, compiled {len(compiled_leaves)}"
    reference_leaves: list[Any] | None = None
    for position, ((path, want), got) in enumerate(zip(eager_leaves, compiled_leaves, strict=True)):
        where = f"{path}: " if len(eager_leaves) > 1 else ""
        problem = _metadata_difference(want, got)
        if problem is None and values_matter and isinstance(want, torch.Tensor):
            tolerance = tolerance_of(want.dtype.to_real() if want.is_complex() else want.dtype)
            bad = _bad_elements(want, got, tolerance)
            if bad.any() and want.is_floating_point():
                reference_leaves = reference() if reference_leaves is None else reference_leaves
                if reference_leaves is not None and position < len(reference_leaves):
                    bad &= ~_close_to_exact(want, got, reference_leaves[position], tolerance)
            if bad.any():
                exact = reference_leaves[position] if reference_leaves and position < len(reference_leaves) else None
                problem = _describe(want, got, bad, sample, exact, tolerance)
        if problem:
            return where + problem
    return None


def _metadata_difference(want: Any, got: Any) -> str | None:
    if isinstance(want, torch.Tensor) != isinstance(got, torch.Tensor):
        return f"eager returned {type(want).__name__}, compiled {type(got).__name__}"
    if not isinstance(want, torch.Tensor):
        same = want == got or (isinstance(want, float) and want != want and got != got)
        return None if same else f"eager returned {want!r}, compiled {got!r}"
    if want.dtype != got.dtype:
        return f"dtype: eager {want.dtype}, compiled {got.dtype}"
    if want.shape != got.shape:
        return f"shape: eager {list(want.shape)}, compiled {list(got.shape)}"
    return None


def _real(tensor: torch.Tensor) -> torch.Tensor:
    return torch.view_as_real(tensor.resolve_conj()) if tensor.is_complex() else tensor


def _bad_elements(want: torch.Tensor, got: torch.Tensor, tolerance: Tolerance) -> torch.Tensor:
    want, got = _real(want.detach()).cpu(), _real(got.detach()).cpu()
    if not want.is_floating_point():
        return want != got
    close = torch.isclose(got.double(), want.double(), rtol=tolerance.rtol, atol=tolerance.atol, equal_nan=True)
    return ~close


def _close_to_exact(want: torch.Tensor, got: torch.Tensor, exact: Any, tolerance: Tolerance) -> torch.Tensor:
    if not isinstance(exact, torch.Tensor) or exact.shape != want.shape or exact.is_complex() != want.is_complex():
        return torch.zeros(_real(want).shape, dtype=torch.bool)
    rounded = _real(exact.detach().to(got.dtype)).cpu().double()
    return torch.isclose(_real(got.detach()).cpu().double(), rounded, rtol=tolerance.rtol, atol=tolerance.atol,
                         equal_nan=True)


def _describe(want: torch.Tensor, got: torch.Tensor, bad: torch.Tensor, sample: Any, exact: Any,
              tolerance: Tolerance) -> str:
    want_r, got_r = _real(want.detach()).cpu(), _real(got.detach()).cpu()
    distance = (got_r.double() - want_r.double()).abs().nan_to_num(nan=float("inf"))
    distance = torch.where(bad, distance, torch.full_like(distance, -1.0))
    flat = int(distance.flatten().argmax())
    index = tuple(int(i) for i in torch.unravel_index(torch.tensor(flat), want_r.shape)) if want_r.dim() else ()
    count = int(bad.sum())
    point = f"[{', '.join(map(str, index))}]" if index else ""
    text = (f"{count} of {bad.numel()} elements differ (tolerance atol={tolerance.atol:g}, rtol={tolerance.rtol:g}, "
            f"{tolerance.source}); at {point or 'the value'}: eager {_item(want_r, index)}, compiled "
            f"{_item(got_r, index)}")
    if isinstance(exact, torch.Tensor) and exact.shape == want.shape:
        text += f", float64 {_item(_real(exact.detach()).cpu(), index)}"
    inputs = _inputs_at(sample, want.shape, index[: want.dim()])
    return text + (f"; inputs there: {inputs}" if inputs else "")


def _item(tensor: torch.Tensor, index: tuple[int, ...]) -> str:
    value = tensor[index] if index else tensor
    value = value.item() if value.numel() == 1 else value.tolist()
    return repr(value)


def _inputs_at(sample: Any, shape: torch.Size, index: tuple[int, ...]) -> str:
    """The element of each tensor argument that broadcasts to the output's shape, at the output's index: for an
    elementwise op, the input values at which compiled and eager disagree."""
    shown = []
    arguments = [("input", sample.input)] + [(f"arg {i}", a) for i, a in enumerate(sample.args)]
    arguments += list(sample.kwargs.items())
    for name, value in arguments:
        if isinstance(value, torch.Tensor) and not value.is_complex() and len(index) == len(shape):
            try:
                at = value.detach().broadcast_to(shape)[index]
            except RuntimeError:
                continue
            shown.append(f"{name} = {at.item()!r}")
        elif isinstance(value, int | float | bool) and not isinstance(value, torch.Tensor):
            shown.append(f"{name} = {value!r}")
    return ", ".join(shown)

