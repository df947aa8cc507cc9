"""The one numeric rule of every suite and the op sweep (issue 39): each floating element of a compiled result, judged
by its distance to the float64 reference in units in the last place (ULPs) of the output's dtype at that value.

A compiled element may be at most ``k`` times as far from float64 as eager's element is, plus ``c`` ULPs:
``compiled ≤ k × max(eager, noise) + c``. ULPs scale with the value, so an element of 1e-8 is held as strictly as one
of 1: a rewrite that cancels (``exp(x) - 1`` for ``expm1``), a flush below a threshold or a constant 1e-6 off is
thousands of ULPs away where the value is small, however large the tensor's other elements are. ``noise`` is the
element's measured rounding noise (``rounding_noise.py``): where an element is a sum of terms much larger than itself
(a matmul or reduction output near 0), how far another correct summation order may land, in the same ULPs; it is
measured only when the rule fails without it. ``k`` and ``c`` per device and dtype come from stock torch
(``BOUNDS``; ``bench/ulp_calibration.py`` measures them, docs/suites.md gives the figures).

Exact, whatever float64 says: NaN positions, ±inf, and signs of zero must be eager's. Where float64's value is not
finite in the output dtype (an op that saturates at the dtype's range, ``nan_to_num`` of -inf) eager's value is the
answer, and compiled must be within ``c`` ULPs of it. One hardware allowance: a bfloat16 result whose float64 value is
below bfloat16's smallest normal may be 0 (FLUSHABLE_DTYPES).
"""

from __future__ import annotations

import contextlib
import json
import math
import os
from collections.abc import Iterator
from dataclasses import dataclass

import torch

# bfloat16 results below bfloat16's smallest normal may come back as zero (issue 27). CPUs with AVX512-BF16 or AMX
# multiply bf16 with VDPBF16PS / TDPBF16PS, which ignore the FPU's control register and always read subnormal inputs
# and write subnormal results as zero, and a compiled graph can reach those kernels where eager does not: on stock
# torch, inductor rewrites a hand-written attention into the CPU flash-attention kernel, whose bf16 GEMMs are oneMKL's,
# while eager's small bmm runs ATen's own loops. Such an element counts as eager's value. No other dtype gets this
# allowance: float32 subnormals flush only under FTZ/DAZ (a bug), float16's (down to 6e-8) are kept where fp16 runs
# here (the CUDA fp16 variants pass without it), and no result the dtype holds as a normal number is ever excused.
FLUSHABLE_DTYPES = (torch.bfloat16,)
RECORD_ENV = "COMPILE_CI_ULP_RECORD"  # a directory: each judged tensor's worst elements, for bench/ulp_calibration.py
_label = [""]  # what is being judged inside the running test (the sweep's sample), for the record only


def recording() -> bool:
    """Calibration runs (RECORD_ENV set) measure every differing tensor's noise, so its record has both figures."""
    return bool(os.environ.get(RECORD_ENV))


@contextlib.contextmanager
def labelled(label: str) -> Iterator[None]:
    _label.append(label)
    try:
        yield
    finally:
        _label.pop()


@dataclass(frozen=True)
class Bound:
    """compiled ≤ k × max(eager, noise) + c ULPs, for one device and dtype."""

    k: float
    c: float

    def describe(self, dtype: torch.dtype) -> str:
        return f"compiled ≤ {self.k:g} × max(eager, noise) + {self.c:g} ULPs of {_name(dtype)}"


# Measured on stock torch (bench/ulp_calibration.py; how, and the figures: docs/suites.md). k: how many times eager's
# own error a compiled element may be off, 4 for float32 and float64 (a declared GELU's input gradient on CPU, 376 ULPs
# where eager's is 120, another summation order per element rather than per tensor as the RMSE rule's 2 was), 2 for
# bfloat16 and float16 (float32 arithmetic rounded once: nothing needed more). c: the most any tensor needed on top,
# rounded up to a power of two, over the sweep's samples and the six suites with the sample repositories' models,
# listed upstream differences (ops/known_failures.py) excluded. CPU float32 is the loosest: inductor's vectorised erf
# (GELU's 1 + erf(x/√2), which cancels for x < -1) is up to 35 ULPs from float64 where ATen's is 4.
BOUNDS: dict[tuple[str, torch.dtype], Bound] = {
    ("cpu", torch.float32): Bound(4, 32),
    ("cpu", torch.bfloat16): Bound(2, 2),
    ("cpu", torch.float16): Bound(2, 2),
    ("cpu", torch.float64): Bound(4, 4),
    ("cuda", torch.float32): Bound(4, 8),
    ("cuda", torch.bfloat16): Bound(2, 2),
    ("cuda", torch.float16): Bound(2, 2),
    ("cuda", torch.float64): Bound(4, 4),
}


def bound_for(dtype: torch.dtype, device: str | torch.device) -> Bound:
    kind = torch.device(device).type
    real = dtype.to_real() if dtype.is_complex else dtype
    return BOUNDS.get((kind if kind == "cuda" else "cpu", real), BOUNDS[("cpu", torch.float32)])


