"""One sample's compiled result against eager's, element by element, and where they differ: the special point.

Integers, booleans, shapes and dtypes must match exactly. Floating elements are judged by the suites' one rule
(``suites/precision.py``): each element's distance to the float64 run of the same op, in ULPs of the output's dtype,
at most k × eager's own distance + c (k and c per device and dtype, ``tolerances.py``); NaN/inf positions and signs
of zero exactly as eager's. Where an element fails, the float64 run is repeated with the roundings of a float32 run
drawn (``suites/rounding_noise.py``): a reduction's element that is a sum of much larger terms may be as far off as
their rounding; and eager and float64 run again on inputs nudged to adjacent values: eager's own error there, where
one lucky element is not its error; the rule is applied again with both. Compiled code more accurate than eager (a
fused bf16 chain that rounds once) passes; a wrong value at one input fails, however small the value is.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from .. import judging, precision, rounding_noise
from ..module_runs import flatten_outputs

Reference = Callable[[], list[Any] | None]  # the float64 run's output leaves, or None where there is none


def difference(eager: Any, compiled: Any, bound_of: Callable[[torch.dtype], precision.Bound], sample: Any,
               reference: Reference, values_matter: bool = True,
               nearby: rounding_noise.Nearby | None = None) -> str | None:
    """None when ``compiled`` matches ``eager``; else what differs and where, with the inputs at that point."""
    eager_leaves = flatten_outputs(eager)
    compiled_leaves = [leaf for _path, leaf in flatten_outputs(compiled)]
    if len(eager_leaves) != len(compiled_leaves):
        return f"eager returned {len(eager_leaves)} values, compiled {len(compiled_leaves)}"
    run = _Float64(reference, nearby)
    for position, ((path, want), got) in enumerate(zip(eager_leaves, compiled_leaves, strict=True)):
        where = f"{path}: " if len(eager_leaves) > 1 else ""
        problem = _metadata_difference(want, got)
        if problem is None and values_matter and isinstance(want, torch.Tensor):
            problem = _values_difference(want, got, bound_of, sample, run, position)
        if problem:
            return where + problem
    return None


class _Float64:
    """The sample's float64 run, its rounding noise and eager's error at nudged inputs, each computed once and only
    when a judgement needs it."""

    def __init__(self, reference: Reference, nearby: rounding_noise.Nearby | None) -> None:
        self.reference, self._nearby = reference, nearby
        self._leaves: list[Any] | None = None
        self._noise: dict[torch.dtype, list[Any]] = {}
        self._own: list[Any] | None = None

    def leaf(self, position: int) -> torch.Tensor | None:
        if self._leaves is None:
            self._leaves = self.reference() or []
        found = self._leaves[position] if position < len(self._leaves) else None
        return found if isinstance(found, torch.Tensor) else None

    def noise(self, position: int, dtype: torch.dtype) -> torch.Tensor | None:
        if self.leaf(position) is None or self._leaves is None:
            return None
        if dtype not in self._noise:
            self._noise[dtype] = rounding_noise.measure(self.reference, self._leaves, dtype)
        return self._noise[dtype][position]

    def parts(self, position: int, dtype: torch.dtype) -> Any:
        if not precision.recording() or self.leaf(position) is None or self._leaves is None:
            return (None, None)
        return rounding_noise.parts(self.reference, self._leaves, dtype)[position]

    def nearby(self, position: int) -> torch.Tensor | None:
        if self.leaf(position) is None or self._leaves is None or self._nearby is None:
            return None
        if self._own is None:
            self._own = rounding_noise.eager_nearby(self._nearby, len(self._leaves))
        return self._own[position]


def _values_difference(want: torch.Tensor, got: torch.Tensor, bound_of: Callable[[torch.dtype], precision.Bound],
                       sample: Any, run: _Float64, position: int) -> str | None:
    if not (want.is_floating_point() or want.is_complex()):
        bad = (want.detach().cpu() != got.detach().cpu())
        if not bool(bad.any()):
            return None
        flat = int(bad.reshape(-1).int().argmax())
        index = tuple(int(i) for i in torch.unravel_index(torch.tensor(flat), want.shape)) if want.dim() else ()
        point = f"[{', '.join(map(str, index))}]" if index else "the value"
        text = (f"{int(bad.sum())} of {bad.numel()} elements differ (exact dtype); at {point}: eager "
                f"{_item(want.detach().cpu(), index)}, compiled {_item(got.detach().cpu(), index)}")
        inputs = _inputs_at(sample, want.shape, index)
        return text + (f"; inputs there: {inputs}" if inputs else "")
    if judging.identical(got, want):
        return None
    dtype = want.dtype.to_real() if want.is_complex() else want.dtype
    bound = bound_of(dtype)
    finding = precision.judge(got, want, run.leaf(position), bound)
    if (finding is not None or precision.recording()) and run.leaf(position) is not None:
        finding = precision.judge(got, want, run.leaf(position), bound, run.noise(position, dtype),
                                  run.nearby(position), run.parts(position, dtype))
    if finding is None:
        return None
    return finding.describe(_inputs_at(sample, want.shape, finding.index[: want.dim()]))


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

