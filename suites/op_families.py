"""Inductor's op families and the denominator of corpus coverage: which families a suite on one device could
compile at all, and why the others are left out.

A *family* is an ATen operator name, the unit at which inductor registers a lowering or a decomposition, with every
overload folded in (``add.Tensor``, ``add.Scalar``, ``add.out`` are ``aten.add``) and the in-place form too
(``add_`` is ``aten.add``: functionalization turns it into ``add`` before inductor sees it). The universe is every
family with a key in ``torch._inductor.lowering.lowerings`` (real lowerings and declared fallbacks) or in
``torch._inductor.decomposition.select_decomp_table()``, of the torch that runs the suites.
"""

from __future__ import annotations

import re
from typing import Any

import torch

# (pattern on the family name, devices it excludes on, reason). First match wins; the reasons are what a reader of
# the coverage report sees next to every excluded family, so each says why no model of the corpus can produce it.
EXCLUSIONS: tuple[tuple[str, tuple[str, ...], str], ...] = (
    (r"^(?!aten\.)", ("cpu", "cuda"),
     "not an ATen operator: prims and inductor's own ops only appear as what another family decomposes into; "
     "quantized, mkldnn, onednn, collective (c10d, symm_mem) and higher-order ops come from quantization flows, "
     "inductor's own weight-prepacking passes, process groups or control-flow APIs, not from a model's eager code"),
    (r"^aten\._foreach_", ("cpu", "cuda"),
     "multi-tensor optimizer kernels: produced by compiling optimizer.step, which the suites do not do"),
    (r"(^aten\._?(int_mm|weight_int\d|convert_weight_to_int|dyn_quant|scaled_mm|scaled_grouped_mm|fbgemm|"
     r"fake_quant|quantize|dequantize|choose_qparams|_?fused_moving_avg_obs|wrapped_quantized|wrapped_linear))"
     r"|float8|int4|int8|fp8", ("cpu", "cuda"),
     "low-bit quantised or float8 dtypes: the suites judge float32/float64 (bf16/fp16 for low precision)"),
    (r"sparse|nested|jagged|to_padded|_nnz|coalesce", ("cpu", "cuda"),
     "sparse or nested layouts: inductor compiles strided tensors; these fall back before it sees them"),
    (r"^(?!.*_for_cpu)(.*(cudnn|miopen|_flash_attention|_efficient_attention|_fused_sdp_choice|_cummax_helper|"
     r"_cummin_helper|cuda|_amp_|_fused_adam|_fused_sgd))", ("cpu",),
     "CUDA-only kernels (cuDNN, flash/memory-efficient attention, AMP scaler, fused optimizers): never chosen on CPU"),
    (r"mkldnn|mkl_|_for_cpu|onednn|fbgemm", ("cuda",),
     "CPU-only kernels (oneDNN/MKL, CPU attention): never chosen on CUDA"),
    (r"^aten\.(_?local_scalar_dense|_assert_\w+|sym_\w+|_print|_make_dep_token|_functional_assert_\w+|"
     r"record_stream|_resize_output|resize|_unsafe_view|lift_fresh(_copy)?|_has_compatible_shallow_copy_type|"
     r"_conj(_physical|_copy)?|_neg_view(_copy)?|set|_allocate_buffer|_foobar|_test_\w+|_efficientzerotensor|"
     r"_reshape_alias|_scaled_dot_product_attention_math_for_mps|_scaled_dot_product_fused_attention_overrideable"
     r"(_backward)?|lift|mkldnn_rnn_layer)$", ("cpu", "cuda"),
     "bookkeeping, test-only or other backends' ops (scalar reads, asserts, symbolic sizes, conjugate/negative "
     "views, resizes, MPS and out-of-tree attention hooks): not a computation a model asks for on this device"),
)
IMPLICIT_REASON = (
    "every overload is CompositeImplicitAutograd: the dispatcher decomposes it before inductor's tables are "
    "consulted, so it reaches inductor as (and is counted as) the families it becomes"
)


def family_of(target: Any) -> str | None:
    """``aten.add`` for ``torch.ops.aten.add_.Tensor`` (and its packet); None for what is not an operator (Python
    functions, ``operator.getitem``, symbolic-size helpers)."""
    if isinstance(target, torch._ops.OpOverload):
        namespace, name = target.namespace, target._opname
    elif isinstance(target, torch._ops.OpOverloadPacket):
        namespace, name = str(target).split(".", 1)
    elif isinstance(target, torch._ops.HigherOrderOperator):
        return f"higher_order.{target.name()}"
    else:
        return None
    if name.endswith("_") and not name.endswith("__"):
        name = name[:-1]  # in-place form: functionalization rewrites add_ as add before inductor sees it
    return f"{namespace}.{name}"


def universe(lowering_keys: list[Any], decomposition_keys: list[Any]) -> dict[str, set[str]]:
    """Every family of the two tables, with where it was found: ``lowering``, ``decomposition`` or both."""
    found: dict[str, set[str]] = {}
    for source, keys in (("lowering", lowering_keys), ("decomposition", decomposition_keys)):
        for key in keys:
            family = family_of(key)
            if family is not None:
                found.setdefault(family, set()).add(source)
    return found


def _implicit(op: Any) -> bool:
    try:
        return bool(op.has_kernel_for_dispatch_key(torch._C.DispatchKey.CompositeImplicitAutograd))
    except RuntimeError:  # a key naming a symbolic-int overload the dispatcher does not know (``sqrt.int``)
        return True


def implicit_families(keys: list[Any]) -> set[str]:
    """Families whose every overload among ``keys`` the dispatcher decomposes itself (CompositeImplicitAutograd)."""
    verdicts: dict[str, bool] = {}
    for key in keys:
        family = family_of(key)
        if family is not None and isinstance(key, torch._ops.OpOverload):
            verdicts[family] = verdicts.get(family, True) and _implicit(key)
    return {family for family, implicit in verdicts.items() if implicit}


def exclusion_reason(family: str, device: str, implicit: set[str] | frozenset[str] = frozenset()) -> str | None:
    """Why ``family`` cannot apply to a suite on ``device``; None when it belongs in the denominator."""
    if family in implicit and family.startswith("aten."):
        return IMPLICIT_REASON
    for pattern, devices, reason in EXCLUSIONS:
        if device in devices and re.search(pattern, family):
            return reason
    return None


def denominator(
    families: set[str], device: str, implicit: set[str] | frozenset[str] = frozenset()
) -> tuple[set[str], dict[str, list[str]]]:
    """The families that count on ``device``, and the excluded ones grouped by reason."""
    counted: set[str] = set()
    excluded: dict[str, list[str]] = {}
    for family in sorted(families):
        reason = exclusion_reason(family, device, implicit)
        if reason is None:
            counted.add(family)
        else:
            excluded.setdefault(reason, []).append(family)
    return counted, excluded