def _name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def spacing(reference: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """The ULP of ``dtype`` at each float64 value: 2^(exponent - mantissa bits), the exponent no lower than the dtype's
    smallest normal's, so the subnormal range has the smallest subnormal as its spacing (and 0 has it too)."""
    info = torch.finfo(dtype)
    digits = 1 - round(math.log2(info.eps))  # significand bits, the implicit one included: 24 for float32
    lowest = round(math.log2(info.tiny))  # -126 for float32 and bfloat16, -14 for float16
    _, exponent = torch.frexp(reference.abs().nan_to_num(posinf=info.max))  # |r| = m · 2^e, m in [0.5, 1)
    exponent = torch.where(reference == 0, lowest, (exponent - 1).clamp(min=lowest))
    return torch.ldexp(torch.ones_like(reference), exponent - (digits - 1))


def _real(t: torch.Tensor) -> torch.Tensor:
    t = t.detach().cpu()
    return torch.view_as_real(t.resolve_conj()).double() if t.is_complex() else t.double()


def _units(reference: torch.Tensor, dtype: torch.dtype, complex_: bool) -> torch.Tensor:
    """Spacing per real element; a complex number's two parts share the spacing at its magnitude."""
    if complex_:
        return spacing(torch.linalg.vector_norm(reference, dim=-1), dtype).unsqueeze(-1).expand(reference.shape)
    return spacing(reference, dtype)


@dataclass(frozen=True)
class Finding:
    """What is wrong with one tensor: how many elements, and the worst one with everything there is to say about it."""

    count: int
    total: int
    index: tuple[int, ...]  # of the worst element, in the compared tensor (a complex one's last index: re/im)
    problem: str  # the worst element's values, distances and the bound
    kinds: str = ""  # how many elements are wrong in which way

    def describe(self, inputs: str = "") -> str:
        where = f"[{', '.join(map(str, self.index))}]" if self.index else "the value"
        return (f"{self.count} of {self.total} elements differ {self.kinds}; at {where}: {self.problem}"
                + (f"; inputs there: {inputs}" if inputs else ""))


def judge(compiled: torch.Tensor, eager: torch.Tensor, reference: torch.Tensor | None, bound: Bound,
          noise: torch.Tensor | None = None, nearby: torch.Tensor | None = None,
          parts: tuple[torch.Tensor | None, torch.Tensor | None] = (None, None)) -> Finding | None:
    """None when every element of ``compiled`` keeps the rule against ``eager`` and the float64 ``reference`` (None:
    no float64 result; eager's value then stands in for it). Measured where the rule fails without them, each as an
    absolute distance per element (rounding_noise.py): ``noise``, the rounding noise of a correct lower-precision
    run; ``nearby``, eager's own distance to float64 at adjacent inputs (counted as eager's distance where larger)."""
    dtype = eager.dtype.to_real() if eager.is_complex() else eager.dtype
    c, e = _real(compiled), _real(eager)
    usable = reference is not None and reference.shape == eager.shape and reference.is_complex() == eager.is_complex()
    r = _real(reference) if usable and reference is not None else e
    # NaN and ±inf exactly as eager's; so are the signs of zeros.
    nonfinite = (e.isnan() != c.isnan()) | ((e.isinf() | c.isinf()) & (e != c))
    zero_sign = (e == 0) & (c == 0) & (e.signbit() != c.signbit())
    # Where float64 has no finite answer in the dtype, eager's finite value is the answer (saturating ops).
    representable = r.isfinite() & r.to(dtype).isfinite()
    truth = torch.where(representable, r, e)
    units = _units(truth, dtype, eager.is_complex())
    compiled_ulps = (c - truth).abs() / units
    eager_ulps = torch.where(representable, (e - truth).abs() / units, 0.0)
    own_ulps = eager_ulps
    if nearby is not None and usable:
        own_ulps = torch.maximum(eager_ulps, torch.where(representable, _ulps(nearby, units), 0.0))
    noise_ulps = torch.zeros_like(units)
    if noise is not None and usable:
        noise_ulps = torch.where(representable, _ulps(noise, units), 0.0)
    allowed = bound.k * torch.maximum(own_ulps, noise_ulps) + bound.c
    flushed = (c == 0) & (truth.abs() < torch.finfo(dtype).tiny) if dtype in FLUSHABLE_DTYPES else None
    if flushed is not None:
        zero_sign &= ~flushed  # a flushed result's sign goes with it
    finite = e.isfinite() & c.isfinite()
    over = finite & (compiled_ulps > allowed) & ~(flushed if flushed is not None else torch.zeros_like(finite))
    if recording():
        split = [torch.where(representable, _ulps(p, units), 0.0) if p is not None and usable else
                 torch.zeros_like(units) for p in parts]
        _record(dtype, (compiled_ulps, own_ulps, noise_ulps, *split), finite, nonfinite, zero_sign, flushed,
                noise is not None or nearby is not None)
    bad = nonfinite | zero_sign | over
    if not bool(bad.any()):
        return None
    excess = torch.where(nonfinite | zero_sign, math.inf, (compiled_ulps - allowed).nan_to_num(nan=-math.inf))
    excess = torch.where(bad, excess, -math.inf)
    flat = int(excess.reshape(-1).argmax()) if excess.numel() else 0
    index = tuple(int(i) for i in torch.unravel_index(torch.tensor(flat), c.shape)) if c.dim() else ()
    at = (lambda t: float(t.reshape(-1)[flat]))  # noqa: E731 - one element of each tensor, by the flat index
    values = f"compiled {at(c)!r}, eager {at(e)!r}, float64 {at(r)!r}" if usable else (
        f"compiled {at(c)!r}, eager {at(e)!r}, no float64 result")
    if bool(nonfinite.reshape(-1)[flat]):
        problem = f"{values} (NaN and ±inf must be eager's, whatever float64 says)"
    elif bool(zero_sign.reshape(-1)[flat]):
        problem = f"{values} (the sign of a zero must be eager's)"
    else:
        measured = f", rounding noise {at(noise_ulps):.3g}" if noise is not None else ""
        if nearby is not None:
            measured = f" ({at(own_ulps):.4g} at nearby inputs){measured}"
        against = "eager's value (float64's is not finite in this dtype)" if usable and not bool(
            representable.reshape(-1)[flat]) else "float64"
        scale = "max(eager, noise)" if measured else "eager"
        problem = (f"{values}; compiled {at(compiled_ulps):.4g} ULPs from {against}, eager {at(eager_ulps):.4g}"
                   f"{measured}: more than {at(allowed):.4g} = {bound.k:g} × {scale} + {bound.c:g} ULPs of "
                   f"{_name(dtype)}")
    flushes = int(flushed.sum()) if flushed is not None else 0
    if flushes:
        problem += f" ({flushes} results below {_name(dtype)}'s smallest normal flushed to 0, tolerated)"
    kinds = {"in NaN/inf": int(nonfinite.sum()), "in a zero's sign": int((zero_sign & ~nonfinite).sum()),
             "beyond the bound": int((over & ~nonfinite & ~zero_sign).sum())}
    if kinds["in NaN/inf"] == int(bad.sum()):
        count = "(all non-finite: NaN/inf where eager's are not, or the reverse)"
    else:
        count = "(" + ", ".join(f"{n} {kind}" for kind, n in kinds.items() if n) + ")"
    return Finding(int(bad.sum()), bad.numel(), index, problem, count)


def _ulps(distance: torch.Tensor, units: torch.Tensor) -> torch.Tensor:
    return (_real(distance) / units).nan_to_num(nan=0.0, posinf=0.0)


def rmse_summary(compiled: torch.Tensor, eager: torch.Tensor, reference: torch.Tensor) -> str:
    """The tensor-wide figures the suites judged by before (issue 39): a summary line, no longer a rule."""
    c, e, r = _real(compiled), _real(eager), _real(reference)
    if c.shape != r.shape:
        return ""
    finite = c.isfinite() & e.isfinite() & r.isfinite()

    def rmse(a: torch.Tensor) -> float:
        diff = (a - r)[finite]
        return math.sqrt(diff.square().mean().item()) if diff.numel() else 0.0

    return f"RMSE vs float64: compiled {rmse(c):.3g}, eager {rmse(e):.3g}"


def _record(dtype: torch.dtype, ulps: tuple[torch.Tensor, ...], finite: torch.Tensor, nonfinite: torch.Tensor,
            zero_sign: torch.Tensor, flushed: torch.Tensor | None, measured: bool) -> None:
    """Calibration only (RECORD_ENV): the elements that need the most of k and c, one JSON line per judged tensor,
    labelled by the running test (pytest's PYTEST_CURRENT_TEST): [compiled, eager (at nearby inputs), noise, noise
    of the roundings alone, noise of the sums alone at ACCUMULATION = 1], all in ULPs."""
    compiled, eager, noise = ulps[:3]
    if compiled.numel() == 0:
        return
    keep = finite & ~(flushed if flushed is not None else torch.zeros_like(finite))
    worst = set()
    for k in (1.0, 2.0, 4.0):
        for scale in (torch.maximum(eager, noise), eager, torch.maximum(eager, ulps[3] + 64 * ulps[4])):
            need = torch.where(keep, compiled - k * scale, -math.inf).reshape(-1)
            worst.update(int(i) for i in need.topk(min(2, need.numel())).indices)
    elements = [[float(t.reshape(-1)[i]) for t in ulps] for i in sorted(worst) if bool(keep.reshape(-1)[i])]
    line = {"test": os.environ.get("PYTEST_CURRENT_TEST", ""), "label": _label[-1], "dtype": _name(dtype),
            "measured": measured, "device": os.environ.get("COMPILE_CI_DEVICE", "cpu") or "cpu",
            "numel": compiled.numel(), "nonfinite": int(nonfinite.sum()), "zero_sign": int(zero_sign.sum()),
            "flushed": int(flushed.sum()) if flushed is not None else 0, "elements": elements}
    directory = os.environ[RECORD_ENV]
    os.makedirs(directory, exist_ok=True)
    with open(os.path.join(directory, f"ulps-{os.getpid()}.jsonl"), "a", encoding="utf-8") as out:
        out.write(json.dumps(line) + "\n")
