"""What the sweep covers: every OpInfo op of torch's op database, in the dtypes each device computes in, with the
op's reference inputs (its sample inputs where it declares none)."""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from typing import Any

import torch

from . import internals

# float32, the device's low-precision dtypes (bfloat16 is the one CPUs compute in natively: AVX512-BF16, AMX), then
# the integer and boolean dtype; an op is swept in each of these its OpInfo lists for the device.
DTYPES: dict[str, tuple[torch.dtype, ...]] = {
    "cpu": (torch.float32, torch.bfloat16, torch.int64, torch.bool),
    "cuda": (torch.float32, torch.float16, torch.bfloat16, torch.int64, torch.bool),
}
DTYPE_NAMES = {dtype: str(dtype).removeprefix("torch.") for dtypes in DTYPES.values() for dtype in dtypes}
# Ops whose result is uninitialized memory (their OpInfos skip comparisons with "Expected: empty is not comparable"):
# judged on dtype, shape and that the compiled op runs, never on values, which are whatever the allocator held.
UNINITIALIZED = frozenset({"empty", "empty_like", "empty_strided", "empty_permuted", "new_empty", "new_empty_strided"})
_UNSAFE = re.compile(r"[^A-Za-z0-9_.]+")


@dataclass(frozen=True)
class OpCase:
    """One OpInfo op in one dtype: one test of the sweep."""

    index: int  # into op_db(): OpInfo objects are not hashable
    name: str  # "atan2", "round.decimals_3": the OpInfo name and its variant
    dtype: torch.dtype

    @property
    def op(self) -> Any:
        return op_db()[self.index]

    @property
    def values_matter(self) -> bool:
        """False where eager's and the compiled op's values cannot be compared: uninitialized memory, or an OpInfo
        that says so itself."""
        return self.op.name not in UNINITIALIZED and not getattr(self.op, "skip_correctness_check_compile_vs_eager",
                                                                 False)

    @property
    def test_id(self) -> str:
        return f"{_UNSAFE.sub('_', self.name)}-{DTYPE_NAMES[self.dtype]}"


@functools.cache
def op_db() -> tuple[Any, ...]:
    return tuple(internals.opinfo_database())


def op_name(op: Any) -> str:
    return f"{op.name}.{op.variant_test_name}" if op.variant_test_name else op.name


def cases(device: str) -> list[OpCase]:
    """Every (op, dtype) the op's OpInfo supports on ``device``, in the database's order."""
    found = []
    for index, op in enumerate(op_db()):
        supported = op.supported_dtypes(device)
        found += [OpCase(index, op_name(op), dtype) for dtype in DTYPES[device] if dtype in supported]
    return found


def samples(case: OpCase, device: str) -> list[Any]:
    """The op's reference inputs (OpInfo falls back to its sample inputs when it declares none), no grad."""
    return list(case.op.reference_inputs(device, case.dtype, requires_grad=False))


def call(op: Any, sample: Any) -> Any:
    return op(sample.input, *sample.args, **sample.kwargs)


def describe_value(value: Any) -> str:
    """A short, bounded description of one argument: a tensor's dtype, shape and layout, else its repr."""
    if isinstance(value, torch.Tensor):
        layout = "" if value.is_contiguous() else " non-contiguous"
        shown = f" = {value.item()!r}" if value.numel() == 1 else ""
        return f"{DTYPE_NAMES.get(value.dtype, value.dtype)}{list(value.shape)}{layout}{shown}"
    if isinstance(value, list | tuple):
        inner = ", ".join(describe_value(v) for v in value[:6])
        more = ", …" if len(value) > 6 else ""
        return f"[{inner}{more}]" if isinstance(value, list) else f"({inner}{more})"
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "…"


def describe_sample(sample: Any) -> str:
    parts = [f"input {describe_value(sample.input)}"]
    if sample.args:
        parts.append(f"args {describe_value(tuple(sample.args))}")
    if sample.kwargs:
        parts.append("kwargs {" + ", ".join(f"{k}: {describe_value(v)}" for k, v in sample.kwargs.items()) + "}")
    return ", ".join(parts)
